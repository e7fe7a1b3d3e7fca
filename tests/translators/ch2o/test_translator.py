"""The Python subset ch2o translates: each construct checked against
Chainer's own forward, at run-time sizes other than the export-time ones
where the construct depends on them."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainer_compiler import export
from chainer_compiler.translators.ch2o import TranslationError, export_model

from .helpers import check_ch2o, check_ch2o_gradients


def _x(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


class Model(chainer.Chain):
    """A model whose forward is the function given (translated from source)."""

    def __init__(self, fn, **links):
        super().__init__()
        self.fn = fn
        with self.init_scope():
            for name, link in links.items():
                setattr(self, name, link)

    def forward(self, *args):
        return self.fn(self, *args)


def loop_range(self, x, n):
    h = x
    for i in range(n):
        h = h * 0.5 + i
    return h


def loop_range_step(self, x, a, b):
    total = x * 0
    for i in range(a, b, 2):
        total = total + i
    return total


def while_dynamic(self, x, n):
    i = 0
    while i < n:
        x = x + 1
        i += 1
    return x, i


def break_continue(self, x, n):
    total = x * 0
    for i in range(n):
        if i % 2 == 1:
            continue
        if i >= 6:
            break
        total = total + x * i
    return total


def return_in_loop(self, x, n):
    for i in range(n):
        if F.sum(x).array + i > 3:
            return x * i
    return -x


def append_in_loop(self, x, n):
    ys = []
    for i in range(n):
        ys.append(x * i)
    return ys


def list_comprehension(self, x):
    rows = [r * 2 for r in x if True]
    nested = [[a * b for a in range(3)] for b in range(2)]
    return F.stack(rows), nested[1][2], len(rows)


def dict_tuple_lambda(self, x):
    d = {'a': x, 'b': x * 2}
    square = lambda v: v * v  # noqa: E731
    pair = (d['a'], square(d['b']))
    first, second = pair
    return first + second, pair


def iterate_sequence(self, xs):
    total = xs[0] * 0
    for i, x in enumerate(xs):
        total = total + x * i
    return total


def zip_lists(self, xs, ys):
    out = []
    for x, y in zip(xs, ys):
        out.append(x * y)
    return out


def iterate_tensor(self, x):
    acc = x[0] * 0
    for row in x:
        acc = acc + row
    return acc


def static_if_and_slices(self, x):
    if self.fn is None:
        y = x
    elif chainer.config.train:
        y = x * 3
    else:
        y = x[:, 1:] * 2
    return y[::-1], y[0, -1], x[..., None].shape[-1]


def helper_function(v, k=2):
    return v * k


def calls_function(self, x):
    return helper_function(x), helper_function(x, k=3)


def links_in_loop(self, x, n):
    h = x
    for _ in range(n):
        h = F.tanh(self.l1(h))
    return self.l2(h)


CASES = {
    'range with a run-time bound': (loop_range, lambda: (_x(2, 3), 3), lambda: [(_x(2, 3), 0),
                                                                                  (_x(2, 3), 5)]),
    'range with start, stop and step': (loop_range_step, lambda: (_x(2), 1, 8),
                                        lambda: [(_x(2), 3, 4), (_x(2), 0, 11)]),
    'while with a run-time condition': (while_dynamic, lambda: (_x(3), 2),
                                        lambda: [(_x(3), 0), (_x(3), 7)]),
    'break and continue': (break_continue, lambda: (_x(3), 10),
                           lambda: [(_x(3), 3), (_x(3), 0)]),
    'return inside a loop': (return_in_loop, lambda: (_x(2) + 1, 4),
                             lambda: [(_x(2) - 3, 4), (_x(2) + 3, 2), (_x(2), 0)]),
    'append in a loop (a sequence)': (append_in_loop, lambda: (_x(2), 3),
                                      lambda: [(_x(2), 1), (_x(2), 6)]),
    'list comprehensions': (list_comprehension, lambda: (_x(3, 2),), lambda: []),
    'dicts, tuples and lambdas': (dict_tuple_lambda, lambda: (_x(2, 2),), lambda: []),
    'enumerate over a list argument': (iterate_sequence, lambda: ([_x(2), _x(2, seed=1)],),
                                       lambda: [([_x(2, seed=k) for k in range(4)],)]),
    'zip of two list arguments': (zip_lists, lambda: ([_x(2), _x(2, seed=1)],
                                                      [_x(2, seed=2), _x(2, seed=3)]),
                                  lambda: [([_x(2, seed=4)] * 3, [_x(2, seed=5)] * 2)]),
    'iteration over a tensor': (iterate_tensor, lambda: (_x(4, 3),), lambda: []),
    'constant ifs, config and slices': (static_if_and_slices, lambda: (_x(3, 4),), lambda: []),
    'plain functions with defaults': (calls_function, lambda: (_x(2),), lambda: []),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_construct(case):
    fn, args, others = CASES[case]
    check_ch2o(Model(fn), args(), run_args=others())


def test_links_in_a_loop_with_gradients(tmp_path):
    model = Model(links_in_loop, l1=L.Linear(3, 3), l2=L.Linear(3, 2))
    check_ch2o(model, (_x(2, 3), 2), run_args=[(_x(2, 3), 0), (_x(2, 3), 4)])
    check_ch2o_gradients(model, (_x(2, 3), 3), tmp_path)


def test_parameters_are_named_by_link_path():
    model = Model(links_in_loop, l1=L.Linear(3, 3), l2=L.Linear(3, 2))
    proto = export_model(model, [_x(2, 3), 2])
    names = {t.name for t in proto.graph.initializer}
    assert {'/l1/W', '/l1/b', '/l2/W', '/l2/b'} <= names
    assert [n.op_type for n in proto.graph.node].count('Loop') == 1


def unsupported(self, x):
    try:
        y = x * 2
    except ValueError:
        y = x
    return y


def test_unsupported_construct_names_file_and_line(tmp_path):
    with pytest.raises(TranslationError, match=r"test_translator\.py:\d+: 'try'"):
        export(Model(unsupported), [_x(2)], str(tmp_path / 'm.onnx'), translator='ch2o')
    assert not (tmp_path / 'm.onnx').exists()


def sorts(self, x):
    return x.sort()


def test_an_untranslated_ndarray_method_says_which_are(tmp_path):
    # Any method of ndarray is a method call, refused with the list of the
    # translated ones (before, one outside a hand-kept list of names was
    # refused as an attribute, with the list of attributes).
    with pytest.raises(TranslationError, match=r"test_translator\.py:\d+: '\.sort\(\)' of a "
                       r"tensor is not supported \(supported: astype, reshape"):
        export(Model(sorts), [_x(2)], str(tmp_path / 'm.onnx'), translator='ch2o')


# -- slices of a list whose length is only known at run time ------------------------
def _sequence(n, seed=0):
    """``n`` arrays of varying first axis (a list argument: a sequence)."""
    return [_x(k % 3 + 1, 2, seed=seed + k) for k in range(n)]


def sequence_slices(self, xs, a, b):
    lengths = [len(x) for x in xs]
    return (xs[1:], xs[:-1], xs[::-1], xs[-2::-2], xs[a:b], xs[b:a:-1], xs[a::2], xs[5:],
            xs[-100:100], lengths[:-1], lengths[a:])


@pytest.mark.slow
def test_sequence_slices_at_several_lengths():
    """Constant and run-time bounds, negative ones and ones out of range,
    both directions: Python's clamping at every length (0 included), each
    from the same file."""
    runs = [(_sequence(n, seed=n), a, b) for n in (0, 1, 2, 5)
            for a, b in ((0, 3), (-2, 10), (3, -4))]
    check_ch2o(Model(sequence_slices), [_sequence(4), 1, -1], run_args=runs)


def slice_and_stack(self, xs):
    return F.stack(xs[-2::-1]) * self.l.W[0, 0]


def test_sequence_slice_gradients(tmp_path):
    model = Model(slice_and_stack, l=L.Linear(3, 2))
    check_ch2o_gradients(model, [[_x(2, 3, seed=k) for k in range(4)]], tmp_path)


# -- plain Python classes constructed in forward ------------------------------------
class Accumulator:
    """A plain class whose methods update its state."""

    scale = 2

    def __init__(self, start, *, decay=0.5):
        self.total = start
        self.steps = 0
        self.decay = decay

    def add(self, x):
        self.total = self.total * self.decay + x * self.scale
        self.steps += 1
        return self

    @property
    def mean(self):
        return self.total / self.steps


def plain_class_with_state(self, x, y):
    acc = Accumulator(x, decay=0.25)
    acc.add(y).add(x)
    for k in range(2):
        acc.add(y * k)
    return acc.total, acc.mean, acc.steps, isinstance(acc, Accumulator)


def test_plain_class_with_state():
    check_ch2o(Model(plain_class_with_state), [_x(2, 3), _x(2, 3, seed=1)])


def plain_class_set_in_a_branch(self, x):
    acc = Accumulator(x)
    if x.sum() > 0:
        acc.add(x)
    return acc.total


class Bag:
    def __init__(self):
        self.items = []


def plain_class_list_appended_in_a_loop(self, x, n):
    bag = Bag()
    for _ in range(n):
        bag.items.append(x)
    return bag.items


def test_plain_class_state_changed_in_a_dynamic_branch_is_refused():
    """The attributes live on the object, not among the names If and Loop
    merge: changing them there is an error, not a wrong graph."""
    with pytest.raises(TranslationError, match=r"test_translator\.py:\d+: setting "
                                               r"Accumulator\.total inside a branch"):
        export_model(Model(plain_class_set_in_a_branch), [_x(2)])
    with pytest.raises(TranslationError, match=r"test_translator\.py:\d+: changing a list "
                                               r"attribute of Bag inside a branch or loop"):
        export_model(Model(plain_class_list_appended_in_a_loop), [_x(2), 3])


# -- children() and links() of a ChainList --------------------------------------------
class Stages(chainer.ChainList):
    def __init__(self):
        super().__init__(L.Linear(3, 3), L.Linear(3, 3), L.Linear(3, 2))

    def forward(self, x):
        for link in self.children():
            x = F.tanh(link(x))
        names = [name for name, _ in self.namedlinks(skipself=True)]
        return x, len(names), sum(p.size for p in self.params())


def test_chainlist_children_unrolled(tmp_path):
    """The structure is known at export time: the loop over the children
    unrolls, and each child's parameters get their gradients."""
    model = Stages()
    protos = check_ch2o(model, [_x(2, 3)])
    assert not {'Loop', 'If'} & {n.op_type for n in protos[0].graph.node}
    check_ch2o_gradients(model, [_x(2, 3)], tmp_path)


