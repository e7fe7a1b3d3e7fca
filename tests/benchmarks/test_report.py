"""The benchmark report's inference and native-backend columns, and the
native candidates' building blocks: the executable built from the emitted C
(or why not), its ``--iterations`` line, and the repetition count."""
import os
import sys
import time

import numpy
import pytest
from onnx import TensorProto, helper

# The benchmark scripts are not a package; put their directory (not tests/,
# whose chainer_compiler would shadow the real one) on the path.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks'))
import inference_candidates as inference  # noqa: E402
import report  # noqa: E402
from timing import repetitions  # noqa: E402

from chainer_compiler.pipeline import build_program  # noqa: E402

MiB = 2 ** 20


def _row(model='LeNet-5', batch=1, ms=None, emit_s=0.5, compile_s=1.5, arena=MiB,
         peak=3 * MiB, constants=2 * MiB, notes=None, agree=None):
    return {'model': model, 'batch': batch,
            'ms': ms or {'vm': 4.0, 'onnxruntime': 2.0, 'native': 1.0, 'executable': 0.5},
            'outputs_agree': agree or {'vm': True, 'native': True, 'executable': True},
            'build': {'emit_s': emit_s, 'compile_s': compile_s, 'arena_bytes': arena},
            'memory': {'vm_peak_bytes': peak, 'constant_bytes': constants},
            'executable_best_ms': 0.25, 'notes': notes or {}}


def _results(*rows):
    return {'optimizer': 'sgd', 'training': [], 'inference': list(rows)}


def _line(table, model, batch):
    return next(line for line in table.splitlines()
                if line.startswith('| %s | %d |' % (model, batch)))


def test_inference_table_gives_every_column_as_a_ratio_to_onnxruntime():
    table = report.inference_table(_results(_row()))
    assert table.splitlines()[0] == ('| model | batch | VM | onnxruntime | native, in Python | '
                                     'native executable | outputs agree with onnxruntime |')
    assert _line(table, 'LeNet-5', 1) == (
        '| LeNet-5 | 1 | 4.000 ms (2.00×) | 2.000 ms (1.00×) | 1.000 ms (0.50×) '
        '| 0.500 ms (0.25×), best 0.250 ms | yes |')


def test_missing_native_columns_are_na_and_disagreement_is_named():
    row = _row(ms={'vm': 4.0, 'onnxruntime': 2.0, 'native': 3.0},
               agree={'vm': True, 'native': False},
               notes={'executable': 'make failed: model.c:1: error: x'})
    del row['executable_best_ms']
    line = _line(report.inference_table(_results(row)), 'LeNet-5', 1)
    assert line.endswith('| 3.000 ms (1.50×) | n/a | NO: native, in Python |')


def test_native_table_sets_arena_beside_vm_peak_and_says_why_na():
    fits = _row()
    refused = _row(model='ResNet-50', emit_s=None, compile_s=None, arena=None,
                   ms={'vm': 900.0, 'onnxruntime': 90.0},
                   notes={'native': 'not attempted: emit_c took over 60 s (stopped)',
                          'executable': 'emit_c took over 60 s (stopped)'})
    grows = _row(model='MLP 784-100-100-10', batch=32, arena=4 * MiB)
    small = _row(model='MLP 10 layers, width 32', arena=1536, peak=4096, constants=1024)
    table = report.native_table(_results(fits, refused, grows, small))
    assert _line(table, 'LeNet-5', 1) == ('| LeNet-5 | 1 | 0.50 s | 1.50 s | 1.00 MiB | 3.00 MiB '
                                          '| 1.00 MiB | yes | - |')
    assert _line(table, 'ResNet-50', 1) == (
        '| ResNet-50 | 1 | n/a | n/a | n/a | 3.00 MiB | 1.00 MiB | n/a | native, in Python: '
        'not attempted: emit_c took over 60 s (stopped); native executable: emit_c took over '
        '60 s (stopped) |')
    assert '| 4.00 MiB | 3.00 MiB | 1.00 MiB | **no** |' in _line(table, 'MLP 784-100-100-10', 32)
    assert '| 1.5 KiB | 4.0 KiB | 3.0 KiB | yes |' in _line(table, 'MLP 10 layers, width 32', 1)


def test_native_targets_resnet50_build_time_and_arena():
    found = report.native_targets(_results(_row(model='ResNet-50', emit_s=20.0, compile_s=30.0),
                                           _row(batch=32, arena=5 * MiB)))
    assert found == [
        ('native ≤ 1.5× onnxruntime at batch 1, ResNet-50', '0.50×', True),
        ('native ≤ 1.5× onnxruntime at batch 32, LeNet-5', '0.50×', True),
        ('native emit + C compile < 60 s, ResNet-50', '50.0 s (emit 20.0 s, compile 30.0 s)',
         True),
        ('native arena ≤ VM peak memory, every model emitted', '1 of 2 (not: LeNet-5 batch 32)',
         False)]


