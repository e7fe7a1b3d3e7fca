"""Converters of chainer.functions.array: exported at the oldest, default and
newest opsets, checked in onnxruntime and our VM against Chainer."""
import chainer.functions as F
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer import export_model

from .helpers import FunctionModel, check_export, op_types

RNG = numpy.random.RandomState(0)


def _x(*shape, dtype=numpy.float32):
    return RNG.uniform(-1, 1, shape).astype(dtype)


# -- dtype, copies -------------------------------------------------------------
@pytest.mark.parametrize('dtype', [numpy.float64, numpy.float16, numpy.int32, numpy.int64])
def test_cast(dtype):
    # float16 keeps ~3 significant digits: compare at its precision.
    tol = 1e-3 if dtype == numpy.float16 else 1e-5
    check_export(lambda x: F.cast(x * 3, dtype), _x(2, 3), rtol=tol, atol=tol)


def test_copy():
    models = check_export(lambda x: F.copy(x, -1) * 2, _x(2, 3))
    assert op_types(models[0]) == ['Identity', 'Mul']


# -- joining -------------------------------------------------------------------
@pytest.mark.parametrize('axis', [0, 1, -1])
def test_concat(axis):
    check_export(lambda a, b: F.concat((a, b), axis=axis), (_x(2, 3), _x(2, 3)))


@pytest.mark.parametrize('axis', [0, 1, 2, -1, -3])
def test_stack(axis):
    check_export(lambda a, b: F.stack((a, b), axis=axis), (_x(2, 3), _x(2, 3)))


@pytest.mark.parametrize('fn', [F.hstack, F.vstack, F.dstack])
@pytest.mark.parametrize('shape', [(), (3,), (2, 3), (2, 3, 2)])
def test_hstack_vstack_dstack(fn, shape):
    check_export(lambda a, b: fn((a, b)), (_x(*shape), _x(*shape)))


# -- splitting -----------------------------------------------------------------
@pytest.mark.parametrize('ios,axis', [
    (2, 1), (3, 0), (1, 1), ([1, 3], 1), ([2], -1), ((1, 1, 3), 1),
    (numpy.array([1, 2]), 0), ([-2], 1),
])
def test_split_axis(ios, axis):
    check_export(lambda x: F.split_axis(x, ios, axis), _x(3, 4))


@pytest.mark.parametrize('ios', [[0, 2], [2, 2, 3], [3, 1], [0], [4]])
def test_split_axis_empty_or_overlapping_pieces(ios):
    # numpy.split semantics: empty pieces and (unsorted) overlapping pieces,
    # every output written.
    check_export(lambda x: tuple(F.split_axis(x, ios, 1)), _x(2, 4))


def test_split_axis_writes_every_output():
    model = check_export(lambda x: F.split_axis(x, 3, 1), _x(2, 6))[0]
    assert len(model.graph.output) == 3


@pytest.mark.parametrize('axis', [0, 1, -1])
def test_separate(axis):
    check_export(lambda x: F.separate(x, axis), _x(2, 3, 4))


def test_transpose_sequence_same_lengths():
    check_export(lambda a, b, c: F.transpose_sequence([a, b, c]), (_x(3, 2), _x(3, 2), _x(3, 2)))


def test_transpose_sequence_different_lengths():
    # onnx-chainer accepted equal lengths only.
    check_export(lambda a, b, c: F.transpose_sequence([a, b, c]), (_x(4, 2), _x(2, 2), _x(1, 2)))


# -- shape changes ---------------------------------------------------------------
@pytest.mark.parametrize('shape', [(6, 4), (-1, 2), (2, -1, 3), (24,)])
def test_reshape(shape):
    check_export(lambda x: F.reshape(x, shape), _x(2, 3, 4))


def test_flatten():
    check_export(F.flatten, _x(2, 3, 4))


@pytest.mark.parametrize('axis', [0, 1, 2, -1, -3])
def test_expand_dims(axis):
    check_export(lambda x: F.expand_dims(x, axis), _x(2, 3))


@pytest.mark.parametrize('axis', [None, 0, 2, (0, 2), -1])
def test_squeeze(axis):
    check_export(lambda x: F.squeeze(x, axis), _x(1, 3, 1, 1))


def test_squeeze_nothing():
    check_export(lambda x: F.squeeze(x), _x(2, 3))


@pytest.mark.parametrize('in_shape,shape', [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 3), (2, 2, 3))])
def test_broadcast_to(in_shape, shape):
    check_export(lambda x: F.broadcast_to(x, shape), _x(*in_shape))


def test_broadcast():
    check_export(lambda a, b, c: F.broadcast(a, b, c), (_x(2, 1), _x(1, 3), _x(2, 3)))