# -- F.n_step_* on a time-major list argument -------------------------------------
def n_step_bilstm_function(self, hx, cx, xs):
    return F.n_step_bilstm(2, 0.0, hx, cx, self.rnn.ws, self.rnn.bs, xs)


def n_step_rnn_function_own_lists(self, hx, xs):
    # ws and bs rebuilt in the source: lists of lists of tensors
    ws = [[w for w in cell] for cell in self.rnn.ws]
    bs = [list(cell) for cell in self.rnn.bs]
    return F.n_step_rnn(2, 0.0, hx, ws, bs, xs, activation='relu')


def test_n_step_functions_of_two_layers_on_a_sequence():
    """xs[t] holds step t of the sequences still running; the number of
    steps and who runs them vary between runs of one file."""
    h, c = _x(4, 2, 3, seed=1), _x(4, 2, 3, seed=2)
    xs = [_x(2, 4), _x(1, 4, seed=1)]
    others = [[_x(2, 4, seed=k) for k in range(4)], [_x(2, 4), _x(2, 4, seed=3), _x(1, 4)]]
    check_ch2o(Model(n_step_bilstm_function, rnn=L.NStepBiLSTM(2, 4, 3, 0.0)), [h, c, xs],
               rtol=1e-4, atol=1e-5, run_args=[(h, c, o) for o in others])
    check_ch2o(Model(n_step_rnn_function_own_lists, rnn=L.NStepRNNReLU(2, 4, 3, 0.0)),
               [h[:2], xs], rtol=1e-4, atol=1e-5, run_args=[(h[:2], o) for o in others])


