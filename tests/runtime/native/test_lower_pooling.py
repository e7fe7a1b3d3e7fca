"""The mobile models' pooling and squeeze-and-excitation paths on native
(issue 31): MaxPool and AveragePool as rows of vertical maxima or sums then
the windows' columns (any stride, padding, dilation, ceil mode,
count_include_pad; NaN wins as in the VM), windows too wide for that row on
ccn_pool3d, GlobalAveragePool in vector lanes, and
ReduceMean over trailing axes as GlobalAveragePool, and broadcast operands'
axes merged so that an SE scale (N, C, 1, 1) times (N, C, H, W) runs rows of
H * W."""
import re

import numpy
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c
from chainer_compiler.runtime.native.lowerings.math import broadcast_strides, merged_axes

from .helpers import check_native, make_model

F32 = numpy.float32

#: The attributes of MaxPools of a (2, 3, 12, 13) input.
MAX_POOLS = [
    {'kernel_shape': [3, 3], 'strides': [2, 2], 'ceil_mode': 1},  # SqueezeNet's
    {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]},  # ResNet's
    {'kernel_shape': [2, 2], 'strides': [2, 2]},
    {'kernel_shape': [5, 5], 'pads': [2, 2, 2, 2]},
    {'kernel_shape': [3, 2], 'strides': [3, 3], 'pads': [1, 0, 2, 1], 'ceil_mode': 1},
    {'kernel_shape': [3, 3], 'dilations': [2, 3], 'pads': [2, 1, 0, 2]},
    {'kernel_shape': [1, 4], 'strides': [1, 4], 'auto_pad': 'SAME_UPPER'},
]
#: The attributes of AveragePools of the same input (the same row sums).
AVERAGE_POOLS = [
    {'kernel_shape': [2, 2], 'strides': [2, 2]},  # DenseNet's transitions
    {'kernel_shape': [3, 3], 'pads': [1, 1, 1, 1]},  # Inception's, taps inside counted
    {'kernel_shape': [3, 3], 'pads': [1, 1, 1, 1], 'count_include_pad': 1},
    {'kernel_shape': [3, 2], 'strides': [2, 3], 'pads': [1, 0, 1, 1], 'ceil_mode': 1,
     'count_include_pad': 1},
    {'kernel_shape': [5, 4], 'strides': [3, 1], 'pads': [2, 3, 1, 0], 'ceil_mode': 1},
]

#: Pools of a (1, 2, 11, 70) input whose rows have 16 or more outputs with
#: every window column inside: a MaxPool's go by chunks of 16 (the last one
#: overlapping; at stride 2 a chunk takes its last column from the next
#: chunk's first vector), the padding's and ceil_mode's edges one by one;
#: the AveragePools beside them keep the rows' sums.
CHUNKED_POOLS = [
    ('MaxPool', {'kernel_shape': [3, 3], 'strides': [2, 2], 'ceil_mode': 1}),  # edge right
    ('MaxPool', {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]}),
    ('MaxPool', {'kernel_shape': [2, 2], 'strides': [2, 2], 'ceil_mode': 1}),
    ('MaxPool', {'kernel_shape': [3, 3], 'pads': [1, 1, 1, 1]}),  # stride 1
    ('MaxPool', {'kernel_shape': [3, 2], 'strides': [1, 1], 'dilations': [2, 1]}),
    ('MaxPool', {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [2, 1, 0, 0]}),
    ('AveragePool', {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1],
                     'ceil_mode': 1}),
    ('AveragePool', {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1],
                     'count_include_pad': 1}),
    ('AveragePool', {'kernel_shape': [2, 2], 'strides': [2, 2]}),
    ('AveragePool', {'kernel_shape': [3, 2], 'pads': [1, 1, 1, 0]}),
]