def test_native_build_target_is_na_with_the_reason_when_not_built():
    row = _row(model='ResNet-50', emit_s=95.0, compile_s=None,
               notes={'executable': 'make took over 600 s (stopped)'})
    found = report.native_targets(_results(row))
    assert ('native emit + C compile < 60 s, ResNet-50',
            'n/a: make took over 600 s (stopped)', False) in found


def test_native_speed_targets_follow_the_issue():
    """At most 1.0x onnxruntime at batch 1 for the MLPs and LeNet-5, 1.5x for
    the CNNs at batch 1 and for every model at batch 32; n/a when not run."""
    rows = [_row(model='LeNet-5', ms={'onnxruntime': 2.0, 'native': 2.2}),
            _row(model='ResNet-18-style CNN', ms={'onnxruntime': 2.0, 'native': 2.2}),
            _row(model='LeNet-5', batch=32, ms={'onnxruntime': 2.0},
                 notes={'native': 'UnsupportedNativeOpsError: ...'})]
    found = report.native_targets(_results(*rows))
    assert found[:3] == [
        ('native ≤ 1.0× onnxruntime at batch 1, LeNet-5', '1.10×', False),
        ('native ≤ 1.5× onnxruntime at batch 1, ResNet-18-style CNN', '1.10×', True),
        ('native ≤ 1.5× onnxruntime at batch 32, LeNet-5',
         'n/a: UnsupportedNativeOpsError: ...', False)]


def test_native_training_targets_follow_the_issue():
    """The native step against hand-written NumPy (0.5x for the small MLPs,
    0.8x LeNet-5) or PyTorch (1.0x, the ResNet-18-style CNN), and
    compile_onnx run natively (parameters packed or not) at least 2x faster
    than Chainer on the 784-100-100-10 MLP with Adam and accuracy (judged in
    that configuration only); issue 31's: the native step 10x faster than
    Chainer there, quiet and with a busy neighbour, and the ResNet's 1.0x
    PyTorch with a busy neighbour too; n/a with the reason when a column
    was not run."""
    mlp = {'model': 'MLP 784-100-100-10', 'batch': 8, 'notes': {},
           'ms': {'numpy': 0.2, 'chainer': 1.0, 'compiled_step_native': 0.09,
                  'compile_onnx_native': 0.6, 'compile_onnx_native_packed': 0.45,
                  'chainer_busy': 2.0, 'compiled_step_native_busy': 0.25}}
    lenet = {'model': 'LeNet-5', 'batch': 32, 'ms': {'numpy': 3.0, 'chainer': 9.0},
             'notes': {'compiled_step_native': 'RuntimeVMError: no C compiler'}}
    resnet = {'model': 'ResNet-18-style CNN', 'batch': 8, 'notes': {},
              'ms': {'numpy': 300.0, 'pytorch': 100.0, 'compiled_step_native': 120.0,
                     'pytorch_busy': 150.0, 'compiled_step_native_busy': 140.0}}
    adam = {'optimizer': 'adam', 'accuracy': True, 'training': [mlp, lenet, resnet]}
    found = report.native_step_targets(adam)
    assert found == [
        ('compiled training step, native ≤ 0.5× hand-written NumPy, MLP 784-100-100-10',
         '0.45×', True),
        ('compiled training step, native ≤ 0.8× hand-written NumPy, LeNet-5',
         'n/a: RuntimeVMError: no C compiler', False),
        ('compiled training step, native ≤ 1.0× PyTorch eager, ResNet-18-style CNN',
         '1.20×', False),
        ('compiled training step, native ≥ 10× faster than Chainer, MLP 784-100-100-10, '
         'Adam, accuracy on', '11.1× faster', True),
        ('compiled training step, native ≥ 10× faster than Chainer, MLP 784-100-100-10, '
         'Adam, accuracy on, busy neighbour', '8.0× faster', False),
        ('compiled training step, native ≤ 1.0× PyTorch eager, ResNet-18-style CNN, '
         'busy neighbour', '0.93×', True),
        ('Chainer + compile_onnx, native ≥ 2× faster than Chainer, MLP 784-100-100-10, Adam, '
         'accuracy on', '1.67× faster', False),
        ('Chainer + compile_onnx, native, packed parameters ≥ 2× faster than Chainer, '
         'MLP 784-100-100-10, Adam, accuracy on', '2.22× faster', True)]
    for optimizer, accuracy in (('sgd', True), ('adam', False)):
        other = dict(adam, optimizer=optimizer, accuracy=accuracy)
        # Only the ResNet's busy target is judged in every configuration.
        assert report.native_step_targets(other) == found[:3] + found[5:6]


