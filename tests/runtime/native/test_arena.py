"""The arena planner (runtime/native/arena.py): where every intermediate
buffer of a native program lives.  No gcc: plans only."""
import chainer
import chainer.links as L
import numpy

import chainer_compiler
from benchmarks import models as bench_models
from chainer_compiler.runtime.native.arena import Buffer, aligned, plan_arena
from chainer_compiler.runtime.native.emit_c import _lowered
from chainer_compiler.runtime.native.plan import plan


def _most_live(buffers):
    """The most aligned bytes ``buffers`` hold live at one instruction: no
    arena can be smaller."""
    live = {}
    for b in buffers:
        for i in range(b.start, b.end + 1):
            live[i] = live.get(i, 0) + aligned(b.nbytes)
    return max(live.values())


def _check_disjoint(buffers, offsets):
    for a in buffers:
        for b in buffers:
            if a is not b and a.start <= b.end and b.start <= a.end:
                assert offsets[a.key] + aligned(a.nbytes) <= offsets[b.key] or \
                    offsets[b.key] + aligned(b.nbytes) <= offsets[a.key], (a, b)


def test_a_large_value_made_later_leaves_no_hole():
    """By first use, two small values at 0 and 64 push a later large one
    past them once the first is dead (256 bytes); the largest first fits
    all three in what is ever live at once (192)."""
    buffers = [Buffer('short', 64, 0, 1), Buffer('long', 64, 0, 3), Buffer('large', 128, 2, 3)]
    offsets, size = plan_arena(buffers)
    assert size == _most_live(buffers) == 192
    _check_disjoint(buffers, offsets)


def test_a_training_steps_arena_is_the_most_its_values_hold_at_once():
    """compile_training_step's one program on a small ResNet, planned as
    the native backend plans it: the arena is what its buffers hold live at
    once, no more (by first use alone it was 5% more when this test was
    written: 608,768 against 578,176 bytes; gt's step the same), so the
    native step holds that much less at its peak
    (memory_model.native_process_peak counts the arena whole)."""
    rng = numpy.random.RandomState(0)
    x = rng.uniform(-1, 1, (8, 3, 32, 32)).astype(numpy.float32)
    t = rng.randint(0, 10, 8).astype(numpy.int32)
    numpy.random.seed(0)
    model = bench_models.ResNet50(width=4, blocks=(1, 1, 1, 1))
    with chainer.using_config('train', False):
        model(x)
    classifier = L.Classifier(model)
    optimizer = chainer.optimizers.MomentumSGD()
    optimizer.setup(classifier)
    step = chainer_compiler.compile_training_step(classifier, optimizer, (x, t),
                                                  runtime_kwargs={'backend': 'numpy'})
    arena = plan(_lowered(step.program, 'model'))
    assert arena.arena_bytes == _most_live(arena.buffers)
    _check_disjoint(arena.buffers, arena.offsets)
