"""benchmarks/memory.py's real peaks: tracemalloc's live bytes of a whole
training step with the parameters, gradients and optimizer state apart,
the peak RSS of a fresh process, and the prediction judged against them."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import memory  # noqa: E402


@pytest.mark.slow  # two fresh processes import Chainer and compile (peak RSS)
def test_a_row_has_its_real_peak_and_its_parts(tmp_path):
    rows = memory.main(['--quick', '--models', 'mlp100', '--policies', 'none', 'gt',
                        '--backends', 'numpy', '--api', 'onnx', '--steps', '2', '--seconds', '0',
                        '--out', str(tmp_path / 'memory.png')])
    for row in rows:
        params = row.param_bytes
        # Momentum keeps one velocity per parameter; backward made one gradient each.
        assert row.state_bytes == row.grad_bytes == params > 0
        # Between steps the process holds the parameters, their velocities
        # and gradients; the step's peak holds them and its activations.
        assert row.held >= 3 * params and row.real > row.held
        assert row.above_parameters() == row.real - 2 * params
        assert row.rss > 0 and 0 <= row.rss_steps < row.rss
    assert (tmp_path / 'memory.csv').read_text().count('\n') == 3


def test_the_prediction_is_judged_against_the_real_peak():
    row = memory.Row('plaincnn', 'cnn', memory.Policy.parse('gt'), predicted=99, real=100)
    other = memory.Row('plaincnn', 'cnn', memory.Policy.parse('gt'), predicted=60, real=100,
                       backend='native')
    assert memory.prediction_targets([row, other]) == [
        'PASS: predicted within 2% of the real peak, plain CNN, gt: 9.4e-05 MiB predicted, '
        '9.5e-05 MiB real (-1.0%)',
        'MISS: predicted within 2% of the real peak, plain CNN (native), gt: 5.7e-05 MiB '
        'predicted, 9.5e-05 MiB real (-40.0%)']
    # The VM's count stands in for a real peak not measured.
    assert memory.Row('m', 'm', row.policy, measured=7).peak == 7


def test_the_step_clears_the_gradients_before_the_forward(tmp_path):
    # Chainer's Optimizer.update clears them after the forward: the last
    # step's gradients would be held through it and counted in its peak.
    case = memory.MODELS['mlp100']
    x, t = memory.batch_data(case.quick_shape, case.quick_batch)
    model = memory.initialized_model(case.quick_make, x)
    onnx_file = str(tmp_path / 'mlp.onnx')
    memory.chainer_compiler.export(model, [x], onnx_file)
    compiled, step = memory.compiled_step(model, onnx_file, memory.Policy.parse('none'), {},
                                          'momentum')
    step(x, t)
    assert all(p.grad is not None for p in compiled.params())
    forward, seen = compiled.forward, []

    def spy(*args):
        seen.append([p.grad for p in compiled.params()])
        return forward(*args)
    compiled.forward = spy
    step(x, t)
    assert len(seen) == 1 and all(grad is None for grad in seen[0])
