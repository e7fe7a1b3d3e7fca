"""The translator's state around a body that fails to translate: the scope
it translates into and the frame's bindings are those from before (each
If and Loop body is translated in its own scope, on its own copy of the
bindings)."""
import ast

import numpy
import pytest

from chainer_compiler.translators.ch2o import TranslationError
from chainer_compiler.translators.ch2o.scope import Scope, Translation
from chainer_compiler.translators.ch2o.translator import FLAGS, Frame, Translator
from chainer_compiler.translators.ch2o.values import Const, PyList, Tensor
from chainer_compiler.translators.onnx_chainer.tracing import DEFAULT_OPSET

FAILING_BODIES = {
    'if': 'if x.sum() > 0:\n    y = undefined\n',
    'else': 'if x.sum() > 0:\n    y = x\nelse:\n    y = undefined\n',
    'for over a run-time range': 'for i in range(n):\n    x = x + undefined\n',
    'while': 'while x.sum() > 0:\n    x = x - undefined\n',
    'loop in a branch': 'if x.sum() > 0:\n    for i in range(n):\n        xs.append(undefined)\n',
    'comprehension': 'ys = [x * undefined for i in [1, 2]]\n',
}


@pytest.mark.parametrize('source', FAILING_BODIES.values(), ids=list(FAILING_BODIES))
def test_a_body_that_fails_to_translate_leaves_scope_and_bindings_as_before(source):
    root = Scope(Translation(DEFAULT_OPSET, None))
    translator = Translator(root)
    xs = PyList([])
    env = {'x': Tensor('x', numpy.ones(3, numpy.float32)), 'n': Tensor('n', numpy.int64(2)),
           'xs': xs, **{flag: Const(False) for flag in FLAGS}}
    before = dict(env)
    frame = Frame(env, {}, 'model.py')
    with pytest.raises(TranslationError, match=r"model\.py:\d+: name 'undefined' is not "
                       r'defined'):
        translator.block(frame, ast.parse(source).body)
    assert translator.scope is root
    assert frame.env is env
    assert env == before  # the same Values: what the body bound is gone
    assert xs.items == []  # a body appends to its own copy
