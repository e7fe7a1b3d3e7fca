"""The facts of an operator's record (runtime/ops/registry.py) hold on every
stage and backend that reads them: random operators are evaluated by no
folder, views are what the backends alias, epilogue activations are what
the native products apply, attribute defaults are filled once."""
import glob
import os
import re

import numpy
import pytest
from onnx import helper

from chainer_compiler.passes.constant_folding import fold_constants
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import fusion
from chainer_compiler.runtime.native.folding import fold
from chainer_compiler.runtime.native.lowering import native_operators
from chainer_compiler.runtime.native.lowerings.connection import activation_enum
from chainer_compiler.runtime.ops.fusion_rules import epilogue_ops, product_epilogues
from chainer_compiler.runtime.ops.registry import records
from chainer_compiler.runtime.program import Instruction
from tests.runtime.native.helpers import make_model


def _training_dropout():
    """A Dropout in training mode (a constant true) on a constant input."""
    return make_model(
        [helper.make_node('Dropout', ['c', 'r', 't'], ['y'])], [], [('y', numpy.float32, [4, 8])],
        {'c': numpy.ones((4, 8), numpy.float32), 'r': numpy.array(0.5, numpy.float32),
         't': numpy.array(True)})


# Its native case is not native_build: make test-fast keeps it as a smoke test.
@pytest.mark.parametrize('backend', ['numpy', 'native'])
def test_a_training_dropout_on_a_constant_draws_a_fresh_mask_every_run(backend):
    # The old native emitter refused it or (by an op-name rule that missed
    # Dropout) could evaluate it once: one mask frozen into the C.
    executor = Executor(build_program(_training_dropout()), backend=backend)
    numpy.random.seed(0)
    masks = [executor.run_positional([])[0] for _ in range(3)]
    assert len({m.tobytes() for m in masks}) == 3
    numpy.random.seed(0)  # the same numbers as the NumPy VM draws
    reference = Executor(build_program(_training_dropout()), backend='numpy')
    for mask in masks:
        numpy.testing.assert_array_equal(mask, reference.run_positional([])[0])


def _random_ops():
    return [r for r in records() if r.random]


def test_the_random_operators_are_declared():
    names = {r.op for r in _random_ops()}
    assert {'Dropout', 'DropoutTraining', 'Bernoulli', 'Multinomial', 'RandomUniform',
            'RandomUniformLike', 'RandomNormal', 'RandomNormalLike'} <= names


@pytest.mark.parametrize('record', _random_ops(), ids=lambda r: r.op)
def test_no_folder_evaluates_a_random_operator(record):
    """Every input a small constant: both folders would run a deterministic
    operator of this shape; a random one they must leave to run time."""
    data = {'x%d' % k: numpy.ones((2, 2), numpy.float32) for k in range(2)}
    node = helper.make_node(record.op, list(data), ['y'], domain=record.domain)
    graph = helper.make_graph([node], 'g', [], [], [
        helper.make_tensor(n, 1, [2, 2], a.reshape(-1)) for n, a in data.items()])
    assert fold_constants(graph, {'': 17, record.domain: 1}) == 0
    consts = dict(enumerate(data.values()))
    inst = Instruction(record.op, (0, 1), (2,), domain=record.domain, version=17)
    assert fold(inst, consts, {}, {}) is None


def test_the_native_folder_refuses_by_the_record_not_the_name(monkeypatch):
    # Identity would be folded; declared random, it is not.
    inst = Instruction('Identity', (0,), (1,), version=17)
    consts = {0: numpy.ones(3, numpy.float32)}
    assert fold(inst, consts, {}, {}) is not None
    record = next(r for r in records() if r.op == 'Identity' and r.domain == '')
    monkeypatch.setattr(record, 'random', True)
    assert fold(inst, consts, {}, {}) is None


@pytest.mark.parametrize('record', [r for r in records() if r.view_of is not None],
                         ids=lambda r: r.op)
def test_views_are_what_the_native_fusion_sees_through(record):
    """The fusion's aliasing (a product's operands) follows every view_of
    operator, as the native planner aliases exactly them."""
    view = Instruction(record.op, (0,) * (record.view_of + 1), (1,), domain=record.domain)
    fuser = fusion._Fuser.__new__(fusion._Fuser)
    fuser.insts, fuser.producer = [view], {1: 0}
    assert fuser._root(1) == 0


def test_a_copying_operator_is_not_a_view():
    # Transpose was on the old fusion's list, but the C backend copies it.
    transpose = Instruction('Transpose', (0,), (1,))
    fuser = fusion._Fuser.__new__(fusion._Fuser)
    fuser.insts, fuser.producer = [transpose], {1: 0}
    assert fuser._root(1) == 1


def test_every_epilogue_activation_has_a_c_enum_and_a_lowering():
    headers = glob.glob(os.path.join(os.path.dirname(fusion.__file__), 'kernels', '*.h'))
    enums = {e for h in headers for e in re.findall(r'CCN_ACT_\w+', open(h).read())}
    assert set(epilogue_ops()) == {'Relu', 'LeakyRelu', 'Sigmoid', 'Tanh', 'HardSwish', 'Swish',
                                   'Gelu'}
    # Clip from 0 too (ReLU6), which fusion takes by its bounds.
    for op in product_epilogues():
        assert activation_enum(op) in enums and op in native_operators()


def test_attribute_defaults_are_filled_once_when_the_program_is_built():
    model = make_model(
        [helper.make_node('Conv', ['x', 'w'], ['y']), helper.make_node('LeakyRelu', ['y'], ['z'])],
        [('x', numpy.float32, [1, 2, 5, 5])], [('z', numpy.float32, [1, 3, 3, 3])],
        {'w': numpy.ones((3, 2, 3, 3), numpy.float32)})
    conv, leaky = build_program(model).instructions
    assert conv.attrs['group'] == 1 and conv.attrs['auto_pad'] == 'NOTSET'
    assert leaky.attrs['alpha'] == 0.01


@pytest.mark.native_build
def test_an_inference_dropout_takes_a_computed_ratio_natively():
    # Only a training Dropout needs its ratio at emit time.
    model = make_model([helper.make_node('Dropout', ['x', 'r'], ['y'])],
                       [('x', numpy.float32, [2, 3]), ('r', numpy.float32, [])],
                       [('y', numpy.float32, [2, 3])])
    x = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    got = Executor(build_program(model), backend='native').run_positional(
        [x, numpy.array(0.3, numpy.float32)])
    numpy.testing.assert_array_equal(got[0], x)