# -- values None on one path and a tensor on another ---------------------------------
def none_then_tensor_in_a_while(self, x, n):
    h = None
    i = 0
    while i < n:
        if h is None:
            h = x * 2
        else:
            h = h * 0.5 + x
        i += 1
    if h is None:
        return x - 1, i
    return h, i


def test_none_then_tensor_in_a_while_loop():
    """h is None until the first iteration sets it: at run time, also when
    the loop does not run at all (n = 0 returns the None path's value)."""
    x = _x(2, 3)
    check_ch2o(Model(none_then_tensor_in_a_while), [x, 3],
               run_args=[(x, 0), (x, 1), (x, 5)])


def none_or_tensor_in_an_if(self, x, flag):
    h = None
    if flag > 0:
        h = x + 1
    scale = 3.0 if h is None else 0.5
    if h is not None:
        x = x + h * scale
    return x * scale, h is None


def test_none_or_tensor_in_an_if():
    """``is None`` and ``is not None`` of a value the If made None on one
    branch only: run-time bools, in a condition and as an output."""
    x = _x(2, 3)
    check_ch2o(Model(none_or_tensor_in_an_if), [x, 1], run_args=[(x, 0), (x, -2)])


def lstm_state_none_first(self, xs):
    c = h = None
    for x in xs:
        c, h = self.lstm(c, h, x)
    return h


