"""A Program is validated whole, from a file or in memory, before anything
runs or is generated from it."""
import json

import numpy
import pytest

from chainer_compiler import build_program
from chainer_compiler.runtime import (
    NO_REGISTER,
    Executor,
    Instruction,
    KernelBindError,
    Program,
    ProgramFormatError,
    ValueInfo,
    load_program,
    save_program,
)
from chainer_compiler.runtime.validation import validate_program

# The mlp_model fixture compiles, unfused (the edits below name its
# instructions), to:
#   input  %0 = x float32[2, 3]
#   const  %1(W) = float32[3, 4]        (stored as array a0)
#   const  %2(b) = float32[4]           (stored as array a1)
#      0: %3 = MatMul(%0, %1)  free %0  # matmul
#      1: %4 = Add(%3, %2)  free %3     # add
#      2: %5 = Relu(%4)  free %4        # relu
#   output y = %5


@pytest.fixture
def mlp_file(tmp_path, mlp_model):
    path = str(tmp_path / 'model.npz')
    save_program(build_program(mlp_model, fuse=False), path)
    return path


def rewrite(path, edit=None, **arrays):
    """Rewrite Program file ``path``: ``edit(program_json)`` changes the
    program's JSON in place; keyword arguments replace stored arrays (None
    deletes one)."""
    with numpy.load(path) as archive:
        stored = {k: archive[k] for k in archive.files}
    header = json.loads(bytes(stored['program.json']).decode('utf-8'))
    if edit:
        edit(header['program'])
    stored['program.json'] = numpy.frombuffer(json.dumps(header).encode('utf-8'), numpy.uint8)
    stored.update(arrays)
    numpy.savez(path, **{k: v for k, v in stored.items() if v is not None})


def _set(*keys_and_value):
    """An edit setting program[k1][k2]...[kn] = value."""
    *keys, last, value = keys_and_value

    def edit(program):
        for key in keys:
            program = program[key]
        program[last] = value
    return edit


def _swap_first_two_instructions(program):
    program['instructions'][:2] = program['instructions'][1::-1]


def _leaky_relu(alpha):
    return _set('instructions', 2, {'op': 'LeakyRelu', 'domain': '', 'version': 16,
                                    'name': 'relu', 'inputs': [4], 'outputs': [5],
                                    'frees': [4], 'captures': [], 'attrs': {'alpha': alpha}})