@pytest.mark.native_build
def test_max_pool_rows_then_columns_and_global_average_lanes():
    rng = numpy.random.RandomState(0)
    nodes = [helper.make_node('MaxPool', ['x'], ['m%d' % k], **attrs)
             for k, attrs in enumerate(MAX_POOLS)]
    nodes += [helper.make_node('AveragePool', ['x'], ['a%d' % k], **attrs)
              for k, attrs in enumerate(AVERAGE_POOLS)]
    # Planes of 156 values (16 lanes' blocks and a tail), of 3 (no block),
    # and the squeeze-and-excitation Mul of the pooled scale.
    nodes += [helper.make_node('GlobalAveragePool', ['x'], ['g']),
              helper.make_node('GlobalAveragePool', ['t'], ['h']),
              helper.make_node('Mul', ['x', 'g'], ['s']),
              # ReduceMean over trailing axes runs as GlobalAveragePool.
              helper.make_node('ReduceMean', ['x'], ['r0'], axes=[2, 3]),
              helper.make_node('ReduceMean', ['x'], ['r1'], axes=[-1], keepdims=0),
              helper.make_node('ReduceMean', ['x'], ['r2'], axes=[3, 1, 2]),
              helper.make_node('ReduceMean', ['x'], ['r3'], axes=[1])]
    nodes += [helper.make_node(op, ['u'], ['c%d' % k], **attrs)
              for k, (op, attrs) in enumerate(CHUNKED_POOLS)]
    # Over 17 columns, chunks of 8: one at stride 2 (8 outputs), two
    # overlapping at stride 1 (15).
    nodes += [helper.make_node('MaxPool', ['v'], ['v%d' % k], kernel_shape=[3, 3],
                               strides=[k, k]) for k in (2, 1)]
    outputs = [(node.output[0], F32, None) for node in nodes]  # shapes inferred
    shapes = {'x': (2, 3, 12, 13), 't': (1, 2, 1, 3), 'u': (1, 2, 11, 70), 'v': (1, 4, 9, 17)}
    model = onnx.shape_inference.infer_shapes(
        make_model(nodes, [(name, F32, shape) for name, shape in shapes.items()], outputs,
                   opset=13))
    x, t, u, v = (rng.randn(*shape).astype(F32) for shape in shapes.values())
    check_native(model, [x, t, u, v])
    # A NaN wins its windows, as in the VM (NumPy's maximum); before, the
    # native kernel skipped it.  onnxruntime's max drops NaN: not compared.
    x[1, 2, 4, 4] = numpy.nan
    # The last column of a chunk taken from the next one (32), of one whose
    # next is the overlapping last (64), and ceil_mode's edge (69).
    u[0, 1, 4, 32] = u[0, 1, 4, 64] = u[0, 0, 3, 69] = numpy.nan
    v[0, 0, 2, 16] = numpy.nan  # the last column of a chunk of 8
    got = check_native(model, [x, t, u, v], onnxruntime_check=False)
    assert numpy.isnan(got[0][1, 2, 1:3, 1:3]).all()
    assert numpy.isnan(got[0]).sum() == 4
    chunked = got[len(MAX_POOLS) + len(AVERAGE_POOLS) + 7]  # 3x3 stride 2, ceil_mode
    assert numpy.isnan(chunked[0, 1, 1:3][:, [15, 16, 31, 32]]).all()
    assert numpy.isnan(chunked[0, 0, 1, 34]) and numpy.isnan(chunked).sum() == 9
    assert numpy.isnan(got[-2][0, 0, 0:2, 7]).all() and numpy.isnan(got[-2]).sum() == 2


