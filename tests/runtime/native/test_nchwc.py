"""Chains of mobile convolutions in the blocked channel layout (NCHWc,
runtime/native/blocked.py, lowerings/nchwc.py, kernels/ccn_nchwc.c): which
Convs the pass chains and where it reorders, without a C compiler, and one
small native build of a chain (odd channel counts, strides 1 and 2,
asymmetric padding, a residual Add, every kind of epilogue, batch 2)
against the NumPy VM and onnxruntime."""
import dataclasses
import math

import numpy
import pytest
from onnx import helper

from chainer_compiler.pipeline import build_program
from chainer_compiler.runtime.native import UnsupportedNativeOpsError
from chainer_compiler.runtime.native.blocked import block_chains, blockable, chains
from chainer_compiler.runtime.native.fusion import fuse
from chainer_compiler.runtime.native.lower import lower
from chainer_compiler.runtime.native.lowering import BLOCK, with_defaults
from chainer_compiler.runtime.native.lowerings.conv_direct import direct_lane_use
from chainer_compiler.runtime.native.lowerings.nchwc import (
    NCHWC_GEOMETRY,
    WINOGRAD_MAX_IN_BLOCKS,
    WINOGRAD_TILE4_MIN_SIDE,
    winograd_filters,
)

from .helpers import check_native, make_model, uniform
from .test_kernel_contract import _define, _struct_fields

NCHWC = 'org.chainer_compiler::'


