import json
import os
import zipfile

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler import build_program
from chainer_compiler.runtime import (
    Executor,
    Instruction,
    Program,
    ProgramFormatError,
    ValueInfo,
    load_program,
    save_program,
    serialization,
    validation,
)
from chainer_compiler.runtime.program import RegisterType
from tests.conftest import make_model


def test_round_trip_gives_the_same_results(tmp_path, mlp_model):
    program = build_program(mlp_model)
    path = str(tmp_path / 'mlp.npz')
    save_program(program, path)
    loaded = load_program(path)
    x = numpy.random.RandomState(1).standard_normal((2, 3)).astype(numpy.float32)
    numpy.testing.assert_array_equal(Executor(program).run({'x': x})['y'],
                                     Executor(loaded).run({'x': x})['y'])
    assert loaded.dump() == program.dump()
    assert loaded.types == program.types and len(loaded.types) == program.num_registers


def test_register_types_round_trip_in_sub_programs_too(tmp_path):
    symbol = 'N' * validation.MAX_SYMBOL_LENGTH
    types = {0: RegisterType('tensor', 'float32', (symbol, None, 3)),
             1: RegisterType('sequence', 'int64', None), 2: RegisterType('optional')}
    body = Program(instructions=[], inputs=[], outputs=[ValueInfo('a', 0)],
                   constants={0: numpy.ones(2, numpy.float32)}, num_registers=1, name='body',
                   types={0: RegisterType('tensor', 'float32', (2,))})
    program = Program(instructions=[Instruction('If', (0,), (2,), version=16, attrs={
                          'then_branch': body, 'else_branch': body})],
                      inputs=[ValueInfo('c', 0, 'tensor', 'bool', ()), ValueInfo('s', 1)],
                      outputs=[ValueInfo('y', 2)], num_registers=3, types=types)
    path = str(tmp_path / 'p.npz')
    save_program(program, path)
    loaded = load_program(path)
    assert loaded.types == types
    assert loaded.instructions[0].attrs['then_branch'].types == body.types


def test_a_file_from_before_register_types_loads_with_types_unknown(tmp_path, mlp_model):
    # Types are advice for later stages (the memory model, the native
    # emitter's checks): a file without them still runs.
    path = str(tmp_path / 'old.npz')
    save_program(build_program(mlp_model), path)
    with numpy.load(path) as archive:
        stored = {k: archive[k] for k in archive.files}
    header = json.loads(bytes(stored['program.json']).decode('utf-8'))
    del header['program']['types']
    stored['program.json'] = numpy.frombuffer(json.dumps(header).encode('utf-8'), numpy.uint8)
    numpy.savez(path, **stored)
    loaded = load_program(path)
    assert loaded.types == {}
    x = numpy.ones((2, 3), numpy.float32)
    assert Executor(loaded).run({'x': x})['y'].shape == (2, 4)


def test_round_trip_keeps_subprograms_strings_dtypes_and_lists(tmp_path):
    body = Program(instructions=[], inputs=[], outputs=[ValueInfo('a', 0)],
                   constants={0: numpy.ones(2, numpy.float32)}, num_registers=1, name='body')
    program = Program(
        instructions=[
            Instruction('Cast', (0,), (2,), attrs={'to': numpy.dtype('int64')}, version=13),
            Instruction('LeakyRelu', (0,), (3,), attrs={'alpha': 1.5}, version=16),
            Instruction('Constant', (), (4,), version=13,
                        attrs={'value': numpy.array(['x', 'yz'], dtype=object)}),
            Instruction('LSTM', (0, 0, 0), (5,), version=14,
                        attrs={'activations': ['Sigmoid', 'Tanh', 'Tanh']}),
            Instruction('If', (1,), (6,), attrs={'then_branch': body, 'else_branch': body},
                        version=16)],
        inputs=[ValueInfo('x', 0, 'tensor', 'float32', (2, 'N', None)),
                ValueInfo('c', 1, 'tensor', 'bool', ())],
        outputs=[ValueInfo('y', 6)], num_registers=7, register_names={0: 'x', 6: 'y'})
    path = str(tmp_path / 'p.npz')
    save_program(program, path)
    loaded = load_program(path)
    attrs = {k: v for inst in loaded.instructions for k, v in inst.attrs.items()}
    assert attrs['to'] == numpy.dtype('int64') and attrs['alpha'] == 1.5
    assert attrs['activations'] == ['Sigmoid', 'Tanh', 'Tanh']
    assert list(attrs['value']) == ['x', 'yz']
    assert isinstance(attrs['then_branch'], Program) and attrs['then_branch'].name == 'body'
    assert loaded.inputs[0].shape == (2, 'N', None)
    assert loaded.dump() == program.dump()


def test_extension_dtype_constants_round_trip(tmp_path):
    bfloat16 = pytest.importorskip('ml_dtypes').bfloat16
    constants = {0: numpy.array(1.5, bfloat16), 1: numpy.arange(6).reshape(2, 3).astype(bfloat16)}
    program = Program(instructions=[], inputs=[], outputs=[ValueInfo('a', 0), ValueInfo('b', 1)],
                      constants=constants, num_registers=2)
    path = str(tmp_path / 'p.npz')
    save_program(program, path)
    loaded = load_program(path).constants
    for reg, value in constants.items():
        assert loaded[reg].dtype == value.dtype and loaded[reg].shape == value.shape
        numpy.testing.assert_array_equal(loaded[reg].astype(numpy.float32),
                                         value.astype(numpy.float32))


