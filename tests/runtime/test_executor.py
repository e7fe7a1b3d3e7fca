import io
import json

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler import build_program
from chainer_compiler.runtime import (
    Executor,
    InputValidationError,
    Instruction,
    KernelBindError,
    KernelError,
    NonFiniteError,
    OutputValidationError,
    Program,
    ProgramFormatError,
    Tracer,
    ValueInfo,
)
from chainer_compiler.runtime import executor as executor_module
from tests.conftest import address_space_limit, make_model

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
    assert len(lines) == 2  # the bias Add is MatMul's third input (the VM's fusion)
    assert 'MatMul' in lines[0] and 'float32[2, 3]' in lines[0] and ' ms' in lines[0]
    assert lines[0].endswith('# matmul+add') and lines[1].endswith('# relu')


def test_chrome_tracing_json_has_one_complete_event_per_instruction(tmp_path, mlp_model):
    tracer = Tracer()
    Executor(build_program(mlp_model), tracer=tracer).run({'x': X})
    path = tmp_path / 'trace.json'
    tracer.write_chrome_tracing(str(path))
    events = json.loads(path.read_text())['traceEvents']
    assert [e['name'] for e in events] == ['MatMul', 'Relu']
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


def test_unknown_attribute_is_refused_before_running():
    with pytest.raises(KernelBindError, match="attribute.* bogus not supported"):
        Executor(_one_instruction('Relu', {'bogus': 1}))


def test_unknown_operator_is_refused_before_running():
    with pytest.raises(ProgramFormatError, match=r"<program main>: instruction 0 "
                                                 r"\(NoSuchOp, node 'n0'\) has no kernel"):
        Executor(_one_instruction('NoSuchOp'))


def test_peak_bytes_counts_inputs_constants_and_the_largest_live_set(mlp_model):
    ex = Executor(build_program(mlp_model), track_memory=True)
    ex.run({'x': X})
    constants = 3 * 4 * 4 + 4 * 4
    # x (24 B) and the constants are live when MatMul makes h (32 B).
    assert ex.peak_bytes >= constants + X.nbytes + 2 * 4 * 4
    assert Executor(build_program(mlp_model)).peak_bytes == 0  # off by default


# -- outputs are checked against their declaration -------------------------
def _relu_program(output):
    return Program(instructions=[Instruction('Relu', (0,), (1,), version=14)],
                   inputs=[ValueInfo('x', 0, 'tensor', 'float32', (2, 64))],
                   outputs=[output], num_registers=2)


@pytest.mark.parametrize('output, message', [
    (ValueInfo('y', 1, 'tensor', 'int32', (7, 7)), "output 'y' has dtype float32, expected int32"),
    (ValueInfo('y', 1, 'tensor', 'float32', (7, 7)),
     r"output 'y' has shape \(2, 64\), expected \(7, 7\) \(axis 0\)"),
    (ValueInfo('y', 1, 'tensor', 'float32', (2,)),
     r"output 'y' has shape \(2, 64\), expected \(2,\)"),
])
def test_an_output_that_is_not_as_declared_is_an_error(output, message):
    with pytest.raises(OutputValidationError, match='program main: ' + message):
        Executor(_relu_program(output)).run({'x': numpy.ones((2, 64), numpy.float32)})


def test_outputs_of_unknown_dtype_or_shape_are_not_checked():
    x = numpy.ones((2, 64), numpy.float32)
    for output in [ValueInfo('y', 1), ValueInfo('y', 1, 'tensor', None, (2, None)),
                   ValueInfo('y', 1, 'unknown', 'int32', (7,))]:
        assert Executor(_relu_program(output)).run({'x': x})['y'].shape == (2, 64)


def test_an_output_symbol_must_have_its_size_among_the_inputs():
    program = Program(instructions=[Instruction('Transpose', (0,), (1,))],
                      inputs=[ValueInfo('x', 0, 'tensor', 'float32', ('N', 'K'))],
                      outputs=[ValueInfo('y', 1, 'tensor', 'float32', ('N', 'M'))],
                      num_registers=2)
    executor = Executor(program)
    assert executor.run({'x': numpy.ones((3, 3), numpy.float32)})['y'].shape == (3, 3)
    with pytest.raises(OutputValidationError, match="output 'y' has N=3 on axis 0, but input "
                                                    "'x' has N=2"):
        executor.run({'x': numpy.ones((2, 3), numpy.float32)})


