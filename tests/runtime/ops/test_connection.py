"""Tests for the connection kernels, with onnxruntime and onnx.reference as
oracles."""
import numpy as np
import onnx.defs
import onnxruntime
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops import lookup
from chainer_compiler.runtime.ops.connection import (
    causal_conv_with_state,
    col2im,
    col2im_op,
    conv,
    conv_transpose,
    deform_conv,
    im2col,
    window_geometry,
)

_RNG = np.random.default_rng(0)


def _rand(*shape, dtype=np.float32):
    return _RNG.standard_normal(shape).astype(dtype)


def _model(op, inputs, n_outputs, opset, attrs):
    names = ['in%d' % i if x is not None else '' for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = ['out%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if n],
        [helper.make_empty_tensor_value_info(n) for n in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 10
    feeds = {n: x for n, x in zip(names, inputs) if n}
    return model, feeds


def run_ort(op, inputs, n_outputs=1, opset=22, **attrs):
    """Outputs of a one-node model run by onnxruntime (a test oracle)."""
    model, feeds = _model(op, inputs, n_outputs, opset, attrs)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    return session.run(None, feeds)


def run_reference(op, inputs, n_outputs=1, opset=22, **attrs):
    """Outputs of a one-node model run by onnx.reference (a test oracle)."""
    model, feeds = _model(op, inputs, n_outputs, opset, attrs)
    return ReferenceEvaluator(model).run(None, feeds)


def test_every_schema_version_of_every_connection_op_has_a_kernel():
    ops = {'Conv', 'ConvTranspose', 'DeformConv', 'Col2Im', 'CausalConvWithState'}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == '' and schema.name in ops:
            assert lookup(schema.name, version=schema.since_version).family == 'connection'


_CONV_CASES = [
    # 1-D, asymmetric pads, stride and dilation
    ((2, 3, 11), (4, 3, 3), dict(pads=[2, 1], strides=[2], dilations=[2])),
    # 2-D, groups, SAME_LOWER with stride (odd total padding)
    ((1, 4, 7, 8), (6, 2, 3, 2), dict(group=2, auto_pad='SAME_LOWER', strides=[2, 3])),
    ((1, 4, 7, 8), (6, 2, 3, 2), dict(group=2, auto_pad='SAME_UPPER', strides=[2, 3])),
    # depthwise with a channel multiplier
    ((2, 3, 6, 6), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
    # 3-D, VALID, explicit kernel_shape
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(auto_pad='VALID', kernel_shape=[2, 3, 2])),
]


@pytest.mark.parametrize('x_shape,w_shape,attrs', _CONV_CASES)
def test_conv_matches_onnxruntime(x_shape, w_shape, attrs):
    x, w, b = _rand(*x_shape), _rand(*w_shape), _rand(w_shape[0])
    expected = run_ort('Conv', [x, w, b], **attrs)[0]
    got = conv(np, x, w, b, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_conv_without_bias_and_in_float16():
    x, w = _rand(1, 3, 5, 5, dtype=np.float16), _rand(2, 3, 3, 3, dtype=np.float16)
    got = conv(np, x, w, pads=[1, 1, 1, 1])
    assert got.dtype == np.float16 and got.shape == (1, 2, 5, 5)
    wide = conv(np, x.astype(np.float32), w.astype(np.float32), pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, wide, rtol=1e-2, atol=1e-2)


def test_window_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match='does not fit'):
        conv(np, _rand(1, 1, 2, 2), _rand(1, 1, 3, 3))


_CONV_TRANSPOSE_CASES = [
    ((2, 3, 5), (3, 2, 3), dict(strides=[3], output_padding=[1], pads=[1, 0])),
    ((1, 4, 3, 4), (4, 3, 3, 2), dict(group=2, dilations=[2, 1], strides=[2, 2],
                                      pads=[0, 1, 2, 0])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad='SAME_UPPER')),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad='SAME_LOWER')),
    ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    ((1, 2, 2, 3, 2), (2, 3, 2, 2, 2), dict(strides=[1, 2, 2], output_padding=[0, 1, 0])),
]


