"""Tests for the control_flow kernels (If, Loop, Scan).

Sub-graphs are plain Python callables here, as the executor passes them.
"""
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from chainer_compiler.conformance import node_tests_dir
from chainer_compiler.runtime import ops
from chainer_compiler.runtime.ops.control_flow import if_, loop, scan, scan_v8
from chainer_compiler.runtime.program import ValueInfo

NODE_DATA = node_tests_dir()


def _load(test, kind, i):
    path = os.path.join(NODE_DATA, test, 'test_data_set_0', '%s_%d.pb' % (kind, i))
    if not os.path.exists(path):
        pytest.skip("this onnx installation has no node test data")
    return numpy_helper.to_array(onnx.load_tensor(path))


# -- If ----------------------------------------------------------------------

def test_if_runs_only_the_chosen_branch():
    calls = []

    def then_branch():
        calls.append('then')
        return [np.ones(2, np.float32)]

    def else_branch():
        calls.append('else')
        return [np.zeros(3, np.float32)]

    out = if_(np, np.array(False), then_branch=then_branch, else_branch=else_branch)
    assert calls == ['else']
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0], np.zeros(3, np.float32))
    # A one-element (rank-1) condition is accepted too.
    out = if_(np, np.array([True]), then_branch=then_branch, else_branch=else_branch)
    assert calls == ['else', 'then']


def test_if_keeps_sequence_and_empty_optional_outputs_whole():
    seq = [np.arange(3, dtype=np.float32), np.ones(2, np.float32)]
    out = if_(np, np.array(True), then_branch=lambda: [seq, None],
              else_branch=lambda: [[], None])
    assert out == (seq, None)


# -- Loop --------------------------------------------------------------------

def _loop11_body(i, cond, y):
    # The body of ONNX's test_loop11: y += x[i]; scan out y.
    x = np.array([1, 2, 3, 4, 5], np.float32)
    y_out = y + x[i:i + 1]
    return [cond, y_out, y_out]


def test_loop_matches_onnx_test_loop11():
    inputs = [_load('test_loop11', 'input', k) for k in range(3)]
    y, scanned = loop(np, *inputs, body=_loop11_body, n_outputs=2)
    np.testing.assert_array_equal(y, _load('test_loop11', 'output', 0))
    np.testing.assert_array_equal(scanned, _load('test_loop11', 'output', 1))
    assert scanned.shape == (5, 1) and scanned.dtype == np.float32


def test_loop_passes_iteration_number_and_condition_as_0d_arrays():
    seen = []

    def body(i, cond, v):
        seen.append((i.dtype, i.shape, cond.dtype, cond.shape, int(i)))
        return [cond, v + np.int32(1)]

    (v,) = loop(np, np.array(3, np.int64), None, np.array(0, np.int32),
                body=body, n_outputs=1)
    assert v == 3 and v.dtype == np.int32
    assert seen == [(np.dtype(np.int64), (), np.dtype(np.bool_), (), k) for k in range(3)]


def test_loop_while_form_stops_on_body_condition():
    # M omitted: run while the body says so; the first condition decides
    # whether any iteration runs.
    def body(i, cond, v):
        return [np.array(v + 1 < 4), v + 1, v * 10]

    v, scanned = loop(np, None, np.array(True), np.array(0, np.int64), body=body, n_outputs=2)
    assert int(v) == 4
    np.testing.assert_array_equal(scanned, [0, 10, 20, 30])
    v, scanned = loop(np, None, np.array(False), np.array(7, np.int64), body=body, n_outputs=2)
    assert int(v) == 7 and scanned.shape == (0,)


def test_loop_trip_count_and_condition_combine():
    def body(i, cond, v):
        return [np.array(i < 1), v + 1]

    (v,) = loop(np, np.array(10, np.int64), np.array(True), np.array(0.0, np.float32),
                body=body, n_outputs=1)
    assert float(v) == 2.0
    # Without a cond input the body's condition still ends the loop.
    (v,) = loop(np, np.array(10, np.int64), None, np.array(0.0, np.float32),
                body=body, n_outputs=1)
    assert float(v) == 2.0


def test_loop_zero_iterations_uses_declared_scan_output_type():
    def body(i, cond, v):
        return [cond, v, np.zeros((2, 3), np.int32)]

    body.outputs = [ValueInfo('c', 0, dtype='bool', shape=()),
                    ValueInfo('v', 1, dtype='float32', shape=(1,)),
                    ValueInfo('s', 2, dtype='int32', shape=(2, 3))]
    v0 = np.ones(1, np.float32)
    v, scanned = loop(np, np.array(0, np.int64), np.array(True), v0, body=body, n_outputs=2)
    assert v is v0
    assert scanned.shape == (0, 2, 3) and scanned.dtype == np.int32


