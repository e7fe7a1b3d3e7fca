"""Backends: the array module a Program runs on.

``numpy`` is always there; ``cupy`` needs the optional CuPy extra and a GPU;
``native`` (host NumPy arrays in and out) needs a C compiler
(runtime/native/library.py).
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


def get_array_module(backend):
    """The ``xp`` module for a backend name ('numpy', 'cupy' or 'native')."""
    if backend in ('numpy', 'native'):
        return numpy
    if backend == 'cupy':
        reason = cupy_unavailable_reason()
        if reason:
            raise BackendUnavailableError('backend cupy is unavailable: ' + reason)
        import cupy
        return cupy
    raise BackendUnavailableError("unknown backend %r (expected 'numpy', 'cupy' or "
                                  "'native')" % (backend,))


def default_backend():
    """'cupy' when CuPy and a GPU are present, else 'numpy'."""
    return 'cupy' if cupy_unavailable_reason() is None else 'numpy'


def to_numpy(value):
    """Host copy of an array of either backend; other values pass through."""
    get = getattr(value, 'get', None)
    if get is not None and not isinstance(value, numpy.ndarray) and callable(get) \
            and type(value).__module__.startswith('cupy'):
        return get()
    return value


def to_backend(xp, value):
    """Move a host array to backend ``xp``; sequences are moved element-wise."""
    if xp is numpy or value is None:
        return value
    if isinstance(value, list):
        return [to_backend(xp, v) for v in value]
    if isinstance(value, numpy.ndarray) and value.dtype != object:
        return xp.asarray(value)
    return value


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
