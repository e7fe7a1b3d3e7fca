"""Convolution, transposed convolution and pooling over other ranks than
images: 1-D (Whisper's audio front end, through the 2-D kernels with a unit
height), 3-D (kernels of their own) and global pooling of any rank, against
the NumPy VM and onnxruntime."""
import numpy
import pytest
from onnx import helper

from .helpers import check_native, make_model


@pytest.mark.native_build
def test_one_and_three_dimensional_convolution_and_pooling():
    rng = numpy.random.RandomState(0)
    f32 = numpy.float32
    inits = {'w': rng.randn(6, 4, 3).astype(f32), 'b': rng.randn(6).astype(f32),
             'wg': rng.randn(6, 2, 5).astype(f32), 'wt': rng.randn(4, 6, 3).astype(f32),
             'bt': rng.randn(6).astype(f32), 'w3': rng.randn(6, 2, 3, 3, 3).astype(f32),
             'b3': rng.randn(6).astype(f32), 'wt3': rng.randn(4, 3, 2, 3, 3).astype(f32),
             'scale': rng.rand(6).astype(f32) + 0.5, 'shift': rng.randn(6).astype(f32),
             'mean': rng.randn(6).astype(f32), 'var': rng.rand(6).astype(f32) + 0.5}
    nodes = [
        # Whisper's: kernel 3, padding 1, strides 1 then 2, GELU after.
        helper.make_node('Conv', ['x', 'w', 'b'], ['c0'], pads=[1, 1]),
        helper.make_node('Conv', ['x', 'w', 'b'], ['c1'], pads=[1, 1], strides=[2]),
        # At least 12 outputs wide: the direct kernel, its weights lifted to a unit height.
        helper.make_node('Conv', ['y', 'w', 'b'], ['h0'], pads=[1, 1]),
        helper.make_node('Conv', ['y', 'w', 'b'], ['h1'], pads=[1, 1], strides=[2]),
        helper.make_node('Conv', ['x', 'wg'], ['c2'], group=2, dilations=[2], pads=[2, 2]),
        helper.make_node('Conv', ['x', 'wg'], ['c4'], group=2, auto_pad='SAME_UPPER'),
        helper.make_node('ConvTranspose', ['x', 'wt', 'bt'], ['d0'], strides=[2], pads=[1, 0],
                         output_padding=[1]),
        helper.make_node('ConvTranspose', ['x', 'wt'], ['d1'], output_shape=[13]),
        # Conv + BatchNormalization + Relu: folded and fused.
        helper.make_node('Conv', ['x', 'w'], ['t'], kernel_shape=[3]),
        helper.make_node('BatchNormalization', ['t', 'scale', 'shift', 'mean', 'var'], ['u']),
        helper.make_node('Relu', ['u'], ['c3']),
        helper.make_node('MaxPool', ['x'], ['p0'], kernel_shape=[2], strides=[2], ceil_mode=1),
        helper.make_node('AveragePool', ['x'], ['p1'], kernel_shape=[4], pads=[1, 2],
                         count_include_pad=1),
        helper.make_node('AveragePool', ['x'], ['p2'], kernel_shape=[3], pads=[1, 1]),
        helper.make_node('AveragePool', ['x'], ['p3'], kernel_shape=[3], dilations=[2]),
        helper.make_node('GlobalMaxPool', ['x'], ['g0']),
        helper.make_node('GlobalMaxPool', ['v'], ['g1']),
        helper.make_node('GlobalAveragePool', ['v'], ['g2']),
        # 3-D: grouped, strided, padded, dilated, with bias, BN and Relu fused.
        helper.make_node('Conv', ['v3', 'w3', 'b3'], ['e0'], group=2, pads=[1, 1, 1, 1, 1, 1],
                         strides=[1, 2, 2]),
        helper.make_node('Conv', ['v3', 'w3'], ['s3'], group=2, dilations=[1, 2, 1],
                         pads=[0, 1, 1, 0, 2, 0]),
        helper.make_node('BatchNormalization', ['s3', 'scale', 'shift', 'mean', 'var'], ['t3']),
        helper.make_node('Relu', ['t3'], ['e1']),
        helper.make_node('ConvTranspose', ['v3', 'wt3', 'b3'], ['f0'], group=2,
                         strides=[1, 2, 3], pads=[1, 0, 1, 0, 1, 2], output_padding=[0, 1, 2]),
        helper.make_node('ConvTranspose', ['v3', 'wt3'], ['f1'], group=2, dilations=[2, 1, 1],
                         output_shape=[6, 7, 9]),
        helper.make_node('MaxPool', ['v3'], ['q0'], kernel_shape=[2, 2, 2], strides=[2, 2, 2],
                         ceil_mode=1),
        helper.make_node('AveragePool', ['v3'], ['q1'], kernel_shape=[3, 2, 3],
                         pads=[1, 0, 1, 1, 1, 0]),
        helper.make_node('AveragePool', ['v3'], ['q2'], kernel_shape=[2, 3, 3], strides=[1, 2, 2],
                         pads=[0, 1, 1, 1, 1, 1], count_include_pad=1),
        helper.make_node('MaxPool', ['v3'], ['q3'], kernel_shape=[2, 2, 2], dilations=[2, 1, 2],
                         pads=[1, 1, 1, 0, 0, 0])]
    model = make_model(nodes, [('x', f32, (2, 4, 11)), ('v', f32, (2, 3, 2, 3, 4)),
                               ('v3', f32, (2, 4, 5, 6, 7)), ('y', f32, (2, 4, 30))],
                       [('c0', f32, (2, 6, 11)), ('c1', f32, (2, 6, 6)),
                        ('c2', f32, (2, 6, 7)), ('c3', f32, (2, 6, 9)),
                        ('p0', f32, (2, 4, 6)), ('p1', f32, (2, 4, 11)),
                        ('p2', f32, (2, 4, 11)), ('g0', f32, (2, 4, 1)),
                        ('g1', f32, (2, 3, 1, 1, 1)), ('g2', f32, (2, 3, 1, 1, 1)),
                        ('c4', f32, (2, 6, 11)), ('d0', f32, (2, 6, 23)),
                        ('d1', f32, (2, 6, 13)), ('e0', f32, (2, 6, 5, 3, 4)),
                        ('e1', f32, (2, 6, 3, 5, 6)), ('q0', f32, (2, 4, 3, 3, 4)),
                        ('q1', f32, (2, 4, 5, 6, 6)), ('q2', f32, (2, 4, 5, 3, 4)),
                        ('q3', f32, (2, 4, 4, 6, 6)), ('p3', f32, (2, 4, 7)),
                        ('f0', f32, (2, 6, 5, 13, 20)), ('f1', f32, (2, 6, 6, 7, 9)),
                        ('h0', f32, (2, 6, 30)), ('h1', f32, (2, 6, 15))],
                       inits, opset=19)
    x = rng.randn(2, 4, 11).astype(f32)
    v = rng.randn(2, 3, 2, 3, 4).astype(f32)
    v3 = rng.randn(2, 4, 5, 6, 7).astype(f32)
    v[1, 2, 1, 1, 1] = numpy.nan  # GlobalMaxPool propagates NaN as NumPy's max
    y = rng.randn(2, 4, 30).astype(f32)
    got = check_native(model, [x, v, v3, y], onnxruntime_check=False)
    assert numpy.isnan(got[8][1, 2]).all() and not numpy.isnan(got[8][1, :2]).any()
    # onnxruntime on the finite input (its max drops NaN)
    check_native(model, [x, numpy.nan_to_num(v), v3, y])
