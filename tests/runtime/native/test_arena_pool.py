"""The native arenas are the process's (arena_pool.py): the programs of a
model share one buffer, concurrent calls get one each, and an arena that
cannot be had is refused before the C runs."""
import gc
import shutil
import threading
import tracemalloc
import types

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.errors import KernelError
from chainer_compiler.runtime.executor import Executor
from chainer_compiler.runtime.native import arena_pool
from chainer_compiler.runtime.native.arena_pool import POOL, ArenaPool, release_arenas
from chainer_compiler.runtime.native.library import NativeRun
from tests.runtime.native.helpers import make_model

CC = shutil.which('cc') or shutil.which('gcc') or shutil.which('clang')
#: The tracemalloc domain NumPy reports its arrays' data in.
NUMPY_TRACE_DOMAIN = 389047


def _exhaust_memory(monkeypatch):
    """Make every new arena fail as numpy.empty does when memory is out."""
    def empty(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(arena_pool, 'numpy', types.SimpleNamespace(empty=empty,
                                                                   uint8=numpy.uint8))


@pytest.fixture
def pool():
    pool = ArenaPool()
    pool.join(1000)  # a user whose arena is 1000 bytes
    return pool


def test_calls_one_after_another_share_one_buffer_grown_to_the_largest(pool):
    small = pool.borrow(100, 'forward')
    pool.give_back(small)
    large = pool.borrow(300, 'backward')
    pool.give_back(large)
    assert pool.idle_bytes() == [300]  # the small one was replaced
    again = pool.borrow(100, 'forward')
    assert again[1] == large[1] and again[2].nbytes == 300


def test_concurrent_calls_get_buffers_of_their_own(pool):
    first, second = pool.borrow(100, 'a'), pool.borrow(50, 'b')
    assert first[1] != second[1]
    pool.give_back(first)
    pool.give_back(second)
    assert pool.idle_bytes() == [100, 50]  # as many as ran at once
    assert pool.borrow(40, 'c')[0] == 50  # the smallest that fits


def test_an_arena_larger_than_memory_is_refused_and_the_pool_unchanged(pool):
    pool.give_back(pool.borrow(64, 'a'))
    with pytest.raises(KernelError, match=r'program big: the native arena of %d bytes '
                       r'\(4\.19e\+06 GiB\) cannot be allocated' % 2**52):
        pool.borrow(2**52, 'big')
    assert pool.idle_bytes() == [64]


def test_a_failed_allocation_is_a_kernel_error_and_the_pool_unchanged(pool, monkeypatch):
    """Before the pool: numpy.empty's MemoryError was caught at construction
    only."""
    pool.give_back(pool.borrow(64, 'a'))
    _exhaust_memory(monkeypatch)
    with pytest.raises(KernelError, match='program b: the native arena of 128 bytes'):
        pool.borrow(128, 'b')
    assert pool.idle_bytes() == [64]


def test_idle_buffers_go_with_the_users_that_need_them_or_when_released(pool):
    """A model dropped takes its large arena with it, while a smaller model
    that lives on keeps its own."""
    pool.join(5000)
    pool.give_back(pool.borrow(5000, 'large'))
    pool.leave(5000)
    assert pool.idle_bytes() == []  # larger than the 1000 bytes still used
    lent = pool.borrow(1000, 'small')
    pool.join(5000)
    pool.give_back(pool.borrow(5000, 'large'))
    pool.leave(5000)
    pool.give_back(lent)
    assert pool.idle_bytes() == [1000]
    pool.release()
    assert pool.idle_bytes() == []
    pool.give_back(pool.borrow(64, 'a'))
    pool.leave(1000)
    assert pool.idle_bytes() == []
    pool.give_back(pool.borrow(64, 'a'))  # no user keeps it
    assert pool.idle_bytes() == []


# -- NativeRun ----------------------------------------------------------------------

def _chain(depth, batch=512, width=256):
    """x[512, 256] through ``depth`` MatMuls: depth - 1 intermediates of
    512 KiB, two of them live at once from depth 3."""
    rng = numpy.random.RandomState(depth)
    names = ['x'] + ['h%d' % k for k in range(depth - 1)] + ['y']
    nodes = [helper.make_node('MatMul', [names[k], 'W%d' % k], [names[k + 1]])
             for k in range(depth)]
    weights = {'W%d' % k: rng.standard_normal((width, width)).astype(numpy.float32) / 16
               for k in range(depth)}
    return build_program(make_model(nodes, [('x', numpy.float32, [batch, width])],
                                    [('y', numpy.float32, [batch, width])], weights))


@pytest.fixture(scope='module')
def programs():
    return _chain(2), _chain(4)


def _numpy_bytes():
    return sum(t.size for t in tracemalloc.take_snapshot().traces
               if t.domain == NUMPY_TRACE_DOMAIN)


@pytest.mark.native_build
@pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')
def test_programs_run_alternately_hold_one_arena(programs):
    """A model's forward and backward: before, each NativeRun held its own
    arena for its life (both, 1.5 MiB here); now the largest of them."""
    x = numpy.ones((512, 256), numpy.float32)
    gc.collect()
    release_arenas()
    tracemalloc.start()
    try:
        before = _numpy_bytes()
        runs = [NativeRun(p) for p in programs]
        arenas = sorted(r.arena_bytes for r in runs)
        weights = sum(r._weights.nbytes for r in runs)
        assert arenas == [2**19, 2**20]
        for _ in range(2):
            for run in runs:
                run.run([x])
        held = _numpy_bytes() - before - weights
    finally:
        tracemalloc.stop()
    assert POOL.idle_bytes() == [2**20]
    assert 2**20 <= held < sum(arenas)


@pytest.mark.native_build
@pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')
def test_concurrent_calls_each_get_an_arena_and_compute_the_same(programs):
    runs = [NativeRun(p) for p in programs]
    xs = [numpy.random.RandomState(k).standard_normal((512, 256)).astype(numpy.float32)
          for k in range(2)]
    # Each call waits in its C call until the other is in its own: both
    # hold an arena at once.
    together = threading.Barrier(2, timeout=60)
    arenas = []

    def meeting(fn):
        def call(arena, *pointers):
            arenas.append(arena)
            together.wait()
            return fn(arena, *pointers)
        return call
    for run in runs:
        run._fn = meeting(run._fn)
    got = [None, None]

    def work(k):
        got[k] = runs[k].run([xs[k]])[0]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(arenas)) == 2
    for program, x, y in zip(programs, xs, got):
        numpy.testing.assert_allclose(y, Executor(program).run_positional([x])[0],
                                      rtol=1e-4, atol=1e-5)


@pytest.mark.native_build
@pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')
def test_an_arena_that_cannot_be_had_is_refused_before_the_c_runs(programs, monkeypatch):
    run = NativeRun(programs[1])
    called = []
    run._fn = lambda *args: called.append(args) or 0
    held = POOL.borrow(run.arena_bytes, 'another call')  # the idle one is in use
    _exhaust_memory(monkeypatch)
    try:
        with pytest.raises(KernelError, match=r'program main: the native arena of %d bytes '
                           r'\(.* GiB\) cannot be allocated' % run.arena_bytes):
            run.run([numpy.ones((512, 256), numpy.float32)])
    finally:
        POOL.give_back(held)
    assert called == []
