"""Tests for the array kernels (shape, indexing, data movement, casts), with
onnx.reference as the oracle where the semantics are intricate."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from chainer_compiler.runtime.ops import array as arr
from chainer_compiler.runtime.ops import lookup


def _reference(op, inputs, opset, n_outputs=1, **attrs):
    """Run one node through onnx.reference; ``None`` inputs are omitted."""
    names = ['' if x is None else 'in%d' % i for i, x in enumerate(inputs)]
    feeds = {n: x for n, x in zip(names, inputs) if n}
    outs = ['out%d' % i for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], 'g',
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), None)
         for n, x in feeds.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    results = ReferenceEvaluator(model).run(None, feeds)
    return results[0] if n_outputs == 1 else results


def _i64(*values):
    return np.array(values, dtype=np.int64)


_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((3, 4, 5)).astype(np.float32)


# -- versions --------------------------------------------------------------
@pytest.mark.parametrize('op,version,fn', [
    ('Split', 11, arr.split_v2), ('Split', 13, arr.split_v13), ('Split', 18, arr.split),
    ('Squeeze', 11, arr.squeeze_v1), ('Squeeze', 13, arr.squeeze),
    ('Slice', 1, arr.slice_v1), ('Slice', 13, arr.slice_),
    ('Pad', 2, arr.pad_v2), ('Pad', 19, arr.pad), ('Reshape', 1, arr.reshape_v1),
    ('TopK', 1, arr.top_k_v1), ('TopK', 11, arr.top_k),
    ('Resize', 10, arr.resize_v10), ('Resize', 19, arr.resize), ('Upsample', 7, arr.upsample_v7),
])
def test_versions_pick_the_right_kernel(op, version, fn):
    assert lookup(op, version=version).fn is fn


# -- constants and shapes --------------------------------------------------
def test_constant_attribute_forms_have_onnx_dtypes():
    assert arr.constant(np, value_float=1.5).dtype == np.float32
    assert arr.constant(np, value_floats=[1.0, 2.0]).dtype == np.float32
    assert arr.constant(np, value_int=3).dtype == np.int64
    assert arr.constant(np, value_ints=[1, 2]).shape == (2,)
    assert arr.constant(np, value_strings=['a', 'b']).tolist() == ['a', 'b']
    assert arr.constant(np, value=np.array([1, 2], np.int8)).dtype == np.int8


def test_constant_of_shape_default_is_float32_zeros_and_keeps_value_dtype():
    y = arr.constant_of_shape(np, _i64(2, 3))
    assert y.dtype == np.float32 and y.shape == (2, 3) and not y.any()
    y = arr.constant_of_shape(np, _i64(0, 4), value=np.array([7], np.int32))
    assert y.dtype == np.int32 and y.shape == (0, 4)


@pytest.mark.parametrize('start,end', [(0, None), (1, None), (-1, None), (1, -1), (-10, 10),
                                       (2, 1)])
def test_shape_start_end_clamp_like_python(start, end):
    got = arr.shape(np, _X, start=start, end=end)
    assert got.dtype == np.int64 and got.tolist() == list(_X.shape[start:end])


def test_reshape_zero_copies_dimension_unless_allowzero():
    x = np.zeros((2, 3, 4))
    assert arr.reshape(np, x, _i64(0, -1)).shape == (2, 12)
    assert arr.reshape(np, np.zeros((0, 4)), _i64(0, 4), allowzero=1).shape == (0, 4)
    with pytest.raises(ValueError):
        arr.reshape(np, x, _i64(0, 5), allowzero=1)


@pytest.mark.parametrize('axis', [0, 1, 3, -1, -3])
def test_flatten(axis):
    x = np.zeros((2, 3, 4))
    k = axis % 4 if axis >= 0 else axis + 3
    assert arr.flatten(np, x, axis=axis).shape == (int(np.prod(x.shape[:k])),
                                                  int(np.prod(x.shape[k:])))


def test_squeeze_unsqueeze_negative_and_unsorted_axes():
    x = np.zeros((1, 3, 1, 4))
    assert arr.squeeze(np, x).shape == (3, 4)
    assert arr.squeeze(np, x, _i64(-2)).shape == (1, 3, 4)
    with pytest.raises(ValueError):
        arr.squeeze(np, x, _i64(1))
    assert arr.unsqueeze(np, np.zeros((3, 4)), _i64(-1, 0)).shape == (1, 3, 4, 1)
    assert arr.unsqueeze_v1(np, np.zeros((3, 4)), axes=[1]).shape == (3, 1, 4)


# -- Split and Slice -------------------------------------------------------
def test_split_num_outputs_uneven_last_chunk():
    parts = arr.split(np, np.arange(7), num_outputs=3, n_outputs=3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]


def test_split_sizes_from_input_attribute_and_equal_parts():
    x = np.arange(12).reshape(2, 6)
    assert [p.shape for p in arr.split_v13(np, x, _i64(1, 0, 5), axis=-1, n_outputs=3)] == \
        [(2, 1), (2, 0), (2, 5)]
    assert [p.shape for p in arr.split_v2(np, x, axis=1, split=[2, 4], n_outputs=2)] == \
        [(2, 2), (2, 4)]
    assert [p.shape for p in arr.split_v13(np, x, axis=1, n_outputs=3)] == [(2, 2)] * 3
    with pytest.raises(ValueError):
        arr.split_v13(np, x, _i64(2, 2), axis=1, n_outputs=2)


@pytest.mark.parametrize('starts,ends,axes,steps', [
    ((0, 1), (3, -1), (0, 2), (1, 2)),
    ((-1,), (-100,), (1,), (-1,)),          # negative step down to the start
    ((100,), (0,), (2,), (-2,)),            # start clamped to dim - 1
    ((-100,), (100,), (-1,), (3,)),
    ((2,), (1,), (0,), (1,)),               # empty
])
def test_slice_matches_reference(starts, ends, axes, steps):
    inputs = [_X, _i64(*starts), _i64(*ends), _i64(*axes), _i64(*steps)]
    np.testing.assert_array_equal(arr.slice_(np, *inputs), _reference('Slice', inputs, 13))


def test_slice_negative_step_clamps_start_to_zero():
    # The spec (and onnxruntime) clamp start to [0, dim-1]; onnx.reference
    # follows Python and returns nothing here.
    y = arr.slice_(np, np.arange(4), _i64(-100), _i64(-200), _i64(0), _i64(-1))
    assert y.tolist() == [0]


def test_slice_int64_extremes_and_default_axes():
    big = np.iinfo(np.int64)
    y = arr.slice_(np, _X, _i64(big.max), _i64(big.min), None, _i64(-1))
    np.testing.assert_array_equal(y, _X[::-1])
    assert arr.slice_v1(np, _X, starts=[1], ends=[1000]).shape == (2, 4, 5)


# -- gathers and scatters --------------------------------------------------
def test_gather_negative_indices_and_strings():
    assert arr.gather(np, _X, _i64(-1, 0), axis=1).shape == (3, 2, 5)
    np.testing.assert_array_equal(arr.gather(np, _X, _i64(-1), axis=-1), _X[..., [4]])
    s = np.array(['a', 'b', 'c'], dtype=object)
    assert arr.gather(np, s, _i64(-1, 0)).tolist() == ['c', 'a']


def test_gather_elements_and_nd_batch_dims_match_reference():
    idx = _RNG.integers(-4, 4, (3, 2, 5))
    np.testing.assert_array_equal(arr.gather_elements(np, _X, idx, axis=1),
                                  _reference('GatherElements', [_X, idx], 13, axis=1))
    idx = _RNG.integers(-4, 4, (3, 2, 2))
    for batch_dims in (0, 1):
        ind = idx if batch_dims else idx[..., :2] % 3
        np.testing.assert_array_equal(
            arr.gather_nd(np, _X, ind, batch_dims=batch_dims),
            _reference('GatherND', [_X, ind], 13, batch_dims=batch_dims))


@pytest.mark.parametrize('reduction', ['none', 'add', 'mul', 'max', 'min'])
def test_scatter_elements_reductions_with_duplicates(reduction):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([[1, 1, -1], [0, 0, 0]], np.int64)
    updates = np.array([[5, 6, 7], [-1, 2, 30]], np.float32)
    got = arr.scatter_elements(np, data, indices, updates, axis=1, reduction=reduction)
    want = _reference('ScatterElements', [data, indices, updates], 18, axis=1,
                      reduction=reduction)
    if reduction == 'none':  # duplicate targets (flat 1 and 4) are unspecified; compare the rest
        got, want = np.delete(got, [1, 4], None), np.delete(want, [1, 4], None)
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, data)


@pytest.mark.parametrize('reduction,combine', [
    ('add', np.add), ('mul', np.multiply), ('max', np.maximum), ('min', np.minimum)])
def test_scatter_nd_reductions_combine_duplicates(reduction, combine):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    indices = np.array([[[0, 1]], [[1, -1]], [[0, 1]]], np.int64)
    updates = _RNG.standard_normal((3, 1, 4)).astype(np.float32)
    want = data.copy()
    want[0, 1] = combine(combine(want[0, 1], updates[0, 0]), updates[2, 0])
    want[1, 2] = combine(want[1, 2], updates[1, 0])
    np.testing.assert_allclose(
        arr.scatter_nd(np, data, indices, updates, reduction=reduction), want, rtol=1e-6)
    assert arr.scatter_nd(np, data, indices[:2], updates[:2]).tolist() != data.tolist()


@pytest.mark.parametrize('mode', ['linear', 'circular'])
def test_tensor_scatter_writes_per_batch_positions(mode):
    past = np.zeros((2, 3, 5, 2), np.float32)
    update = np.ones((2, 3, 2, 2), np.float32) * np.array([1, 2], np.float32).reshape(2, 1, 1, 1)
    write = _i64(0, 4) if mode == 'circular' else _i64(0, 3)
    got = arr.tensor_scatter(np, past, update, write, mode=mode, axis=2)
    np.testing.assert_array_equal(got, _reference('TensorScatter', [past, update, write], 24,
                                                  mode=mode, axis=2))
    assert not past.any()


# -- padding and broadcasting ----------------------------------------------
@pytest.mark.parametrize('mode', ['constant', 'reflect', 'edge', 'wrap'])
def test_pad_modes_match_reference(mode):
    inputs = [_X, _i64(1, 2, 0, 2, 1, 3), np.array(2.5, np.float32)]
    np.testing.assert_array_equal(arr.pad(np, *inputs, mode=mode),
                                  _reference('Pad', inputs, 19, mode=mode))


@pytest.mark.parametrize('mode', ['constant', 'reflect', 'edge', 'wrap'])
def test_negative_pads_crop_before_padding(mode):
    # onnx.reference rejects negative pads; onnxruntime crops first.
    value = np.array(2.5, np.float32)
    got = arr.pad(np, _X, _i64(0, -1, 2, 0, 2, -2), value, mode=mode)
    want = _reference('Pad', [_X[:, 1:, :-2], _i64(0, 0, 2, 0, 2, 0), value], 19, mode=mode)
    np.testing.assert_array_equal(got, want)


def test_pad_axes_and_integer_constant():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    y = arr.pad(np, x, _i64(1, 2), np.array(-1, np.int32), _i64(-1))
    assert y.dtype == np.int32 and y.tolist() == [[-1, 0, 1, 2, -1, -1], [-1, 3, 4, 5, -1, -1]]
    assert arr.pad_v2(np, x, pads=[0, 1, 0, 0]).tolist() == [[0, 0, 1, 2], [0, 3, 4, 5]]


def test_center_crop_pad_crops_left_pads_right():
    x = np.arange(5, dtype=np.float32)
    assert arr.center_crop_pad(np, x, _i64(2)).tolist() == [1, 2]
    assert arr.center_crop_pad(np, x, _i64(8)).tolist() == [0, 0, 1, 2, 3, 4, 0, 0]
    y = arr.center_crop_pad(np, _X, _i64(3, 2), axes=[-1, 0])
    assert y.shape == (2, 4, 3)
    np.testing.assert_array_equal(y, _reference('CenterCropPad', [_X, _i64(3, 2)], 18,
                                                axes=[-1, 0]))


def test_expand_is_bidirectional_and_copies():
    x = np.arange(3, dtype=np.int32).reshape(3, 1)
    y = arr.expand(np, x, _i64(2, 1, 4))
    assert y.shape == (2, 3, 4) and y.flags.writeable
    assert arr.expand(np, x, _i64(1)).shape == (3, 1)


def test_tile_and_where_on_strings():
    s = np.array(['a', 'b'], dtype=object)
    assert arr.tile(np, s, _i64(2)).tolist() == ['a', 'b', 'a', 'b']
    assert arr.where(np, np.array([True, False]), s, s[::-1]).tolist() == ['a', 'a']


# -- casts -----------------------------------------------------------------
def test_cast_strings_both_ways():
    s = np.array(['1.5', '+INF', '-inf', 'NaN', '1e-5', '1E8'], dtype=object)
    y = arr.cast(np, s, to=np.dtype(np.float32))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.array([1.5, np.inf, -np.inf, np.nan, 1e-5, 1e8],
                                              np.float32))
    assert arr.cast(np, np.array(['100.5', '7'], dtype=object),
                    to=np.dtype(np.int64)).tolist() == [100, 7]
    out = arr.cast(np, np.array([0.1, -2.5, 3.0], np.float32), to=np.dtype(object))
    assert out.dtype == object and out.tolist() == ['0.1', '-2.5', '3.0']


def test_cast_integers_wrap_and_bool():
    assert arr.cast(np, np.array([200, -1], np.int16), to=np.dtype(np.int8)).tolist() == [-56, -1]
    assert arr.cast(np, np.array([0.0, -0.0, 0.1]), to=np.dtype(bool)).tolist() == \
        [False, False, True]


@pytest.mark.parametrize('saturate', [0, 1])
def test_cast_float8_saturate(saturate):
    ml_dtypes = pytest.importorskip('ml_dtypes')
    x = np.array([1e6, -1e6, np.inf, 300, 0.3, np.nan], np.float32)
    to = np.dtype(ml_dtypes.float8_e4m3fn)
    got = arr.cast(np, x, to=to, saturate=saturate).astype(np.float32)
    want = _reference('Cast', [x], 21, to=TensorProto.FLOAT8E4M3FN,
                      saturate=saturate).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_cast_like_uses_target_dtype():
    y = arr.cast_like(np, np.array([1.7, -2.2]), np.zeros(1, np.int32))
    assert y.dtype == np.int32 and y.tolist() == [1, -2]


def test_bit_cast_keeps_bits():
    y = arr.bit_cast(np, np.array([1.0], np.float32), to=np.dtype(np.int32))
    assert y.dtype == np.int32 and y.tolist() == [0x3F800000]


# -- generators ------------------------------------------------------------
@pytest.mark.parametrize('start,limit,delta,dtype', [
    (3, 9, 3, np.int32), (10, 4, -2, np.int64), (1, 1, 1, np.int32),
    (0.5, 2.0, 0.4, np.float32), (1.0, 10.0, 3.0, np.float16), (5.0, 1.0, 1.0, np.float64),
])
def test_range(start, limit, delta, dtype):
    got = arr.range_(np, *(np.array(v, dtype) for v in (start, limit, delta)))
    want = _reference('Range', [np.array(v, dtype) for v in (start, limit, delta)], 11)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want)


def test_one_hot_out_of_range_index_is_all_off():
    got = arr.one_hot(np, _i64(5, -5, -4), np.array(4), np.array([0.0, 1.0], np.float32))
    assert got.dtype == np.float32 and got.tolist() == [[0] * 4, [0] * 4, [1, 0, 0, 0]]


@pytest.mark.parametrize('axis', [-1, 0, 1, -2])
def test_one_hot_negative_indices_and_axes(axis):
    indices = np.array([[0, -1, 2], [3, 1, -3]], np.int64)
    values = np.array([2, 7], np.int32)
    got = arr.one_hot(np, indices, np.array(4.0, np.float32), values, axis=axis)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference(
        'OneHot', [indices, np.array(4.0, np.float32), values], 11, axis=axis))


def test_trilu_eye_like():
    x = np.ones((2, 3, 4), np.float32)
    assert arr.trilu(np, x, _i64(1)).sum() == 2 * 6
    assert arr.trilu(np, x, np.array(-1, np.int64), upper=0).sum() == 2 * 3
    assert arr.trilu(np, x).sum() == 2 * 9
    y = arr.eye_like(np, np.zeros((2, 3), np.int32), k=1)
    assert y.dtype == np.int32 and y.tolist() == [[0, 1, 0], [0, 0, 1]]
    assert arr.eye_like(np, y, dtype=np.dtype(np.float64)).dtype == np.float64


# -- block rearrangements and selections -----------------------------------
@pytest.mark.parametrize('mode', ['DCR', 'CRD'])
def test_depth_to_space_inverts_space_to_depth_in_dcr(mode):
    x = _RNG.standard_normal((2, 8, 3, 2)).astype(np.float32)
    y = arr.depth_to_space(np, x, blocksize=2, mode=mode)
    np.testing.assert_array_equal(y, _reference('DepthToSpace', [x], 13, blocksize=2, mode=mode))
    if mode == 'DCR':
        np.testing.assert_array_equal(arr.space_to_depth(np, y, blocksize=2), x)


def test_compress_short_condition_and_flatten():
    x = np.arange(6).reshape(2, 3)
    assert arr.compress(np, x, np.array([False, True]), axis=0).tolist() == [[3, 4, 5]]
    assert arr.compress(np, x, np.array([1, 0, 1], bool)).tolist() == [0, 2]


def test_non_zero_shape_and_dtype():
    y = arr.non_zero(np, np.array([[1, 0], [0, 3]]))
    assert y.dtype == np.int64 and y.tolist() == [[0, 1], [0, 1]]
    assert arr.non_zero(np, np.zeros((2, 2))).shape == (2, 0)


_UNIQUE_X = np.array([[2, 1, 1, 2], [3, 1, 1, 3], [2, 1, 1, 2]], np.float32)


@pytest.mark.parametrize('axis', [None, 0, -1])
def test_unique_sorted_matches_reference(axis):
    attrs = {} if axis is None else {'axis': axis}
    got = arr.unique(np, _UNIQUE_X, **attrs)
    for g, w in zip(got, _reference('Unique', [_UNIQUE_X], 11, n_outputs=4, **attrs)):
        np.testing.assert_array_equal(g, w)
    assert [g.dtype for g in got[1:]] == [np.int64] * 3


@pytest.mark.parametrize('axis,want', [
    (None, ([2, 1, 3], [0, 1, 4], [0, 1, 1, 0, 2, 1, 1, 2, 0, 1, 1, 0], [4, 6, 2])),
    (-1, ([[2, 1], [3, 1], [2, 1]], [0, 1], [0, 1, 1, 0], [2, 2])),
])
def test_unique_unsorted_keeps_first_occurrence_order(axis, want):
    got = arr.unique(np, _UNIQUE_X, axis=axis, sorted=0)
    assert [g.tolist() for g in got] == list(want)


@pytest.mark.parametrize('largest', [0, 1])
def test_top_k_ties_prefer_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3]], np.uint64)
    values, indices = arr.top_k(np, x, _i64(4), largest=largest)
    assert values.dtype == np.uint64 and indices.dtype == np.int64
    if largest:
        assert indices.tolist() == [[0, 2, 5, 3]] and values.tolist() == [[3, 3, 3, 2]]
    else:
        assert indices.tolist() == [[1, 4, 3, 0]] and values.tolist() == [[1, 1, 2, 3]]
    v1 = arr.top_k_v1(np, _X, k=2, axis=0)
    np.testing.assert_array_equal(v1[0], np.sort(_X, axis=0)[::-1][:2])


@pytest.mark.parametrize('batch_axis,time_axis', [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = np.arange(12, dtype=np.float32).reshape(4, 3) if batch_axis else \
        np.arange(12, dtype=np.float32).reshape(3, 4)
    lens = _i64(4, 1, 2)
    np.testing.assert_array_equal(
        arr.reverse_sequence(np, x, lens, batch_axis=batch_axis, time_axis=time_axis),
        _reference('ReverseSequence', [x, lens], 10, batch_axis=batch_axis,
                   time_axis=time_axis))


# -- Resize ----------------------------------------------------------------
_IMAGE = _RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)

_RESIZE_CASES = [
    ('nearest', 'half_pixel', {'nearest_mode': 'round_prefer_ceil'}),
    ('nearest', 'asymmetric', {'nearest_mode': 'floor'}),
    ('nearest', 'align_corners', {'nearest_mode': 'ceil'}),
    ('linear', 'half_pixel', {}),
    ('linear', 'pytorch_half_pixel', {}),
    ('linear', 'half_pixel_symmetric', {}),
    ('linear', 'align_corners', {}),
    ('linear', 'half_pixel', {'antialias': 1}),
    ('cubic', 'half_pixel', {'exclude_outside': 1, 'cubic_coeff_a': -0.5}),
    ('cubic', 'asymmetric', {}),
    ('cubic', 'half_pixel', {'antialias': 1}),
]


@pytest.mark.parametrize('mode,transform,extra', _RESIZE_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize('scales', [(1, 1, 1.5, 0.6), (1, 1, 0.5, 2.2)])
def test_resize_scales_match_reference(mode, transform, extra, scales):
    scales = np.array(scales, np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode=transform, **extra)
    got = arr.resize(np, _IMAGE, None, scales, **attrs)
    want = _reference('Resize', [_IMAGE, None, scales], 19, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('policy', ['stretch', 'not_larger', 'not_smaller'])
def test_resize_sizes_with_axes_and_aspect_policy(policy):
    sizes = _i64(7, 3)
    attrs = dict(mode='linear', axes=[3, 2], keep_aspect_ratio_policy=policy)
    got = arr.resize(np, _IMAGE, None, None, sizes, **attrs)
    want = _reference('Resize', [_IMAGE, None, None, sizes], 19, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize_tf_half_pixel_for_nn():
    # x_original = (x + 0.5) / 1.5 = 1/3, 1, 5/3, 7/3, 3, 11/3 -> floor, clipped to 3
    y = arr.resize(np, np.arange(4.0), None, np.array([1.5], np.float32),
                   coordinate_transformation_mode='tf_half_pixel_for_nn', nearest_mode='floor')
    assert y.tolist() == [0, 1, 1, 2, 3, 3]


def test_resize_tf_crop_and_resize_extrapolates():
    roi = np.array([0.2, -0.3, 0.9, 1.25], np.float32)
    scales = np.array([1.5, 1.2], np.float32)
    attrs = dict(mode='linear', coordinate_transformation_mode='tf_crop_and_resize',
                 axes=[2, 3], extrapolation_value=-9.0)
    got = arr.resize(np, _IMAGE, roi, scales, **attrs)
    np.testing.assert_allclose(got, _reference('Resize', [_IMAGE, roi, scales], 19, **attrs),
                               rtol=1e-5, atol=1e-5)
    assert (got == -9.0).any()


def test_resize_integer_image_rounds_and_keeps_dtype():
    x = np.array([[0, 255], [255, 0]], np.uint8)
    y = arr.resize(np, x, None, np.array([2.0, 2.0], np.float32), mode='linear')
    assert y.dtype == np.uint8 and y.min() >= 0 and y.max() <= 255


def test_upsample_forms_repeat_nearest():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    want = np.repeat(np.repeat(x, 2, axis=2), 3, axis=3)
    np.testing.assert_array_equal(
        arr.upsample(np, x, np.array([1, 1, 2, 3], np.float32)), want)
    np.testing.assert_array_equal(arr.upsample_v7(np, x, scales=[1, 1, 2, 3]), want)
    np.testing.assert_array_equal(
        arr.upsample_v1(np, x, height_scale=2.0, width_scale=3.0), want)
    y = arr.upsample(np, x, np.array([1, 1, 2, 2], np.float32), mode='linear')
    np.testing.assert_allclose(y[0, 0, 0], [0, 0.5, 1, 1])
