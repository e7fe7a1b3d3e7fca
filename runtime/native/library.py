"""The native backend inside Python: a Program's C (emit_c.py) built once
into a shared library, cached, and called through ctypes.

The C is emitted with ``weights='file'``: the library reads the weights from
a block this module passes at every call (weights.py), so large models
compile fast and a Program that differs only in its weights' values (e.g.
after more training) reuses the library.

The library is cached under the sha256 of every emitted source, the
compiler command and its flags (and, since it is built with
``-march=native``, this machine's CPU), in ``$CHAINER_COMPILER_CACHE``, else
``$XDG_CACHE_HOME/chainer_compiler``, else ``~/.cache/chainer_compiler``.
The kernel files (ccn_<family>.c), the same for every model, are compiled
once into ``objects/`` there and linked into each model's library.  Every
file is built in a temporary folder inside the cache and renamed into
place, so a concurrent process sees either none or a whole one.

The cache is untrusted (docs/security.md): the folder (created with mode
0700), ``objects/`` and every file must be this user's and writable by
nobody else, and the folder above must not let others rename it, or
NativeBuildError refuses it before anything is read.  Every file carries
a seal (its length and SHA-256); one read once and found whole is copied
into a private build folder and loaded from there, so what runs is what
was checked.  A damaged entry is rebuilt; a cache that cannot be written
is only read (NativeCacheWarning when something must be built).
"""
import contextlib
import ctypes
import functools
import hashlib
import logging
import math
import os
import platform
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Collection
from typing import NamedTuple

import numpy

from ..errors import ConfigurationError, InputValidationError, KernelError, NativeBuildError
from ..profiling import describe_value
from ..program import Program
from .arena_pool import POOL
from .emit_c import EmitResult, emit_c

#: The model name inside the library (its symbols are loaded RTLD_LOCAL).
NAME = 'model'
#: Flags of the locally cached library only; emitted Makefiles keep theirs.
#: THREAD_FLAGS are added when the compiler accepts them (thread_flags).
#: -fno-math-errno lets sqrtf and friends vectorise (no kernel reads errno
#: after a math function).
CFLAGS = ('-O3', '-march=native', '-std=c99', '-fno-math-errno', '-fPIC', '-shared')
#: The kernels' thread pool (ccn_threads.c) with POSIX threads; without
#: them, SERIAL_FLAGS build it to run every loop on the calling thread.
THREAD_FLAGS = ('-pthread',)
SERIAL_FLAGS = ('-DCCN_THREADS=0',)
LDLIBS = ('-lm',)
#: Bumped when the way a library is built or called changes.
CACHE_FORMAT = '4'
#: The environment variable that sets how many threads native code runs on
#: (Executor's ``threads`` argument takes precedence).
THREADS_VARIABLE = 'CHAINER_COMPILER_THREADS'
#: Most threads (ccn_threads.h's CCN_MAX_THREADS).
MAX_THREADS = 256
#: The cgroup (v2) CPU quota: "QUOTA PERIOD" in microseconds, or "max ...".
CGROUP_CPU_MAX = '/sys/fs/cgroup/cpu.max'
#: How many lines of a failed compile's output an error quotes.
ERROR_LINES = 10
#: Every cached file ends with a seal: this magic, the length of the content
#: before it and the content's SHA-256.  Content and seal are one file,
#: renamed into place whole, so they disagree only when the file is damaged.
SEAL_MAGIC = b'CCNSEAL1'
SEAL_BYTES = len(SEAL_MAGIC) + 8 + 32
#: A build folder older than this is removed, even one whose process may
#: still run (on another machine sharing the cache, or a reused pid).
STALE_BUILD_S = 24 * 3600

_log = logging.getLogger(__name__)


class NativeCacheWarning(UserWarning):
    """The native library cache cannot be written (read-only, full): a
    library it lacks is built in a private temporary folder, not cached."""


