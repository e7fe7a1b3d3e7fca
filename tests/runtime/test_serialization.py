import os
import zipfile

import numpy
import pytest
from onnx import TensorProto, helper

from chainer_compiler import build_program
from chainer_compiler.runtime import (Executor, Instruction, Program, ProgramFormatError,
                                      ValueInfo, load_program, save_program)
from chainer_compiler.runtime import serialization
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


def test_round_trip_keeps_subprograms_strings_dtypes_and_lists(tmp_path):
    body = Program(instructions=[], inputs=[ValueInfo('a', 0)], outputs=[ValueInfo('a', 0)],
                   num_registers=1, name='body')
    program = Program(
        instructions=[Instruction('Custom', (0,), (1,), attrs={
            'to': numpy.dtype('int64'), 'names': ['a', 'b'], 'f': 1.5, 'raw': b'\x00\x01',
            'words': numpy.array(['x', 'yz'], dtype=object), 'body': body})],
        inputs=[ValueInfo('x', 0, 'tensor', 'float32', (2, 'N', None))],
        outputs=[ValueInfo('y', 1)], num_registers=2,
        constants={}, register_names={0: 'x', 1: 'y'})
    path = str(tmp_path / 'p.npz')
    save_program(program, path)
    attrs = load_program(path).instructions[0].attrs
    assert attrs['to'] == numpy.dtype('int64')
    assert attrs['names'] == ['a', 'b'] and attrs['f'] == 1.5 and attrs['raw'] == b'\x00\x01'
    assert list(attrs['words']) == ['x', 'yz']
    assert isinstance(attrs['body'], Program) and attrs['body'].name == 'body'
    assert load_program(path).inputs[0].shape == (2, 'N', None)


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


def test_wrong_format_version_names_both_versions(tmp_path, mlp_model, monkeypatch):
    path = str(tmp_path / 'p.npz')
    monkeypatch.setattr(serialization, 'FORMAT_VERSION', 99)
    save_program(build_program(mlp_model), path)
    monkeypatch.undo()
    with pytest.raises(ProgramFormatError, match='version 99.*reads version 1'):
        load_program(path)


def test_pickled_payload_is_refused(tmp_path):
    path = str(tmp_path / 'evil.npz')
    numpy.savez(path, **{'program.json': numpy.array([{'a': 1}], dtype=object)})
    with pytest.raises(ProgramFormatError):
        load_program(path)
    assert zipfile.is_zipfile(path) and os.path.getsize(path) > 0
