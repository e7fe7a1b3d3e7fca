"""Where the VM's device memory comes from.

By default the runtime draws CuPy memory from a pool of its own, so its use
can be reported apart from Chainer's.  ``use_chainerx_shared_allocator``
makes it share the pool Chainer uses (the name is the original
chainer-compiler's; our VM plays ChainerX's role), and
``use_unified_memory_allocator`` switches CuPy to managed (unified) memory;
each new chunk it asks for must fit in the memory the card has free at that
moment (asking for more managed memory than is free can stall the GPU).
"""
import warnings

from .runtime import backend

_said_nothing_to_do = set()


def _cupy_or_say_why(function_name):
    reason = backend.cupy_unavailable_reason()
    if reason is None:
        import cupy
        return cupy
    if function_name not in _said_nothing_to_do:
        _said_nothing_to_do.add(function_name)
        warnings.warn('chainer_compiler.%s has nothing to do: %s' % (function_name, reason),
                      stacklevel=3)
    return None


def managed_malloc_within_free_memory(cupy):
    """An allocator for a cupy MemoryPool: managed memory, refused with
    cupy's OutOfMemoryError (the pool then frees its cached blocks and
    retries once) when the request is above the device's free memory."""
    def malloc(size):
        free, total = cupy.cuda.runtime.memGetInfo()
        if size > free:
            raise cupy.cuda.memory.OutOfMemoryError(size, free)
        return cupy.cuda.memory.malloc_managed(size)
    return malloc


def use_unified_memory_allocator():
    """Allocate CuPy memory (Chainer's and the VM's) as managed memory,
    never asking for more than the device has free."""
    cupy = _cupy_or_say_why('use_unified_memory_allocator')
    if cupy is None:
        return False
    pool = cupy.cuda.MemoryPool(managed_malloc_within_free_memory(cupy))
    cupy.cuda.set_allocator(pool.malloc)
    backend.set_cupy_pool(pool)
    return True


def use_chainerx_shared_allocator():
    """Make the VM allocate from the CuPy pool Chainer uses."""
    cupy = _cupy_or_say_why('use_chainerx_shared_allocator')
    if cupy is None:
        return False
    backend.set_cupy_pool(cupy.get_default_memory_pool())
    return True