def find_compiler() -> list[str]:
    """The C compiler command: ``$CC`` (split like a shell word list) when
    set, else the first of cc, gcc, clang on PATH.  Raises NativeBuildError
    when there is none."""
    cc = os.environ.get('CC', '').strip()
    if cc:
        command = shlex.split(cc)
        path = shutil.which(command[0])
        if path is None:
            raise NativeBuildError("backend 'native' needs a C compiler: $CC is %r, which is "
                                   'not an executable (set CC to a C compiler, or unset it to '
                                   'use cc, gcc or clang from PATH)' % cc)
        return [path] + command[1:]
    for candidate in ('cc', 'gcc', 'clang'):
        path = shutil.which(candidate)
        if path is not None:
            return [path]
    raise NativeBuildError("backend 'native' needs a C compiler, and none was found: $CC is "
                           'not set and none of cc, gcc, clang is on PATH (install one or set '
                           "CC; backend 'numpy' needs none)")


def cache_dir() -> str:
    """Where built libraries are cached (not created here)."""
    explicit = os.environ.get('CHAINER_COMPILER_CACHE')
    if explicit:
        return explicit
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'chainer_compiler')


def _machine() -> str:
    """What ``-march=native`` depends on: the architecture and, where
    Linux tells, the CPU's model and feature flags."""
    text = platform.machine()
    # Without /proc/cpuinfo (not Linux) the architecture alone.
    with contextlib.suppress(OSError), open('/proc/cpuinfo') as f:
        for line in f:
            key = line.split(':', 1)[0].strip()
            if key in ('model name', 'flags', 'Features'):
                text += '\n' + line.strip()
            if line.strip() == '':  # the first processor is enough
                break
    return text


@functools.lru_cache(maxsize=None)
def thread_flags(command: tuple[str, ...]) -> tuple[str, ...]:
    """THREAD_FLAGS when ``command`` compiles and links a C program with
    them (asked once per compiler and process), else SERIAL_FLAGS."""
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, 'probe.c')
        with open(source, 'w') as f:
            f.write('#include <pthread.h>\nstatic void *run(void *p) { return p; }\n'
                    'int main(void) { pthread_t t; return pthread_create(&t, 0, run, 0) || '
                    'pthread_join(t, 0); }\n')
        try:
            done = subprocess.run(list(command) + list(THREAD_FLAGS) +
                                  [source, '-o', os.path.join(folder, 'probe')],
                                  capture_output=True)
        except OSError:
            return SERIAL_FLAGS
    return THREAD_FLAGS if done.returncode == 0 else SERIAL_FLAGS


def compile_flags(command: list[str]) -> list[str]:
    """Every flag of the cached library's compile and link but the files."""
    return list(CFLAGS) + list(thread_flags(tuple(command)))


def _cgroup_cpus() -> float | None:
    """The CPUs the cgroup (v2) quota allows this process, or None when
    there is no quota (``max``) or no cgroup file to read."""
    try:
        with open(CGROUP_CPU_MAX) as f:
            quota, period = f.read().split()[:2]
        cpus = int(quota) / int(period)  # 'max': ValueError
    except (OSError, ValueError, ZeroDivisionError):  # no cgroup v2, or a format it lacks
        return None
    return cpus if cpus > 0 else None  # ccn_threads.c's quota_cpus reads it alike


def machine_threads() -> int:
    """How many threads this machine gives this process: the CPUs it may
    run on (os.sched_getaffinity, else os.cpu_count), at most the cgroup's
    CPU quota rounded up, at most MAX_THREADS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, min(cpus, MAX_THREADS))


class ThreadCount(NamedTuple):
    """How many threads native code runs on, and whether that count is fixed
    (an argument or $CHAINER_COMPILER_THREADS set it) or the most, up to
    which each run function takes the count its runs are fastest on
    (ccn_set_most_threads: the machine's default)."""
    threads: int
    fixed: bool


def thread_count(threads: int | None = None) -> ThreadCount:
    """The thread count native code runs on: ``threads`` when given, else
    $CHAINER_COMPILER_THREADS when set (both fixed), else at most
    machine_threads().  Raises ConfigurationError naming the argument or the
    variable when it is not a whole number from 1 to MAX_THREADS."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or \
                not 1 <= threads <= MAX_THREADS:
            raise ConfigurationError('threads=%r: the thread count must be an int from 1 to %d'
                                     % (threads, MAX_THREADS))
        return ThreadCount(threads, True)
    text = os.environ.get(THREADS_VARIABLE, '').strip()
    if not text:
        return ThreadCount(machine_threads(), False)
    if not re.fullmatch('[0-9]{1,4}', text) or not 1 <= int(text) <= MAX_THREADS:
        raise ConfigurationError('$%s is %r: it must be a whole number of threads from 1 to %d '
                                 '(or unset: one per CPU this process may use)'
                                 % (THREADS_VARIABLE, text[:40], MAX_THREADS))
    return ThreadCount(int(text), True)


def native_threads(threads: int | None = None) -> int:
    """thread_count(threads)'s count."""
    return thread_count(threads).threads


def run_compiler(argv: list[str], cwd: str, what: str) -> None:
    """Run the compiler command ``argv`` in ``cwd``.  Raises NativeBuildError
    quoting the compiler's first error lines when it fails."""
    _log.info('compiling %s', what)
    _log.debug('%s (in %s)', shlex.join(argv), cwd)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors='replace')
    except OSError as e:
        raise NativeBuildError('cannot run the C compiler %s: %s' % (argv[0], e)) from e
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if 'error' in line.lower()] or lines
        raise NativeBuildError('the C compiler failed (exit %d) building %s:\n%s\n%s'
                               % (done.returncode, what, shlex.join(argv),
                                  '\n'.join(errors[:ERROR_LINES])))
    _log.info('compiled %s in %.1f s', what, time.perf_counter() - start)


