"""Converters of chainer.functions.connection."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import pytest

from chainer_compiler.translators.onnx_chainer import supported_functions

from .helpers import check_export, op_types


def _rand(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def _needs(*names):
    missing = [n for n in names if n not in supported_functions()]
    return pytest.mark.skipif(bool(missing), reason='no converter yet for %s' % missing)


# -- Linear ---------------------------------------------------------------------
@pytest.mark.parametrize('in_shape,bias', [
    ((2, 5), True), ((2, 5), False),
    pytest.param((2, 3, 4), True, marks=_needs('Reshape')),  # L.Linear reshapes first
])
def test_linear(in_shape, bias):
    in_size = int(numpy.prod(in_shape[1:]))
    model = L.Linear(in_size, 3, nobias=not bias)
    models = check_export(model, _rand(*in_shape))
    assert 'Gemm' in op_types(models[0])


@_needs('Reshape')
def test_linear_n_batch_axes():
    W, b = _rand(3, 4, seed=1), _rand(3, seed=2)
    check_export(lambda x: F.linear(x, W, b, n_batch_axes=2), _rand(2, 5, 4))


# -- Convolution ----------------------------------------------------------------
CONV2D_CASES = [
    dict(),
    dict(stride=2, pad=1),
    dict(stride=(1, 2), pad=(0, 1)),
    dict(groups=2),
    dict(pad=2, dilate=2),
    dict(stride=2, pad=1, dilate=(2, 1), groups=2),
    dict(stride=2, pad=1, cover_all=True),
    dict(stride=3, pad=0, cover_all=True, dilate=2),
    dict(nobias=True),
]


@pytest.mark.parametrize('kw', CONV2D_CASES)
def test_convolution_2d(kw):
    kw = dict(kw)
    nobias = kw.pop('nobias', False)
    groups = kw.get('groups', 1)
    x = _rand(2, 4, 7, 8)
    W = _rand(6, 4 // groups, 3, 3, seed=1)
    b = None if nobias else _rand(6, seed=2)
    models = check_export(lambda x: F.convolution_2d(x, W, b, **kw), x)
    assert op_types(models[0]) == ['Conv']


def test_convolution_2d_respects_dilate():
    """onnx-chainer dropped ``dilate``."""
    x = _rand(1, 2, 9, 9)
    model = L.DilatedConvolution2D(2, 3, ksize=3, pad=2, dilate=2)
    models = check_export(model, x)
    conv = models[0].graph.node[0]
    assert [a.ints for a in conv.attribute if a.name == 'dilations'][0] == [2, 2]


def test_convolution_2d_cover_all_matches_chainer():
    """cover_all=True changes the output size; expressed with end padding."""
    x = _rand(1, 2, 8, 8)
    W = _rand(3, 2, 3, 3, seed=1)
    y = F.convolution_2d(x, W, stride=2, cover_all=True)
    assert y.shape == (1, 3, 4, 4)  # 3x3 without cover_all
    check_export(lambda x: F.convolution_2d(x, W, stride=2, cover_all=True), x)


@pytest.mark.parametrize('ndim,kw', [
    (1, dict()),
    (1, dict(stride=2, pad=1, dilate=2)),
    (3, dict()),
    (3, dict(stride=(1, 2, 1), pad=1, groups=2)),
    (3, dict(stride=2, dilate=(1, 2, 1), cover_all=True)),
])
def test_convolution_nd(ndim, kw):
    groups = kw.get('groups', 1)
    x = _rand(2, 4, *(6,) * ndim)
    W = _rand(4, 4 // groups, *(3,) * ndim, seed=1)
    b = _rand(4, seed=2)
    check_export(lambda x: F.convolution_nd(x, W, b, **kw), x)


def test_convolution_nd_link():
    check_export(L.ConvolutionND(3, 2, 3, ksize=2, stride=1, pad=1), _rand(1, 2, 3, 4, 5))


@_needs('Reshape')
def test_depthwise_convolution_2d():
    model = L.DepthwiseConvolution2D(3, 2, ksize=3, stride=2, pad=1)
    check_export(model, _rand(2, 3, 6, 6))


# -- Deconvolution --------------------------------------------------------------
DECONV2D_CASES = [
    dict(),
    dict(stride=2, pad=1),
    dict(stride=(2, 3), pad=(1, 0)),
    dict(groups=2),
    dict(stride=2, dilate=2),
    dict(stride=2, pad=1, outsize=(10, 10)),
    dict(stride=3, pad=1, outsize=(15, 14), groups=2),
    dict(nobias=True),
]


@pytest.mark.parametrize('kw', DECONV2D_CASES)
def test_deconvolution_2d(kw):
    kw = dict(kw)
    nobias = kw.pop('nobias', False)
    groups = kw.get('groups', 1)
    x = _rand(2, 4, 5, 5)
    W = _rand(4, 6 // groups, 3, 3, seed=1)
    b = None if nobias else _rand(6, seed=2)
    models = check_export(lambda x: F.deconvolution_2d(x, W, b, **kw), x)
    assert op_types(models[0]) == ['ConvTranspose']


def test_deconvolution_2d_respects_dilate():
    """onnx-chainer dropped ``dilate``."""
    x = _rand(1, 2, 4, 4)
    check_export(L.Deconvolution2D(2, 3, ksize=3, stride=1, pad=0, dilate=2), x)


def test_deconvolution_2d_respects_outsize():
    x = _rand(1, 2, 4, 4)
    W = _rand(2, 3, 3, 3, seed=1)
    fn = lambda x: F.deconvolution_2d(x, W, stride=2, pad=1, outsize=(8, 8))  # noqa: E731
    assert fn(x).shape == (1, 3, 8, 8)  # 7x7 without outsize
    check_export(fn, x)


@pytest.mark.parametrize('ndim,kw', [
    (1, dict(stride=2, pad=1)),
    (3, dict()),
    (3, dict(stride=2, pad=1, dilate=(1, 2, 1), groups=2)),
    (3, dict(stride=2, pad=1, outsize=(8, 8, 7))),
])
def test_deconvolution_nd(ndim, kw):
    groups = kw.get('groups', 1)
    x = _rand(2, 4, *(4,) * ndim)
    W = _rand(4, 4 // groups, *(3,) * ndim, seed=1)
    b = _rand(4, seed=2)
    check_export(lambda x: F.deconvolution_nd(x, W, b, **kw), x)


# -- EmbedID --------------------------------------------------------------------
def test_embed_id():
    model = L.EmbedID(5, 3)
    x = numpy.array([[0, 4, 2], [1, 1, 3]], dtype=numpy.int32)
    models = check_export(model, x)
    assert op_types(models[0]) == ['Gather']


@pytest.mark.parametrize('ignore_label', [-1, 2])
def test_embed_id_zeroes_ignore_label_rows(ignore_label):
    """onnx-chainer gathered W[ignore_label] (the last row for -1)."""
    model = L.EmbedID(5, 3, ignore_label=ignore_label)
    x = numpy.array([[0, ignore_label, 2], [ignore_label, 1, 4]], dtype=numpy.int32)
    y = model(x).array
    assert (y[0, 1] == 0).all() and (y[1, 0] == 0).all()
    check_export(model, x)


def test_embed_id_int64_indices():
    model = L.EmbedID(5, 3, ignore_label=-1)
    check_export(model, numpy.array([3, -1, 0], dtype=numpy.int64))


# -- Bilinear -------------------------------------------------------------------
@pytest.mark.parametrize('nobias', [False, True])
def test_bilinear(nobias):
    model = L.Bilinear(3, 4, 2, nobias=nobias)
    if not nobias:  # the default V1, V2, b are zero
        for p in (model.V1, model.V2, model.b):
            p.array[...] = _rand(*p.shape, seed=p.size)
    check_export(model, (_rand(2, 3), _rand(2, 4, seed=1)))


def test_bilinear_flattens_inputs():
    W = _rand(6, 4, 2, seed=2)
    check_export(lambda a, b: F.bilinear(a, b, W), (_rand(2, 3, 2), _rand(2, 4, seed=1)))


def test_convolution_2d_in_chain():
    class Net(chainer.Chain):
        def __init__(self):
            super().__init__()
            with self.init_scope():
                self.c1 = L.Convolution2D(2, 4, 3, pad=1, groups=2)
                self.c2 = L.Deconvolution2D(4, 2, 2, stride=2)

        def forward(self, x):
            return self.c2(self.c1(x))

    check_export(Net(), _rand(1, 2, 4, 4))
