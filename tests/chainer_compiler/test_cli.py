import json
import os
import shutil

import pytest

from chainer_compiler.cli import main
from chainer_compiler.conformance import node_tests_dir
from chainer_compiler.runtime import load_program

RELU_TEST = os.path.join(node_tests_dir(), 'test_relu')


def test_run_test_passes_on_good_data(capsys):
    assert main(['run', '--test', RELU_TEST]) == 0
    assert 'test_relu: OK' in capsys.readouterr().out


def test_run_test_fails_on_broken_data_and_names_the_output(tmp_path, capsys):
    import onnx
    from onnx import numpy_helper
    broken = tmp_path / 'test_relu'
    shutil.copytree(RELU_TEST, broken)
    path = broken / 'test_data_set_0' / 'output_0.pb'
    expected = numpy_helper.to_array(onnx.load_tensor(str(path)))
    onnx.save_tensor(numpy_helper.from_array(expected + 1, 'y'), str(path))
    assert main(['run', '--test', str(broken)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "output 'y'" in err and 'test_data_set_0' in err


def test_run_test_tolerances_are_honoured(tmp_path):
    import onnx
    from onnx import numpy_helper
    nudged = tmp_path / 'test_relu'
    shutil.copytree(RELU_TEST, nudged)
    path = nudged / 'test_data_set_0' / 'output_0.pb'
    expected = numpy_helper.to_array(onnx.load_tensor(str(path)))
    onnx.save_tensor(numpy_helper.from_array(expected + 1e-3, 'y'), str(path))
    assert main(['run', '--test', str(nudged)]) == 1
    assert main(['run', '--test', str(nudged), '--atol', '1e-2']) == 0


def test_run_test_missing_directory_is_an_error(tmp_path, capsys):
    assert main(['run', '--test', str(tmp_path / 'none')]) == 2
    assert 'has no model.onnx' in capsys.readouterr().err


def test_run_onnx_with_all_options(tmp_path, capsys):
    trace = tmp_path / 'trace.json'
    saved = tmp_path / 'prog.npz'
    model = os.path.join(node_tests_dir(), 'test_conv_with_strides_padding', 'model.onnx')
    assert main(['run', '--onnx', model, '--iterations', '3', '--trace', '--check-nans',
                 '--chrome-tracing', str(trace), '--dump', '--save', str(saved)]) == 0
    captured = capsys.readouterr()
    assert 'program main' in captured.out and 'Conv(' in captured.out
    assert '3 iterations: mean' in captured.out and 'best' in captured.out
    assert 'output y: float32[1, 1, 4, 3]' in captured.out
    assert 'Conv' in captured.err  # the trace
    assert json.loads(trace.read_text())['traceEvents']
    assert load_program(str(saved)).instructions[0].op == 'Conv'
    assert main(['run', '--program', str(saved)]) == 0


def test_cupy_backend_without_gpu_is_a_clear_error(capsys):
    from chainer_compiler.runtime import cupy_unavailable_reason
    if cupy_unavailable_reason() is None:
        pytest.skip('CuPy is usable here')
    assert main(['run', '--test', RELU_TEST, '--backend', 'cupy']) == 2
    assert 'backend cupy is unavailable' in capsys.readouterr().err


def test_conformance_json_reports_each_test(capsys):
    assert main(['conformance', '--json', '-k', '^test_(relu|abs)$']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['totals'] == {'passed': 2, 'failed': 0, 'unsupported': 0, 'total': 2}
    assert {t['name'] for t in report['tests']} == {'test_relu', 'test_abs'}
    assert all(t['family'] in ('activation', 'math') for t in report['tests'])