def test_a_constant_swapped_to_another_dtype_is_caught_at_the_output(mlp_model):
    program = build_program(mlp_model)
    reg, weight = next((r, v) for r, v in program.constants.items() if v.shape == (3, 4))
    program.constants[reg] = weight.astype(numpy.float64)
    with pytest.raises(OutputValidationError, match="output 'y' has dtype float64, expected "
                                                    "float32"):
        Executor(program).run({'x': X})


def test_outputs_are_checked_once_per_input_signature(mlp_model, monkeypatch):
    checked = []
    monkeypatch.setattr(executor_module, 'validate_outputs',
                        lambda *args: checked.append(args[1][0].shape))
    ex = Executor(build_program(mlp_model))
    for _ in range(3):
        ex.run({'x': X})
    assert checked == [(2, 4)]
    Executor(build_program(mlp_model), validate_inputs=False).run({'x': X})
    assert checked == [(2, 4)]


# -- inputs of the wrong Python type -------------------------------------
@pytest.mark.parametrize('value, got', [([[1.0] * 3] * 2, 'list'), (None, 'None'),
                                        (1.5, 'float')])
def test_an_input_that_is_not_an_array_is_named(mlp_model, value, got):
    with pytest.raises(InputValidationError, match=r"input 'x' must be an array of float32 "
                                                   r"\[2, 3\], got %s$" % got):
        Executor(build_program(mlp_model)).run({'x': value})


def test_an_omitted_optional_input_is_still_none():
    program = Program(instructions=[Instruction('OptionalHasElement', (0,), (1,), version=18)],
                      inputs=[ValueInfo('o', 0, 'optional')],
                      outputs=[ValueInfo('y', 1, 'tensor', 'bool', ())], num_registers=2)
    assert not Executor(program).run({'o': None})['y']
    assert Executor(program).run({'o': X})['y']


# -- error messages -------------------------------------------------------
@pytest.mark.parametrize('options', [{}, {'check_nans': True}])
def test_kernel_error_describes_constant_inputs(options):
    program = Program(
        instructions=[Instruction('Reshape', (0, 1), (2,), version=14, name='reshape')],
        inputs=[ValueInfo('x', 0, 'tensor', 'float32', None)], outputs=[ValueInfo('y', 2)],
        constants={1: numpy.array([4, 4], numpy.int64)}, num_registers=3)
    with pytest.raises(KernelError, match=r"\(Reshape, node 'reshape'\) failed on inputs "
                                          r"\(float32\[2, 3\], int64\[2\]\)"):
        Executor(program, **options).run({'x': X})


def test_kernel_bind_error_lists_only_attributes():
    with pytest.raises(KernelBindError, match=r'\(it accepts: perm\)$'):
        Executor(_one_instruction('Transpose', {'bogus': 1}))


# -- allocations that cannot succeed ---------------------------------------
@pytest.mark.parametrize('op, inputs, version', [('ConstantOfShape', (1,), 9),
                                                 ('Expand', (0, 1), 13)])
@pytest.mark.parametrize('options', [{}, {'check_nans': True}])
def test_an_impossible_allocation_names_the_instruction(op, inputs, version, options):
    program = Program(
        instructions=[Instruction(op, inputs, (2,), version=version, name='huge')],
        inputs=[ValueInfo('x', 0, 'tensor', 'float32', (1,))], outputs=[ValueInfo('y', 2)],
        constants={1: numpy.array([2**25, 2**25], numpy.int64)}, num_registers=3)
    executor = Executor(program, **options)
    with address_space_limit(2**30):  # 2**50 float32 elements never fit
        with pytest.raises(KernelError, match=r"instruction 0 \(%s, node 'huge'\) failed on "
                                              r"inputs .*int64\[2\]\): (OutOfMemory|Memory)Error"
                                              % op):  # CuPy's OutOfMemoryError on a GPU
            executor.run({'x': numpy.ones(1, numpy.float32)})
