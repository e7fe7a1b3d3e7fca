"""The native library cache is untrusted input: a damaged entry is rebuilt,
never loaded; a cache folder or file that another user owns or may write
is refused before anything in it is read; a read-only cache is read and
left alone; killed builds leave nothing behind for long.

Every load from a prepared cache runs in a child process
(``python -c RUN``): a damaged library loaded anyway would kill pytest with
SIGBUS, and a planted one would run its constructor in it."""
import errno
import os
import shutil
import subprocess
import sys
import time

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import NativeBuildError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import library
from chainer_compiler.runtime.serialization import save_program
from tests.runtime.native.helpers import make_model

CC = shutil.which('cc') or shutil.which('gcc') or shutil.which('clang')
pytestmark = pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')

#: The child: run the Program file argv[1] natively on argv[2] into argv[3];
#: a RuntimeVMError is one line on stdout and exit status 2.  With argv[4],
#: that folder cannot be written (as a read-only mount; root ignores modes).
RUN = r'''
import errno, os, sys, warnings
import numpy
from chainer_compiler.runtime.errors import RuntimeVMError
from chainer_compiler.runtime.native.library import NativeRun
from chainer_compiler.runtime.serialization import load_program
warnings.simplefilter('always')
if len(sys.argv) > 4:
    real_mkdir, real_open = os.mkdir, os.open
    def refused(path):
        return os.path.abspath(path).startswith(sys.argv[4] + os.sep)
    def mkdir(path, *args, **kwargs):
        if refused(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_mkdir(path, *args, **kwargs)
    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and refused(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args, **kwargs)
    os.mkdir, os.open = mkdir, open_
try:
    outputs = NativeRun(load_program(sys.argv[1])).run([numpy.load(sys.argv[2])])
except RuntimeVMError as e:
    print('%s: %s' % (type(e).__name__, e))
    sys.exit(2)
numpy.save(sys.argv[3], outputs[0])
'''

#: A library (or object) whose constructor writes the file MARKER.
PLANTED = ('#include <stdio.h>\n'
           '__attribute__((constructor)) static void planted(void) {\n'
           '    FILE *f = fopen(MARKER, "w"); if (f) fclose(f); }\n'
           'int model_run_arena(void) { return 0; }\n')


def _mlp():
    rng = numpy.random.RandomState(0)
    return make_model(
        [helper.make_node('Gemm', ['x', 'W', 'b'], ['h']), helper.make_node('Relu', ['h'], ['y'])],
        [('x', numpy.float32, [2, 5])], [('y', numpy.float32, [2, 3])],
        {'W': rng.uniform(-1, 1, (5, 3)).astype(numpy.float32),
         'b': rng.uniform(-1, 1, 3).astype(numpy.float32)})


@pytest.fixture(scope='module')
def pristine(tmp_path_factory):
    """A cache that holds the model's library and kernel objects (built
    once), the Program file, its input and the expected output."""
    tmp = tmp_path_factory.mktemp('pristine')
    program = build_program(_mlp())
    save_program(program, tmp / 'mlp.npz')
    x = numpy.random.RandomState(1).uniform(-1, 1, (2, 5)).astype(numpy.float32)
    numpy.save(tmp / 'x.npy', x)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('CHAINER_COMPILER_CACHE', str(tmp / 'cache'))
        name = os.path.basename(library.NativeRun(program).path)
    return tmp, name, Executor(program).run_positional([x])[0]


