"""The original chainer-compiler's ch2o "syntax" test cases, ported.

Each case translates ``forward``'s source with ch2o and compares the file
run in onnxruntime and the VM with Chainer's own forward.  Where the
original case was about a run-time value (a trip count, a condition, a
list's length, an index), ``run_args`` feeds the one exported file other
values too, so that a graph that baked the export-time value in would fail.
Where the original checked gradients, ours are checked with compile_onnx.
"""
import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from .helpers import check_ch2o, check_ch2o_gradients


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def top_level_ops(protos):
    """The op types of the main graphs of ``protos`` (bodies not included)."""
    return {node.op_type for proto in protos for node in proto.graph.node}


def nested_loss(outputs):
    """A loss over every float Variable in ``outputs``, lists and tuples
    included, each item weighted by its position so that no gradient is
    uniform."""
    if isinstance(outputs, chainer.Variable):
        return F.sum(outputs) if outputs.dtype.kind == 'f' else 0
    if not isinstance(outputs, (list, tuple)):
        return 0  # an int result
    total = 0
    for i, item in enumerate(outputs):
        total = total + (i + 1) * nested_loss(item)
    return total


def fresh_each_call(cls):
    """``cls`` whose eager calls run on a copy of the model.

    Some cases set ``self.x`` inside ``forward`` (lazily, or by updating an
    attribute set in ``__init__``).  ch2o reads such an attribute as a
    local of each translated call, so every run of the exported file starts
    from the state the model had at export; Chainer's eager calls would
    instead keep what the previous call left.  Running Chainer on a copy
    gives it the same starting state on every call."""
    def __call__(self, *args):
        return chainer.Chain.__call__(copy.deepcopy(self), *args)
    return type(cls.__name__, (cls,), {'__call__': __call__})


# -- comparisons (Cmp) ---------------------------------------------------------------
class Equal(chainer.Chain):
    def forward(self, a, b):
        return a == b


class NotEqual(chainer.Chain):
    def forward(self, a, b):
        return a != b


class Greater(chainer.Chain):
    def forward(self, a, b):
        return a > b


class GreaterEqual(chainer.Chain):
    def forward(self, a, b):
        return a >= b


class Less(chainer.Chain):
    def forward(self, a, b):
        return a < b


class LessEqual(chainer.Chain):
    def forward(self, a, b):
        return a <= b


class Is(chainer.Chain):
    def forward(self, a, b):
        return a is b


class IsNot(chainer.Chain):
    def forward(self, a, b):
        return a is not b


@pytest.mark.parametrize('cls', [Equal, NotEqual, Greater, GreaterEqual, Less, LessEqual])
def test_compare_ints(cls):
    # Python ints given to forward are run-time inputs: one file answers
    # for a smaller, an equal and a larger left operand.
    check_ch2o(cls(), [4, 5], run_args=[(4, 4), (4, 3)])


IDENTITY_OPERANDS = [
    # (a, b, other arguments for the same file or None)
    pytest.param(None, None, None, id='none_none'),
    pytest.param(42, None, [(7, None)], id='int_none'),
    pytest.param(True, None, [(False, None)], id='true_none'),
    # Python's bools are singletons, so 'is' between two bool arguments is
    # their equality, decided at run time.
    pytest.param(True, False, [(True, True), (False, False)], id='true_false'),
    pytest.param(True, True, [(False, True)], id='true_true'),
    pytest.param(False, False, [(True, False)], id='false_false'),
    pytest.param(True, [numpy.float32(42)], None, id='bool_list'),
    pytest.param([numpy.float32(42)], [numpy.float32(42)], None, id='list_list'),
    pytest.param(numpy.array(42), numpy.array(42), None, id='array_array'),
]


@pytest.mark.parametrize('cls', [Is, IsNot])
@pytest.mark.parametrize('a,b,other', IDENTITY_OPERANDS)
def test_identity(cls, a, b, other):
    check_ch2o(cls(), [a, b], run_args=other or ())


