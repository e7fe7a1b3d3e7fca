"""emit_c's refusal lists every instruction the kernels cannot run, each
with its index, operator and reason: also those after a refused one, whose
input shapes come from the Program's declared types."""
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError, emit_c

from .helpers import make_model


def test_every_refused_instruction_of_a_chain_is_listed(tmp_path):
    nodes = [helper.make_node('Hardmax', ['x'], ['h']),          # no kernel
             helper.make_node('Relu', ['h'], ['r']),
             helper.make_node('MaxPool', ['r'], ['p', 'i'], kernel_shape=[3, 3]),
             helper.make_node('Det', ['p'], ['d'])]              # no kernel
    # MaxPool's Indices, an output here, are refused.
    model = make_model(nodes, [('x', 'float32', (2, 3, 6, 6))],
                       [('d', 'float32', (2, 3)), ('i', 'int64', (2, 3, 4, 4))], opset=19)
    with pytest.raises(UnsupportedNativeOpsError) as info:
        emit_c(build_program(model), tmp_path / 'c')
    problems = info.value.problems
    assert [p[0] for p in problems] == [0, 2, 3]
    assert 'Hardmax' in problems[0][1] and 'no C kernel' in problems[0][2]
    assert 'MaxPool' in problems[1][1] and 'Indices output is used' in problems[1][2]
    message = str(info.value)
    assert 'cannot emit C for 3 instruction(s)' in message and 'Relu' not in message
    assert not (tmp_path / 'c').exists()