@pytest.mark.parametrize('reps', [2, (2,), (1, 2), (2, 1, 2), (2, 3, 1, 1)])
def test_tile(reps):
    check_export(lambda x: F.tile(x, reps), _x(2, 3))


@pytest.mark.parametrize('repeats,axis', [
    (2, None), (2, 0), (3, 1), (1, -1), ((2,), 1), ((1, 0, 2), 1), ((2, 1), 0), (0, 1),
])
def test_repeat(repeats, axis):
    # onnx-chainer refused per-element repeats; tuples work here.
    check_export(lambda x: F.repeat(x, repeats, axis), _x(2, 3))


# -- axis permutations ------------------------------------------------------
@pytest.mark.parametrize('axes', [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)])
def test_transpose(axes):
    check_export(lambda x: F.transpose(x, axes), _x(2, 3, 4))


@pytest.mark.parametrize('a1,a2', [(0, 1), (0, 2), (-1, 1)])
def test_swapaxes(a1, a2):
    check_export(lambda x: F.swapaxes(x, a1, a2), _x(2, 3, 4))


@pytest.mark.parametrize('src,dst', [(0, 2), (2, 0), (-1, 1), ((0, 1), (2, 3)), ((0, 3), (-1, 0))])
def test_moveaxis(src, dst):
    check_export(lambda x: F.moveaxis(x, src, dst), _x(2, 3, 4, 5))


@pytest.mark.parametrize('axis,start', [(0, 0), (2, 0), (0, 2), (0, 3), (1, 3), (-1, 1), (3, -2)])
def test_rollaxis(axis, start):
    # start > axis: NumPy moves the axis to start - 1 (onnx-chainer did not).
    check_export(lambda x: F.rollaxis(x, axis, start), _x(2, 3, 4, 5))


@pytest.mark.parametrize('axis', [0, 1, -1])
@pytest.mark.parametrize('inv', [False, True])
def test_permutate(axis, inv):
    # Chainer 7.8.1 permutes axis 0 for a negative axis; the export matches it.
    indices = numpy.array([2, 0, 1], dtype=numpy.int32)
    check_export(lambda x: F.permutate(x, indices, axis=axis, inv=inv), _x(3, 3, 3))


@pytest.mark.parametrize('fn', [lambda x: F.flip(x, 0), lambda x: F.flip(x, -1),
                                F.fliplr, F.flipud])
def test_flip(fn):
    check_export(fn, _x(3, 4, 2))


@pytest.mark.parametrize('r', [2, 3])
def test_depth2space(r):
    check_export(lambda x: F.depth2space(x, r), _x(2, 2 * r * r, 3, 2))


@pytest.mark.parametrize('r', [2, 3])
def test_space2depth(r):
    check_export(lambda x: F.space2depth(x, r), _x(2, 2, 2 * r, 3 * r))


# -- selection -----------------------------------------------------------------
def test_where():
    cond = numpy.array([[True, False, True], [False, False, True]])
    check_export(lambda x, y: F.where(cond, x, y), (_x(2, 3), _x(2, 3)))


def test_where_broadcasts():
    cond = numpy.array([True, False, True])
    check_export(lambda x, y: F.where(cond, x, y), (_x(2, 3), _x(1, 3)))


@pytest.mark.parametrize('dtype', [numpy.int32, numpy.int64])
def test_select_item(dtype):
    t = numpy.array([3, 0, 2], dtype=dtype)
    check_export(F.select_item, (_x(3, 4), t))


# Every index form: basic slicing (negative and non-unit steps, None, Ellipsis,
# out-of-range bounds), integer arrays (one, several, adjacent or not, with
# broadcasting), boolean masks and mixtures.
GET_ITEM_CASES = [
    0, -1, (1, 2), slice(1, 3), slice(None, None, 2), slice(None, None, -1),
    slice(3, 0, -1), slice(None, 1, -1), slice(-1, -4, -2), slice(-100, 100),
    slice(2, 1), (slice(None), 0), (Ellipsis, 1), (0, Ellipsis), (Ellipsis,),
    (None,), (slice(None), None, 1), (None, Ellipsis, None), (1, None, slice(None, None, -2)),
    (slice(1, None, 2), slice(None, None, -1), slice(2, 0, -2)),
    [0, 2], [[0, 1], [2, 2]], (slice(None), [2, 0, 0]), (Ellipsis, [1, -1]),
    ([0, 1], [2, 0]), (slice(None), [0, 2], [1, 3]), ([0, 2], slice(None), [1, 3]),
    ([0, 2], 1), (1, slice(None), [0, 1]), (slice(None), 1, [0, 1]),
    ([[0], [2]], slice(None, None, -1), [1, 3]), ([[0], [1]], [[1, 2]]),
    (None, [0, 1], [1, 2]), ([0, 1], None, [1, 2]), (slice(None, None, -1), None, [1, 2]),
    (numpy.array([True, False, True]),), (slice(None), numpy.array([True, False, True, True])),
    (numpy.array([[True, False, True, False]] * 3),), (numpy.array(1), slice(None)),
    ([0, 1], Ellipsis, [1, 2]), (slice(2, 1), [0, 1]), (0, slice(3, 1), None),
]