# -- for (For) -------------------------------------------------------------------------
class AppendPrefixes(chainer.Chain):
    def forward(self, xs, p):
        v = []
        for i in range(p):
            v.append(xs[:i])
        return v


class LastStepOfPadded(chainer.Chain):
    """The original's 'closure_bug': a loop reading a tensor made before it."""

    def forward(self, xs, length):
        inputs = F.pad_sequence(xs)
        h = inputs[:, 0]
        for time in range(length):
            h = inputs[:, time]
        return h


class ChainedAssignInLoop(chainer.Chain):
    def forward(self):
        bs = 0
        cs = 0
        for i in range(4):
            cs = i
            bs = cs
        return bs, cs


class LoopVariableLeaks(chainer.Chain):
    def forward(self):
        for i in range(4):
            o = i
        return o


class UpdateSelfInLoop(chainer.Chain):
    def forward(self, x):
        self.x = x
        for i in range(5):
            self.x += i
        return self.x


class UpdateSelfLiteralInLoop(chainer.Chain):
    def forward(self):
        self.x = 42
        for i in range(5):
            self.x += i
        return self.x


class UpdateInitAttributeInLoop(chainer.Chain):
    def __init__(self):
        super().__init__()
        self.x = 42

    def forward(self):
        for i in range(5):
            self.x += i
        return self.x


