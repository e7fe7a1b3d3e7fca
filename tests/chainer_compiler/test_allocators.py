"""use_unified_memory_allocator's guard, with a stand-in for CuPy (the real
one is exercised by benchmarks/gpu/run_gpu_checks.py on a GPU)."""
import types

import pytest

from chainer_compiler.allocators import managed_malloc_within_free_memory


class _OutOfMemory(Exception):
    def __init__(self, size, total):
        super().__init__('out of memory allocating %d bytes (%d free)' % (size, total))


def _fake_cupy(free):
    asked = []
    memory = types.SimpleNamespace(OutOfMemoryError=_OutOfMemory,
                                   malloc_managed=lambda size: asked.append(size) or size)
    runtime = types.SimpleNamespace(memGetInfo=lambda: (free, 4 * free))
    return types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory, runtime=runtime)), asked


def test_managed_memory_above_free_memory_is_refused_before_it_is_asked_for():
    cupy, asked = _fake_cupy(free=1 << 20)
    malloc = managed_malloc_within_free_memory(cupy)
    with pytest.raises(_OutOfMemory, match='allocating 1048577 bytes'):
        malloc((1 << 20) + 1)
    assert asked == []  # managed memory was never requested
    assert malloc(1 << 20) == 1 << 20
    assert asked == [1 << 20]