def test_benchmark_issue_targets_are_judged_with_sgd_and_no_accuracy_only():
    mlp = {'model': 'MLP 784-100-100-10', 'batch': 8, 'notes': {},
           'ms': {'numpy': 0.2, 'chainer': 1.0, 'compile_onnx': 0.4, 'compiled_step': 0.22},
           'first_loss': {'numpy': 2.3, 'chainer': 2.3}}
    sgd = {'optimizer': 'sgd', 'accuracy': False, 'training': [mlp], 'inference': []}
    assert report.targets(sgd)[:2] == [
        ('compiled step ≤ 1.2× NumPy, MLP 784-100-100-10', '1.10×', True),
        ('compile_onnx ≥ 2× faster than Chainer, MLP 784-100-100-10', '2.50× faster', True)]
    adam = dict(sgd, optimizer='adam', accuracy=True)
    assert not any(name.startswith(('compiled step ≤', 'compile_onnx ≥'))
                   for name, _, _ in report.targets(adam))
    text = report.markdown(adam)
    assert 'softmax cross entropy, accuracy, backward, adam update' in text
    assert 'Inference' not in text  # a --training-only run


def test_markdown_and_chart_without_training_rows(tmp_path):
    results = _results(_row(), _row(batch=32, ms={'vm': 4.0, 'onnxruntime': 2.0}))
    text = report.markdown(results)
    assert '## Native backend: build time and memory' in text
    assert 'Training' not in text  # an --inference-only run
    assert '| native arena ≤ VM peak memory, every model emitted | 2 of 2 | yes |' in text
    path = tmp_path / 'chart.png'
    report.chart(results, str(path))
    assert path.read_bytes().startswith(b'\x89PNG')


def test_parse_iterations():
    assert inference.parse_iterations(
        '50 iterations: mean 0.125 ms, median 0.110 ms, best 0.100 ms\n') == (
        50, 0.125, 0.11, 0.1)
    with pytest.raises(ValueError, match='iterations'):
        inference.parse_iterations('wrote out/y.npy\n')


def test_repetitions_fill_the_budget_within_bounds():
    assert repetitions(1.0, 0.01) == 100
    assert repetitions(1.0, 10.0) == 5
    assert repetitions(1.0, 0.0) == 300


def _program(op, inputs=('x',), **attrs):
    node = helper.make_node(op, list(inputs), ['y'], **attrs)
    graph = helper.make_graph(
        [node], 'g', [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in inputs],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])])
    return build_program(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)]))


@pytest.mark.native_build
def test_executable_is_built_and_times_itself(tmp_path):
    # Two inputs: each reaches the executable, in graph-input order.
    program = _program('Sub', inputs=('x', 'z'))
    build = inference.build_executable(program, str(tmp_path / 'c'), timeout_s=120)
    assert build.failure is None, build.failure
    assert build.emit_s > 0 and build.compile_s > 0 and build.arena_bytes >= 0
    x = numpy.array([[-1, 2, -3], [4, -5, 6]], numpy.float32)
    z = numpy.full((2, 3), 0.5, numpy.float32)
    timing, y = inference.executable_timing(build, program, [x, z], budget_s=0.01,
                                            timeout_s=60)
    assert 5 <= timing.runs <= 300  # repetitions() bounds
    assert 0 <= timing.best_ms <= timing.median_ms and timing.best_ms <= timing.mean_ms
    numpy.testing.assert_array_equal(y, x - z)
    with pytest.raises(ValueError, match='1 inputs for the executable, whose graph has 2'):
        inference.executable_timing(build, program, [x], budget_s=0.01, timeout_s=60)


def test_refused_program_is_reported_not_raised(tmp_path):
    build = inference.build_executable(_program('Hardmax'), str(tmp_path / 'c'), timeout_s=120)
    assert build.emit_s is None and build.executable is None and not build.timed_out
    assert 'Hardmax' in build.failure and '\n' not in build.failure


def test_make_past_the_timeout_is_stopped(tmp_path):
    # A Makefile whose build outlasts the timeout: make and the command it
    # runs are stopped together, and the build says so.
    (tmp_path / 'Makefile').write_text('all:\n\tsleep 30\n')
    build = inference.NativeBuild(str(tmp_path), emit_s=0.1)
    inference._compile(build, timeout_s=0.5)
    assert build.timed_out and build.compile_s is None and build.executable is None
    assert build.failure == 'make took over 0.5 s (stopped)'


def test_failed_make_quotes_its_first_error(tmp_path):
    (tmp_path / 'Makefile').write_text('all:\n\t@echo "model.c:3: error: boom" >&2; exit 1\n')
    build = inference.NativeBuild(str(tmp_path), emit_s=0.1)
    inference._compile(build, timeout_s=30)
    assert build.failure == 'make failed: model.c:3: error: boom' and not build.timed_out


def test_emit_past_the_timeout_is_stopped(tmp_path, monkeypatch):
    # The forked child emits with the module's emit_c: make it hang.
    monkeypatch.setattr(inference, 'emit_c', lambda *args, **kwargs: time.sleep(60))
    build = inference.build_executable(_program('Relu'), str(tmp_path / 'c'), timeout_s=0.5)
    assert build.timed_out and build.executable is None
    assert build.failure == 'emit_c took over 0.5 s (stopped)'

