import os

import pytest

from chainer_compiler.runtime.files import atomic_write


def test_writes_bytes_or_utf8_text(tmp_path):
    with atomic_write(str(tmp_path / 'b')) as f:
        f.write(b'\x00\x01')
    with atomic_write(str(tmp_path / 't'), 'w') as f:
        f.write('é')
    assert (tmp_path / 'b').read_bytes() == b'\x00\x01'
    assert (tmp_path / 't').read_bytes() == 'é'.encode('utf-8')


def test_a_failure_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / 'out'
    path.write_bytes(b'old')
    with pytest.raises(RuntimeError, match='disk on fire'):
        with atomic_write(str(path)) as f:
            f.write(b'half of the new')
            raise RuntimeError('disk on fire')
    assert path.read_bytes() == b'old'
    assert os.listdir(tmp_path) == ['out']


def test_the_file_appears_only_when_the_block_ends(tmp_path):
    path = tmp_path / 'out'
    with atomic_write(str(path)) as f:
        f.write(b'new')
        f.flush()
        assert not path.exists()
    assert path.read_bytes() == b'new'


def test_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory, not a file: '%s'" % tmp_path):
        with atomic_write(str(tmp_path)):
            pass
    assert os.listdir(tmp_path) == []


def test_permissions_follow_the_umask_like_open(tmp_path):
    with open(tmp_path / 'plain', 'wb'):
        pass
    with atomic_write(str(tmp_path / 'atomic')):
        pass
    assert os.stat(tmp_path / 'atomic').st_mode == os.stat(tmp_path / 'plain').st_mode


def test_only_write_modes(tmp_path):
    with pytest.raises(ValueError, match="mode 'wb' or 'w', not 'a'"):
        with atomic_write(str(tmp_path / 'x'), 'a'):
            pass
