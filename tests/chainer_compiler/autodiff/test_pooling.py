"""Gradient rules of the pooling family."""
import numpy
import pytest

from chainer_compiler.autodiff import differentiable_ops

from .gradcheck import check_gradients, single_node_model
from .test_connection import translator_ops

FAMILY = 'pooling'


def test_translator_ops_covered():
    ops = differentiable_ops()
    known = set(ops['rules']) | set(ops['none'])
    missing = [op for op in translator_ops(FAMILY) if op not in known]
    assert not missing


def _distinct(*shape, seed=0):
    """Values far enough apart that no max changes under the numeric step."""
    rng = numpy.random.RandomState(seed)
    return rng.permutation(numpy.prod(shape)).reshape(shape) * 0.1 + 0.05 * rng.random_sample(
        shape)


WINDOW_CASES = [
    ((2, 2, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 5, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 6, 5), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((1, 2, 7, 6), dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[1, 2])),
    ((1, 2, 5, 6), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad='SAME_UPPER')),
    ((1, 2, 5, 6), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad='SAME_LOWER')),
    ((1, 2, 5, 6), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad='VALID')),
    ((1, 3, 7), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),            # 1-D
    ((1, 2, 4, 3, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 1, 2])),      # 3-D
    ((1, 2, 4, 4), dict(kernel_shape=[3, 3])),                              # overlapping
]


@pytest.mark.parametrize('shape,attrs', WINDOW_CASES)
def test_max_pool(shape, attrs):
    inputs = {'x': _distinct(*shape)}
    check_gradients(single_node_model('MaxPool', inputs, **attrs), inputs)


def test_max_pool_with_indices():
    inputs = {'x': _distinct(1, 2, 4, 4)}
    model = single_node_model('MaxPool', inputs, n_outputs=2, kernel_shape=[2, 2],
                              strides=[2, 2])
    # The indices are integers: only the pooled values carry a gradient.
    model.graph.output.pop()
    check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [8, 10, 12])
def test_max_pool_opsets(opset):
    inputs = {'x': _distinct(1, 2, 5, 5)}
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    check_gradients(single_node_model('MaxPool', inputs, opset=opset, **attrs), inputs)


def test_max_pool_ties_go_to_first_maximum():
    """Chainer's rule: on ties the first maximum (row-major in the window)
    takes the whole gradient."""
    import chainer
    import chainer.functions as F

    from chainer_compiler.runtime.ops.pooling import max_pool, max_pool_grad
    x = numpy.zeros((1, 1, 4, 4), numpy.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = x[0, 0, 2, 1] = 1  # ties in overlapping windows
    gy = numpy.arange(1, 10, dtype=numpy.float32).reshape(1, 1, 3, 3)
    attrs = dict(kernel_shape=[2, 2], strides=[1, 1])
    y = max_pool(numpy, x, **attrs)
    gx = max_pool_grad(numpy, x, y, gy, **attrs)
    xv = chainer.Variable(x)
    yv = F.max_pooling_2d(xv, 2, stride=1, cover_all=False)
    yv.grad = gy
    yv.backward()
    numpy.testing.assert_array_equal(gx, xv.grad)
    assert gx.sum() == gy.sum()


def test_max_pool_matches_chainer_padded_cover_all():
    import chainer
    import chainer.functions as F

    from chainer_compiler.runtime.ops.pooling import max_pool, max_pool_grad
    rng = numpy.random.RandomState(1)
    x = rng.randint(0, 3, (2, 3, 7, 6)).astype(numpy.float32)   # many ties
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    xv = chainer.Variable(x)
    yv = F.max_pooling_2d(xv, 3, stride=2, pad=1, cover_all=False)
    gy = rng.standard_normal(yv.shape).astype(numpy.float32)
    yv.grad = gy
    yv.backward()
    y = max_pool(numpy, x, **attrs)
    numpy.testing.assert_array_equal(y, yv.array)
    numpy.testing.assert_allclose(max_pool_grad(numpy, x, y, gy, **attrs), xv.grad, rtol=1e-6)


@pytest.mark.parametrize('shape,attrs', WINDOW_CASES)
@pytest.mark.parametrize('count_include_pad', [0, 1])
def test_average_pool(shape, attrs, count_include_pad):
    inputs = {'x': numpy.random.RandomState(0).standard_normal(shape)}
    model = single_node_model('AveragePool', inputs, opset=19,
                              count_include_pad=count_include_pad, **attrs)
    check_gradients(model, inputs)


@pytest.mark.parametrize('opset', [7, 11])
def test_average_pool_opsets(opset):
    inputs = {'x': numpy.random.RandomState(0).standard_normal((1, 2, 5, 5))}
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    check_gradients(single_node_model('AveragePool', inputs, opset=opset, **attrs), inputs)


@pytest.mark.parametrize('shape', [(2, 3, 4, 5), (2, 3, 5), (1, 2, 2, 3, 2)])
def test_global_average_pool(shape):
    inputs = {'x': numpy.random.RandomState(0).standard_normal(shape)}
    check_gradients(single_node_model('GlobalAveragePool', inputs), inputs)


@pytest.mark.parametrize('shape', [(2, 3, 4, 5), (2, 3, 5)])
def test_global_max_pool(shape):
    inputs = {'x': _distinct(*shape)}
    check_gradients(single_node_model('GlobalMaxPool', inputs), inputs)


def test_max_roi_pool():
    x = _distinct(2, 2, 6, 7)
    rois = numpy.array([[0, 0, 0, 4, 3], [1, 1, 2, 6, 5], [0, 2, 1, 2, 1],
                        [1, 0, 0, 12, 10]], numpy.float64)
    inputs = {'x': x}
    model = single_node_model('MaxRoiPool', inputs, constants={'rois': rois},
                              pooled_shape=[2, 3], spatial_scale=0.5)
    check_gradients(model, inputs)


def test_max_roi_pool_matches_chainer():
    import chainer
    import chainer.functions as F

    from chainer_compiler.runtime.ops.pooling import max_roi_pool, max_roi_pool_grad
    rng = numpy.random.RandomState(2)
    x = rng.randint(0, 4, (2, 3, 8, 9)).astype(numpy.float32)
    rois = numpy.array([[0, 1, 1, 6, 5], [1, 0, 2, 8, 7], [0, 3, 3, 4, 4]], numpy.float32)
    xv = chainer.Variable(x)
    yv = F.roi_pooling_2d(xv, rois, 3, 2, 1.0)
    gy = rng.standard_normal(yv.shape).astype(numpy.float32)
    yv.grad = gy
    yv.backward()
    attrs = dict(pooled_shape=[3, 2], spatial_scale=1.0)
    numpy.testing.assert_allclose(max_roi_pool(numpy, x, rois, **attrs), yv.array)
    numpy.testing.assert_allclose(max_roi_pool_grad(numpy, x, rois, gy, **attrs), xv.grad,
                                  rtol=1e-6)