class LinearNTimes(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(None, 3)

    def forward(self, x, n):
        for _ in range(n):
            x = self.l(x)
        return x


class LinearNTimesMTimes(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(None, 3)

    def forward(self, x, n, m):
        for _i in range(n):
            for _j in range(m):
                x = self.l(x)
        return x


def test_for_append(tmp_path):
    protos = check_ch2o(AppendPrefixes(), [_rand(10), 5], run_args=[(_rand(10, seed=1), 2)])
    assert 'Loop' in top_level_ops(protos)
    check_ch2o_gradients(AppendPrefixes(), [_rand(10), 5], tmp_path, loss=nested_loss)


def test_for_reads_outer_tensor():
    xs = [_rand(4, 5, seed=i) for i in range(4)]
    check_ch2o(LastStepOfPadded(), [xs, 4], run_args=[(xs[:3], 2), (xs, 1)])


@pytest.mark.parametrize('cls', [ChainedAssignInLoop, LoopVariableLeaks, UpdateSelfLiteralInLoop,
                                 fresh_each_call(UpdateInitAttributeInLoop)],
                         ids=['multi_ref', 'leak', 'update_self_literal',
                              'update_self_literal_in_init'])
def test_for_static(cls):
    check_ch2o(cls(), [])


def test_for_update_self():
    check_ch2o(UpdateSelfInLoop(), [42], run_args=[(-3,)])


def test_for_backprop(tmp_path):
    model = LinearNTimes()
    x = _rand(4, 3)
    protos = check_ch2o(model, [x, 2], run_args=[(x, 0), (x, 3)])
    assert 'Loop' in top_level_ops(protos)
    check_ch2o_gradients(model, [x, 2], tmp_path)


def test_double_for_backprop(tmp_path):
    model = LinearNTimesMTimes()
    x = _rand(4, 3)
    check_ch2o(model, [x, 2, 5], run_args=[(x, 1, 2), (x, 3, 0)])
    check_ch2o_gradients(model, [x, 2, 3], tmp_path)


# -- for with if (ForAndIf) ----------------------------------------------------------
class LazyInitInLoop(chainer.Chain):
    def forward(self, n):
        y = None
        for i in range(n):
            if y is None:
                y = 42
            y += i
        return y


class LazySelfInitInLoop(chainer.Chain):
    def __init__(self):
        super().__init__()
        self.y = None

    def forward(self, n):
        for i in range(n):
            if self.y is None:
                self.y = 42
            self.y += i
        return self.y


@pytest.mark.parametrize('cls', [
    pytest.param(LazyInitInLoop, id='lazy_init'),
    pytest.param(fresh_each_call(LazySelfInitInLoop), id='lazy_self_init'),
])
def test_for_and_if(cls):
    check_ch2o(cls(), [5], run_args=[(1,), (3,)])


# -- if (If) --------------------------------------------------------------------------
class StaticTrue(chainer.Chain):
    def forward(self, x):
        if True:
            x += 3
        else:
            x += 10
        return x


class StaticFalse(chainer.Chain):
    def forward(self, x):
        if False:
            x += 3
        else:
            x += 10
        return x


class StaticTrueNoElse(chainer.Chain):
    def forward(self, x):
        if True:
            x += 3
        return x


class StaticFalseNoElse(chainer.Chain):
    def forward(self, x):
        if False:
            x += 3
        return x


class Dynamic(chainer.Chain):
    def forward(self, x, cond):
        if cond:
            x += 3
        else:
            x += 10
        return x


class DynamicNoElse(chainer.Chain):
    def forward(self, x, cond):
        if cond:
            x += 3
        return x


class DynamicDefinesInBranches(chainer.Chain):
    def forward(self, x, cond):
        if cond:
            y = x + 3
        else:
            y = x + 10
        return y


class DynamicUpdatesAlias(chainer.Chain):
    def forward(self, x, cond):
        y = x
        if cond:
            y += 3
        else:
            y += 10
        return y


class UpdateSelfInBranch(chainer.Chain):
    def forward(self, x, cond):
        self.x = x
        if cond:
            self.x += 10
        return self.x


class LazyInit(chainer.Chain):
    def __init__(self):
        super().__init__()
        self.x = None

    def forward(self, x):
        if self.x is None:
            self.x = x
        return self.x


class LazyInitUsedTwice(chainer.Chain):
    """Calls a LazyInit child twice: the second call sees the first's value."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.li = LazyInit()

    def forward(self, x):
        a = self.li(x)
        b = self.li(x * 2)
        return a + b


class LinearIfGiven(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(None, 4)

    def forward(self, x, cond):
        if cond is not None:
            x = self.l(x)
        return x


@pytest.mark.parametrize('cls', [StaticTrue, StaticFalse, StaticTrueNoElse, StaticFalseNoElse],
                         ids=['static_true', 'static_false', 'static_true_no_else',
                              'static_false_no_else'])
def test_if_static(cls):
    # A condition known at export time is folded: no If.
    protos = check_ch2o(cls(), [42], run_args=[(-1,)])
    assert 'If' not in top_level_ops(protos)


@pytest.mark.parametrize('cls', [Dynamic, DynamicNoElse, DynamicDefinesInBranches,
                                 DynamicUpdatesAlias, UpdateSelfInBranch],
                         ids=['dynamic', 'no_else', 'leak', 'alias', 'update_self'])
def test_if_dynamic(cls):
    # One file takes either branch: the condition is a run-time input.
    protos = check_ch2o(cls(), [42, False], run_args=[(42, True), (-5, True)])
    assert 'If' in top_level_ops(protos)


@pytest.mark.parametrize('cls', [
    pytest.param(fresh_each_call(LazyInit), id='lazy_init'),
    pytest.param(fresh_each_call(LazyInitUsedTwice), id='lazy_init_use'),
])
def test_if_lazy_init(cls):
    check_ch2o(cls(), [10], run_args=[(7,)])


def test_if_backprop(tmp_path):
    model = LinearIfGiven()
    x = _rand(3, 5)
    check_ch2o(model, [x, 1])
    check_ch2o_gradients(model, [x, 1], tmp_path)


# -- links in loops (LinkInFor) -------------------------------------------------------
class LinearOverColumns(chainer.Chain):
    def __init__(self, n_hidden):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(n_hidden, n_hidden)

    def forward(self, x, h, indices):
        for i in indices:
            h = h + self.l(x[:, i])
        return h


def test_link_in_for(tmp_path):
    model, x, h = LinearOverColumns(5), _rand(3, 4, 5), _rand(3, 5, seed=1)
    # The loop runs over the rows of an int array: other values, other columns.
    check_ch2o(model, [x, h, numpy.arange(4)], run_args=[(x, h, numpy.array([3, 3, 0, 1]))])
    check_ch2o_gradients(model, [x, h, numpy.array([3, 3, 0, 1])], tmp_path)


# -- list comprehensions (ListComp) ----------------------------------------------------
class Comprehensions(chainer.Chain):
    def forward(self, xs, ps, p):
        y1 = [x[3:5] for x in xs]
        y2 = [x[ps[0]:ps[0] + 3] for x in xs]
        y3 = [x[p:p + 4] for x in xs]
        y4 = [xs[i][:i] for i in range(p)]
        y5 = [3 for x in xs]
        return y1, y2, y3, y4, y5


def test_list_comprehension(tmp_path):
    xs = _rand(6, 8)
    check_ch2o(Comprehensions(), [xs, numpy.array([3, 4]), 5],
               run_args=[(xs, numpy.array([0, 1]), 2)])
    check_ch2o_gradients(Comprehensions(), [xs, numpy.array([3, 4]), 5], tmp_path,
                         loss=nested_loss)


# -- several classes (MultiClass) ------------------------------------------------------
class ScaledLinear(chainer.Chain):
    def __init__(self, n_out, p):
        super().__init__()
        with self.init_scope():
            self.l = L.Linear(None, n_out)
        self.p = p

    def forward(self, x):
        return self.l(x) * self.p


class TwoScaledLinears(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l0 = L.Linear(3)
            self.l1 = ScaledLinear(5, 3.1)
            self.l2 = ScaledLinear(4, 4.2)

    def forward(self, x):
        x = self.l0(x)
        x = self.l1(x) + self.l2.p
        x = self.l2(x) + self.l1.p
        return x


def test_multi_class(tmp_path):
    model, x = TwoScaledLinears(), _rand(3, 7)
    check_ch2o(model, [x])
    check_ch2o_gradients(model, [x], tmp_path)


# -- several functions (MultiFunction) --------------------------------------------------
class HelperMethod(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l0 = L.Linear(7)
            self.l1 = L.Linear(5)

    def g(self, y):
        return self.l1(y)

    # The receiver is not called ``self``: ch2o must follow the first
    # parameter, not the name.
    def forward(me, x):
        x1 = me.l0(x)
        return me.g(x1)


def test_multi_function():
    check_ch2o(HelperMethod(), [_rand(10, 20)])


# -- range (Range) -------------------------------------------------------------------------
class Range(chainer.Chain):
    def forward(self, n):
        return range(n)


class RangeStartStop(chainer.Chain):
    def forward(self, a, b):
        return range(a, b)


class RangeStep(chainer.Chain):
    def forward(self, a, b, c):
        return range(a, b, c)


class RangeInComprehension(chainer.Chain):
    def forward(self, xs, ps, p):
        y1 = [xs[i, i + 2] for i in range(p)]
        y2 = [xs[ps[i], ps[i] + 3] for i in range(p)]
        return y1, y2


@pytest.mark.parametrize('cls,args,other', [
    (Range, (5,), (2,)),
    (RangeStartStop, (5, 8), (2, 9)),
    (RangeStep, (5, 19, 2), (1, 10, 3)),
], ids=['range', 'stop', 'step'])
def test_range(cls, args, other):
    check_ch2o(cls(), list(args), run_args=[other])


def test_range_list_comprehension():
    xs = _rand(10, 20)
    ps = numpy.array([4, 0, 2, 1, 3])
    check_ch2o(RangeInComprehension(), [xs, ps, 5], run_args=[(xs, ps[::-1].copy(), 3)])


# -- sequences (Sequence) ----------------------------------------------------------------
class SequenceOfSlices(chainer.Chain):
    def forward(self, xs, p):
        t = [xs[:i + 1] for i in range(p)]
        y1 = [v[-2:-1] for v in t]
        v = []
        v.append(xs[2])
        v.append(xs[0])
        return y1, v


def test_sequence():
    xs = _rand(10)
    check_ch2o(SequenceOfSlices(), [xs, 1], run_args=[(xs, 4)])


def test_sequence_backprop(tmp_path):
    check_ch2o_gradients(SequenceOfSlices(), [_rand(10), 4], tmp_path, loss=nested_loss)


# -- slices (Slice) ----------------------------------------------------------------------
class Slices(chainer.Chain):
    def forward(self, xs, xss, ps):
        y1 = xs[2]
        y2 = xs[3:5]
        y3 = xs[ps[0]]
        y4 = xs[ps[0]:ps[0] + 2]
        y5 = xss[ps[0]:10, ps[1]:ps[1] + 4]
        y6 = xss[ps[0], ps[1]:ps[1] + 4]
        y7 = xss[3, ps[0]]
        y8 = xs[-1]
        y9 = xs[-2]
        return y1, y2, y3, y4, y5, y6, y7, y8, y9


class ShapeSlices(chainer.Chain):
    def forward(self, x):
        s = x.shape
        return (numpy.array(s[2]), numpy.array(s[-2]), numpy.array(s[:2]),
                numpy.array(s[1:3]), numpy.array(s[1::2]))


class SliceStep(chainer.Chain):
    def forward(self, x):
        return x[1:6:2]


class SliceStepSecondAxis(chainer.Chain):
    def forward(self, x):
        return x[:, 1:-2:2]


class SliceAll(chainer.Chain):
    def forward(self, x):
        return x[:]


class SliceAllBothAxes(chainer.Chain):
    def forward(self, x):
        return x[:, :]


def test_slices():
    xs, xss = _rand(16), _rand(16, 16, seed=1)
    # Indices from an int array input: other values give other (and
    # differently sized) slices from the same file.
    check_ch2o(Slices(), [xs, xss, numpy.array([4, 7])],
               run_args=[(xs, xss, numpy.array([8, 0]))])


@pytest.mark.parametrize('cls', [ShapeSlices, SliceStep, SliceStepSecondAxis, SliceAll,
                                 SliceAllBothAxes],
                         ids=['list', 'step', 'step_second', 'all', 'all_second'])
def test_slice_variants(cls):
    check_ch2o(cls(), [_rand(7, 5, 3, 4)])


# -- user-defined functions (UserDefinedFunc) -------------------------------------------
class Adder:
    """A plain Python class constructed inside ``forward``."""

    def __init__(self, a):
        self.a = a

    def add_to(self, x):
        return self.a + x


def add(x, y):
    return x + y


class UserFunctions(chainer.Chain):
    def forward(self, x, y, z):
        p = Adder(x).add_to(y)
        return add(p, z)


def test_user_defined_function():
    check_ch2o(UserFunctions(), [_rand(3, 4), _rand(3, 4, seed=1), _rand(3, 4, seed=2)])


# -- a user-defined FunctionNode (ChinerFunctionNode) -----------------------------------
class EmbedIDFunction(chainer.FunctionNode):
    """A FunctionNode written by the user.  Converters are keyed by the
    FunctionNode's class name, so this one shares the name of Chainer's
    own embedding function, as the original case's did, and has the
    attribute that converter reads."""

    ignore_label = None

    def forward(self, inputs):
        x, w = inputs
        return w[x],


class UserEmbed(chainer.Link):
    def __init__(self, n_in, n_out):
        super().__init__()
        with self.init_scope():
            self.W = chainer.Parameter(chainer.initializers.Normal(1.0), (n_in, n_out))

    def forward(self, x):
        return EmbedIDFunction().apply((x, self.W))[0]


class UserFunctionNodeModel(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = UserEmbed(10, 6)

    def forward(self, x):
        return self.l1(x)


def test_user_function_node():
    check_ch2o(UserFunctionNodeModel(), [numpy.array([3, 0, 9, 3, 5])])