class Case:
    """A copy of the pristine cache (modes included) for one test."""

    def __init__(self, pristine, tmp_path, monkeypatch):
        self.source, self.name, self.want = pristine
        self.tmp = tmp_path
        self.root = tmp_path / 'cache'
        shutil.copytree(self.source / 'cache', self.root)
        monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(self.root))
        self.library = self.root / self.name
        self.marker = tmp_path / 'constructor-ran'

    def objects(self):
        return sorted((self.root / 'objects').iterdir())

    def planted(self, kind='library'):
        """Bytes of a library (or an object) whose constructor writes
        self.marker."""
        source = self.tmp / 'planted.c'
        source.write_text(PLANTED)
        out = self.tmp / 'planted.bin'
        flags = ['-shared', '-fPIC'] if kind == 'library' else ['-c', '-fPIC']
        subprocess.run([CC, *flags, '-DMARKER="%s"' % self.marker, str(source), '-o',
                        str(out)], check=True)
        return out.read_bytes()

    def run(self, read_only=False):
        """The child's CompletedProcess; asserts that the output is right when
        it succeeds."""
        out = self.tmp / 'y.npy'
        done = subprocess.run([sys.executable, '-c', RUN, str(self.source / 'mlp.npz'),
                               str(self.source / 'x.npy'), str(out)] +
                              ([str(self.root)] if read_only else []),
                              capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            numpy.testing.assert_allclose(numpy.load(out), self.want, rtol=1e-5, atol=1e-6)
        return done


@pytest.fixture
def case(pristine, tmp_path, monkeypatch):
    return Case(pristine, tmp_path, monkeypatch)


def _whole(path):
    """Whether ``path`` is a cache entry with its seal intact."""
    return library._unseal(path.read_bytes()) is not None


@pytest.mark.parametrize('damage', ['truncated', 'empty', 'altered', 'planted', 'planted-object'])
@pytest.mark.native_build
def test_a_damaged_entry_is_rebuilt_never_loaded(case, damage):
    sealed = case.library.read_bytes()
    if damage == 'truncated':  # was: SIGBUS, in this and every later run
        case.library.write_bytes(sealed[:len(sealed) // 2])
    elif damage == 'empty':
        case.library.write_bytes(b'')
    elif damage == 'altered':
        case.library.write_bytes(sealed[:1000] + bytes([sealed[1000] ^ 1]) + sealed[1001:])
    elif damage == 'planted':  # a valid library, but not the one the seal is of
        case.library.write_bytes(case.planted())
    else:  # an object linked into the library: the library must be rebuilt
        case.library.unlink()
        case.objects()[0].write_bytes(case.planted('object'))
    done = case.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not case.marker.exists()
    # Whole again (none of the damaged contents is): the next run loads it.
    assert _whole(case.library) and all(_whole(o) for o in case.objects())


@pytest.mark.native_build
def test_a_library_truncated_while_loaded_is_not_what_runs(case):
    """What runs is the copy that was checked: the cache's file may change."""
    script = RUN.replace('outputs = ', 'run = NativeRun(load_program(sys.argv[1]))\n'
                         '    os.truncate(run.path, 100)\n'
                         '    outputs = ')
    done = subprocess.run([sys.executable, '-c', script, str(case.source / 'mlp.npz'),
                           str(case.source / 'x.npy'), str(case.tmp / 'y.npy')],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr  # was: SIGBUS
    numpy.testing.assert_allclose(numpy.load(case.tmp / 'y.npy'), case.want, rtol=1e-5)


@pytest.mark.parametrize('where', ['root', 'objects', 'library', 'parent', 'owner'])
@pytest.mark.native_build
def test_a_cache_others_can_write_is_refused_before_reading_it(case, where):
    """A library planted with a valid seal in a cache others can write
    never runs: the folder or file is refused, naming it and the problem."""
    if where == 'owner' and os.geteuid() != 0:
        pytest.skip('only root can give a folder to another user')
    planted = library._seal(case.planted())
    case.library.write_bytes(planted)
    path, problem = case.root, 'writable by group or others (mode 777)'
    if where == 'root':
        case.root.chmod(0o777)
    elif where == 'objects':  # the library is linked from planted objects
        case.library.unlink()
        case.objects()[0].write_bytes(library._seal(case.planted('object')))
        path = case.root / 'objects'
        path.chmod(0o775)
        problem = 'writable by group or others (mode 775)'
    elif where == 'library':
        path = case.library
        path.chmod(0o662)
        problem = 'writable by group or others (mode 662)'
    elif where == 'parent':  # others could rename the cache and put theirs in its place
        case.tmp.chmod(0o777)
        problem = 'its parent folder %s (uid %d, mode 777)' % (case.tmp, os.geteuid())
    else:
        os.chown(case.root, 12345, -1)
        problem = 'owned by uid 12345, not by this user (uid 0)'
    try:
        done = case.run()
    finally:
        case.tmp.chmod(0o700)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith('NativeBuildError: native library cache')
    assert str(path) in done.stdout and problem in done.stdout, done.stdout
    assert len(done.stdout.strip().splitlines()) == 1
    assert not case.marker.exists()


@pytest.mark.native_build
def test_a_sticky_world_writable_parent_is_accepted(case):
    """As /tmp: others may add their own files there, not rename ours."""
    case.tmp.chmod(0o1777)
    try:
        done = case.run()
    finally:
        case.tmp.chmod(0o700)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.native_build
def test_a_new_cache_is_private_whatever_the_umask(tmp_path, monkeypatch):
    root = tmp_path / 'new' / 'cache'
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(root))
    old = os.umask(0)
    try:
        library.NativeRun(build_program(_mlp()))
    finally:
        os.umask(old)
    assert root.stat().st_mode & 0o777 == 0o700  # was 0o777
    assert (root / 'objects').stat().st_mode & 0o777 == 0o700
    files = [p for p in root.rglob('*') if p.is_file()]
    assert files and all(p.stat().st_mode & 0o777 == 0o600 for p in files)


@pytest.mark.native_build
def test_a_read_only_cache_is_read_and_left_unchanged(case):
    def snapshot():
        return {p: p.stat().st_mtime_ns for p in case.root.rglob('*')}
    before = snapshot()
    case.root.chmod(0o500)
    try:
        # It holds the library: used as it is (was: PermissionError).
        done = case.run(read_only=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert 'Warning' not in done.stderr, done.stderr
        # It holds a damaged one: built privately, with a warning saying so.
        case.root.chmod(0o700)
        case.library.write_bytes(b'')
        before = snapshot()
        case.root.chmod(0o500)
        done = case.run(read_only=True)
    finally:
        case.root.chmod(0o700)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'NativeCacheWarning: native library cache %s cannot be written' % case.root \
        in done.stderr and 'not cached' in done.stderr, done.stderr
    assert snapshot() == before


@pytest.mark.native_build
def test_a_full_cache_warns_and_runs_uncached(case, monkeypatch):
    case.library.unlink()
    write = library._write_new

    def full(path, data):  # a disk full when the entry is stored
        if os.path.basename(path).startswith('sealed-'):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        write(path, data)
    monkeypatch.setattr(library, '_write_new', full)
    with pytest.warns(library.NativeCacheWarning, match='cannot store .*No space left'):
        run = library.NativeRun(build_program(_mlp()))
    x = numpy.load(case.source / 'x.npy')
    numpy.testing.assert_allclose(run.run([x])[0], case.want, rtol=1e-5, atol=1e-6)
    assert not case.library.exists()


@pytest.mark.native_build
def test_build_folders_of_killed_builds_are_removed(case):
    child = subprocess.Popen(['true'])
    child.wait()  # its pid runs no more
    host = library._HOST
    other = 'f' * 8 if host != 'f' * 8 else 'e' * 8
    dead = case.root / ('.build-%s-%d-abcdefgh' % (host, child.pid))
    live = case.root / ('.build-%s-%d-abcdefgh' % (host, os.getpid()))
    old = case.root / '.build-0123abcd'  # a name from before this change
    other_host = case.root / ('.build-%s-%d-abcdefgh' % (other, child.pid))
    for folder in (dead, live, old, other_host):
        folder.mkdir()
        (folder / 'model.c').write_text('/* half done */')
    long_ago = time.time() - library.STALE_BUILD_S - 60
    os.utime(old, (long_ago, long_ago))
    done = case.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not dead.exists() and not old.exists()  # was: there forever
    assert live.exists() and other_host.exists()


@pytest.mark.parametrize('where', ['file', 'under-a-file'])
def test_a_misplaced_cache_is_a_one_line_error(tmp_path, monkeypatch, where):
    (tmp_path / 'f').write_text('')
    root = tmp_path / 'f' if where == 'file' else tmp_path / 'f' / 'cache'
    monkeypatch.setenv('CHAINER_COMPILER_CACHE', str(root))
    expected = 'is not a folder' if where == 'file' else 'a folder on its path is a file'
    with pytest.raises(NativeBuildError, match=expected) as raised:  # was: FileExistsError
        library.NativeRun(build_program(_mlp()))
    assert str(root) in str(raised.value) and '\n' not in str(raised.value)
