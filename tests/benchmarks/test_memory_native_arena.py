"""benchmarks/memory.py counts the native arena of the row it measures:
the arenas are the process's (arena_pool.py), so a buffer an earlier row
allocated, before this row's tracing began, must not serve this row."""
import os
import shutil
import sys

import pytest

from chainer_compiler.runtime.native.arena_pool import POOL

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import memory  # noqa: E402


@pytest.mark.native_build
@pytest.mark.skipif(shutil.which('cc') is None and shutil.which('gcc') is None,
                    reason='no C compiler on PATH')
def test_each_native_row_holds_its_own_arena_once(tmp_path):
    case = memory.MODELS['mlp100']
    x, t = memory.batch_data(case.quick_shape, case.quick_batch)
    model = memory.initialized_model(case.quick_make, x)
    onnx_file = str(tmp_path / 'mlp.onnx')
    memory.chainer_compiler.export(model, [x], onnx_file)
    rows, steps = [], []
    for name in ('none', 'none'):
        rows.append(memory.Row('mlp100', 'mlp', memory.Policy.parse(name),
                               backend='native'))
        # (the steps live on, as the benchmark keeps them for timing)
        steps.append(memory.measure_real(rows[-1], model, onnx_file, {}, x, t, 'momentum'))
        arena = POOL.idle_bytes()
        assert len(arena) == 1  # one buffer for the row's programs
        rows[-1].arena = arena[0]
    first, again = rows
    # Before: the buffer the first row allocated served the second untraced.
    assert again.held == first.held
    assert first.held >= first.state_bytes + first.grad_bytes + first.arena
