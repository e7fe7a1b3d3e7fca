"""Backends: the array module a Program runs on.

``numpy`` is always there; ``cupy`` needs the optional CuPy extra and a GPU;
``native`` (host NumPy arrays in and out) needs a C compiler
(runtime/native/library.py); ``auto`` is native when it can run the
Program, else numpy (runtime/native/auto.py), never cupy.
"""
import numpy

from .errors import RuntimeVMError


class BackendUnavailableError(RuntimeVMError):
    """The requested backend cannot run on this machine."""


def cupy_unavailable_reason():
    """None when CuPy and a GPU are usable, else a sentence saying why not."""
    try:
        import cupy
    except ImportError as e:
        return 'CuPy is not installed (pip install chainer-compiler[cuda]): %s' % e
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return 'CuPy found no CUDA device'
    except Exception as e:  # CUDA driver missing or broken
        return 'CuPy cannot reach a CUDA device: %s' % e
    return None


#: The backend names an Executor takes (None too: default_backend).
BACKENDS = ('auto', 'numpy', 'native', 'cupy')


def get_array_module(backend):
    """The ``xp`` module for a backend name (one of BACKENDS)."""
    if backend in ('numpy', 'native', 'auto'):
        return numpy
    if backend == 'cupy':
        reason = cupy_unavailable_reason()
        if reason:
            raise BackendUnavailableError('backend cupy is unavailable: ' + reason)
        import cupy
        return cupy
    raise BackendUnavailableError('unknown backend %r (expected one of %s)'
                                  % (backend, ', '.join(map(repr, BACKENDS))))


def default_backend():
    """'cupy' when CuPy and a GPU are present, else 'numpy'."""
    return 'cupy' if cupy_unavailable_reason() is None else 'numpy'


def to_numpy(value):
    """Host copy of an array of either backend; sequences are copied
    element-wise; other values pass through."""
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if type(value).__module__.startswith('cupy') and callable(getattr(value, 'get', None)):
        return value.get()  # a CuPy array (or a test's stand-in for one)
    return value


#: The dtypes CuPy holds: NumPy's own booleans, integers, floats and complex
#: numbers, in native byte order.  Named one by one because ml_dtypes' types
#: can share their kinds (float8_e5m2's kind is 'f').
_DEVICE_DTYPES = frozenset(numpy.dtype(t) for t in (
    numpy.bool_, numpy.int8, numpy.int16, numpy.int32, numpy.int64, numpy.uint8,
    numpy.uint16, numpy.uint32, numpy.uint64, numpy.float16, numpy.float32, numpy.float64,
    numpy.complex64, numpy.complex128))


def device_dtype(dtype):
    """Whether CuPy can hold arrays of ``dtype``: not strings, objects or
    ml_dtypes' types (float8, int4, bfloat16...), which stay on the host."""
    try:
        return numpy.dtype(dtype) in _DEVICE_DTYPES
    except TypeError:  # a name NumPy does not know (ml_dtypes' without ml_dtypes)
        return False


def to_backend(xp, value):
    """Move a host array to backend ``xp``; sequences are moved element-wise;
    an array of a dtype CuPy cannot hold stays on the host."""
    if xp is numpy or value is None:
        return value
    if isinstance(value, list):
        return [to_backend(xp, v) for v in value]
    if isinstance(value, numpy.ndarray) and device_dtype(value.dtype):
        return xp.asarray(value)
    return value


def on_host(value):
    """Whether a register value of a CuPy run is (or holds) a host array."""
    if type(value) is list:
        return any(type(v) is numpy.ndarray for v in value)
    return type(value) is numpy.ndarray


_cupy_pool = None


def set_cupy_pool(pool):
    """Make the VM allocate CuPy memory from ``pool`` (a cupy MemoryPool)."""
    global _cupy_pool
    _cupy_pool = pool


def cupy_pool():
    """The pool the VM allocates CuPy memory from: its own unless
    set_cupy_pool chose another, so its use is reported apart from Chainer's."""
    global _cupy_pool
    if _cupy_pool is None:
        import cupy
        _cupy_pool = cupy.cuda.MemoryPool()
    return _cupy_pool