@pytest.mark.native_build
def test_windows_wholly_in_the_padding():
    # Padding wider than the window (onnxruntime refuses it; ONNX does not):
    # whole rows and columns of windows read no input.
    nodes = [helper.make_node('MaxPool', ['x'], ['m'], kernel_shape=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node('AveragePool', ['x'], ['a'], kernel_shape=[2, 3], strides=[2, 2],
                              pads=[3, 4, 2, 4], count_include_pad=1)]
    model = onnx.shape_inference.infer_shapes(make_model(
        nodes, [('x', F32, (1, 2, 5, 4))], [('m', F32, None), ('a', F32, None)]))
    x = numpy.random.RandomState(1).randn(1, 2, 5, 4).astype(F32)
    got = check_native(model, [x], onnxruntime_check=False)
    assert numpy.isneginf(got[0][0, 0, 0]).all() and got[1][0, 0, 0, 0] == 0


@pytest.mark.native_build
def test_global_average_of_a_large_plane_is_accurate():
    # One running float32 sum of 262,144 values of 0.1 drifted by 2.5e-3 of
    # the mean (the old kernel); the vector lanes' sums stay within 2e-4
    # (the VM's NumPy mean is 6e-4 off, hence the looser comparison).
    x = numpy.full((1, 2, 512, 512), 0.1, F32)
    x[0, 1] = 3.0
    model = make_model([helper.make_node('GlobalAveragePool', ['x'], ['y'])],
                       [('x', F32, x.shape)], [('y', F32, (1, 2, 1, 1))])
    got = check_native(model, [x], rtol=1e-3)[0]
    numpy.testing.assert_allclose(got.ravel(), [0.1, 3.0], rtol=5e-4)


def _c_text(model, tmp_path) -> str:
    result = emit_c(build_program(model), str(tmp_path), 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        return f.read()


def test_squeeze_excitation_scale_runs_whole_planes(tmp_path):
    model = make_model([helper.make_node('Mul', ['x', 'w'], ['y']),
                        helper.make_node('MaxPool', ['x'], ['z'], kernel_shape=[1, 1030]),
                        helper.make_node('AveragePool', ['x'], ['v'], kernel_shape=[2, 1025]),
                        helper.make_node('ReduceMean', ['x'], ['m'], axes=[2, 3]),
                        helper.make_node('ReduceMean', ['x'], ['n'], axes=[1, 2, 3])],
                       [('x', F32, (1, 40, 14, 1100)), ('w', F32, (1, 40, 1, 1))],
                       [('y', F32, (1, 40, 14, 1100)), ('z', F32, (1, 40, 14, 71)),
                        ('v', F32, (1, 40, 13, 76)), ('m', F32, (1, 40, 1, 1)),
                        ('n', F32, (1, 1, 1, 1))], opset=13)
    text = _c_text(model, tmp_path)
    # MixNet's SE mean as GlobalAveragePool; 616,000 values keep the double sum.
    assert 'ccn_global_avgpool(40, 15400, ' in text
    assert text.count('ccn_reduce_float32(') == 1
    # One row per channel of 14 * 1100 values with the scale's stride 0
    # (before: rank 4, rows of 1100).
    assert re.search(r'shape\[\] = \{40, 15400\}, a_strides\[\] = \{15400, 1\}, '
                     r'b_strides\[\] = \{1, 0\};\s+\w*ccn_binary_float32\(CCN_MUL, 2,', text)
    # Windows wider than the 2-D kernels' row of maxima or sums (1024 columns).
    assert text.count('ccn_pool3d(') == 2
    assert 'ccn_maxpool2d(' not in text and 'ccn_avgpool2d(' not in text


_SHAPES = st.lists(st.integers(1, 4), min_size=0, max_size=5)


@given(_SHAPES, st.data())
def test_merged_axes_address_the_same_elements(out, data):
    """Every operand read through the merged shape and strides is the
    operand broadcast to ``out`` (shapes drawn by dropping axes to 1)."""
    out = tuple(out)
    shapes = [tuple(d if data.draw(st.booleans()) else 1 for d in out) for _ in range(2)]
    shape, strides = merged_axes(out, *(broadcast_strides(s, out) for s in shapes))
    assert len(shape) <= len(out) and numpy.prod(shape) == numpy.prod(out)
    for s, merged in zip(shapes, strides):
        a = numpy.arange(numpy.prod(s), dtype=numpy.int64).reshape(s)
        seen = as_strided(a, tuple(shape), tuple(8 * m for m in merged))
        assert seen.ravel().tolist() == numpy.broadcast_to(a, out).ravel().tolist()