@pytest.mark.parametrize('edit, message', [
    (_set('outputs', 0, 'register', 99),
     "output 'y' uses register 99, but the program has 6 registers"),
    (_set('instructions', 2, 'inputs', [-7]),
     r"instruction 2 \(Relu, node 'relu'\) reads register -7, but the program has 6 registers"),
    (_set('num_registers', 0), "input 'x' uses register 0, but the program has 0 registers"),
    (_set('num_registers', 6.0), 'num_registers is 6.0, not an int >= 0'),
    (_set('num_registers', 10**12),
     'num_registers is 1000000000000, but the program defines only 6 values'),
    (_set('inputs', 0, 'dtype', 'bogus'), "input 'x': dtype 'bogus' is not a NumPy dtype"),
    (_set('inputs', 0, 'dtype', 'f4'), r"input 'x': dtype 'f4' is not a NumPy dtype name"),
    (_set('inputs', 0, 'shape', [2, -1]), r"input 'x': shape \(2, -1\) has dimension -1"),
    (_set('outputs', 0, 'kind', 'blob'), "output 'y': kind 'blob' is not one of tensor"),
    (_set('instructions', 2, 'op', 'NoSuchOp'),
     r"instruction 2 \(NoSuchOp, node 'relu'\) has no kernel at opset version 14"),
    (_set('instructions', 2, 'version', '14'), "instruction 2: version '14' is not an int"),
    (_set('instructions', 2, 'frees', 4), 'instruction 2: frees has type int, expected tuple'),
    (_leaky_relu({'value': 'big'}),
     r"instruction 2 \(LeakyRelu, node 'relu'\): attribute alpha has type str, "
     r"but the kernel takes a number"),
    (_leaky_relu({'value': {'a': 1}}),
     'attribute alpha has type dict, which no Program attribute can have'),
    (_swap_first_two_instructions,
     r"instruction 0 \(Add, node 'add'\) reads register 3 before any input, constant "
     r"or instruction defines it"),
    (_set('instructions', 1, 'inputs', [3, 0]),
     r"instruction 1 \(Add, node 'add'\) reads register 0 after instruction 0 "
     r"\(MatMul, node 'matmul'\) freed it"),
    (_set('instructions', 2, 'frees', [4, 5]),
     r"output 'y' reads register 5 after instruction 2 \(Relu, node 'relu'\) freed it"),
    (_set('instructions', 2, 'frees', [3]),
     r"instruction 2 \(Relu, node 'relu'\) frees register 3, which holds no value there"),
    (_set('instructions', 2, 'outputs', [1]),
     r"instruction 2 \(Relu, node 'relu'\) writes register 1, which holds a constant"),
    (_set('register_names', {'77': 'x'}), 'register_names names register 77'),
    (_set('types', {'77': {'kind': 'tensor', 'dtype': None, 'shape': None}}),
     'types gives a type to register 77, but the program has 6 registers'),
    (_set('types', '3', 'dtype', 'float128'),
     "the type of register 3: dtype 'float128' is not one of bfloat16, bool"),
    (_set('types', '3', 'dtype', ['float32']), r"dtype \['float32'\] is not one of"),
    (_set('types', '3', 'kind', 'blob'), "the type of register 3: kind 'blob' is not one of"),
    (_set('types', '3', 'shape', [2, -1]),
     r'the type of register 3: shape \(2, -1\) has dimension -1 \(expected an int64 >= 0, '
     r'None or an identifier of at most 128 characters\)'),
    (_set('types', '3', 'shape', [2, 1 << 63]), 'has dimension 9223372036854775808'),
    (_set('types', '3', 'shape', [True]), 'has dimension True'),
    (_set('types', '3', 'shape', ['N*2']), "has dimension 'N\\*2'"),
    (_set('types', '3', 'shape', ['N' * 129]), 'has dimension'),
    (_set('types', '3', 'shape', [1] * 65), 'is not a tuple of at most 64 dimensions'),
])
def test_a_malformed_program_file_is_refused_with_one_line_naming_it(mlp_file, edit, message):
    rewrite(mlp_file, edit)
    with pytest.raises(ProgramFormatError, match=message) as e:
        load_program(mlp_file)
    assert str(e.value).startswith(mlp_file + ': ')
    assert '\n' not in str(e.value)


@pytest.mark.parametrize('array, message', [
    (numpy.ones((3, 4), numpy.int64),
     r'the constant in register 1 is stored as int64\[3, 4\], but the header declares '
     r'float32\[3, 4\]'),
    (numpy.ones((4, 3), numpy.float32),
     r'is stored as float32\[4, 3\], but the header declares float32\[3, 4\]'),
    (None, r'the constant in register 1 is missing \(no a0 entry\)'),
])
def test_a_stored_array_must_be_what_the_header_declares(mlp_file, array, message):
    rewrite(mlp_file, a0=array)
    with pytest.raises(ProgramFormatError, match=message):
        load_program(mlp_file)


def test_validate_program_names_the_source_it_is_given(mlp_model):
    program = build_program(mlp_model)
    validate_program(program, 'model.onnx')  # what the compiler emits is valid
    program.outputs[0].register = 99
    with pytest.raises(ProgramFormatError, match="^model.onnx: output 'y' uses register 99"):
        validate_program(program, 'model.onnx')


# -- Programs built in memory --------------------------------------------
def _program(instructions, inputs=None, outputs=None, num_registers=2, **fields):
    """A Program of ``instructions`` reading input x (register 0) and
    giving output y (register 1) unless told otherwise."""
    return Program(instructions=list(instructions),
                   inputs=list(inputs) if inputs is not None else [ValueInfo('x', 0)],
                   outputs=list(outputs) if outputs is not None else [ValueInfo('y', 1)],
                   num_registers=num_registers, **fields)


