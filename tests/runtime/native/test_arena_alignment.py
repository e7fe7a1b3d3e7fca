"""The native arenas start at a cache line, as the kernels' 64-byte vectors
at the arenas' aligned offsets rely on for speed (benchmarks/NOTES.md,
"MNASNet's 7x7 layers and the mobile models at batch 32")."""
from chainer_compiler.runtime.native.arena import ALIGNMENT
from chainer_compiler.runtime.native.arena_pool import ArenaPool


def test_arenas_start_at_a_cache_line():
    """The kernels' 64-byte vectors sit at 64-byte offsets of the arena; a
    large NumPy array starts 16 bytes past a line, and every vector then
    straddled two (MNASNet-1.0 1.04x its time)."""
    pool = ArenaPool()
    for nbytes in (64, 1000, 10**6, 3 * 10**7):
        pool.join(nbytes)
        lent = pool.borrow(nbytes, 'a')
        assert lent[1] % ALIGNMENT == 0 and lent[2].ctypes.data == lent[1]
        assert lent[2].nbytes >= nbytes
        pool.give_back(lent)
