import io
import json

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler import build_program
from chainer_compiler.runtime import (Executor, InputValidationError, Instruction,
                                      KernelBindError, KernelError, NonFiniteError, Program,
                                      Tracer, UnsupportedOperatorError, ValueInfo)
from tests.conftest import make_model

X = numpy.ones((2, 3), numpy.float32)


def test_inputs_by_name_or_position(mlp_model):
    ex = Executor(build_program(mlp_model))
    numpy.testing.assert_array_equal(ex.run({'x': X})['y'], ex.run([X])['y'])


@pytest.mark.parametrize('inputs, message', [
    ({}, "missing input.* x"),
    ({'x': X, 'z': X}, 'unknown input.* z'),
    ({'x': X.astype(numpy.float64)}, "input 'x' has dtype float64, expected float32"),
    ({'x': numpy.ones((2, 4), numpy.float32)}, r"input 'x' has shape \(2, 4\), expected \(2, 3\)"),
    ({'x': numpy.ones(3, numpy.float32)}, r"input 'x' has shape \(3,\), expected \(2, 3\)"),
    ([X, X], 'takes 1 input'),
])
def test_input_validation_names_the_problem(mlp_model, inputs, message):
    with pytest.raises(InputValidationError, match=message):
        Executor(build_program(mlp_model)).run(inputs)


def test_symbolic_dimensions_must_agree_across_inputs():
    model = make_model([helper.make_node('Add', ['a', 'b'], ['c'])],
                       [('a', TensorProto.FLOAT, ['N', 2]), ('b', TensorProto.FLOAT, ['N', 2])],
                       [('c', TensorProto.FLOAT, ['N', 2])])
    ex = Executor(build_program(model))
    assert ex.run({'a': numpy.ones((5, 2), numpy.float32),
                   'b': numpy.ones((5, 2), numpy.float32)})['c'].shape == (5, 2)
    with pytest.raises(InputValidationError, match="'b' has N=4 on axis 0, but input 'a' has N=5"):
        ex.run({'a': numpy.ones((5, 2), numpy.float32), 'b': numpy.ones((4, 2), numpy.float32)})


def test_trace_prints_op_shapes_and_time(mlp_model):
    stream = io.StringIO()
    Executor(build_program(mlp_model), tracer=Tracer(stream=stream)).run({'x': X})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert 'MatMul' in lines[0] and 'float32[2, 3]' in lines[0] and ' ms' in lines[0]
    assert lines[2].endswith('# relu')


def test_chrome_tracing_json_has_one_complete_event_per_instruction(tmp_path, mlp_model):
    tracer = Tracer()
    Executor(build_program(mlp_model), tracer=tracer).run({'x': X})
    path = tmp_path / 'trace.json'
    tracer.write_chrome_tracing(str(path))
    events = json.loads(path.read_text())['traceEvents']
    assert [e['name'] for e in events] == ['MatMul', 'Add', 'Relu']
    assert all(e['ph'] == 'X' and e['dur'] >= 0 for e in events)


def test_check_nans_names_the_first_instruction_that_made_one():
    model = make_model([helper.make_node('Log', ['x'], ['l'], name='take_log'),
                        helper.make_node('Relu', ['l'], ['y'], name='after')],
                       [('x', TensorProto.FLOAT, [2])], [('y', TensorProto.FLOAT, [2])])
    program = build_program(model)
    x = numpy.array([1.0, -1.0], numpy.float32)
    with numpy.errstate(invalid='ignore'):
        Executor(program).run({'x': x})  # unchecked: no error
        with pytest.raises(NonFiniteError, match=r"instruction 0 \(Log, node 'take_log'\) "
                                                 r"produced NaN in output l"):
            Executor(program, check_nans=True).run({'x': x})


def test_kernel_failure_names_the_instruction_and_input_shapes():
    model = make_model([helper.make_node('MatMul', ['a', 'b'], ['c'], name='mm')],
                       [('a', TensorProto.FLOAT, ['M', 'K']), ('b', TensorProto.FLOAT, ['P', 'Q'])],
                       [('c', TensorProto.FLOAT, ['M', 'Q'])])
    with pytest.raises(KernelError, match=r"\(MatMul, node 'mm'\).*float32\[2, 3\], "
                                          r"float32\[2, 3\]"):
        Executor(build_program(model)).run({'a': X, 'b': X})


def _one_instruction(op, attrs=None):
    return Program(instructions=[Instruction(op, (0,), (1,), attrs=attrs or {}, name='n0')],
                   inputs=[ValueInfo('x', 0)], outputs=[ValueInfo('y', 1)], num_registers=2)


def test_unknown_attribute_is_refused_when_binding():
    with pytest.raises(KernelBindError, match="attribute.* bogus not supported"):
        Executor(_one_instruction('Relu', {'bogus': 1}))


def test_unknown_operator_is_refused_when_binding():
    with pytest.raises(UnsupportedOperatorError, match="no kernel for operator NoSuchOp"):
        Executor(_one_instruction('NoSuchOp'))


def test_peak_bytes_counts_inputs_constants_and_the_largest_live_set(mlp_model):
    ex = Executor(build_program(mlp_model), track_memory=True)
    ex.run({'x': X})
    constants = 3 * 4 * 4 + 4 * 4
    # x (24 B) and the constants are live when MatMul makes h (32 B).
    assert ex.peak_bytes >= constants + X.nbytes + 2 * 4 * 4
    assert Executor(build_program(mlp_model)).peak_bytes == 0  # off by default