def test_a_bad_register_is_refused_before_code_is_generated():
    # Register -7 used to reach the generated source: SyntaxError.
    program = _program([Instruction('Relu', (-7,), (1,), name='r')])
    with pytest.raises(ProgramFormatError, match=r"^<program main>: instruction 0 "
                                                 r"\(Relu, node 'r'\) reads register -7"):
        Executor(program)


def test_an_input_of_the_kernel_is_not_an_attribute():
    program = _program([Instruction('Transpose', (0,), (1,), attrs={'x': 1})])
    with pytest.raises(KernelBindError, match=r'attribute\(s\) x not supported by the kernel '
                                              r'\(it accepts: perm\)$'):
        Executor(program)


def test_omitted_optional_inputs_and_outputs_are_allowed():
    program = _program([Instruction('Split', (0, NO_REGISTER), (1, NO_REGISTER), version=18,
                                    attrs={'num_outputs': 2})])
    x = numpy.arange(4, dtype=numpy.float32)
    numpy.testing.assert_array_equal(Executor(program).run({'x': x})['y'], [0, 1])


@pytest.mark.parametrize('program, message', [
    (_program([], inputs=[ValueInfo('a', 0), ValueInfo('b', 0)], outputs=[ValueInfo('y', 0)],
              num_registers=1),
     "input 'b' uses register 0, as another input does"),
    (_program([], outputs=[ValueInfo('y', 0)], num_registers=1,
              constants={0: numpy.zeros(1)}),
     'register 0 is both an input and a constant'),
    (_program([], outputs=[ValueInfo('y', 1)], constants={1: [1.0]}),
     'the constant in register 1 has type list, expected ndarray'),
    (_program([Instruction('Relu', (0,), (1,), frees=(NO_REGISTER,))]),
     r'instruction 0 \(Relu\) frees register -1, but the program has 2 registers'),
    (_program([Instruction('Relu', (0,), (1,), attrs={'alpha': 1})]),
     r'attribute\(s\) alpha not supported'),
    (_program([Instruction('Flatten', (0,), (1,), attrs={'axis': 1.5})]),
     'attribute axis has type float, but the kernel takes an integer'),
    (_program([Instruction('Relu', (0,), (1,))], outputs=[ValueInfo('y', NO_REGISTER)]),
     "output 'y' uses register -1, but the program has 2 registers"),
    (_program([Instruction('Relu', [0], (1,))]),
     'instruction 0: inputs has type list, expected tuple'),
    (_program(['Relu']), 'instruction 0 has type str, expected Instruction'),
    (Program(instructions=[], inputs=[], outputs=[], name=3), 'program name 3 is not a string'),
    ('not a program', 'expected a Program, got str'),
])
def test_a_malformed_program_in_memory_is_refused(program, message):
    with pytest.raises(ProgramFormatError, match=message):
        Executor(program)


def _if_program(branch, captures=()):
    return _program([Instruction('If', (0,), (1,), captures=captures, name='if', attrs={
        'then_branch': branch, 'else_branch': branch})])


def test_a_sub_program_is_checked_and_named():
    body = Program(instructions=[Instruction('Relu', (5,), (0,))], inputs=[],
                   outputs=[ValueInfo('a', 0)], num_registers=1, name='if/then')
    with pytest.raises(ProgramFormatError, match=r"^<program main>: instruction 0 \(Relu, in "
                                                 r"program if/then\) reads register 5, but "
                                                 r"the program has 1 registers"):
        Executor(_if_program(body))
    body.instructions = []
    with pytest.raises(ProgramFormatError, match=r"program if/then: output 'a' reads register "
                                                 r"0 before any input"):
        Executor(_if_program(body))


def test_a_body_receives_no_more_captures_than_it_has_inputs():
    body = Program(instructions=[], inputs=[ValueInfo('c', 0, 'unknown')],
                   outputs=[ValueInfo('a', 0)], num_registers=1, name='body')
    assert Executor(_if_program(body, captures=(0,)))
    with pytest.raises(ProgramFormatError, match=r"instruction 0 \(If, node 'if'\) captures 2 "
                                                 r"registers, but its body then_branch has only "
                                                 r"1 inputs"):
        Executor(_if_program(body, captures=(0, 0)))
