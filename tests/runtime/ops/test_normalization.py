"""Tests for the normalization kernels, with onnx.reference as the oracle where
it helps."""
import numpy as np
import onnxruntime
import pytest
from onnx import defs, helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops import normalization as nz
from chainer_compiler.runtime.ops import opset_rules


def _reference(op, inputs, n_outputs, opset, runtime='reference', **attrs):
    """Run a one-node model on onnx.reference, or on onnxruntime (onnx.reference's
    LRN does not follow the documented channel window)."""
    names = ['in%d' % i for i in range(len(inputs))]
    outputs = ['out%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(inputs[0].dtype), None)
         for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    feeds = dict(zip(names, inputs))
    if runtime == 'reference':
        return ReferenceEvaluator(model).run(None, feeds)
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    return session.run(None, feeds)


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _assert_close(got, expected, rtol=1e-5, atol=1e-6):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# -- BatchNormalization -------------------------------------------------------

def _bn_inputs(c=3):
    x = _rand(2, c, 4, 5) * 2 + 1
    scale, b, mean = _rand(c, seed=1), _rand(c, seed=2), _rand(c, seed=3)
    var = np.abs(_rand(c, seed=4)) + 0.5
    return x, scale, b, mean, var


def test_batch_norm_inference_matches_reference():
    inputs = _bn_inputs()
    got = nz.batch_normalization(np, *inputs, epsilon=1e-2)
    _assert_close(got, _reference('BatchNormalization', list(inputs), 1, 15, epsilon=1e-2)[0])


def test_batch_norm_training_mode_updates_running_statistics():
    inputs = _bn_inputs()
    got = nz.batch_normalization(np, *inputs, training_mode=1, momentum=0.8)
    expected = _reference('BatchNormalization', list(inputs), 3, 15, training_mode=1,
                          momentum=0.8)
    assert len(got) == 3
    for g, e in zip(got, expected):
        _assert_close(g, e)


def test_batch_norm_before_14_trains_when_asked_for_five_outputs():
    x, scale, b, mean, var = _bn_inputs()
    y, running_mean, running_var, saved_mean, saved_var = nz.batch_normalization_v1(
        np, x, scale, b, mean, var, momentum=0.5, n_outputs=5)
    batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(saved_mean, batch_mean, rtol=1e-5)
    np.testing.assert_allclose(saved_var, batch_var, rtol=1e-5)
    np.testing.assert_allclose(running_mean, 0.5 * mean + 0.5 * batch_mean, rtol=1e-5)
    np.testing.assert_allclose(running_var, 0.5 * var + 0.5 * batch_var, rtol=1e-5)
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), b, atol=1e-5)
    # One output, or is_test, means inference with the given statistics.
    for kwargs in (dict(n_outputs=1), dict(n_outputs=5, is_test=1)):
        out = nz.batch_normalization_v1(np, x, scale, b, mean, var, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        _assert_close(out, nz.batch_normalization(np, x, scale, b, mean, var))


@pytest.mark.parametrize('version', [6, 7, 9, 13, 14, 15, 26])
def test_batch_norm_training_form_is_read_back_as_training(version):
    """The form the converters write for a training BatchNormalization is
    one ONNX's schema allows and one the kernels and the rule read as
    training; one output alone (or is_test) means inference."""
    attrs, n_outputs = opset_rules.batch_norm_training_form(version)
    assert opset_rules.batch_norm_trains(version, n_outputs, **attrs)
    assert not opset_rules.batch_norm_trains(version, 1)
    assert not opset_rules.batch_norm_trains(version, 5, is_test=1)
    schema = defs.get_schema('BatchNormalization', version)
    assert schema.max_output == n_outputs and set(attrs) <= set(schema.attributes)


def test_batch_norm_non_spatial_statistics_are_per_feature():
    x = _rand(6, 2, 3)
    ones, zeros = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    y = nz.batch_normalization_v1(np, x, ones, zeros, zeros, ones, spatial=0, n_outputs=5)[0]
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(axis=0), 1, rtol=1e-3)


def test_batch_norm_float16_keeps_dtypes_of_data_and_statistics():
    x, scale, b, mean, var = _bn_inputs()
    got = nz.batch_normalization(np, x.astype(np.float16), scale.astype(np.float16),
                                 b.astype(np.float16), mean, var, training_mode=1)
    assert [g.dtype for g in got] == [np.float16, np.float32, np.float32]


# -- LayerNormalization, RMSNormalization --------------------------------------

@pytest.mark.parametrize('axis', [0, 1, 2, -1, -2])
def test_layer_norm_outputs_match_reference(axis):
    x = _rand(2, 3, 4) * 3 + 2
    scale, b = _rand(*x.shape[axis % 3:], seed=1), _rand(*x.shape[axis % 3:], seed=2)
    got = nz.layer_normalization(np, x, scale, b, axis=axis, epsilon=0.1)
    expected = _reference('LayerNormalization', [x, scale, b], 3, 17, axis=axis, epsilon=0.1)
    for g, e in zip(got, expected):
        _assert_close(g, e)
    assert got[1].shape == x.shape[:axis % 3] + (1,) * (3 - axis % 3)