def _conv(init, rng, name, x, cin, cout, k, stride, pads, group=1, bias=True):
    init[name + '_w'] = uniform(rng, cout, cin // group, k, k)
    inputs = [x, name + '_w']
    if bias:
        init[name + '_b'] = uniform(rng, cout)
        inputs.append(name + '_b')
    return helper.make_node('Conv', inputs, [name], kernel_shape=[k, k], strides=[stride] * 2,
                            pads=list(pads), group=group)


def _squeeze_excitation(conv, x, channels, gate, y):
    """Nodes scaling x's ``channels`` channels by a squeeze-excitation
    (pool, 1x1 to 8 channels, Relu, 1x1 back, ``gate``) into ``y``: a Mul
    that a 1x1 product reading y folds."""
    return [helper.make_node('GlobalAveragePool', [x], [y + '_pool']),
            conv(y + '_down', y + '_pool', channels, 8, 1, 1, (0, 0, 0, 0)),
            helper.make_node('Relu', [y + '_down'], [y + '_relu']),
            conv(y + '_up', y + '_relu', 8, channels, 1, 1, (0, 0, 0, 0)),
            helper.make_node(gate, [y + '_up'], [y + '_gate']),
            helper.make_node('Mul', [y + '_gate', x], [y])]


def chain_model(rng, batch=2):
    """A MobileNet-like chain from a stem (3 channels of 18x30 to 20 of
    9x15, stride 2, asymmetric padding, ReLU: x, written blocked): 1x1 products and
    depthwise 3x3 and 5x5 at strides 1 and 2 (asymmetric padding), with
    ReLU6, HardSwish, none, a residual Add of x, Swish, Relu, LeakyRelu
    and Sigmoid, dense 3x3 and 1x1 Convs (strides 1 and 2, residuals), a
    squeeze-excitation before the last product; outputs the
    residual sum (read mid-chain) and the end.  Its planes end in part
    tiles (135, 40 and 8 pixels; a depthwise row of 15 with 13 columns
    inside: a tile and 5 more), stored by a whole tile ending at the
    plane's or the row's end or one pixel at a time."""
    init = {'lo': numpy.array(0, numpy.float32), 'hi': numpy.array(6, numpy.float32)}

    def conv(*args, **kwargs):
        return _conv(init, rng, *args, **kwargs)
    nodes = [
        conv('stem', 'x0', 3, 20, 3, 2, (1, 1, 0, 0)),
        helper.make_node('Relu', ['stem'], ['x']),
        conv('c1', 'x', 20, 36, 1, 1, (0, 0, 0, 0)),
        helper.make_node('Clip', ['c1', 'lo', 'hi'], ['a1']),
        conv('c2', 'a1', 36, 36, 3, 1, (1, 1, 1, 1), group=36),
        helper.make_node('HardSwish', ['c2'], ['a2']),
        conv('c3', 'a2', 36, 20, 1, 1, (0, 0, 0, 0), bias=False),
        helper.make_node('Add', ['c3', 'x'], ['a3']),
        conv('c4', 'a3', 20, 20, 5, 2, (2, 2, 2, 2), group=20),
        helper.make_node('Sigmoid', ['c4'], ['s4']),
        helper.make_node('Mul', ['c4', 's4'], ['a4']),
        # Dense 3x3 and 1x1 (ccn_nchwc_dense): stride 2 and asymmetric
        # padding here, residual Adds; stride 1 at 2x4 below (planes under a
        # tile).
        conv('k3', 'a3', 20, 20, 3, 2, (1, 2, 2, 1)),
        helper.make_node('Add', ['a4', 'k3'], ['a4d']),
        conv('k4', 'a3', 20, 20, 1, 2, (0, 0, 0, 0)),
        helper.make_node('Add', ['a4d', 'k4'], ['a4k']),
        conv('c5', 'a4k', 20, 17, 1, 1, (0, 0, 0, 0)),
        helper.make_node('Relu', ['c5'], ['a5']),
        conv('c6', 'a5', 17, 17, 3, 2, (0, 1, 1, 0), group=17),
        helper.make_node('LeakyRelu', ['c6'], ['a6'], alpha=0.1),
        conv('c7', 'a6', 17, 17, 3, 1, (1, 1, 1, 1), group=17),
        conv('k1', 'c7', 17, 24, 3, 1, (1, 1, 1, 1)),
        helper.make_node('Relu', ['k1'], ['b1']),
        conv('k2', 'b1', 24, 17, 3, 1, (1, 1, 1, 1)),
        helper.make_node('Add', ['k2', 'c7'], ['b2']),
        # A squeeze-excitation: its pool and the Mul (folded into c8) on blocks.
        *_squeeze_excitation(conv, 'b2', 17, 'HardSigmoid', 'm7'),
        conv('c8', 'm7', 17, 16, 1, 1, (0, 0, 0, 0)),
        helper.make_node('Sigmoid', ['c8'], ['y']),
    ]
    return make_model(nodes, [('x0', numpy.float32, (batch, 3, 18, 30))],
                      [('a3', numpy.float32, (batch, 20, 9, 15)),
                       ('y', numpy.float32, (batch, 16, 2, 4))], init, opset=14)


def _blocked(model):
    return block_chains(fuse(with_defaults(build_program(model))))


def test_a_chain_runs_blocked_between_reorders_at_its_edges():
    program = _blocked(chain_model(numpy.random.default_rng(0)))
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    # x from the stem in blocks (read by c1 and as c3's residual), the
    # residual sum out mid-chain for the caller, the end out; nothing else
    # leaves the chain.
    # The squeeze-excitation pools blocks; its Mul is the last product's
    # input 4.
    assert ops == ['NchwcStemConv'] + ['NchwcConv'] * 3 + ['NchwcReorderOut'] + \
        ['NchwcConv'] * 8 + ['NchwcGlobalAveragePool', 'Conv', 'Conv', 'HardSigmoid',
                             'NchwcConv', 'NchwcReorderOut']
    assert program.instructions[-2].inputs[4] == program.instructions[-3].outputs[0]
    conv = program.instructions[3]
    assert conv.inputs[3] == program.instructions[0].outputs[0]  # x blocked, as residual
    # A value only the chain reads keeps its register, now blocked.
    assert program.types[program.instructions[1].outputs[0]].shape == (2, 3, 9, 15, BLOCK)


def test_a_squeeze_excitation_read_elsewhere_keeps_its_mul():
    # The caller reads the Mul's result too: the product cannot fold it,
    # the scaled tensor leaves the chain for it.
    model = chain_model(numpy.random.default_rng(0))
    model.graph.output.append(helper.make_tensor_value_info(
        'm7', helper.np_dtype_to_tensor_dtype(numpy.dtype(numpy.float32)), (2, 17, 2, 4)))
    program = _blocked(model)
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    assert 'Mul' in ops and all(len(i.inputs) < 5 for i in program.instructions)


def test_chains_that_do_not_pay_stay_as_they_are():
    rng = numpy.random.default_rng(0)
    init = {}
    # MobileNet's block around a squeeze-excitation: the depthwise output
    # leaves the chain (for the Mul) and comes back; one depthwise Conv
    # does not pay two reorders.
    nodes = [_conv(init, rng, 'e', 'x', 16, 32, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'd', 'e', 32, 32, 3, 1, (1, 1, 1, 1), group=32),
             helper.make_node('Mul', ['d', 'x2'], ['m'])]
    init['x2'] = uniform(rng, 1, 32, 1, 1)
    model = make_model(nodes, [('x', numpy.float32, (1, 16, 8, 8))],
                       [('m', numpy.float32, (1, 32, 8, 8))], init)
    program = fuse(with_defaults(build_program(model)))
    assert chains(program) == [] and block_chains(program) is program
    # Fewer than MIN_CHANNELS channels: mostly padding, never blocked.
    init = {}
    nodes = [_conv(init, rng, 'e', 'x', 8, 8, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'd', 'e', 8, 8, 3, 1, (1, 1, 1, 1), group=8),
             _conv(init, rng, 'f', 'd', 8, 8, 3, 1, (1, 1, 1, 1), group=8)]
    model = make_model(nodes, [('x', numpy.float32, (1, 8, 8, 8))],
                       [('f', numpy.float32, (1, 8, 8, 8))], init)
    assert chains(fuse(with_defaults(build_program(model)))) == []


@pytest.mark.parametrize('channels, blocked', [(144, False), (64, True)])
def test_a_resnet_bottleneck_runs_blocked_and_its_winograd_conv_if_few_channels(channels,
                                                                                 blocked):
    # A 3x3 that Winograd runs (stride 1 at 28x28) stays NCHW when it has
    # more input channels than the blocks' Winograd takes, and joins the
    # chain otherwise; a stride-2 bottleneck (1x1, 3x3 s2, 1x1 plus a 1x1
    # s2 downsample) into the pool saves more multiply-adds than its one
    # reorder in costs: blocked.
    rng = numpy.random.default_rng(0)
    init = {}

    def conv(*args, **kwargs):
        return _conv(init, rng, *args, **kwargs)
    nodes = [conv('a', 'x', channels, 64, 3, 1, (1, 1, 1, 1)),
             helper.make_node('Relu', ['a'], ['y1']),
             conv('b1', 'y1', 64, 128, 1, 1, (0, 0, 0, 0)),
             helper.make_node('Relu', ['b1'], ['q1']),
             conv('b2', 'q1', 128, 128, 3, 2, (1, 1, 1, 1)),
             helper.make_node('Relu', ['b2'], ['q2']),
             conv('b3', 'q2', 128, 256, 1, 1, (0, 0, 0, 0)),
             conv('bd', 'y1', 64, 256, 1, 2, (0, 0, 0, 0)),
             helper.make_node('Add', ['b3', 'bd'], ['t']), helper.make_node('Relu', ['t'], ['u']),
             helper.make_node('GlobalAveragePool', ['u'], ['y'])]
    model = make_model(nodes, [('x', numpy.float32, (1, channels, 28, 28))],
                       [('y', numpy.float32, (1, 256, 1, 1))], init)
    ops = [i.qualified_op.replace(NCHWC, '') for i in _blocked(model).instructions]
    first = ['NchwcReorderIn', 'NchwcConv'] if blocked else ['Conv', 'NchwcReorderIn']
    assert ops == first + ['NchwcConv'] * 4 + ['NchwcGlobalAveragePool']


def _means_model(opset, means):
    """A blocked chain (1x1, 3x3 stride 2, 1x1 of 40 channels, ReLUs) whose
    end ``means`` average: (output name, axes, keepdims), the axes an
    attribute before opset 18 and a constant input from it."""
    rng = numpy.random.default_rng(0)
    init = {}
    nodes = [_conv(init, rng, 'a', 'x', 32, 64, 1, 1, (0, 0, 0, 0)),
             helper.make_node('Relu', ['a'], ['a1']),
             _conv(init, rng, 'b', 'a1', 64, 64, 3, 2, (1, 1, 1, 1)),
             helper.make_node('Relu', ['b'], ['b1']),
             _conv(init, rng, 'c', 'b1', 64, 40, 1, 1, (0, 0, 0, 0)),
             helper.make_node('Relu', ['c'], ['u'])]
    outputs = []
    for name, axes, keepdims in means:
        if opset >= 18:
            init[name + '_axes'] = numpy.array(axes, numpy.int64)
            nodes.append(helper.make_node('ReduceMean', ['u', name + '_axes'], [name],
                                          keepdims=keepdims))
        else:
            nodes.append(helper.make_node('ReduceMean', ['u'], [name], axes=axes,
                                          keepdims=keepdims))
        kept = [1 if k in [a % 4 for a in axes] else d for k, d in enumerate((2, 40, 14, 14))]
        outputs.append((name, numpy.float32, kept if keepdims else
                        [d for k, d in enumerate(kept) if k not in [a % 4 for a in axes]]))
    return make_model(nodes, [('x', numpy.float32, (2, 32, 28, 28))], outputs, init, opset=opset)


@pytest.mark.parametrize('opset', [13, 18])
def test_a_mean_over_each_plane_pools_the_blocks(opset):
    # torchvision's MNASNet ends in x.mean([2, 3]): like a GlobalAveragePool,
    # it reads the chain's blocks (no reorder out first), kept dims or not;
    # a mean over other axes reads a reordered copy.
    model = _means_model(opset, [('y', [2, 3], 0), ('z', [-1, -2], 1), ('w', [1, 2], 0)])
    ops = [i.qualified_op.replace(NCHWC, '') for i in _blocked(model).instructions]
    assert ops == ['NchwcReorderIn'] + ['NchwcConv'] * 3 + ['NchwcReorderOut'] + \
        ['NchwcGlobalAveragePool'] * 2 + ['ReduceMean']


@pytest.mark.native_build
def test_means_over_each_plane_on_blocks_compute_what_the_vm_computes():
    model = _means_model(18, [('y', [2, 3], 0), ('z', [-1, -2], 1)])
    check_native(model, [uniform(numpy.random.default_rng(2), 2, 32, 28, 28)])


@pytest.mark.parametrize('channels, size, blocked', [(256, 48, True), (272, 48, False),
                                                     (272, 40, True)])
def test_a_deep_large_input_stays_nchw(channels, size, blocked):
    # A product's tile reads every input block: past 16 blocks, an input of
    # more than DEEP_INPUT floats an image (272 x 48 x 48) runs on the GEMM.
    rng = numpy.random.default_rng(0)
    init = {}
    model = make_model([_conv(init, rng, 'p', 'x', channels, 64, 1, 1, (0, 0, 0, 0))],
                       [('x', numpy.float32, (2, channels, size, size))],
                       [('p', numpy.float32, (2, 64, size, size))], init)
    program = fuse(with_defaults(build_program(model)))
    assert blockable(program, program.instructions[0]) == blocked


@pytest.mark.parametrize('attrs', [{'dilations': [2, 2]}, {'group': 3}])
def test_a_program_asking_the_kernels_for_more_is_refused(attrs):
    # A Program file may hold NchwcConv itself: a dilation or a group that
    # is not the channels asks for another convolution than the kernels'.
    program = _blocked(chain_model(numpy.random.default_rng(0)))
    k = 1 if attrs.get('group') is None else 2  # the first 1x1, the first depthwise
    inst = program.instructions[k]
    program.instructions[k] = dataclasses.replace(inst, attrs={**inst.attrs, **attrs})
    with pytest.raises(UnsupportedNativeOpsError, match='NchwcConv is a dense or depthwise'):
        lower(program, 'm')


def test_dense_convolutions_and_strided_products_lower_to_the_dense_kernel():
    # chain_model's k3 (3x3, stride 2) and k4 (1x1, stride 2) run
    # ccn_nchwc_dense, its k1 and k2 (3x3, stride 1) Winograd; a 1x1 with
    # strides is no product either (the dense kernel checks each tap
    # against the input).
    program = _blocked(chain_model(numpy.random.default_rng(0)))

    def calls():
        return [line.split('(')[0] for step in lower(program, 'm').steps
                for line in step.render(lambda r: 'r%d' % r, None) if line.startswith('ccn_')]
    assert calls().count('ccn_nchwc_dense') == 2
    assert calls().count('ccn_nchwc_winograd') == 2
    k = next(i for i, inst in enumerate(program.instructions) if inst.op == 'NchwcConv' and
             program.constants[inst.inputs[1]].shape == (20, 20, 3, 3))  # k3
    inst = program.instructions[k]
    program.constants[inst.inputs[1]] = program.constants[inst.inputs[1]][:, :, :1, :1]
    program.instructions[k] = dataclasses.replace(inst, attrs={
        **inst.attrs, 'kernel_shape': [1, 1], 'pads': [0, 0, 0, 0]})
    assert calls().count('ccn_nchwc_dense') == 2


def _dense_3x3(channels, height, width, batch, act):
    """A 1x1 product to ``channels`` channels and a depthwise 3x3, then a
    dense 3x3 stride-1 Conv (bias, a residual Add, ``act``) of ``height`` x
    ``width`` pixels, two depthwise 3x3s and a product out: one chain (its
    depthwise Convs pay for its two reorders)."""
    rng = numpy.random.default_rng(channels + height)
    init = {}

    def conv(*args, **kwargs):
        return _conv(init, rng, *args, **kwargs)
    same = (1, 1, 1, 1)
    nodes = [conv('p1', 'x', 8, channels, 1, 1, (0, 0, 0, 0)),
             conv('d1', 'p1', channels, channels, 3, 1, same, group=channels),
             conv('k', 'd1', channels, channels, 3, 1, same),
             helper.make_node('Add', ['k', 'p1'], ['r']),
             helper.make_node(act, ['r'], ['a']),
             conv('d2', 'a', channels, channels, 3, 1, same, group=channels),
             conv('d3', 'd2', channels, channels, 3, 1, same, group=channels),
             conv('y', 'd3', channels, 24, 1, 1, (0, 0, 0, 0))]
    return make_model(nodes, [('x', numpy.float32, (batch, 8, height, width))],
                      [('y', numpy.float32, (batch, 24, height, width))], init, opset=14)


def test_a_3x3_of_more_input_blocks_than_winograd_keeps_stays_dense():
    def kernels(channels):
        program = _blocked(_dense_3x3(channels, 7, 7, 1, 'Relu'))
        return [line.split('(')[0] for step in lower(program, 'm').steps
                for line in step.render(lambda r: 'r%d' % r, None)
                if line.startswith(('ccn_nchwc_dense', 'ccn_nchwc_winograd'))]
    assert kernels(WINOGRAD_MAX_IN_BLOCKS * BLOCK) == ['ccn_nchwc_winograd']
    assert kernels(WINOGRAD_MAX_IN_BLOCKS * BLOCK + 1) == ['ccn_nchwc_dense']


@pytest.mark.parametrize('tile, g', [
    (2, [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
    (4, [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
])
def test_winograd_filters_are_g_g_gt_per_channel_pair(tile, g):
    # G of F(2x2, 3x3) and F(4x4, 3x3) as Lavin and Gray give them.
    rng = numpy.random.default_rng(0)
    w = rng.standard_normal((20, 5, 3, 3)).astype(numpy.float32)
    u = winograd_filters(w, tile, 1, 2)
    n = tile + 2
    assert u.shape == (n * n, 2, BLOCK, BLOCK)
    g = numpy.array(g)
    for o, c in [(0, 0), (19, 4), (7, 2)]:
        expected = g @ w[o, c] @ g.T
        numpy.testing.assert_allclose(u[:, o // BLOCK, c, o % BLOCK].reshape(n, n), expected,
                                      rtol=1e-6, atol=1e-7)
    assert not u[:, :, 5:].any() and not u[:, 1, :, 4:].any()  # past the channels


@pytest.mark.native_build
@pytest.mark.parametrize('channels, height, width, batch, act', [
    (16, 55, 55, 1, 'Relu'),      # SqueezeNet's first expand: F(4x4), the last tiles' rows 3 of 4
    (30, 6, 9, 2, 'Sigmoid'),     # F(2x2); 2 blocks, the last part; an epilogue after the stores
    (128, 7, 5, 1, 'HardSwish'),  # F(2x2); the most input blocks; fewer tiles than a piece
    (40, 7, 10, 2, 'Relu'),       # F(4x4) from 7 a side; 2 images
])
def test_winograd_on_blocks_computes_what_the_vm_computes(channels, height, width, batch, act):
    rng = numpy.random.default_rng(7)
    model = _dense_3x3(channels, height, width, batch, act)
    tile = 4 if min(height, width) >= WINOGRAD_TILE4_MIN_SIDE else 2
    assert any(line.startswith('ccn_nchwc_winograd(') and line.endswith(' %d,' % tile)
               for step in lower(_blocked(model), 'm').steps
               for line in step.render(lambda r: 'r%d' % r, None))
    # 1e-3: sums of up to 1152 products in [-1, 1] rounded in another order.
    check_native(model, [uniform(rng, batch, 8, height, width)], atol=1e-3)


@pytest.mark.native_build
@pytest.mark.parametrize('size', [6, 12])  # F(2x2), F(4x4)
def test_winograd_keeps_an_infinity_or_a_nan_to_the_windows_that_read_it(size):
    # The transforms mix a tile's whole patch: an infinity would become
    # NaN, and reach outputs whose windows do not hold it.  Such tiles are
    # summed as the dense kernel does, so the NaNs and infinities lie where
    # the VM puts them.
    rng = numpy.random.default_rng(8)
    model = _dense_3x3(16, size, size, 2, 'Identity')
    x = uniform(rng, 2, 8, size, size)
    x[0, 3, 2, 3] = numpy.inf
    x[1, 5, size - 1, 1] = numpy.nan
    with numpy.errstate(invalid='ignore'):  # the VM's sums of infinities
        got = check_native(model, [x], atol=1e-3, onnxruntime_check=False)[0]
    assert not numpy.isfinite(got[0]).all() and numpy.isnan(got[1]).any()


@pytest.mark.parametrize('case', ['scale of x', 'scaled depthwise', 'pool of x', 'pool to 33'])
def test_a_malformed_blocked_pool_or_scale_is_refused(case):
    # A Program file may hold them itself: a scale not of the product's
    # input channels, or a pool's channels not its input's blocks, would
    # read or write past the buffers.
    program = _blocked(chain_model(numpy.random.default_rng(0)))
    insts = program.instructions
    pool, product = insts[-6], insts[-2]
    assert (pool.op, product.op) == ('NchwcGlobalAveragePool', 'NchwcConv')
    if case == 'scale of x':
        insts[-2] = dataclasses.replace(product, inputs=product.inputs[:4] + (0,))
    elif case == 'scaled depthwise':
        insts[2] = dataclasses.replace(insts[2], inputs=insts[2].inputs + (-1, 0))
    elif case == 'pool of x':
        insts[-6] = dataclasses.replace(pool, inputs=(0,))
    else:
        program.types[pool.outputs[0]] = dataclasses.replace(
            program.types[pool.outputs[0]], shape=(2, 33, 1, 1))
    match = 'NchwcConv scales the input of a 1x1 product by' if 'scale' in case else \
        'NchwcGlobalAveragePool takes a blocked tensor to a declared'
    with pytest.raises(UnsupportedNativeOpsError, match=match):
        lower(program, 'm')


def _stem_model(outputs, channels=32, batch=1, size=32):
    """A stem (3 to ``channels`` channels, stride 2, from ``size`` x
    ``size``) and two depthwise Convs around a product: they pay the
    reorder out, not the stem's in too."""
    rng = numpy.random.default_rng(0)
    init, c = {}, channels
    nodes = [_conv(init, rng, 's', 'x', 3, c, 3, 2, (1, 1, 1, 1)),
             _conv(init, rng, 'd', 's', c, c, 3, 1, (1, 1, 1, 1), group=c),
             _conv(init, rng, 'p', 'd', c, c, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'e', 'p', c, c, 3, 1, (1, 1, 1, 1), group=c)]
    out = (size - 1) // 2 + 1
    return make_model(nodes, [('x', numpy.float32, (batch, 3, size, size))],
                      [(name, numpy.float32, (batch, c, out, out)) for name, c in outputs], init)


def _stem_block(outputs):
    return fuse(with_defaults(build_program(_stem_model(outputs))))


def test_a_stem_only_the_chain_reads_writes_blocks():
    program = block_chains(_stem_block([('e', 32)]))
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    assert ops == ['NchwcStemConv'] + ['NchwcConv'] * 3 + ['NchwcReorderOut']
    assert program.types[program.instructions[0].outputs[0]].shape == (1, 2, 16, 16, BLOCK)
    # The caller reads the stem's output too: it stays NCHW, and two
    # depthwise Convs do not pay two reorders.
    program = _stem_block([('e', 32), ('s', 32)])
    assert chains(program) == [] and block_chains(program) is program


@pytest.mark.native_build
@pytest.mark.parametrize('channels, size', [(16, 46), (40, 32), (84, 32)])
def test_a_blocked_stem_computes_what_the_vm_computes(channels, size):
    # Its tiles sum up to four blocks of output channels at once: 16 are
    # one block (tiles of 16 pixels, rows of 23: one tile and part of
    # another), 40 three blocks, 84 four and then two (tiles of 14, rows
    # of 16), the last block in part (its lanes past the channels zero,
    # which the depthwise Conv reads).
    model = _stem_model([('e', channels)], channels, batch=2, size=size)
    assert _blocked(model).instructions[0].op == 'NchwcStemConv'
    check_native(model, [uniform(numpy.random.default_rng(7), 2, 3, size, size)], atol=1e-4)


@pytest.mark.parametrize('case', ['residual', 'bias of 31', 'five channels', 'group 3'])
def test_a_malformed_blocked_stem_is_refused(case):
    # A Program file may hold NchwcStemConv itself: the kernel's stem path
    # takes few channels, one group, no residual and M values of bias.
    program = _blocked(chain_model(numpy.random.default_rng(0)))
    stem = program.instructions[0]
    assert stem.op == 'NchwcStemConv'
    if case == 'residual':
        program.instructions[0] = dataclasses.replace(stem, inputs=stem.inputs + (0,))
    elif case == 'bias of 31':
        program.constants[stem.inputs[2]] = numpy.zeros(31, numpy.float32)
    elif case == 'five channels':
        program.constants[stem.inputs[1]] = numpy.zeros((20, 5, 3, 3), numpy.float32)
        program.types[0] = dataclasses.replace(program.types[0], shape=(2, 5, 18, 22))
    else:
        program.instructions[0] = dataclasses.replace(stem, attrs={**stem.attrs, 'group': 3})
        program.constants[stem.inputs[1]] = numpy.zeros((20, 1, 3, 3), numpy.float32)
    with pytest.raises(UnsupportedNativeOpsError, match='NchwcStemConv is a direct stem Conv'):
        lower(program, 'm')


def test_the_block_and_geometry_are_the_headers():
    assert BLOCK == _define('CCN_NCHWC_BLOCK', 'ccn_nchwc.h')
    assert WINOGRAD_MAX_IN_BLOCKS == _define('CCN_NCHWC_WINOGRAD_MAX_IN_BLOCKS', 'ccn_nchwc.h')
    assert NCHWC_GEOMETRY.fields == _struct_fields('ccn_nchwc.h', NCHWC_GEOMETRY.ctype)


@pytest.mark.native_build
def test_a_blocked_chain_computes_what_the_vm_computes():
    rng = numpy.random.default_rng(1)
    check_native(chain_model(rng), [uniform(rng, 2, 3, 18, 30)])



def one_block_model(rng, height, width, batch=2):
    """Products of a single output block (16 channels or fewer), whose
    tiles are wider than the others' in the AVX-512 build: plain, with a
    residual Add, and of a squeeze-excitation's Mul (a scaled input), on a
    plane of ``height`` x ``width`` pixels between depthwise Convs."""
    init = {}

    def conv(*args, **kwargs):
        return _conv(init, rng, *args, **kwargs)
    nodes = [
        conv('d1', 'x', 24, 24, 3, 1, (1, 1, 1, 1), group=24),
        conv('p1', 'd1', 24, 16, 1, 1, (0, 0, 0, 0)),
        helper.make_node('Relu', ['p1'], ['a1']),
        conv('d2', 'a1', 16, 16, 3, 1, (1, 1, 1, 1), group=16),
        conv('p2', 'd2', 16, 16, 1, 1, (0, 0, 0, 0)),
        helper.make_node('Add', ['p2', 'd2'], ['a2']),
        conv('d3', 'a2', 16, 16, 3, 1, (1, 1, 1, 1), group=16),
        *_squeeze_excitation(conv, 'd3', 16, 'Sigmoid', 'm3'),
        conv('y', 'm3', 16, 16, 1, 1, (0, 0, 0, 0)),
    ]
    return make_model(nodes, [('x', numpy.float32, (batch, 24, height, width))],
                      [('y', numpy.float32, (batch, 16, height, width))], init, opset=14)


@pytest.mark.native_build
@pytest.mark.parametrize('height, width', [(9, 2), (7, 7)])
def test_products_of_one_output_block_compute_what_the_vm_computes(height, width):
    # 18 pixels: a tile of 12, then one ending at the plane's end storing
    # its last 6; 49: four tiles, then one pixel alone.
    rng = numpy.random.default_rng(2)
    _runs_blocked_as_the_vm(one_block_model(rng, height, width), 6,
                            uniform(rng, 2, 24, height, width))


def _runs_blocked_as_the_vm(model, convs: int, x):
    """Assert that ``model`` runs ``convs`` NchwcConvs and computes on
    ``x`` what the VM computes (outputs up to about 10 after layers of
    sums: 1e-4 is float32's rounding of such sums in another order, not a
    wrong tap)."""
    ops = [i.qualified_op.replace(NCHWC, '') for i in _blocked(model).instructions]
    assert ops.count('NchwcConv') == convs
    check_native(model, [x], atol=1e-4)


def same_rows_model(rng, height, width, batch=2):
    """Depthwise Convs padded by half their window, as PyTorch pads them
    (34 channels: the last block in part), between 1x1 products: 5x5 at
    stride 1, 3x3 at stride 2, 5x5 at stride 1 with a residual Add and a
    ReLU6, 3x3 at stride 2 with no padding right (floor's rounding drops
    it), 5x5 at stride 1."""
    init = {'lo': numpy.array(0, numpy.float32), 'hi': numpy.array(6, numpy.float32)}

    def conv(*args, **kwargs):
        return _conv(init, rng, *args, **kwargs)
    nodes = [
        conv('p1', 'x', 24, 34, 1, 1, (0, 0, 0, 0)),
        conv('d1', 'p1', 34, 34, 5, 1, (2, 2, 2, 2), group=34),
        conv('d2', 'd1', 34, 34, 3, 2, (1, 1, 1, 1), group=34),
        conv('d3', 'd2', 34, 34, 5, 1, (2, 2, 2, 2), group=34),
        helper.make_node('Add', ['d3', 'd2'], ['r3']),
        helper.make_node('Clip', ['r3', 'lo', 'hi'], ['a3']),
        conv('d4', 'a3', 34, 34, 3, 2, (1, 1, 0, 0), group=34),
        conv('d5', 'd4', 34, 34, 5, 1, (2, 2, 2, 2), group=34),
        conv('y', 'd5', 34, 16, 1, 1, (0, 0, 0, 0)),
    ]
    def out(n):  # through d2, then d4
        n = (n - 1) // 2 + 1
        return (n - 2) // 2 + 1
    return make_model(nodes, [('x', numpy.float32, (batch, 24, height, width))],
                      [('y', numpy.float32, (batch, 16, out(height), out(width)))], init,
                      opset=14)


@pytest.mark.native_build
@pytest.mark.parametrize('height, width', [(14, 28), (9, 32), (6, 23)])
def test_rows_padded_by_half_the_window_compute_what_the_vm_computes(height, width):
    # The rows run as equal tiles whose edge taps are known as they compile.
    # Width 28 -> 14 -> 7: four tiles of 7 (left edge, two inside, right
    # edge), two, then one holding both edges; 32 -> 16 -> 8: tiles of 8,
    # the same; 23 (odd: in_w is not twice out_w at stride 2) and the
    # narrow rows below a tile go as before, their taps checked.
    rng = numpy.random.default_rng(4)
    _runs_blocked_as_the_vm(same_rows_model(rng, height, width), 7,
                            uniform(rng, 2, 24, height, width))


def fire_model(rng, squeeze=(32, 48), expand=(128, 128), size=13, batch=1):
    """Two of SqueezeNet's fire modules at ``size`` x ``size``: a 1x1
    squeeze, then a 1x1 and a 3x3 expansion concatenated, the next squeeze
    reading the Concat; the second Concat is the output."""
    init = {}
    nodes, x, c = [], 'x', 64
    for k, (s, e) in enumerate(zip(squeeze, expand)):
        nodes += [_conv(init, rng, 's%d' % k, x, c, s, 1, 1, (0, 0, 0, 0)),
                  helper.make_node('Relu', ['s%d' % k], ['r%d' % k]),
                  _conv(init, rng, 'e%d' % k, 'r%d' % k, s, e, 1, 1, (0, 0, 0, 0)),
                  _conv(init, rng, 'f%d' % k, 'r%d' % k, s, e, 3, 1, (1, 1, 1, 1)),
                  helper.make_node('Concat', ['e%d' % k, 'f%d' % k], ['c%d' % k], axis=1)]
        x, c = 'c%d' % k, 2 * e
    return make_model(nodes, [('x', numpy.float32, (batch, 64, size, size))],
                      [(x, numpy.float32, (batch, c, size, size))], init, opset=13)


def test_fire_modules_at_13x13_concatenate_on_blocks():
    # ccn_conv2d_direct would lose a fifth of its lanes on 13x13 planes
    # (rows of 15 columns, 208 outputs summed for 169): the modules pay
    # their edges, and a Concat of whole blocks joins the chain.
    program = _blocked(fire_model(numpy.random.default_rng(0)))
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    assert ops == ['NchwcReorderIn'] + ['NchwcConv'] * 3 + ['Concat'] + \
        ['NchwcConv'] * 3 + ['Concat', 'NchwcReorderOut']
    concat = program.instructions[4]
    assert [program.types[r].shape for r in concat.inputs] == [(1, 8, 13, 13, BLOCK)] * 2
    assert concat.attrs['axis'] == 1
    assert direct_lane_use((1, 48, 13, 13), (128, 48, 3, 3), {'pads': [1] * 4}) == 169 / 208


def test_a_concat_of_part_blocks_or_large_planes_stays_nchw():
    rng = numpy.random.default_rng(0)
    # 120 channels: the second input would start mid-block.
    ops = [i.op for i in _blocked(fire_model(rng, expand=(120, 120))).instructions]
    assert 'Concat' in ops and ops.count('NchwcConv') < 6
    # At 56x56 the direct kernel loses few lanes: with 3x3s of more input
    # channels than the blocks' Winograd takes (they stay on the NCHW
    # one), the 1x1s alone do not pay.
    ops = [i.op for i in _blocked(fire_model(rng, squeeze=(144, 160), size=56)).instructions]
    assert not any(op.startswith('Nchwc') for op in ops)


@pytest.mark.native_build
def test_fire_modules_on_blocks_compute_what_the_vm_computes():
    rng = numpy.random.default_rng(3)
    # Outputs reach about 350 (sums of 1152 products of weights in [-1, 1]):
    # 1e-2 is float32's rounding of such sums in another order.
    check_native(fire_model(rng, batch=2), [uniform(rng, 2, 64, 13, 13)], atol=1e-2)


def test_a_product_of_half_a_block_keeps_its_chain_whole():
    # MNASNet-0.5's 16 -> 8 -> 24 between depthwise Convs: the 8-channel
    # value stays in blocks (half of one padding), nothing is reordered
    # mid-chain.  Depthwise Convs of 8 channels still never run blocked.
    rng = numpy.random.default_rng(4)
    init = {}
    nodes = [_conv(init, rng, 'd1', 'x', 16, 16, 3, 1, (1, 1, 1, 1), group=16),
             _conv(init, rng, 'p1', 'd1', 16, 8, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'p2', 'p1', 8, 24, 1, 1, (0, 0, 0, 0)),
             helper.make_node('Relu', ['p2'], ['a2']),
             _conv(init, rng, 'd2', 'a2', 24, 24, 3, 2, (1, 1, 1, 1), group=24),
             _conv(init, rng, 'd3', 'd2', 24, 24, 3, 1, (1, 1, 1, 1), group=24)]
    model = make_model(nodes, [('x', numpy.float32, (2, 16, 12, 12))],
                       [('d3', numpy.float32, (2, 24, 6, 6))], init)
    ops = [i.qualified_op.replace(NCHWC, '') for i in _blocked(model).instructions]
    assert ops == ['NchwcReorderIn'] + ['NchwcConv'] * 5 + ['NchwcReorderOut']
    check_native(model, [uniform(rng, 2, 16, 12, 12)], atol=1e-4)


def test_a_concat_of_values_made_outside_a_chain_stays_out_of_it():
    # Its inputs are the caller's: the Concat runs on NCHW and the chain
    # reading it reorders its result (the pass once looked the Concat up
    # as a chain member here and failed).
    rng = numpy.random.default_rng(5)
    init = {}
    nodes = [helper.make_node('Concat', ['a', 'b'], ['x'], axis=1),
             _conv(init, rng, 'd1', 'x', 32, 32, 3, 1, (1, 1, 1, 1), group=32),
             _conv(init, rng, 'p1', 'd1', 32, 32, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'd2', 'p1', 32, 32, 3, 1, (1, 1, 1, 1), group=32),
             _conv(init, rng, 'd3', 'd2', 32, 32, 3, 1, (1, 1, 1, 1), group=32)]
    model = make_model(nodes, [('a', numpy.float32, (1, 16, 8, 8)),
                               ('b', numpy.float32, (1, 16, 8, 8))],
                       [('d3', numpy.float32, (1, 32, 8, 8))], init)
    ops = [i.qualified_op.replace(NCHWC, '') for i in _blocked(model).instructions]
    assert ops == ['Concat', 'NchwcReorderIn'] + ['NchwcConv'] * 4 + ['NchwcReorderOut']


def pooled_stem_model(rng, stem_kernel=3, squeeze_act='Relu', batch=2, pool_stride=2,
                      pool_pads=(1, 0, 0, 1), ceil_mode=1):
    """SqueezeNet's first layers, small: a stem (3 to 32 channels, stride
    2, ``stem_kernel`` square) and a 3x3 MaxPool of it (by default stride
    2, padded top and right, ceil mode), a fire module (its squeeze's
    activation ``squeeze_act``, its 3x3 expansion of 16 channels, which
    Winograd would run on NCHW) and a 2x2 MaxPool of its Concat as the
    output."""
    init = {}
    size = (58 - stem_kernel) // 2 + 1
    rounding = math.ceil if ceil_mode else math.floor
    pooled = [rounding((size + pool_pads[k] + pool_pads[k + 2] - 3) / pool_stride) + 1
              for k in (0, 1)]
    nodes = [_conv(init, rng, 'stem', 'x', 3, 32, stem_kernel, 2, (0, 0, 0, 0)),
             helper.make_node('MaxPool', ['stem'], ['p'], kernel_shape=[3, 3],
                              strides=[pool_stride] * 2, pads=list(pool_pads),
                              ceil_mode=ceil_mode),
             _conv(init, rng, 's', 'p', 32, 16, 1, 1, (0, 0, 0, 0)),
             helper.make_node(squeeze_act, ['s'], ['r']),
             _conv(init, rng, 'e1', 'r', 16, 64, 1, 1, (0, 0, 0, 0)),
             _conv(init, rng, 'e3', 'r', 16, 64, 3, 1, (1, 1, 1, 1)),
             helper.make_node('Concat', ['e1', 'e3'], ['c'], axis=1),
             helper.make_node('MaxPool', ['c'], ['y'], kernel_shape=[2, 2], strides=[2, 2])]
    return make_model(nodes, [('x', numpy.float32, (batch, 3, 58, 58))],
                      [('y', numpy.float32, (batch, 128, pooled[0] // 2, pooled[1] // 2))],
                      init, opset=13)


def test_maxpools_of_a_3x3_stem_and_of_a_chain_run_on_blocks():
    program = _blocked(pooled_stem_model(numpy.random.default_rng(0)))
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    assert ops == ['NchwcStemConv', 'NchwcMaxPool'] + ['NchwcConv'] * 3 + \
        ['Concat', 'NchwcMaxPool', 'NchwcReorderOut']
    assert [program.types[i.outputs[0]].shape for i in program.instructions[1:2]] == \
        [(2, 2, 14, 14, BLOCK)]
    # A 7x7 stem (ResNet's) stays NCHW, and so does its pool: the chain
    # starts at the pool's reader.
    program = _blocked(pooled_stem_model(numpy.random.default_rng(0), stem_kernel=7))
    ops = [i.qualified_op.replace(NCHWC, '') for i in program.instructions]
    assert ops[:3] == ['Conv', 'MaxPool', 'NchwcReorderIn']


@pytest.mark.native_build
@pytest.mark.parametrize('stride, pads, ceil_mode', [
    (1, (1, 1, 1, 1), 0), (1, (0, 0, 0, 0), 0), (2, (1, 1, 1, 1), 0), (2, (0, 0, 0, 0), 1),
    (2, (0, 1, 0, 0), 0)])
def test_pools_whose_windows_share_columns_compute_what_the_vm_computes(stride, pads,
                                                                       ceil_mode):
    # 3x3 windows inside the row share each column's maximum over their
    # three rows with the next window (ccn_nchwc.c, windows_max3); those
    # at the padded edges go one by one.  A NaN in a column two windows
    # share wins both, as on the VM.
    rng = numpy.random.default_rng(stride * 10 + sum(pads))
    model = pooled_stem_model(rng, squeeze_act='Identity', batch=1, pool_stride=stride,
                              pool_pads=pads, ceil_mode=ceil_mode)
    assert _blocked(model).instructions[1].qualified_op == NCHWC + 'NchwcMaxPool'
    x = uniform(rng, 1, 3, 58, 58)
    check_native(model, [x], atol=1e-3)
    # The stem (stride 2, no padding) reads input row 31 and column 21 in
    # its pixel (15, 10) alone; its column 10 lies in two windows at either
    # stride, its row 15 in the middle of some.
    x[0, 1, 31, 21] = numpy.nan
    got = check_native(model, [x], atol=1e-3, onnxruntime_check=False)[0]
    assert numpy.isnan(got).any()


def test_a_blocked_maxpool_of_an_nchw_tensor_is_refused():
    # A Program file may hold NchwcMaxPool itself.
    program = _blocked(pooled_stem_model(numpy.random.default_rng(0)))
    pool = program.instructions[1]
    program.instructions[1] = dataclasses.replace(pool, inputs=(0,))
    with pytest.raises(UnsupportedNativeOpsError, match='NchwcMaxPool pools a blocked tensor'):
        lower(program, 'm')


@pytest.mark.native_build
def test_pools_on_blocks_compute_what_the_vm_computes():
    rng = numpy.random.default_rng(6)
    model = pooled_stem_model(rng)
    x = uniform(rng, 2, 3, 58, 58)
    check_native(model, [x], atol=1e-3)
    # A NaN wins its windows, as on the VM: the pools' first pass, by
    # MAXPS, would drop it.  (Not through a ReLU, which makes it 0 in
    # native code; onnxruntime's MaxPool lets a later tap win.)
    model = pooled_stem_model(rng, squeeze_act='Identity')
    x[1, 2, 30, 17] = numpy.nan
    got = check_native(model, [x], atol=1e-3, onnxruntime_check=False)[0]
    assert numpy.isnan(got[1]).any() and not numpy.isnan(got[0]).any()