def _digest(parts) -> str:
    """SHA-256 of ``parts`` (bytes or str), each length-prefixed."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(b'%d\0' % len(data) + data)
    return digest.hexdigest()


def _seal(data: bytes) -> bytes:
    """``data`` followed by its seal (SEAL_MAGIC, its length, its SHA-256)."""
    return data + SEAL_MAGIC + len(data).to_bytes(8, 'little') + hashlib.sha256(data).digest()


def _unseal(sealed: bytes) -> bytes | None:
    """The content of a sealed cache file; None when it is damaged (empty,
    truncated, altered) or was never sealed."""
    body, seal = sealed[:-SEAL_BYTES], sealed[-SEAL_BYTES:]
    if (len(sealed) < SEAL_BYTES or seal[:8] != SEAL_MAGIC
            or int.from_bytes(seal[8:16], 'little') != len(body)
            or hashlib.sha256(body).digest() != seal[16:]):
        return None
    return body


def _read(path: str) -> bytes:
    with open(path, 'rb') as f:
        return f.read()


def _write_new(path: str, data: bytes) -> None:
    """Write ``data`` to the new file ``path``, readable by this user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, 'wb') as f:
        f.write(data)


def _refuse_foreign(path: str, st: os.stat_result, what: str) -> None:
    """Raise NativeBuildError unless ``path`` (``st`` is its stat) is this
    user's and nobody else may write it: whoever can write the cache
    chooses code that this process runs."""
    if st.st_uid != os.geteuid():
        problem = 'is owned by uid %d, not by this user (uid %d)' % (st.st_uid, os.geteuid())
    elif st.st_mode & 0o022:
        problem = 'is writable by group or others (mode %03o)' % stat.S_IMODE(st.st_mode)
    else:
        return
    raise NativeBuildError('native library cache: the %s %s %s, so a library there could be '
                           "another user's code; use a folder of your own (set "
                           'CHAINER_COMPILER_CACHE)' % (what, path, problem))


