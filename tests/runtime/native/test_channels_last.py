"""ConvNeXt's block without its permutes (runtime/native/channels_last.py,
ccn_scale_add_nhwc, ccn_conv2d_depthwise_nhwc): which Transposes the pass
folds and which it leaves, without a C compiler, and one small native build
of two blocks against the NumPy VM and onnxruntime."""
import dataclasses

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native.channels_last import fold_permutes
from chainer_compiler.runtime.native.fusion import fuse
from chainer_compiler.runtime.native.lowering import with_defaults

from .helpers import check_native, make_model, uniform


def _block(init, rng, k, x, channels, layer_scale=True, perm_back=(0, 3, 1, 2)):
    """torchvision's CNBlock on ``x`` (NCHW) as the torchscript exporter writes
    it: depthwise 7x7, Transpose, LayerNormalization, Linear, GELU (the Erf
    form), Linear, Transpose, layer scale, residual Add."""
    p = 'b%d_' % k
    hidden = 4 * channels
    init.update({p + 'dw': uniform(rng, channels, 1, 7, 7), p + 'dwb': uniform(rng, channels),
                 p + 'g': uniform(rng, channels), p + 'beta': uniform(rng, channels),
                 p + 'w1': uniform(rng, channels, hidden), p + 'b1': uniform(rng, hidden),
                 p + 'w2': uniform(rng, hidden, channels), p + 'b2': uniform(rng, channels),
                 p + 'sqrt2': numpy.float32(numpy.sqrt(2)), p + 'one': numpy.float32(1),
                 p + 'half': numpy.float32(0.5),
                 p + 'ls': uniform(rng, channels, 1, 1)})
    nodes = [
        helper.make_node('Conv', [x, p + 'dw', p + 'dwb'], [p + 'c'], group=channels,
                         kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
        helper.make_node('Transpose', [p + 'c'], [p + 't'], perm=[0, 2, 3, 1]),
        helper.make_node('LayerNormalization', [p + 't', p + 'g', p + 'beta'], [p + 'ln'],
                         axis=-1, epsilon=1e-6),
        helper.make_node('MatMul', [p + 'ln', p + 'w1'], [p + 'm1']),
        helper.make_node('Add', [p + 'b1', p + 'm1'], [p + 'a1']),
        helper.make_node('Div', [p + 'a1', p + 'sqrt2'], [p + 'd']),
        helper.make_node('Erf', [p + 'd'], [p + 'e']),
        helper.make_node('Add', [p + 'e', p + 'one'], [p + 'e1']),
        helper.make_node('Mul', [p + 'a1', p + 'e1'], [p + 'g1']),
        helper.make_node('Mul', [p + 'g1', p + 'half'], [p + 'g2']),
        helper.make_node('MatMul', [p + 'g2', p + 'w2'], [p + 'm2']),
        helper.make_node('Add', [p + 'b2', p + 'm2'], [p + 'a2']),
        helper.make_node('Transpose', [p + 'a2'], [p + 'u'], perm=list(perm_back))]
    last = p + 'u'
    if layer_scale:
        nodes.append(helper.make_node('Mul', [p + 'ls', p + 'u'], [p + 's']))
        last = p + 's'
    nodes.append(helper.make_node('Add', [last, x], [p + 'y']))
    return nodes, p + 'y'


def _model(rng, shape, **kw):
    init: dict = {}
    nodes, y = _block(init, rng, 0, 'x', shape[1], **kw)
    more, z = _block(init, rng, 1, y, shape[1])
    return make_model(nodes + more, [('x', numpy.float32, shape)],
                      [(z, numpy.float32, shape)], init, opset=17)


def _ops(model):
    program = fold_permutes(fuse(with_defaults(build_program(model))))
    return [i.op for i in program.instructions]


def test_block_permutes_folded():
    ops = _ops(_model(numpy.random.default_rng(0), (1, 8, 5, 6)))
    assert ops.count('ChannelsFirstScaleAdd') == ops.count('DepthwiseConvNhwc') == 2
    assert not {'Transpose', 'Conv', 'Mul', 'Add'} & set(ops)


def test_a_wide_plane_keeps_its_transpose_after_the_conv():
    """112x112 outputs: a block holds 4 rows of them, fewer than the 7 the
    kernel reaches: ccn_depthwise.c runs them by strips, not by channels."""
    ops = _ops(_model(numpy.random.default_rng(0), (1, 8, 112, 112)))
    assert ops.count('Transpose') == ops.count('Conv') == 2 and 'DepthwiseConvNhwc' not in ops


@pytest.mark.parametrize('kw', [
    {'layer_scale': False},  # no Mul
    {'perm_back': (0, 3, 2, 1)},  # another permutation back (H = W)
])
def test_other_graphs_keep_their_nodes(kw):
    """The first block's end stays; the second block's is folded."""
    ops = _ops(_model(numpy.random.default_rng(0), (1, 8, 6, 6), **kw))
    assert ops.count('Transpose') == 1 and ops.count('ChannelsFirstScaleAdd') == 1


def test_a_value_read_elsewhere_stays_made():
    """A layer-scaled value that is also a program output keeps its Mul
    and Add."""
    model = _model(numpy.random.default_rng(0), (1, 8, 5, 6))
    program = build_program(model)
    scaled = next(i.outputs[0] for i in program.instructions if i.op == 'Mul'
                  and i.inputs[1] in [j.outputs[0] for j in program.instructions
                                      if j.op == 'Transpose'])
    program = dataclasses.replace(program, outputs=program.outputs + [
        dataclasses.replace(program.outputs[0], register=scaled, name='scaled')])
    ops = [i.op for i in fold_permutes(fuse(with_defaults(program))).instructions]
    assert ops.count('ChannelsFirstScaleAdd') == 1 and ops.count('Transpose') == 1


@pytest.mark.native_build
def test_convnext_blocks_native():
    """Two blocks, batch 2, 13 channels (no multiple of a vector: a part of
    a block of channels, and channels past the 8x8 tiles) at 9x7 pixels (a
    last block of pixels shorter than 16), against the VM and
    onnxruntime."""
    rng = numpy.random.default_rng(1)
    model = _model(rng, (2, 13, 9, 7))
    check_native(model, [uniform(rng, 2, 13, 9, 7)], rtol=1e-4, atol=1e-4)


@pytest.mark.native_build
def test_a_plane_in_bands_native():
    """40x40 pixels, 18 channels: ccn_depthwise.c's blocks hold 20 output
    rows, so each plane runs in two bands (a vector's worth of channels,
    then the rest)."""
    rng = numpy.random.default_rng(2)
    model = _model(rng, (1, 18, 40, 40))
    assert 'Transpose' not in _ops(model)
    check_native(model, [uniform(rng, 1, 18, 40, 40)], rtol=1e-4, atol=1e-4)
    # Written back into planes (no Transpose after it), bias and ReLU.
    conv = make_model([helper.make_node('Conv', ['x', 'w', 'b'], ['c'], group=18,
                                        kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
                       helper.make_node('Relu', ['c'], ['y'])],
                      [('x', numpy.float32, (1, 18, 40, 40))],
                      [('y', numpy.float32, (1, 18, 40, 40))],
                      {'w': uniform(rng, 18, 1, 7, 7), 'b': uniform(rng, 18)})
    check_native(conv, [uniform(rng, 1, 18, 40, 40)])