def test_string_constants_are_saved_without_pickle(tmp_path):
    model = make_model(
        [helper.make_node('Identity', ['s'], ['y'])], [], [('y', TensorProto.STRING, [2])],
        [('s', numpy.array(['ab', 'c'], dtype=object))])
    path = str(tmp_path / 's.npz')
    save_program(build_program(model), path)
    with numpy.load(path, allow_pickle=False) as archive:  # would raise if pickled
        assert all(archive[k].dtype != object for k in archive.files)
    assert list(Executor(load_program(path)).run({})['y']) == ['ab', 'c']


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ProgramFormatError, match='does not exist'):
        load_program(str(tmp_path / 'nope.npz'))


def test_damaged_file_is_a_clear_error(tmp_path, mlp_model):
    path = str(tmp_path / 'p.npz')
    save_program(build_program(mlp_model), path)
    data = open(path, 'rb').read()
    with open(path, 'wb') as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(ProgramFormatError, match='damaged'):
        load_program(path)


def test_other_npz_files_are_rejected(tmp_path):
    path = str(tmp_path / 'other.npz')
    numpy.savez(path, a=numpy.zeros(3))
    with pytest.raises(ProgramFormatError, match='not a chainer-compiler Program'):
        load_program(path)


@pytest.mark.parametrize('version', [1, serialization.FORMAT_VERSION + 1, 99])
def test_old_or_future_format_version_names_both_versions(tmp_path, mlp_model, monkeypatch,
                                                          version):
    path = str(tmp_path / 'p.npz')
    monkeypatch.setattr(serialization, 'FORMAT_VERSION', version)
    save_program(build_program(mlp_model), path)
    monkeypatch.undo()
    with pytest.raises(ProgramFormatError, match='version %d.*reads version %d'
                       % (version, serialization.FORMAT_VERSION)):
        load_program(path)


def test_saving_into_a_directory_is_a_clear_error(tmp_path, mlp_model):
    with pytest.raises(ProgramFormatError, match='cannot write Program file .*: is a directory'):
        save_program(build_program(mlp_model), str(tmp_path))


def test_a_failed_save_leaves_the_old_file_and_no_temporary_file(tmp_path, mlp_model,
                                                                 monkeypatch):
    path = tmp_path / 'p.npz'
    path.write_bytes(b'the old file')

    def fail_halfway(member, array, **kwargs):
        member.write(b'half an array')
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(numpy.lib.format, 'write_array', fail_halfway)
    with pytest.raises(ProgramFormatError, match='No space left on device'):
        save_program(build_program(mlp_model), str(path))
    assert path.read_bytes() == b'the old file'
    assert os.listdir(tmp_path) == ['p.npz']


def test_pickled_payload_is_refused(tmp_path):
    path = str(tmp_path / 'evil.npz')
    numpy.savez(path, **{'program.json': numpy.array([{'a': 1}], dtype=object)})
    with pytest.raises(ProgramFormatError):
        load_program(path)
    assert zipfile.is_zipfile(path) and os.path.getsize(path) > 0


def _inflating_program(tmp_path, n):
    """A Program file whose constant of ``n`` zeros is deflated, as
    numpy.savez_compressed writes it (save_program never does)."""
    program = Program(instructions=[Instruction('Identity', (0,), (1,), version=16)],
                      inputs=[], outputs=[ValueInfo('y', 1)],
                      constants={0: numpy.zeros(n, numpy.float32)}, num_registers=2)
    save_program(program, tmp_path / 'plain.npz')
    with numpy.load(tmp_path / 'plain.npz') as archive:
        members = {key: archive[key] for key in archive.files}
    path = tmp_path / 'deflated.npz'
    numpy.savez_compressed(path, **members)
    return path


def test_decompressed_size_is_bounded_before_inflating(tmp_path):
    import tracemalloc
    # 64 MiB of zeros in a 65 KB file (the issue's: 1 GB from 1 MB).
    path = _inflating_program(tmp_path, 1 << 24)
    assert os.path.getsize(path) < 70_000
    tracemalloc.start()
    try:
        with pytest.raises(ProgramFormatError, match=r'deflated.npz holds 671\d+ bytes once '
                           r'decompressed, more than 16 times its size of \d+ bytes'):
            load_program(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    assert load_program(_inflating_program(tmp_path, 1000)).constants[0].shape == (1000,)


def test_an_array_must_fit_in_its_member_before_it_is_read(tmp_path):
    # numpy allocates the array its .npy header declares before reading:
    # a header-only member may not declare 1 GiB.
    import io
    _inflating_program(tmp_path, 1000)
    with numpy.load(tmp_path / 'plain.npz') as archive:
        header = bytes(archive['program.json'])
    npy = io.BytesIO()
    numpy.lib.format.write_array_header_1_0(
        npy, {'descr': '<f4', 'fortran_order': False, 'shape': (1 << 28,)})
    path = tmp_path / 'short.npz'
    with zipfile.ZipFile(path, 'w') as z:
        with z.open('program.json.npy', 'w') as f:
            numpy.lib.format.write_array(f, numpy.frombuffer(header, numpy.uint8))
        z.writestr('a0.npy', npy.getvalue())
    with pytest.raises(ProgramFormatError, match=r'the constant in register 0 is stored as '
                       r'float32\[268435456\], 1073741824 bytes, in an entry of 128'):
        load_program(path)
    # A zip directory that understates a member's size: zipfile reads no
    # further than it says (and then finds the CRC wrong).
    path = _inflating_program(tmp_path, 1 << 22)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        declared = z.getinfo('a0.npy').file_size.to_bytes(4, 'little')
    assert data.count(declared) == 2  # the local and the central header
    path.write_bytes(data.replace(declared, (1 << 10).to_bytes(4, 'little')))
    with pytest.raises(ProgramFormatError, match="Bad CRC-32 for file 'a0.npy'"):
        load_program(path)
