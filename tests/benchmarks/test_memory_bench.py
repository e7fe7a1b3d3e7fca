"""The memory benchmark (benchmarks/memory.py) end to end on a tiny model,
and the models of benchmarks/models.py it and the recompute tests use:
each exports, and its compiled inference gives Chainer's output."""
import csv
import os
import sys

import chainer
import numpy
import pytest

# The benchmark scripts are not a package; put their directory (not tests/,
# whose chainer_compiler would shadow the real one) on the path.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import memory  # noqa: E402
import models  # noqa: E402

import chainer_compiler  # noqa: E402

#: These tests check the bridge, not the backend: the NumPy VM, where the
#: default ('auto') would build C for each model.
ON_THE_VM = {'backend': 'numpy'}

SMOKE_POLICIES = ['none', 'gt']


@pytest.mark.slow
def test_quick_run_writes_the_table_and_the_plot(tmp_path, capsys):
    out = tmp_path / 'memory.png'
    rows = memory.main(['--quick', '--models', 'mlp100', '--policies'] + SMOKE_POLICIES
                       + ['--backends', 'numpy', '--api', 'onnx', '--no-rss', '--steps', '2',
                          '--seconds', '0', '--out', str(out)])
    assert [r.policy.name for r in rows] == SMOKE_POLICIES
    none = rows[0]
    for row in rows:
        assert row.error is None
        assert row.measured >= row.param_bytes > 0  # the parameters are held throughout
        assert row.predicted > 0 and row.ms > 0
        assert row.none is none
    assert none.fraction_of_none() == 1.0 and none.extra_time() == 0.0
    printed = capsys.readouterr().out
    for policy in SMOKE_POLICIES:
        assert '| %s | numpy | %s | - |' % (none.label, policy) in printed
    assert (tmp_path / 'memory.md').read_text() in printed
    assert '## Where the time goes' in printed
    with open(tmp_path / 'memory.csv') as f:
        assert [r['policy'] for r in csv.DictReader(f)] == SMOKE_POLICIES
    assert out.read_bytes().startswith(b'\x89PNG')


@pytest.mark.slow  # a second compile and steps per policy
def test_step_rows_measure_compile_training_step(tmp_path, capsys):
    rows = memory.main(['--quick', '--models', 'mlp100', '--policies'] + SMOKE_POLICIES
                       + ['--backends', 'numpy', '--api', 'step', '--no-rss', '--steps', '2',
                          '--seconds', '0', '--out', str(tmp_path / 'memory.png')])
    assert [(r.api, r.policy.name) for r in rows] == [('step', p) for p in SMOKE_POLICIES]
    printed = capsys.readouterr().out
    for row in rows:
        assert row.error is None and row.none is rows[0]
        assert row.measured >= row.param_bytes > 0 and row.real > 0 and row.ms > 0
        # Its gradients live in its program; momentum's velocities are the
        # update rules' own.
        assert row.grad_bytes == 0 and row.state_bytes == row.param_bytes
        assert '| %s | numpy, step | %s | - |' % (row.label, row.policy.name) in printed
    with open(tmp_path / 'memory.csv') as f:
        assert [r['api'] for r in csv.DictReader(f)] == ['step'] * len(SMOKE_POLICIES)


def test_policies_parse_with_their_budgets():
    assert memory.Policy.parse('none') == memory.Policy('none', None, None)
    assert memory.Policy.parse('gt:0.35') == memory.Policy('gt:0.35', 'gt', 0.35)
    assert memory.compiler_kwargs(memory.Policy.parse('gt:chen'), 1234.5) == {
        'memory_budget': 1234}
    with pytest.raises(ValueError, match="needs a successful 'chen'"):
        memory.compiler_kwargs(memory.Policy.parse('gt:chen'), None)


def _rows(key, policies, measured, samples, param_bytes):
    """Rows of model ``key`` with the given measured peaks and step
    seconds, the first policy's row being None's."""
    rows = [memory.Row(key, key, memory.Policy.parse(p), measured=m, param_bytes=param_bytes,
                       samples=s) for p, m, s in zip(policies, measured, samples)]
    for row in rows:
        row.none = rows[0]
    return rows