def _make_private_folders(path: str) -> None:
    """os.makedirs(path), every folder it creates with mode 0700 (makedirs
    gives the folders above ``path`` the umask's mode)."""
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        _make_private_folders(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        pass
    return True


#: This machine, in the names of build folders: a pid is only checked on
#: the machine that wrote it (a cache may be shared over NFS).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_BUILD_FOLDER = re.compile(r'\.build-([0-9a-f]{8})-(\d+)-')


class _Cache:
    """The cache folder, checked, and a private folder to build in: inside
    the cache (so that results are renamed into place) when it can be
    written, else a temporary folder elsewhere, and nothing is cached
    (``why_not`` says why)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.why_not = self._check_root()
        self.work = ''
        if self.why_not is None:
            self._remove_stale_builds()
            try:
                self.work = tempfile.mkdtemp(prefix='.build-%s-%d-' % (_HOST, os.getpid()),
                                             dir=self.root)
            except OSError as e:  # read-only, full
                self.why_not = 'cannot be written (%s)' % e.strerror
        if not self.work:
            try:
                self.work = tempfile.mkdtemp(prefix='chainer-compiler-build-')
            except OSError as e:
                raise NativeBuildError('native library cache %s %s, and no temporary folder '
                                       'can be made (%s)' % (self.root, self.why_not, e)) from e

    def _check_root(self) -> str | None:
        """Create the cache folder (mode 0700) when missing and check it:
        this user's, written by nobody else, in a folder from which nobody
        else can rename it (theirs to write only with the sticky bit, as
        /tmp).  None when it can be used, else why not."""
        root = self.root
        try:
            _make_private_folders(root)
        except (FileExistsError, NotADirectoryError):
            raise NativeBuildError('native library cache %s %s' % (
                root, 'is not a folder' if os.path.lexists(root) else
                'cannot be: a folder on its path is a file')) from None
        except OSError as e:
            if not os.path.isdir(root):
                return 'cannot be created (%s)' % e.strerror
        try:
            st = os.stat(root)
            _refuse_foreign(root, st, 'folder')
            parent = os.path.dirname(os.path.realpath(root))
            st = os.stat(parent)
        except OSError as e:
            raise NativeBuildError('native library cache %s: %s' % (root, e.strerror)) from e
        if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o022 and
                                                  not st.st_mode & stat.S_ISVTX):
            raise NativeBuildError(
                'native library cache %s: its parent folder %s (uid %d, mode %03o) lets '
                'another user replace the cache; use a folder of your own (set '
                'CHAINER_COMPILER_CACHE)' % (root, parent, st.st_uid, stat.S_IMODE(st.st_mode)))
        return None

    def _remove_stale_builds(self) -> None:
        """Remove the build folders of builds killed before they finished:
        those of processes of this machine that are gone, and any older than
        STALE_BUILD_S."""
        now = time.time()
        try:
            names = os.listdir(self.root)
        except OSError:  # unreadable: nothing to clean, and read() will say more
            return
        for name in names:
            if not name.startswith('.build-'):
                continue
            path = os.path.join(self.root, name)
            match = _BUILD_FOLDER.match(name)
            with contextlib.suppress(OSError):
                if (match and match.group(1) == _HOST and not _alive(int(match.group(2)))
                        or now - os.lstat(path).st_mtime > STALE_BUILD_S):
                    shutil.rmtree(path)

    def read(self, name: str) -> bytes | None:
        """The content of entry ``name`` (a path under the cache folder)
        when it is whole; None when it is missing, unreadable or damaged
        (empty, truncated, altered).  Raises NativeBuildError when the entry
        or a folder on its way belongs to another user or others may write
        it."""
        if self.why_not is not None and not os.path.isdir(self.root):
            return None
        path = self.root
        for part in name.split('/')[:-1]:
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return None
            _refuse_foreign(path, st, 'folder')
        path = os.path.join(self.root, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # missing, a symbolic link, unreadable: built anew
            return None
        with os.fdopen(fd, 'rb') as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            _refuse_foreign(path, st, 'file')
            return _unseal(f.read())

    def store(self, name: str, data: bytes) -> None:
        """Make ``data``, sealed, entry ``name``: written whole in the work
        folder and renamed into place, so others see no entry or a whole
        one.  Nothing when the cache cannot be written; a warning when
        writing fails (a full disk): the library is built again next time."""
        if self.why_not is not None:
            return
        path = os.path.join(self.root, name)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            temporary = os.path.join(self.work, 'sealed-' + os.path.basename(name))
            _write_new(temporary, _seal(data))
            os.replace(temporary, path)
        except OSError as e:
            warnings.warn(NativeCacheWarning('native library cache %s: cannot store %s (%s)'
                                             % (self.root, name, e.strerror or e)),
                          stacklevel=2)


def _kernel_object(cache: _Cache, setup: list[str], key: list[str], name: str,
                   files: dict[str, bytes]) -> str:
    """The object file of kernel source ``name`` (ccn_<family>.c), in the
    work folder: kernels are the same for every model, so each is compiled
    once per compiler, flags and CPU into the cache's ``objects/``.
    ``setup`` is the compiler command and flags, ``key`` what else the
    object depends on."""
    headers = sorted(n for n in files if n.startswith('ccn_') and n.endswith('.h'))
    digest = _digest(key + [name, files[name]] + [p for h in headers for p in (h, files[h])])
    entry = 'objects/%s-%s.o' % (name[:-2], digest)
    path = os.path.join(cache.work, name[:-2] + '.o')
    data = cache.read(entry)
    if data is None:
        run_compiler(setup + ['-c', '-o', path, name], cache.work, 'the kernels %s' % name)
        cache.store(entry, _read(path))
    else:
        _write_new(path, data)
    return path


#: emit_c's builds of a kernel file for an x86-64 level (gemm_variant).
_VARIANT = re.compile(r'ccn_\w+_v\d+\.c\Z')
#: The libraries this process loaded, by the SHA-256 of their content.
_LOADED: dict[str, ctypes.CDLL] = {}
#: The thread count last set in each loaded library (by id: never unloaded).
_THREADS: dict[int, ThreadCount] = {}


def _load(data: bytes, folder: str) -> ctypes.CDLL:
    """The library whose content is ``data`` (verified), loaded from a new
    file in the private ``folder``: what runs is what was checked, whatever
    happens in the cache meanwhile.  Each content is loaded once per
    process (the file's name holds its hash, because the dynamic loader
    returns an already loaded library of the same name)."""
    digest = hashlib.sha256(data).hexdigest()
    library = _LOADED.get(digest)
    if library is None:
        path = os.path.join(folder, 'load-%s.so' % digest)
        _write_new(path, data)
        try:
            library = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:  # e.g. a temporary folder on a noexec mount
            raise NativeBuildError('cannot load the native library: %s' % e) from e
        _LOADED[digest] = library
    return library


def load_library(program: Program, profile: bool = False, donate: tuple[int, ...] = ()
                 ) -> tuple[ctypes.CDLL, str, EmitResult]:
    """(the shared library of ``program``, loaded; its cache entry; what
    emit_c wrote for it): emitted, hashed, and compiled unless the cache
    holds it whole; with ``profile``, a build that times each instruction
    (-DCCN_PROFILE: model_profile); ``donate``: the inputs in whose memory
    values may live after their last read (emit_c).  Raises
    NativeBuildError when the cache belongs to someone else or lies where
    it cannot be (see _Cache), or the build fails; a cache that cannot be
    written (read-only, full) is read, and what it lacks is built
    privately with a NativeCacheWarning."""
    command = find_compiler()
    setup = command + compile_flags(command) + (['-DCCN_PROFILE'] if profile else [])
    cache = _Cache(cache_dir())
    work = cache.work
    try:
        result = emit_c(program, work, NAME, weights='file', donate=donate)
        files = {}
        for path in result.files:
            if not path.endswith('.bin'):  # the weights come at run time
                files[os.path.basename(path)] = _read(path)
        key = [CACHE_FORMAT, _machine()] + setup + list(LDLIBS)
        name = 'lib%s-%s.so' % (NAME, _digest(
            key + [p for n in sorted(files) for p in (n, files[n])]))
        library = cache.read(name)
        _log.debug('native library of program %s: %s (%s)', program.name,
                   'building' if library is None else 'cached', os.path.join(cache.root, name))
        if library is None:
            if cache.why_not is not None:
                warnings.warn(NativeCacheWarning(
                    'native library cache %s %s: the library of program %s is built in a '
                    'temporary folder and not cached' % (cache.root, cache.why_not,
                                                          program.name)), stacklevel=2)
            # (-march=native: the Makefile's builds for other levels are not needed)
            objects = [_kernel_object(cache, setup, key, n, files) for n in sorted(files)
                       if n.startswith('ccn_') and n.endswith('.c') and not _VARIANT.match(n)]
            model = sorted(n for n in files if n.endswith('.c') and n != 'main.c'
                           and not n.startswith('ccn_'))
            built = os.path.join(work, 'lib%s.so' % NAME)
            run_compiler(setup + ['-o', built] + model + objects + list(LDLIBS), work,
                         'the native library of program %s' % program.name)
            library = _read(built)
            cache.store(name, library)
        return _load(library, work), os.path.join(cache.root, name), result
    except OSError as e:
        raise NativeBuildError('cannot build the native library of program %s in %s: %s'
                               % (program.name, work, e)) from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: Profiled calls take turns: the library's buffer of times is one per
#: library, which instances of the same program share (_LOADED).
_PROFILING = threading.Lock()


class NativeRun:
    """``program`` as a loaded native library, called with NumPy arrays.
    Each call borrows its arena from the process's pool (arena_pool.POOL)
    and gives it back after, so the programs of a model share one buffer
    while concurrent calls get one each; a lock makes concurrent calls on
    one instance take turns (the GIL is released during a call, so
    different instances run in parallel).  With a ``tracer`` (profiling.Tracer), the
    library is a profiling build and every call records one event per
    instruction that runs.  ``threads`` is how many threads its loops run
    on (thread_count: by default $CHAINER_COMPILER_THREADS, else at most one
    per CPU this process may use, each call on the count its program's calls
    have been fastest on).

    ``donate`` are the positions of inputs its caller gives up (a training
    backward's retained values): values live in their memory after their
    last read, so the arena is smaller (EmitResult.donated_inputs, the
    ones the plan uses: ``donated``); a call overwrites such an input's array
    only when run(consume=True) was handed the only reference to it, and
    otherwise copies the input first."""

    def __init__(self, program: Program, tracer=None, threads: int | None = None,
                 donate: Collection[int] = ()):
        self.program = program
        #: The thread count of this instance's calls.
        self._thread_count = thread_count(threads)
        self.threads = self._thread_count.threads
        #: The library's cache entry (where it is cached, or would be).
        self._lib, self.path, result = load_library(program, profile=tracer is not None,
                                                    donate=tuple(sorted(set(donate))))
        #: The inputs whose memory the library writes after their last read.
        self.donated = frozenset(result.donated_inputs)
        self._tracer = tracer
        self._profiled = result.profiled
        self._marks = numpy.zeros(len(result.profiled) + 1, dtype=numpy.int64)
        self._profile = self._lib['%s_profile' % NAME]
        self._profile.argtypes = [ctypes.c_void_p]
        # A function object of its own: another NativeRun may share _lib.
        self._fn = self._lib['%s_run_arena' % NAME]
        #: The shapes of the inputs the emitter added after the Program's
        #: own, which each call fills with uniform random numbers (the masks
        #: of training-mode Dropout: lowerings/noise.py).
        self._uniform_shapes = result.uniform_inputs
        self._fn.argtypes = [ctypes.c_void_p] * (2 + len(program.inputs) +
                                                 len(self._uniform_shapes) + len(program.outputs))
        self._fn.restype = ctypes.c_int
        self._status_message = getattr(self._lib, '%s_status_message' % NAME)
        self._status_message.argtypes = [ctypes.c_int]
        self._status_message.restype = ctypes.c_char_p
        # NAME_set_threads fixes the count; NAME_set_most_threads lets each
        # run function choose its own up to it.
        self._set_threads = self._lib['%s_set_%sthreads' % (
            NAME, '' if self._thread_count.fixed else 'most_')]
        self._set_threads.argtypes = [ctypes.c_int]
        #: The bytes of this program's arena.
        self.arena_bytes = max(1, result.arena_bytes)
        # Checked now, so that an arena too large is refused before any
        # call; the pool keeps buffers up to its size while this instance
        # lives, once a call has used one.
        POOL.check(self.arena_bytes, program.name)
        POOL.join(self.arena_bytes)
        weakref.finalize(self, POOL.leave, self.arena_bytes)
        assert result.weights_block is not None  # emitted with weights='file'
        self._weights = result.weights_block  # the same bytes as model_weights.bin
        self._weights_address = self._weights.ctypes.data
        self._in_shapes = [tuple(v.shape or ()) for v in program.inputs]
        self._in_dtypes = [numpy.dtype(v.dtype) for v in program.inputs]
        self._outputs = list(zip(result.output_shapes, result.output_dtypes))
        self._updated = frozenset(result.updated_inputs)
        #: Per input, the last array passed there as it is, and its data's
        #: address.  A training step passes the same parameter and state
        #: arrays at every call, and ndarray.ctypes costs a microsecond each
        #: time.  An array's data does not move while it is referenced
        #: (resize refuses then), and it stays C-contiguous as long as its
        #: shape is the same.
        #: Input -> (0-d buffer, its address) for the 0-d inputs read only
        #: (a training step's hyperparameters, new Python or NumPy scalars at
        #: every call): the value is stored there instead of converted.
        self._scalars: dict[int, tuple[numpy.ndarray, int]] = {}
        for k, (shape, dtype) in enumerate(zip(self._in_shapes, self._in_dtypes)):
            if shape == () and k not in self._updated:
                buffer = numpy.zeros((), dtype=dtype)
                self._scalars[k] = (buffer, buffer.ctypes.data)
        # (Weak: an input the caller let go, such as a retained value
        # backward has read, must not outlive the call here.)
        self._seen: list[tuple[weakref.ref, int, tuple, numpy.dtype, bool] | None] = \
            [None] * len(program.inputs)
        #: Output -> the input whose array it is (not a 0-d one: its buffer
        #: is reused at every call).
        self._in_place_outputs = {k: j for k, j in result.in_place_outputs.items()
                                  if j not in self._scalars}
        self._lock = threading.Lock()

    def call_bytes(self) -> int:
        """The bytes of the arrays a call allocates before the C runs, which
        live beside its inputs and the arena until it returns: the outputs
        that are not an input's array, and the Dropout masks' uniform draws
        (float64).  Not counted: the copies of donated inputs the caller
        did not give up, and of inputs converted to the declared dtype."""
        new = [self._outputs[k] for k in range(len(self._outputs))
               if k not in self._in_place_outputs]
        new += [(shape, 'float64') for shape in self._uniform_shapes]
        return sum(int(numpy.prod(shape, dtype=numpy.int64)) * numpy.dtype(dtype).itemsize
                   for shape, dtype in new)

    def resident_bytes(self) -> int:
        """The bytes this instance holds for its life, its arena aside (the
        pool's): the weights block and the 0-d inputs' buffers."""
        return self._weights.nbytes + self._marks.nbytes + sum(
            buffer.nbytes for buffer, _ in self._scalars.values())

    def run(self, values, consume: bool = False) -> list[numpy.ndarray]:
        """Outputs for input ``values`` (declaration order).  C-contiguous
        arrays of the declared dtype and shape are read in place; anything
        else is converted first, and a wrong shape is refused (whether or
        not the Executor validates inputs: C would read out of bounds).
        Inputs the program updates in place (a training step's parameters
        and optimizer states) are written where they lie, so they must be
        writable C-contiguous arrays of the declared dtype.  An output that
        is an input (after its update, for an updated one) is the input's
        array, as on the NumPy VM; every other output is a new array.  A
        donated input (self.donated) is overwritten in place when
        ``consume`` says the list ``values`` is handed over and holds the
        only reference to that array (_given_up), else copied first: an
        array the caller still holds is never changed."""
        copies = [k for k in self.donated if not (consume and _given_up(values, k))]
        if copies:
            values = list(values)  # the caller's list stays as it was
            for k in copies:
                values[k] = numpy.array(values[k], dtype=self._in_dtypes[k], order='C')
        pointers = []
        # The array given to C for each input (a conversion must outlive the
        # call); None for a 0-d input stored in its buffer.
        passed: list[numpy.ndarray | None] = []
        scalars = []
        seen_arrays = self._seen
        for k, value in enumerate(values):
            # The same array as last time, as it was then (its shape and
            # dtype can be reassigned in place): checked when first seen,
            # and C-contiguous since.
            seen = seen_arrays[k]
            if seen is not None:
                ref, pointer, shape, dtype, updated = seen
                if ref() is value and value is not None and value.shape == shape and \
                        value.dtype is dtype and (not updated or value.flags.writeable):
                    pointers.append(pointer)
                    passed.append(value)
                    continue
            info, shape, dtype = self.program.inputs[k], self._in_shapes[k], self._in_dtypes[k]
            scalar = self._scalars.get(k)
            # A 0-d array is read in place like any other (and remembered:
            # a training step passes the same ones at every call).
            if scalar is not None and type(value) is not numpy.ndarray and \
                    getattr(value, 'shape', ()) == ():  # stored below
                scalars.append((scalar[0], value))
                pointers.append(scalar[1])
                passed.append(None)
                continue
            a = value
            if type(a) is not numpy.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                if k in self._updated:
                    raise InputValidationError(_not_updatable(self.program, info, a))
                # asarray keeps a 0-d value 0-d (ascontiguousarray does not).
                a = numpy.asarray(a, dtype=dtype, order='C')
            elif k in self._updated and not a.flags.writeable:
                raise InputValidationError(_not_updatable(self.program, info, a))
            if a.shape != shape:
                raise InputValidationError("program %s: input '%s' has shape %s, the native "
                                           'library was built for %s'
                                           % (self.program.name, info.name, a.shape, shape))
            pointers.append(_address(a))
            passed.append(a)
            if a is value:
                seen_arrays[k] = (weakref.ref(a), pointers[-1], shape, a.dtype,
                                  k in self._updated)
        # Drawn as the NumPy VM's DropoutTraining draws its mask, from the
        # same global generator and in program order (runtime/ops/noise.py).
        for shape in self._uniform_shapes:
            uniforms = numpy.random.rand(*shape)
            passed.append(uniforms)
            pointers.append(_address(uniforms))
        outputs: list[numpy.ndarray] = []
        for k, (out_shape, out_dtype) in enumerate(self._outputs):
            j = self._in_place_outputs.get(k, -1)
            source = passed[j] if j >= 0 else None
            if source is not None:
                outputs.append(source)
                pointers.append(pointers[j])
            else:
                outputs.append(numpy.empty(out_shape, dtype=out_dtype))
                pointers.append(_address(outputs[-1]))
        with self._lock:
            arena = POOL.borrow(self.arena_bytes, self.program.name)
            try:
                for buffer, value in scalars:
                    buffer[()] = value
                # The thread pool is the library's: instances sharing it may
                # want other counts.
                if _THREADS.get(id(self._lib)) != self._thread_count:
                    self._set_threads(self.threads)
                    _THREADS[id(self._lib)] = self._thread_count
                if self._tracer is None:
                    status = self._fn(arena[1], self._weights_address, *pointers)
                else:
                    with _PROFILING:
                        self._profile(self._marks.ctypes.data)
                        status = self._fn(arena[1], self._weights_address, *pointers)
                        self._profile(None)
                    if status == 0:
                        self._tracer.record_native(self.program, self._profiled,
                                                   self._marks.tolist())
            finally:
                POOL.give_back(arena)
        if status != 0:  # the message names the instruction, as the VM's would
            raise KernelError(self._status_message(status).decode('utf-8', 'replace'))
        return outputs


def _references(values: list, k: int) -> int:
    """sys.getrefcount of ``values[k]`` as counted from here."""
    a = values[k]
    return sys.getrefcount(a)


#: What _references counts for an array that only its list references (the
#: interpreter's own references, which vary between Python versions).
_ONLY_THE_LIST = _references([numpy.empty(1)], 0)


def _given_up(values: list, k: int) -> bool:
    """Whether ``values[k]`` is an array that owns its memory, writable,
    that nothing references but the list ``values`` (no caller's name, no
    view, no other place in the list): the library may overwrite it."""
    a = values[k]
    if type(a) is not numpy.ndarray or a.base is not None or not a.flags.writeable:
        return False
    del a  # counted as _ONLY_THE_LIST was
    return _references(values, k) == _ONLY_THE_LIST


def _address(a: numpy.ndarray) -> int:
    """The address of a C-contiguous array's data.  A training step passes
    a dozen new arrays a call: ctypes.c_char.from_buffer takes 0.24 µs
    where ndarray.ctypes.data takes 1 µs, but it needs a writable buffer of
    at least one byte."""
    if a.flags.writeable and a.nbytes:
        # numpy 1.26's type stubs do not declare ndarray's buffer protocol.
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]
    return a.ctypes.data


def _not_updatable(program: Program, info, value) -> str:
    """Why ``value`` cannot be input ``info``, which the program updates in
    place: a converted copy would take the update instead of the caller's
    array."""
    if type(value) is not numpy.ndarray:
        what = '%s %s' % (type(value).__name__, describe_value(value))
    elif value.dtype != numpy.dtype(info.dtype) or not value.flags.c_contiguous:
        what = '%s array%s' % (describe_value(value),
                               '' if value.flags.c_contiguous else ', not C-contiguous')
    else:
        what = 'a read-only %s array' % describe_value(value)
    return ("program %s: input '%s' is updated in place by the native library, so it must be "
            'a writable C-contiguous numpy.ndarray of dtype %s; got %s'
            % (program.name, info.name, info.dtype, what))