def test_layer_norm_stash_type_and_optional_bias():
    x = _rand(4, 6).astype(np.float16)
    scale = np.ones(6, np.float16)
    y, mean, inv_std = nz.layer_normalization(np, x, scale)
    assert (y.dtype, mean.dtype, inv_std.dtype) == (np.float16, np.float32, np.float32)
    y64, mean64, _ = nz.layer_normalization(np, x, scale, stash_type=11)
    assert mean64.dtype == np.float64
    np.testing.assert_allclose(y64, y, rtol=1e-3)
    with pytest.raises(ValueError, match='stash_type'):
        nz.layer_normalization(np, x, scale, stash_type=7)


@pytest.mark.parametrize('axis', [0, -1, 1])
def test_rms_norm_matches_reference(axis):
    x = _rand(3, 4, 5) + 1
    scale = _rand(*x.shape[axis % 3:], seed=1)
    got = nz.rms_normalization(np, x, scale, axis=axis, epsilon=0.1)
    _assert_close(got, _reference('RMSNormalization', [x, scale], 1, 23, axis=axis,
                                  epsilon=0.1)[0])


def test_rms_norm_output_takes_the_scale_type():
    x = _rand(2, 8).astype(np.float16)
    assert nz.rms_normalization(np, x, np.ones(8, np.float32)).dtype == np.float32


# -- GroupNormalization, InstanceNormalization, MVN -----------------------------

def test_group_norm_opset21_per_channel_scale_matches_reference():
    x = _rand(2, 6, 3, 2)
    scale, bias = _rand(6, seed=1), _rand(6, seed=2)
    got = nz.group_normalization(np, x, scale, bias, num_groups=3, epsilon=1e-2)
    _assert_close(got, _reference('GroupNormalization', [x, scale, bias], 1, 21,
                                  num_groups=3, epsilon=1e-2)[0])


def test_group_norm_opset18_scale_is_per_group():
    x = _rand(2, 6, 5)
    scale, bias = np.array([1, 2, 3], np.float32), np.array([0, 10, 20], np.float32)
    got = nz.group_normalization_v18(np, x, scale, bias, num_groups=3)
    same = nz.group_normalization(np, x, np.repeat(scale, 2), np.repeat(bias, 2), num_groups=3)
    _assert_close(got, same)
    np.testing.assert_allclose(got.reshape(2, 3, -1).mean(axis=2), [[0, 10, 20]] * 2, atol=1e-4)


def test_instance_norm_matches_reference():
    x, scale, b = _rand(2, 3, 4, 5) * 4, _rand(3, seed=1), _rand(3, seed=2)
    got = nz.instance_normalization(np, x, scale, b, epsilon=1e-2)
    _assert_close(got, _reference('InstanceNormalization', [x, scale, b], 1, 22,
                                  epsilon=1e-2)[0])


@pytest.mark.parametrize('axes', [None, [1], [0, 1, 2, 3]])
def test_mean_variance_normalization_matches_reference(axes):
    x = _rand(2, 3, 4, 5) * 2 + 5
    attrs = {} if axes is None else {'axes': axes}
    got = nz.mean_variance_normalization(np, x, **attrs)
    _assert_close(got, _reference('MeanVarianceNormalization', [x], 1, 13, **attrs)[0],
                  rtol=1e-4, atol=1e-5)


# -- LRN, LpNormalization ---------------------------------------------------------

@pytest.mark.parametrize('size', [1, 2, 3, 4, 5])
def test_lrn_window_follows_the_documented_bounds(size):
    # Channel c sums squares over [c - floor((size-1)/2), c + ceil((size-1)/2)];
    # even sizes reach one channel further up than down.
    x = _rand(2, 5, 3, 3) * 4
    attrs = dict(size=size, alpha=0.3, beta=0.6, bias=1.5)
    expected = np.empty_like(x)
    for c in range(5):
        lo, hi = max(0, c - (size - 1) // 2), min(4, c + size // 2)
        square_sum = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        expected[:, c] = x[:, c] / (1.5 + 0.3 / size * square_sum) ** 0.6
    _assert_close(nz.lrn(np, x, **attrs), expected)


def test_lrn_matches_onnxruntime():
    x = _rand(2, 6, 4, 4) * 4
    attrs = dict(size=5, alpha=0.3, beta=0.6, bias=1.5)
    expected = _reference('LRN', [x], 1, 13, runtime='onnxruntime', **attrs)[0]
    _assert_close(nz.lrn(np, x, **attrs), expected)


@pytest.mark.parametrize('p', [1, 2])
@pytest.mark.parametrize('axis', [0, 1, -1])
def test_lp_normalization(p, axis):
    x = _rand(3, 4, 2)
    x[1, :, :] = 0  # all-zero slices (for axis 1) stay zero
    got = nz.lp_normalization(np, x, axis=axis, p=p)
    norms = np.linalg.norm(x, ord=p, axis=axis, keepdims=True)
    expected = np.divide(x, norms, out=np.zeros_like(x), where=norms != 0)
    _assert_close(got, expected)
    with pytest.raises(ValueError, match='p must be'):
        nz.lp_normalization(np, x, p=3)