def test_targets_are_pass_or_miss_from_the_rows():
    # Step seconds over three rounds: gt at chen's budget has the higher
    # median (12 against 11.5 ms) but is faster in two of the three rounds.
    samples = ([0.010] * 3, [0.014] * 3, [0.011, 0.013, 0.0115], [0.0105, 0.012, 0.012])
    rows = _rows('resnet50', ('none', 'gt', 'chen', 'gt:chen'), (100, 40, 70, 55), samples, 20)
    assert memory.targets(rows) == [
        "PASS: gt peak <= 50% of None's, ResNet-50: 40% (of the peak less the parameters: "
        "25%)",
        "MISS: gt step time <= +30% of None's, ResNet-50: +40%",
        "MISS: chen peak <= 60% of None's, ResNet-50: 70% (of the peak less the parameters: "
        "62%)",
        "PASS: gt no slower than chen at chen's budget, ResNet-50: 12.0 ms against 11.5 ms; "
        "per round, gt minus chen: median -0.5 ms over 3 rounds, gt faster in 2"]
    rows[3].samples = [0.0115, 0.0135, 0.012]
    assert memory.targets(rows)[-1].startswith(
        "MISS: gt no slower than chen at chen's budget, ResNet-50: 12.0 ms against 11.5 ms; "
        "per round, gt minus chen: median +0.5 ms over 3 rounds, gt faster in 0")
    rows[3].error, rows[3].samples = 'memory_budget 70 bytes is below ...', None
    assert memory.targets(rows)[-1] == ("MISS: gt no slower than chen at chen's budget, "
                                        "ResNet-50: gt not run: memory_budget 70 bytes is "
                                        "below ...")


def test_gt_at_the_peak_targets_budget_meets_the_time_target():
    rows = _rows('plaincnn', ('none', 'gt', 'gt:0.5'), (100, 24, 49),
                 ([0.010], [0.0131], [0.0110]), 1)
    assert memory.targets(rows)[1] == (
        "PASS: gt step time <= +30% of None's, plain CNN: +10% with memory_budget 0.5 (49% of "
        "the peak); +31% at its least peak (24%) without a budget")
    rows[2].measured = 51  # over the peak target: it does not count
    assert memory.targets(rows)[1] == "MISS: gt step time <= +30% of None's, plain CNN: +31%"


def test_a_budgeted_gt_row_meets_a_peak_target_for_gt():
    rows = _rows('mlp100', ('none', 'gt', 'gt:0.25'), (100, 33, 24),
                 ([0.010], [0.013], [0.020]), 10)
    assert memory.targets(rows)[-1] == (
        "PASS: gt peak <= 25% of None's, MLP, 100 layers: 24% with memory_budget 0.25 (+100% "
        "time); 33% (of the peak less the parameters: 26%) without a budget")


def _check_compiled_inference(tmp_path, model, shape, batch=2):
    """Export ``model`` on a batch of ``shape``; its compiled inference
    gives Chainer's (batch, 10) output."""
    x = numpy.random.RandomState(0).uniform(-1, 1, (batch,) + shape).astype(numpy.float32)
    with chainer.using_config('train', False):
        expected = model(x).array
        path = chainer_compiler.export(model, [x], str(tmp_path / 'model.onnx'))
        actual = chainer_compiler.compile_onnx(model, path,
                                               runtime_kwargs=ON_THE_VM).forward(x).array
    assert expected.shape == actual.shape == (batch, 10)
    numpy.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('make, shape', [
    (lambda: models.ResNet50(width=4, blocks=(1, 2, 1, 1)), (3, 32, 32)),
    (lambda: models.VGG16(width=4, fc_width=16, image_size=32), (3, 32, 32)),
    (lambda: models.deep_mlp(depth=100, n_in=12, width=8), (12,)),
    (lambda: models.DeepPlainCNN(depth=3, channels=4), (3, 8, 8)),
    (lambda: models.LSTMClassifier(n_in=3, hidden=5), (4, 3)),
    (lambda: models.DropoutMLP(n_in=12, hidden=8), (12,)),
], ids=['resnet50-tiny', 'vgg16-tiny', 'mlp100', 'plaincnn-tiny', 'lstm', 'dropout'])
def test_small_models_export_and_compile(tmp_path, make, shape):
    numpy.random.seed(0)
    _check_compiled_inference(tmp_path, make(), shape)


@pytest.mark.slow
@pytest.mark.parametrize('key', sorted(memory.MODELS))
def test_benchmarked_models_export_and_compile_at_full_size(tmp_path, key):
    case = memory.MODELS[key]
    numpy.random.seed(0)
    _check_compiled_inference(tmp_path, case.make(), case.shape)


@pytest.mark.slow  # VGG16's initial weights alone take seconds to draw
def test_full_sizes_have_the_published_parameter_counts():
    def count(model):
        return sum(p.size for p in model.params())
    # 25,557,032 with ImageNet's 1000 classes; 2048 * 990 + 990 fewer with 10.
    assert count(models.ResNet50()) == 25_557_032 - 2048 * 990 - 990
    vgg = models.VGG16()
    assert count(vgg.convs) == 14_714_688  # VGG16's 13 convolutions, as published
    assert vgg.fc1.W.shape == (4096, 512 * 2 * 2)
    assert len(models.deep_mlp()) == 100
