"""ONNX node conformance tests through backend 'native': a handful that the
C kernels must pass, and how the runner classifies what C cannot run.  The
full run (`chainer-compiler conformance --backend native`) is not part of
the suite: it compiles a C library per test."""
import json
import shutil

import pytest

from chainer_compiler.cli import main as cli_main
from chainer_compiler.conformance import run_conformance, run_node_test

CC = shutil.which('cc') or shutil.which('gcc') or shutil.which('clang')
pytestmark = pytest.mark.skipif(CC is None, reason='no C compiler (cc, gcc, clang) on PATH')

#: Node tests the native backend runs today, one or more per lowered family.
PASSING = ['test_relu', 'test_gemm_default_matrix_bias', 'test_gemm_default_no_bias',
           'test_gemm_default_scalar_bias', 'test_gemm_default_single_elem_vector_bias',
           'test_gemm_default_vector_bias', 'test_gemm_default_zero_bias',
           'test_conv_with_strides_padding', 'test_maxpool_2d_ceil', 'test_add_bcast']


@pytest.mark.parametrize('name', PASSING)
@pytest.mark.native_build
def test_node_test_passes_natively(name):
    result = run_node_test(name, backend='native')
    assert result.status == 'passed', result.reason


def test_an_op_without_a_c_kernel_is_unsupported_not_failed():
    # Hardmax is kept without a lowering on purpose (the refusal example).
    result = run_node_test('test_hardmax_axis_0', backend='native')
    assert result.status == 'unsupported'
    assert 'Hardmax' in result.reason and 'no C kernel' in result.reason
    assert result.family == 'activation'  # the family of the VM's kernel


def test_a_dtype_c_does_not_handle_is_unsupported():
    # Add has a C kernel and the VM runs this test; the emitter refuses its
    # uint8 tensors (a NativeEmitError, not an UnsupportedNativeOpsError).
    assert run_node_test('test_add_uint8', backend='numpy').status == 'passed'
    result = run_node_test('test_add_uint8', backend='native')
    assert result.status == 'unsupported' and 'uint8' in result.reason


def test_a_compiler_error_is_a_failure(monkeypatch):
    # A build that fails (here: no working C compiler) is not 'unsupported'.
    monkeypatch.setenv('CC', 'false')
    result = run_node_test('test_relu', backend='native')
    assert result.status == 'failed' and 'NativeBuildError' in result.reason


@pytest.mark.native_build
def test_worker_processes_give_the_same_results_in_name_order():
    pattern = '^test_(relu|hardmax_axis_0|gemm_default_no_bias)$'
    seen: list = []
    results = run_conformance(pattern, backend='native', progress=seen.append, jobs=2)
    assert [(r.name, r.status) for r in results] == [
        ('test_gemm_default_no_bias', 'passed'), ('test_hardmax_axis_0', 'unsupported'),
        ('test_relu', 'passed')]
    assert sorted(r.name for r in seen) == [r.name for r in results]


@pytest.mark.native_build
def test_cli_reports_native_counts_per_family(capsys):
    assert cli_main(['conformance', '--backend', 'native', '--json',
                     '-k', '^test_(relu|hardmax_axis_0|maxpool_2d_ceil)$']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['totals'] == {'passed': 2, 'failed': 0, 'unsupported': 1, 'total': 3}
    assert report['families']['activation'] == {'passed': 1, 'failed': 0, 'unsupported': 1}
    assert report['families']['pooling'] == {'passed': 1, 'failed': 0, 'unsupported': 0}