@pytest.mark.parametrize('index', GET_ITEM_CASES, ids=lambda i: repr(i).replace(' ', ''))
def test_get_item(index):
    check_export(lambda x: F.get_item(x, index), _x(3, 4, 5))


def test_get_item_respects_negative_steps():
    # onnx-chainer rejected steps; here one Slice with negative steps.
    index = (slice(None, None, -1), slice(3, None, -2))
    model = check_export(lambda x: x[index], _x(3, 4, 5))[0]
    assert op_types(model) == ['Slice']


def test_get_item_multiple_arrays_after_slice():
    # onnx-chainer refused `[:]` before multiple advanced indices.
    check_export(lambda x: x[:, [0, 2], [1, 3]], _x(2, 3, 4))


def test_get_item_numpy_index_arrays():
    rows = numpy.array([[0, 1], [2, 0]], dtype=numpy.int32)
    cols = numpy.array([1, -1], dtype=numpy.int64)
    check_export(lambda x: x[rows, 1:, cols], _x(3, 4, 5))


def test_get_item_whole_is_identity():
    model = check_export(lambda x: x[...] * 2, _x(3, 4))[0]
    assert op_types(model) == ['Identity', 'Mul']


# -- padding -------------------------------------------------------------------
@pytest.mark.parametrize('pad_width', [1, (1, 2), ((1, 2), (0, 3)), ((0, 0), (2, 1))])
@pytest.mark.parametrize('mode', ['constant', 'edge', 'reflect', 'symmetric', 'wrap'])
def test_pad(pad_width, mode):
    check_export(lambda x: F.pad(x, pad_width, mode), _x(3, 4))


@pytest.mark.parametrize('values', [2.5, (1.5,), (1, 2), ((1, 2), (3, 4))])
def test_pad_constant_values(values):
    # onnx-chainer refused different values per side or per axis.
    check_export(lambda x: F.pad(x, ((1, 2), (2, 1)), 'constant', constant_values=values),
                 _x(3, 4))


@pytest.mark.parametrize('length,padding', [(None, 0), (5, -1.5)])
@pytest.mark.parametrize('lengths', [(3, 1, 2), (2,), (2, 2)])
def test_pad_sequence(lengths, length, padding):
    xs = tuple(_x(n, 2) for n in lengths)
    check_export(lambda *xs: F.pad_sequence(xs, length, padding), xs)


def test_pad_4d():
    check_export(lambda x: F.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)), 'reflect'), _x(1, 2, 3, 4))


@pytest.mark.parametrize('mode,kwargs', [('mean', {}), ('linear_ramp', {}),
                                         ('reflect', {'reflect_type': 'odd'})])
def test_pad_unsupported_raises(mode, kwargs):
    model = lambda x: F.pad(x, 1, mode, **kwargs)  # noqa: E731
    with pytest.raises(ValueError, match='Pad'):
        export_model(FunctionModel(model), _x(3, 4))


def test_pad_reflect_too_wide_raises():
    with pytest.raises(ValueError, match='Pad'):
        export_model(FunctionModel(lambda x: F.pad(x, 4, 'reflect')), _x(3, 4))


# -- resizing ----------------------------------------------------------------------
@pytest.fixture
def numpy_float(monkeypatch):
    # Chainer 7.8.1's resize_images uses numpy.float, gone in NumPy >= 1.24.
    monkeypatch.setattr(numpy, 'float', float, raising=False)


@pytest.mark.parametrize('out_size', [(5, 7), (2, 3), (4, 4), (1, 1), (9, 2)])
@pytest.mark.parametrize('align_corners', [True, False])
def test_resize_images_bilinear(numpy_float, out_size, align_corners):
    # onnx-chainer ignored align_corners and used Resize's default coordinates.
    check_export(lambda x: F.resize_images(x, out_size, align_corners=align_corners),
                 _x(2, 3, 4, 4))


@pytest.mark.parametrize('out_size', [(6, 8), (2, 3), (4, 4), (8, 2), (7, 5)])
def test_resize_images_nearest(numpy_float, out_size):
    check_export(lambda x: F.resize_images(x, out_size, mode='nearest'), _x(1, 2, 6, 4))


def test_resize_images_nearest_keeps_chainers_rounding(numpy_float):
    # 30 -> 22 rows: Chainer's float64 floor(i * 30 / 22) differs from the
    # exact integer quotient at some rows; the export reproduces Chainer.
    check_export(lambda x: F.resize_images(x, (22, 26), mode='nearest'), _x(1, 1, 30, 30))
