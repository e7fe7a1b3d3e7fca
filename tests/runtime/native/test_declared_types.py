"""The emitter's shape propagation checks each lowered result against the
type the Program declares for its register (Program.types), instead of
trusting what the lowering derived.  Only C text is written: nothing is built."""
import dataclasses

import pytest
from onnx import TensorProto, helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c
from chainer_compiler.runtime.program import RegisterType
from tests.conftest import make_model


def _program():
    return build_program(make_model(
        [helper.make_node('Relu', ['x'], ['h'], name='relu'),
         helper.make_node('Tanh', ['h'], ['y'], name='tanh')],
        [('x', TensorProto.FLOAT, [2, 3])], [('y', TensorProto.FLOAT, [2, 3])]))


def test_results_that_agree_with_their_declared_types_are_emitted(tmp_path):
    program = _program()
    # Unknown and symbolic parts of a declared type agree with anything.
    h = next(r for r, n in program.register_names.items() if n == 'h')
    program.types[h] = RegisterType('tensor', None, ('N', None))
    assert emit_c(program, tmp_path, 'model').output_shapes == [(2, 3)]


@pytest.mark.parametrize('declared, text', [
    (RegisterType('tensor', 'float32', (2, 4)), r'float32\[2, 4\]'),
    (RegisterType('tensor', 'float32', (6,)), r'float32\[6\]'),
    (RegisterType('tensor', 'float64', (2, 3)), r'float64\[2, 3\]'),
    (RegisterType('sequence', 'float32', None), 'a sequence of float32'),
])
def test_a_result_that_contradicts_its_declared_type_is_refused(tmp_path, declared, text):
    program = _program()
    h = next(r for r, n in program.register_names.items() if n == 'h')
    program = dataclasses.replace(program, types={**program.types, h: declared})
    with pytest.raises(UnsupportedNativeOpsError,
                       match=r"instruction 0 \(Relu, node 'relu'\): its lowering computes output "
                             r"%%%d h as float32\[2, 3\], but the Program declares it %s"
                             % (h, text)):
        emit_c(program, tmp_path, 'model')
    assert not list(tmp_path.iterdir())  # refused before writing anything
