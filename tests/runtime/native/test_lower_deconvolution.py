"""Native lowering of 2-D ConvTranspose, checked against the NumPy VM and
onnxruntime: output-shape rules (pads, output_padding, output_shape,
auto_pad), groups, strides, dilations, bias."""
import numpy
import pytest
from onnx import helper

from chainer_compiler.runtime.native import UnsupportedNativeOpsError

from .helpers import check_native, make_model

F = numpy.float32


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).randn(*shape).astype(F)


def _check(variants, x_shape, w_shape, bias=True, **check):
    """One graph with a ConvTranspose per (attributes, output shape) of
    ``variants``, all on input x and constant weight w (and bias b)."""
    inputs = ['x', 'w'] + (['b'] if bias else [])
    nodes = [helper.make_node('ConvTranspose', inputs, ['y%d' % i], **attrs)
             for i, (attrs, _) in enumerate(variants)]
    outputs = [('y%d' % i, F, shape) for i, (_, shape) in enumerate(variants)]
    inits = {'w': _rand(*w_shape, seed=1)}
    if bias:
        inits['b'] = _rand(w_shape[1] * max(a.get('group', 1) for a, _ in variants), seed=2)
    model = make_model(nodes, [('x', F, x_shape)], outputs, inits, opset=13)
    check_native(model, [_rand(*x_shape)], **check)


@pytest.mark.native_build
def test_strides_pads_dilations_output_padding():
    # Full size per axis: stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads.
    _check([({}, (2, 4, 7, 8)),
            ({'strides': [2, 3]}, (2, 4, 11, 18)),
            ({'strides': [2, 2], 'pads': [1, 0, 0, 2]}, (2, 4, 10, 11)),
            ({'dilations': [2, 1], 'pads': [1, 1, 1, 1]}, (2, 4, 7, 6)),
            ({'strides': [3, 2], 'output_padding': [2, 1]}, (2, 4, 17, 14))],
           (2, 3, 5, 6), (3, 4, 3, 3))


@pytest.mark.native_build
def test_groups_and_no_bias():
    _check([({'group': 2}, (1, 6, 5, 6)),
            ({'group': 3, 'strides': [2, 2], 'pads': [1, 1, 1, 1]}, (1, 9, 5, 7))],
           (1, 6, 3, 4), (6, 3, 3, 3), bias=False)


@pytest.mark.native_build
def test_images_share_products_in_batches():
    # 512 input pixels per image: five images go through the product two by
    # two (GRAD_COLUMNS), the last one alone, with and without groups.
    _check([({'pads': [1, 1, 1, 1]}, (5, 2, 16, 32)),
            ({'group': 2, 'strides': [2, 2]}, (5, 4, 33, 65))],
           (5, 4, 16, 32), (4, 2, 3, 3), bias=False)


@pytest.mark.native_build
def test_columns_by_blocks_of_output_channels():
    # Two images of 512 pixels per product, 9 taps: CCN_GRAD_BLOCK_FLOATS
    # (65536) holds 7 output channels' columns, so each group's 10 go as 7
    # and 3 (the last image alone: 10 at once), each block through col2im
    # with its slice of the bias.
    _check([({'group': 2, 'pads': [1, 1, 1, 1]}, (3, 20, 16, 32)),
            ({'group': 2, 'strides': [2, 2], 'pads': [1, 1, 1, 1]}, (3, 20, 31, 63))],
           (3, 6, 16, 32), (6, 10, 3, 3))


@pytest.mark.native_build
def test_output_shape_and_auto_pad():
    # output_shape and SAME_* crop the full result; an odd total puts the
    # extra pixel at the end (SAME_UPPER) or the start (otherwise).
    _check([({'strides': [2, 2], 'output_shape': [9, 10]}, (1, 2, 9, 10)),
            ({'strides': [2, 2], 'output_shape': [8, 11]}, (1, 2, 8, 11)),
            ({'strides': [2, 2], 'auto_pad': 'SAME_UPPER'}, (1, 2, 8, 10)),
            ({'strides': [2, 2], 'auto_pad': 'SAME_LOWER'}, (1, 2, 8, 10)),
            ({'strides': [2, 2], 'auto_pad': 'VALID'}, (1, 2, 9, 11))],
           (1, 3, 4, 5), (3, 2, 3, 3))


@pytest.mark.native_build
def test_output_shape_with_batch_and_channels():
    # output_shape may also be written as the whole (N, M, OH, OW) shape,
    # which onnxruntime refuses: compared with the NumPy VM only.
    _check([({'strides': [2, 2], 'output_shape': [1, 2, 8, 10]}, (1, 2, 8, 10))],
           (1, 3, 4, 5), (3, 2, 3, 3), onnxruntime_check=False)


@pytest.mark.native_build
def test_weight_and_bias_as_inputs_1x1():
    # A 1x1 kernel (pure channel mixing) with weight and bias computed at
    # run time.
    node = helper.make_node('ConvTranspose', ['x', 'w', 'b'], ['y'])
    model = make_model([node], [('x', F, (2, 4, 3, 3)), ('w', F, (4, 5, 1, 1)), ('b', F, (5,))],
                       [('y', F, (2, 5, 3, 3))])
    check_native(model, [_rand(2, 4, 3, 3), _rand(4, 5, 1, 1, seed=1), _rand(5, seed=2)])


def test_refusals():
    nodes = [helper.make_node('ConvTranspose', ['x3', 'w3'], ['y1']),
             helper.make_node('ConvTranspose', ['x', 'w'], ['y2'], group=2)]
    model = make_model(nodes, [('x3', F, (1, 2, 2, 2, 2, 2)), ('w3', F, (2, 2, 1, 1, 1, 1)),
                               ('x', F, (1, 3, 4, 4)), ('w', F, (3, 2, 3, 3))],
                       [('y1', F, (1, 2, 2, 2, 2, 2)), ('y2', F, (1, 4, 6, 6))])
    with pytest.raises(UnsupportedNativeOpsError) as e:
        check_native(model, [_rand(1, 2, 2, 2, 2, 2), _rand(2, 2, 1, 1, 1, 1),
                             _rand(1, 3, 4, 4), _rand(3, 2, 3, 3)])
    assert 'only 1-D, 2-D and 3-D transposed convolution' in str(e.value)
    assert 'group=2 does not fit' in str(e.value)
