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