def test_link_called_with_a_state_none_before_the_loop():
    """A Chainer link given a state that is None on the first iteration
    only: the call runs in an If on whether it is set, since Chainer
    treats None otherwise than zeros."""
    model = Model(lstm_state_none_first, lstm=L.StatelessLSTM(3, 4))
    xs = [_x(2, 3, seed=k) for k in range(3)]
    protos = check_ch2o(model, [xs], rtol=1e-4, atol=1e-5,
                        run_args=[([_x(2, 3, seed=9)],), ([_x(2, 3, seed=k) for k in range(6)],)])
    assert 'Loop' in {n.op_type for n in protos[0].graph.node}


def padded_comprehension(self, ys):
    sos = self.xp.array([[7.0]], 'f')
    ys_in = [F.concat([sos, y], axis=0) for y in ys]
    padded = F.pad_sequence(ys_in, padding=-1.0)
    return F.hstack((padded, F.pad_sequence(ys))), len(ys_in)


def test_comprehension_over_a_sequence_feeds_pad_sequence():
    """The examples of a loop's results are the values for the export-time
    arguments (all of the list, not its first element): F.hstack checks
    that both padded batches agree, at export time as at run time."""
    ys = [_x(k + 1, 1, seed=k) for k in range(3)]
    check_ch2o(Model(padded_comprehension), [ys],
               run_args=[([_x(2, 1)],), ([_x(4 - k % 3, 1, seed=k) for k in range(5)],)])


class CountingChild(chainer.Chain):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * 2


class CallsChildInALoop(chainer.Chain):
    """Its eager calls run on a copy, so that each starts from the state
    the model had at export, as every run of the exported file does."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.child = CountingChild()

    def __call__(self, *args):
        return chainer.Chain.__call__(self.copy('copy'), *args)

    def forward(self, x, n):
        x = self.child(x)
        for _ in range(n):
            x = self.child(x)
        return x + self.child.calls


def test_attribute_set_by_a_call_is_seen_by_later_calls():
    """``self.calls`` set by the child's forward is a local of the
    translation: later calls (the Loop's iterations too) see it, and the
    model keeps its own value."""
    model = CallsChildInALoop()
    x = _x(2, 3)
    check_ch2o(model, [x, 3], run_args=[(x, 0), (x, 1), (x, 4)])
    assert model.child.calls == 0


def test_gradients_through_values_none_before_a_loop(tmp_path):
    """Training flows into the tensor of a maybe-None state, through the
    Ifs on whether it is set, as Chainer's gradients do."""
    xs = [_x(2, 3, seed=k) for k in range(3)]
    check_ch2o_gradients(Model(lstm_state_none_first, lstm=L.StatelessLSTM(3, 4)), [xs],
                         tmp_path)
    check_ch2o_gradients(Model(none_then_tensor_in_a_while), [_x(2, 3), 3], tmp_path)
