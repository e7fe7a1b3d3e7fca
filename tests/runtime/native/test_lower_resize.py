"""Resize and Upsample natively (lowerings/array.py, ccn_resize_axis):
ONNX's node tests of every mode, coordinate transformation, nearest mode,
cubic coefficient, exclude_outside, extrapolation, antialias, axes and
aspect-ratio policy, compiled as one model with their scales, sizes and
roi as constants (how they reach a model after folding), against the
tests' expected outputs and the NumPy VM."""
import os
import re

import numpy
import onnx
import pytest
from onnx import helper, numpy_helper

from chainer_compiler.conformance import node_test_names, node_tests_dir
from chainer_compiler.onnx_test_data import load_test_cases
from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.emit_c import emit_c

from .helpers import check_native, make_model
from .test_lower_array import refusal


def _merged(pattern):
    """One model running every node test matching ``pattern`` side by side
    (names prefixed by the test's), inputs after the first turned into
    initializers; its inputs, and the expected outputs."""
    nodes, inputs, outputs, inits, feed, want = [], [], [], [], [], []
    for name in node_test_names(pattern):
        model_path, cases = load_test_cases(os.path.join(node_tests_dir(), name))
        graph = onnx.load(model_path).graph
        _, values, expected = cases[0]

        def renamed(n, prefix=name + '/'):
            return prefix + n if n else n
        for node in graph.node:
            node.input[:] = [renamed(n) for n in node.input]
            node.output[:] = [renamed(n) for n in node.output]
            node.name = renamed(node.name or node.op_type)
            nodes.append(node)
        first, *rest = graph.input
        first.name = renamed(first.name)
        inputs.append(first)
        feed.append(values[first.name[len(name) + 1:]])
        inits += [numpy_helper.from_array(values[v.name], renamed(v.name)) for v in rest]
        for v, (_, value) in zip(graph.output, expected):
            v.name = renamed(v.name)
            outputs.append(v)
            want.append(value)
    graph = helper.make_graph(nodes, 'resize_tests', inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 19)]), feed, want


@pytest.mark.native_build
def test_every_resize_node_test_with_constant_operands():
    model, feed, want = _merged('^test_resize_')
    assert len(want) == 39
    got = check_native(model, feed, onnxruntime_check=False)
    names = [v.name for v in model.graph.output]
    for name, g, w in zip(names, got, want):
        numpy.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.native_build
def test_resize_10_on_an_image_batch():
    """Resize-10's form (asymmetric, floor when enlarging, ceil when
    shrinking) on a batch of images."""
    rng = numpy.random.RandomState(0)
    nodes = [helper.make_node('Resize', ['x', 'up'], ['y0'], mode='nearest'),
             helper.make_node('Resize', ['x', 'down'], ['y1'], mode='linear'),
             helper.make_node('Resize', ['x', 'up'], ['y2'], mode='linear')]
    model = make_model(nodes, [('x', 'float32', (2, 3, 5, 7))],
                       [('y0', 'float32', (2, 3, 10, 21)), ('y1', 'float32', (2, 3, 2, 4)),
                        ('y2', 'float32', (2, 3, 10, 21))],
                       {'up': numpy.array([1, 1, 2, 3], numpy.float32),
                        'down': numpy.array([1, 1, 0.5, 0.6], numpy.float32)}, opset=10)
    check_native(model, [rng.randn(2, 3, 5, 7).astype(numpy.float32)], onnxruntime_check=False)


def test_resize_refuses_computed_scales_and_unknown_modes():
    scales = [helper.make_node('Resize', ['x', '', 's'], ['y'])]
    model = make_model(scales, [('x', 'float32', (1, 1, 2, 2)), ('s', 'float32', (4,))],
                       [('y', 'float32', [1, 1, 'h', 'w'])], opset=13)
    assert 'its scales must be a constant' in refusal(model)
    mode = [helper.make_node('Resize', ['x', '', 's'], ['y'], mode='area')]
    model = make_model(mode, [('x', 'float32', (1, 1, 2, 2))], [('y', 'float32', (1, 1, 4, 4))],
                       {'s': numpy.array([1, 1, 2, 2], numpy.float32)}, opset=13)
    assert "mode 'area' is not one of nearest, linear, cubic" in refusal(model)


#: (input shape, output sizes, attributes) of image resizes: enlarging
#: (ccn_resize_2d's columns first) and shrinking (rows first), every mode,
#: odd sizes, a batch of planes, a 3-D input; the last resizes only the
#: width (ccn_resize_axis's one-axis gather).
IMAGE_RESIZES = [
    ((2, 3, 7, 5), (2, 3, 23, 17), dict(mode='linear')),
    ((1, 2, 29, 31), (1, 2, 8, 9), dict(mode='linear',
                                        coordinate_transformation_mode='align_corners')),
    ((1, 3, 5, 6), (1, 3, 11, 13), dict(mode='nearest', coordinate_transformation_mode='asymmetric',
                                        nearest_mode='floor')),
    ((1, 2, 6, 7), (1, 2, 13, 4), dict(mode='cubic',
                                       coordinate_transformation_mode='pytorch_half_pixel')),
    ((1, 1, 16, 16), (1, 1, 5, 7), dict(mode='linear', antialias=1)),
    ((3, 7, 5), (3, 14, 9), dict(mode='linear')),
    ((1, 2, 5, 6), (1, 2, 5, 14), dict(mode='linear')),
]


def _image_resizes():
    rng = numpy.random.RandomState(3)
    nodes, inputs, outputs, inits, feed = [], [], [], {}, []
    for i, (shape, sizes, attrs) in enumerate(IMAGE_RESIZES):
        inits['s%d' % i] = numpy.array(sizes, numpy.int64)
        nodes.append(helper.make_node('Resize', ['x%d' % i, '', '', 's%d' % i], ['y%d' % i],
                                      **attrs))
        inputs.append(('x%d' % i, 'float32', shape))
        outputs.append(('y%d' % i, 'float32', sizes))
        feed.append(rng.uniform(-1, 1, shape).astype(numpy.float32))
    return make_model(nodes, inputs, outputs, inits, opset=19), feed


@pytest.mark.native_build
def test_image_resizes_equal_the_vm():
    check_native(*_image_resizes())


def test_image_resizes_take_the_two_axis_kernel(tmp_path):
    # Emitting only: every resize of the last two axes is one
    # ccn_resize_2d, the columns first where that is less work (enlarging,
    # and 6x7 to 13x4: the gathers on 6 rows, not 13); the width-only one
    # stays one ccn_resize_axis.
    result = emit_c(build_program(_image_resizes()[0]), str(tmp_path), 'model')
    with open(next(p for p in result.files if p.endswith('/model.c'))) as f:
        text = f.read()
    calls = re.findall(r'ccn_resize_2d\(&\(const \w*ccn_resize_2d_geometry\)\{\.outer = (\d+), '
                       r'\.in_h = (\d+), \.in_w = (\d+), \.out_h = (\d+), \.out_w = (\d+), '
                       r'.*?\.columns_first = (\d)\}', text)
    assert sorted(tuple(int(v) for v in c) for c in calls) == sorted([
        (6, 7, 5, 23, 17, 1), (2, 29, 31, 8, 9, 0), (3, 5, 6, 11, 13, 1), (2, 6, 7, 13, 4, 1),
        (1, 16, 16, 5, 7, 0), (3, 7, 5, 14, 9, 1)])
    assert text.count('ccn_resize_axis(') == 1