def test_loop_zero_iterations_without_declared_types_gives_empty_float32():
    (scanned,) = loop(np, np.array(0, np.int64), None, body=lambda i, c: [c, i], n_outputs=1)
    assert scanned.shape == (0,) and scanned.dtype == np.float32


def test_loop_carries_sequences_and_optionals():
    # Like ONNX's test_loop16_seq_none: start from an empty optional and
    # append to a sequence each iteration.
    def body(i, cond, seq):
        base = [np.zeros((), np.float32)] if seq is None else seq
        return [cond, base + [np.arange(int(i) + 1, dtype=np.float32)]]

    (seq,) = loop(np, np.array(3, np.int64), np.array(True), None, body=body, n_outputs=1)
    assert isinstance(seq, list) and len(seq) == 4
    np.testing.assert_array_equal(seq[3], [0, 1, 2])


# -- Scan --------------------------------------------------------------------

def _cumsum_body(total, x):
    total = total + x
    return [total, total]


def test_scan9_matches_onnx_test_scan9_sum():
    inputs = [_load('test_scan9_sum', 'input', k) for k in range(2)]
    y, z = scan(np, *inputs, body=_cumsum_body, num_scan_inputs=1, n_outputs=2)
    np.testing.assert_array_equal(y, _load('test_scan9_sum', 'output', 0))
    np.testing.assert_array_equal(z, _load('test_scan9_sum', 'output', 1))


def test_scan_axes_and_directions():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    init = np.zeros((2, 4), np.float32)
    # Scan axis 1 backwards; accumulate the output by prepending, on the last axis.
    total, ys = scan(np, init, x, body=_cumsum_body, num_scan_inputs=1,
                     scan_input_axes=[1], scan_input_directions=[1],
                     scan_output_axes=[-1], scan_output_directions=[1], n_outputs=2)
    expected = np.cumsum(x[:, ::-1], axis=1)  # element t of the iteration order
    np.testing.assert_array_equal(total, x.sum(axis=1))
    assert ys.shape == (2, 4, 3)
    np.testing.assert_array_equal(ys, np.moveaxis(expected[:, ::-1], 1, -1))


def test_scan_zips_inputs_and_supports_several_states():
    a = np.arange(5, dtype=np.int64)
    b = np.arange(5, dtype=np.int64)[::-1].copy()

    def body(s, p, x, y):
        return [s + x, p * (y + 1), x - y]

    s, p, diff = scan(np, np.array(0, np.int64), np.array(1, np.int64), a, b,
                      body=body, num_scan_inputs=2, scan_input_directions=[0, 1], n_outputs=3)
    assert int(s) == 10 and int(p) == 120
    np.testing.assert_array_equal(diff, [0, 0, 0, 0, 0])
    assert diff.dtype == np.int64


def test_scan_rejects_mismatched_sequence_lengths():
    with pytest.raises(ValueError, match='sequence lengths'):
        scan(np, np.zeros(()), np.zeros(3), np.zeros(4), body=lambda s, x, y: [s],
             num_scan_inputs=2, n_outputs=1)


def test_scan8_matches_onnx_test_scan_sum():
    inputs = [_load('test_scan_sum', 'input', k) for k in range(2)]
    y, z = scan_v8(np, None, *inputs, body=_cumsum_body, num_scan_inputs=1, n_outputs=2)
    np.testing.assert_array_equal(y, _load('test_scan_sum', 'output', 0))
    np.testing.assert_array_equal(z, _load('test_scan_sum', 'output', 1))


def test_scan8_batches_with_sequence_lengths_and_pads_outputs():
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    init = np.zeros((2, 2), np.float32)
    y, z = scan_v8(np, np.array([3, 1], np.int64), init, x, body=_cumsum_body,
                   num_scan_inputs=1, directions=[1], n_outputs=2)
    np.testing.assert_array_equal(y, [x[0].sum(0), x[1, 0]])
    np.testing.assert_array_equal(z[0], np.cumsum(x[0, ::-1], axis=0))
    np.testing.assert_array_equal(z[1], [x[1, 0], [0, 0], [0, 0]])


def test_scan_registry_picks_the_opset8_form_only_for_version_8():
    assert ops.lookup('Scan', version=8).fn is scan_v8
    assert ops.lookup('Scan', version=9).fn is scan
    assert ops.lookup('Scan', version=25).fn is scan
    assert ops.lookup('Loop', version=1).fn is loop
    assert ops.lookup('If', version=25).fn is if_
