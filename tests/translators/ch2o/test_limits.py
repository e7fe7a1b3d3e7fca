"""ch2o translates the code that runs, or refuses with a TranslationError
naming the file, the line and the construct: decorated and redirected
forwards, source edited after import, functions without Python source,
recursion, deep nesting, and loops unrolled at export time."""
import functools
import importlib.util

import chainer
import chainer.functions as F
import numpy
import onnx
import pytest

from chainer_compiler.translators.ch2o import TranslationError, export_model, limits

from .helpers import OPSETS, check_ch2o


def _x(*shape):
    return numpy.random.RandomState(0).uniform(0, 1, shape).astype(numpy.float32)


def _import(tmp_path, name, text):
    """Module ``name`` imported from a file in ``tmp_path`` holding ``text``."""
    path = tmp_path / (name + '.py')
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


# -- what runs is what is translated ------------------------------------------
def doubled(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


def logged(fn):
    """A wrapper ch2o cannot translate: its body is a `try` statement."""
    @functools.wraps(fn)
    def wrapper(*args):
        try:
            return fn(*args)
        finally:
            wrapper.calls += 1
    wrapper.calls = 0
    return wrapper


class Doubled(chainer.Chain):
    @doubled
    def forward(self, x):
        return x + 1


class Logged(chainer.Chain):
    @logged
    def forward(self, x):
        return x + 1


def test_a_wrapped_forward_is_translated_with_its_wrapper():
    # the old translator read the undecorated source: x + 1, not (x + 1) * 2
    check_ch2o(Doubled(), [_x(2, 3)])


def test_a_wrapper_outside_the_subset_is_refused_at_its_line():
    with pytest.raises(TranslationError, match=r"test_limits\.py:\d+: 'try' statements"):
        export_model(Logged(), [_x(2, 3)])


class Redirected(chainer.Chain):
    """``model.forward`` is ``other``: that is what ``model(x)`` runs."""

    def forward(self, x):
        return x + 1

    def other(self, x):
        return x * 3

    def __getattribute__(self, name):
        return object.__getattribute__(self, 'other' if name == 'forward' else name)


class HasRedirectedChild(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.child = Redirected()

    def forward(self, x):
        return self.child(x) - 1


class StaticForward(chainer.Chain):
    forward = staticmethod(lambda x: x * 5)


@pytest.mark.parametrize('model', [Redirected, HasRedirectedChild, StaticForward])
def test_forward_is_looked_up_as_link_call_looks_it_up(model):
    check_ch2o(model(), [_x(2, 3)])


class CallsMixin:
    def __call__(self, x):
        return x * 7


class MixinCall(chainer.Chain, CallsMixin):
    def forward(self, x):
        return x + 1


def test_a_call_method_that_link_prefers_to_forward_is_refused():
    with pytest.raises(TranslationError, match=r'MixinCall\(\.\.\.\) runs .*CallsMixin.__call__'):
        export_model(MixinCall(), [_x(2, 3)])


class UfuncForward(chainer.Chain):
    forward = numpy.add


class BuiltinForward(chainer.Chain):
    forward = len


@pytest.mark.parametrize('model, name', [(UfuncForward, 'add is a ufunc'),
                                         (BuiltinForward, 'builtins.len is a builtin')])
def test_a_forward_without_python_source_is_refused(model, name):
    with pytest.raises(TranslationError, match=r'%s\.forward: %s.*not a Python function'
                       % (model.__qualname__, name)):
        export_model(model(), [_x(2, 3), _x(2, 3)])


SOURCE = '''from __future__ import annotations
import chainer


def scale(k):
    return lambda v: v * k


class Base(chainer.Chain):
    def forward(self, x: chainer.Variable) -> chainer.Variable:
        return x + 1


class Model(Base):
    def forward(self, x):
        return scale(2)(Base.forward(self, x))
'''


def test_a_file_as_imported_is_translated(tmp_path):
    module, _ = _import(tmp_path, 'ch2o_as_imported', SOURCE)
    check_ch2o(module.Model(), [_x(2, 3)])  # a closure, a lambda, a future import


def test_a_file_edited_after_import_is_refused(tmp_path):
    module, path = _import(tmp_path, 'ch2o_edited_after_import', SOURCE)
    path.write_text(SOURCE.replace('v * k', 'v * k * 100'))
    # the old translator exported v * k * 100; the model computes v * k
    with pytest.raises(TranslationError, match=r'%s:5: the code of scale\(\) that runs is '
                       r'not what %s compiles to now' % (path, path)):
        export_model(module.Model(), [_x(2, 3)])


def test_a_file_whose_lines_moved_after_import_is_refused(tmp_path):
    module, path = _import(tmp_path, 'ch2o_moved_after_import', SOURCE)
    # the same code two lines lower: the old line numbers point elsewhere
    path.write_text(SOURCE.replace('import chainer\n', 'import chainer\n\n\n', 1))
    with pytest.raises(TranslationError, match='changed after its module was imported'):
        export_model(module.Model(), [_x(2, 3)])


# -- recursion and nesting --------------------------------------------------------
class Recursive(chainer.Chain):
    def forward(self, x):
        return self.forward(x)


def add_levels(x, n):
    return x if n == 0 else add_levels(x + 1, n - 1)


class Counted(chainer.Chain):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return add_levels(x, self.n)


def test_recursion_that_constants_end_is_inlined():
    check_ch2o(Counted(limits.MAX_CALL_DEPTH - 2), [_x(2, 3)])


@pytest.mark.parametrize('model', [Recursive(), Counted(limits.MAX_CALL_DEPTH)])
def test_recursion_deeper_than_the_limit_is_refused(model):
    with pytest.raises(TranslationError, match=r'test_limits\.py:\d+: calls nest more than '
                       r'%d deep' % limits.MAX_CALL_DEPTH):
        export_model(model, [_x(2, 3)])


def test_an_expression_too_deep_for_python_is_refused(tmp_path):
    module, path = _import(tmp_path, 'ch2o_deep_expression',
                           'def forward(self, x):\n    return x' + ' + 1' * 2000 + '\n')
    model = type('Deep', (chainer.Chain,), {'forward': module.forward})()
    with pytest.raises(TranslationError, match=r'%s:2: nested too deeply' % path):
        export_model(model, [_x(2, 3)])


def nested_ifs(x, depth):
    if depth == 0:
        return x
    if F.sum(x).array >= 0:  # a run-time condition: each level is an ONNX If
        x = nested_ifs(x + 1, depth - 1)
    return x


class NestedIfs(chainer.Chain):
    def __init__(self, depth):
        super().__init__()
        self.depth = depth

    def forward(self, x):
        return nested_ifs(x, self.depth)


def test_ifs_nested_to_the_limit_give_a_file_that_loads():
    for proto in check_ch2o(NestedIfs(limits.MAX_SUBGRAPH_DEPTH), [_x(2, 3)]):
        onnx.load_from_string(proto.SerializeToString())  # protobuf reads it back


@pytest.mark.parametrize('depth', [limits.MAX_SUBGRAPH_DEPTH + 1, 90])
def test_ifs_nested_past_the_limit_are_refused(depth):
    # 90 levels: the old translator failed in protobuf (DecodeError)
    with pytest.raises(TranslationError, match=r'test_limits\.py:\d+: branches and loops .* '
                       r'nest more than %d deep' % limits.MAX_SUBGRAPH_DEPTH):
        export_model(NestedIfs(depth), [_x(2, 3)])


# -- loops unrolled at export time ---------------------------------------------------
class LongConstantLoop(chainer.Chain):
    def forward(self, x):
        for _ in range(limits.MAX_UNROLLED_ITERATIONS + 1):
            x = x + 1
        return x


class HugeRange(chainer.Chain):
    def forward(self, x):
        return x + len(range(10 ** 30))  # the old translator listed it: OverflowError


@pytest.mark.parametrize('model', [LongConstantLoop, HugeRange])
def test_a_constant_iterable_longer_than_the_limit_is_refused_before_unrolling(model):
    with pytest.raises(TranslationError, match=r'test_limits\.py:\d+: more than 100000 items '
                       r'known at export time'):
        export_model(model(), [_x(2, 3)])


class NestedConstantLoops(chainer.Chain):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            for _ in range(self.n):
                x = x + 1
        return x


class ConstantWhile(chainer.Chain):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        i = 0
        while i < self.n * self.n:
            x = x + 1
            i += 1
        return x


@pytest.mark.parametrize('model', [NestedConstantLoops, ConstantWhile])
def test_unrolled_iterations_are_counted_over_all_loops(model, monkeypatch):
    monkeypatch.setattr(limits, 'MAX_UNROLLED_ITERATIONS', 110)
    check_ch2o(model(10), [_x(2, 3)], opsets=OPSETS[:1])
    with pytest.raises(TranslationError, match=r'test_limits\.py:\d+: loops whose trip count '
                       r'is known at export time unroll to more than 110 iterations in all'):
        export_model(model(11), [_x(2, 3)])

