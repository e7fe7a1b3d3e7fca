"""Gradient rules of the connection family (Conv, ConvTranspose)."""
import re
from pathlib import Path

import numpy
import pytest

from chainer_compiler.autodiff import differentiable_ops
from chainer_compiler.runtime.ops.registry import registered_kernels

from .gradcheck import check_gradients, single_node_model

FAMILY = 'connection'


def translator_ops(family):
    """Default-domain operators the tracing translator emits whose kernels
    belong to ``family``."""
    root = Path(__file__).resolve().parents[3] / 'translators' / 'onnx_chainer'
    ops = set()
    for path in root.glob('*.py'):
        ops.update(re.findall(r"ctx\.(?:node|reduce)\(\s*'(\w+)'", path.read_text()))
    families = {s.op: s.family for s in registered_kernels() if s.domain == ''}
    return sorted(op for op in ops if families.get(op) == family)


def test_translator_ops_covered():
    ops = differentiable_ops()
    known = set(ops['rules']) | set(ops['none'])
    missing = [op for op in translator_ops(FAMILY) if op not in known]
    assert not missing


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed + len(shape)).standard_normal(shape)


CONV_CASES = [
    # x shape, w shape, attrs
    ((2, 3, 5, 5), (4, 3, 3, 3), {}),
    ((1, 2, 6, 5), (3, 2, 3, 2), dict(strides=[2, 2])),          # stride not dividing
    ((1, 2, 7, 6), (3, 2, 3, 3), dict(strides=[3, 2], pads=[1, 0, 2, 1])),
    ((1, 2, 7, 7), (2, 2, 2, 3), dict(dilations=[2, 1], pads=[1, 1, 1, 1])),
    ((1, 4, 5, 5), (6, 2, 3, 3), dict(group=2, strides=[2, 1])),
    ((1, 4, 4, 4), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    ((2, 2, 7), (3, 2, 3), dict(strides=[2], pads=[1, 0])),          # 1-D
    ((1, 2, 4, 3, 4), (2, 2, 2, 2, 3), dict(strides=[2, 1, 2])),    # 3-D
    ((1, 2, 5, 6), (3, 2, 3, 3), dict(auto_pad='SAME_UPPER', strides=[2, 2])),
    ((1, 2, 5, 6), (3, 2, 2, 2), dict(auto_pad='SAME_LOWER', strides=[2, 2])),
    ((1, 2, 6, 5), (3, 2, 3, 3), dict(auto_pad='VALID', strides=[2, 2])),
]


@pytest.mark.parametrize('x_shape,w_shape,attrs', CONV_CASES)
@pytest.mark.parametrize('bias', [False, True])
def test_conv(x_shape, w_shape, attrs, bias):
    inputs = {'x': _rand(*x_shape), 'w': _rand(*w_shape, seed=1)}
    if bias:
        inputs['b'] = _rand(w_shape[0], seed=2)
    model = single_node_model('Conv', inputs, **attrs)
    check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [11, 13, 18])
def test_conv_opsets(opset):
    inputs = {'x': _rand(1, 2, 5, 5), 'w': _rand(2, 2, 3, 3, seed=1), 'b': _rand(2, seed=2)}
    model = single_node_model('Conv', inputs, opset=opset, strides=[2, 2], pads=[1, 1, 0, 0])
    check_gradients(model, inputs)


def test_conv_weight_only():
    inputs = {'x': _rand(2, 3, 5, 5), 'w': _rand(4, 3, 3, 3, seed=1)}
    model = single_node_model('Conv', inputs, strides=[2, 2])
    check_gradients(model, inputs, wrt=['w'])


CONV_TRANSPOSE_CASES = [
    ((2, 3, 3, 3), (3, 2, 3, 3), {}),
    ((1, 2, 3, 4), (2, 3, 3, 2), dict(strides=[2, 3])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_padding=[1, 0])),
    ((1, 2, 4, 3), (2, 2, 3, 3), dict(strides=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 2, 3, 3), (2, 1, 2, 3), dict(dilations=[2, 1], strides=[1, 2])),
    ((1, 4, 3, 3), (4, 2, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 4), (2, 3, 3), dict(strides=[2], pads=[1, 1])),          # 1-D
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), dict(strides=[2, 1, 2])),    # 3-D
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad='SAME_UPPER')),
    ((1, 2, 3, 3), (2, 2, 2, 2), dict(strides=[2, 2], auto_pad='SAME_LOWER')),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[6, 7])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[8, 9])),  # cropped
]


@pytest.mark.parametrize('x_shape,w_shape,attrs', CONV_TRANSPOSE_CASES)
@pytest.mark.parametrize('bias', [False, True])
def test_conv_transpose(x_shape, w_shape, attrs, bias):
    inputs = {'x': _rand(*x_shape), 'w': _rand(*w_shape, seed=1)}
    if bias:
        inputs['b'] = _rand(w_shape[1] * attrs.get('group', 1), seed=2)
    model = single_node_model('ConvTranspose', inputs, **attrs)
    check_gradients(model, inputs)


def test_conv_grad_filter_matches_chainer():
    """ConvGradFilter against Chainer's convolution_2d backward (float32)."""
    import chainer
    import chainer.functions as F
    rng = numpy.random.RandomState(3)
    x = rng.standard_normal((2, 4, 7, 6)).astype(numpy.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(numpy.float32)
    xv, wv = chainer.Variable(x), chainer.Variable(w)
    y = F.convolution_2d(xv, wv, stride=(2, 1), pad=(1, 0), dilate=(1, 2), groups=2)
    gy = rng.standard_normal(y.shape).astype(numpy.float32)
    y.grad = gy
    y.backward()
    from chainer_compiler.runtime.ops.connection import conv_grad_filter
    gw = conv_grad_filter(numpy, x, gy, kernel_shape=[3, 3], strides=[2, 1], dilations=[1, 2],
                          pads=[1, 0, 1, 0], group=2)
    numpy.testing.assert_allclose(gw, wv.grad, rtol=1e-4, atol=1e-4)