@pytest.mark.parametrize('x_shape,w_shape,attrs', _CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs):
    x, w = _rand(*x_shape), _rand(*w_shape)
    b = _rand(w_shape[1] * attrs.get('group', 1))
    expected = run_ort('ConvTranspose', [x, w, b], **attrs)[0]
    got = conv_transpose(np, x, w, b, **attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_is_the_adjoint_of_conv():
    x, w, dy = _rand(2, 4, 7, 6), _rand(6, 2, 3, 2), _rand(2, 6, 4, 3)
    attrs = dict(group=2, strides=[2, 2], pads=[1, 0, 1, 1], dilations=[1, 2])
    y = conv(np, x, w, **attrs)
    assert y.shape == dy.shape
    dx = conv_transpose(np, dy, w, **attrs)
    assert dx.shape == x.shape
    np.testing.assert_allclose(np.vdot(y, dy), np.vdot(x, dx), rtol=1e-4)


def test_col2im_is_the_adjoint_of_im2col():
    x = _rand(2, 3, 6, 7)
    window = window_geometry(x.shape[2:], [2, 3], strides=[2, 1], dilations=[2, 2],
                             pads=[1, 0, 2, 1])
    view = im2col(np, x, window)
    assert view.shape == (2, 3, 2, 3) + window.out
    cols = _rand(*view.shape)
    np.testing.assert_allclose(np.vdot(view, cols), np.vdot(x, col2im(np, cols, (6, 7), window)),
                               rtol=1e-4)


@pytest.mark.parametrize('attrs', [{}, dict(strides=[2, 3], pads=[1, 0, 2, 1], dilations=[2, 1])])
def test_col2im_op_matches_reference(attrs):
    image, block = np.array([7, 8]), np.array([2, 3])
    window = window_geometry(image.tolist(), block.tolist(), **attrs)
    x = _rand(2, 3 * 6, int(np.prod(window.out)))
    expected = run_reference('Col2Im', [x, image, block], **attrs)[0]
    np.testing.assert_allclose(col2im_op(np, x, image, block, **attrs), expected, rtol=1e-5,
                               atol=1e-6)


def test_deform_conv_matches_reference():
    x, w = _rand(2, 4, 6, 5), _rand(4, 2, 3, 2)
    attrs = dict(group=2, offset_group=2, strides=[2, 1], pads=[1, 1, 1, 0], dilations=[1, 2])
    out = window_geometry((6, 5), (3, 2), attrs['strides'], attrs['dilations'],
                          attrs['pads']).out
    offset = _rand(2, 2 * 6 * 2, *out) * 1.5
    mask = _RNG.random((2, 2 * 6) + out).astype(np.float32)
    b = _rand(4)
    expected = run_reference('DeformConv', [x, w, offset, b, mask], **attrs)[0]
    got = deform_conv(np, x, w, offset, b, mask, **attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_deform_conv_with_zero_offsets_is_conv():
    x, w = _rand(1, 2, 5, 5), _rand(3, 2, 3, 3)
    offset = np.zeros((1, 18, 3, 3), np.float32)
    np.testing.assert_allclose(deform_conv(np, x, w, offset, strides=[2, 2], pads=[1] * 4),
                               conv(np, x, w, strides=[2, 2], pads=[1] * 4), rtol=1e-5,
                               atol=1e-6)


def test_causal_conv_is_conv_over_the_carried_sequence():
    x, w, b, past = _rand(2, 3, 5), _rand(3, 1, 4), _rand(3), _rand(2, 3, 3)
    y, present = causal_conv_with_state(np, x, w, b, past)
    full = np.concatenate([past, x], axis=2)
    np.testing.assert_allclose(y, conv(np, full, w, b, group=3), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present, full[:, :, -3:])


def test_causal_conv_state_keeps_zero_padding_for_short_input():
    x, w = _rand(1, 2, 2), _rand(2, 1, 5)
    y, present = causal_conv_with_state(np, x, w, activation='silu')
    assert y.shape == (1, 2, 2)
    np.testing.assert_array_equal(present[:, :, :2], 0)
    np.testing.assert_array_equal(present[:, :, 2:], x)


def test_causal_conv_kernel_size_one_has_empty_state_and_float16_output():
    x, w = _rand(1, 2, 3, dtype=np.float16), _rand(2, 1, 1, dtype=np.float16)
    y, present = causal_conv_with_state(np, x, w, activation='swish')
    assert y.dtype == np.float16 and present.shape == (1, 2, 0)
    z = (x * w.reshape(1, 2, 1)).astype(np.float32)
    np.testing.assert_allclose(y, z / (1 + np.exp(-z)), rtol=2e-3, atol=2e-3)


def test_causal_conv_rejects_unknown_activation():
    with pytest.raises(ValueError, match='gelu'):
        causal_conv_with_state(np, _rand(1, 1, 3), _rand(1, 1, 2), activation='gelu')
