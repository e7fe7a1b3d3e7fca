"""Gemm, FusedGemm, MatMul (ccn_gemm.c) and Conv (ccn_connection.c) as
kernel calls.

Each of them may carry an ``activation`` attribute ('Relu', 'LeakyRelu'
with ``activation_alpha``, 'Sigmoid', 'Tanh', 'HardSwish', 'Swish', 'Gelu'
with ``activation_alpha`` 1 for its tanh form, 'Clip' from 0 to
``activation_alpha``; the epilogue activations' records say which):
FusedGemm has it from the
VM's own fusion, and runtime/native/fusion.py sets it on Conv, Gemm and
MatMul when it folds a following activation into them.  The kernels apply
it as they store their results (the GEMM's epilogue).

A Conv may carry a fourth input, the residual: fusion.py makes the Add of
another tensor of the output's shape after it (a ResNet block's shortcut)
that input, which the im2col product starts from (with the bias) before
the activation; the other paths add it in one pass after their kernel."""
import dataclasses
import math
import re

import numpy

from ...ops.fusion_rules import epilogue_alpha, product_epilogues
from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import CStruct, cfloat
from ..gemm_layout import PANEL_MIN_ROWS, STRIP_COLS, pack_panels
from ..lowering import Refuse, Step, conv_geometry, lowers, unit_height, window
from .conv_direct import direct_step, takes_direct
from .depthwise import band_rows, depthwise_step, is_depthwise
from .winograd import (
    MIN_FILTER_GRADIENT_WIDTH,
    winograd_grad_filter_step,
    winograd_step,
    winograd_tiles,
)

#: A batched MatMul whose products have this many multiply-adds each (an
#: attention's heads from 256 tokens of 64) runs them one after the other
#: by the blocked GEMM, each split between threads: ccn_matmul_batched's
#: tiles for small products took 1.1x to 2.2x its time there, and were
#: ahead below (benchmarks/NOTES.md, "Attention at long sequences").
BLOCKED_PRODUCT_MACS = 1 << 22
#: A run-time transposed B goes to ccn_gemm_bt up to BT_MAX_ROWS rows of A
#: from a depth of BT_MIN_DEPTH, and up to BT_DEEP_MAX_ROWS rows from
#: BT_DEEP_DEPTH, instead of being transposed for ccn_gemm_ex (measured
#: against that: 3x faster at 8 x 784 by 100, 1.3x at 16 x 100 by 100;
#: 1.2x at 64 x 400 by 120 and 64 x 784 by 100, but 0.7x at 64 x 100 by 100).
BT_MAX_ROWS = 16
BT_MIN_DEPTH = 64
BT_DEEP_MAX_ROWS = 64
BT_DEEP_DEPTH = 256
#: Columns a convolution's product should have at least: below, several
#: images share one product so the weights are read once for all of them.
CONV_COLUMNS = 256
#: A dilated convolution with constant weights whose (tap, output) pairs
#: read the input less than this share of the time (the rest padding) runs
#: tap by tap (ccn_conv2d_taps) rather than as im2col's product.
TAPS_SHARE = 0.5
#: The same for the products of a convolution's gradients (ConvGradFilter's
#: depth, ConvTranspose's columns), whose other operands are not packed at
#: emit time: each product reads or writes the whole weight gradient.
GRAD_COLUMNS = 1024
#: The most floats of gy one ConvGradFilter product takes, fewer images
#: where the output channels are many: that gy is transposed or gathered
#: into scratch (ResNet-50's 256 -> 1024 at 4x4, batch 64: 32 images, 2
#: MiB, not 64; 0.8-0.95x the kernel's time, the copy staying in cache).
GRAD_GY_FLOATS = 1 << 19
#: ccn_connection.h's CCN_GRAD_BLOCK_FLOATS: the gradients' im2col columns
#: are built and multiplied by blocks of about this many floats.
GRAD_BLOCK_FLOATS = 65536
#: The structs of ccn_connection.h the convolutions take: the geometry
#: (also ConvTranspose's and Winograd's) and how an im2col one runs.
CONV_PLAN = CStruct('ccn_conv_plan', ('images', 'direct', 'w_panels', 'act', 'act_alpha'))
#: The structs of ccn_gemm.h the products take: a product's sizes, strides
#: and epilogue, and the batch of a batched MatMul.
GEMM_GEOMETRY = CStruct('ccn_gemm_geometry', (
    'M', 'N', 'K', 'a_rs', 'a_cs', 'ldb', 'ldc', 'act', 'act_alpha'))
MATMUL_BATCH = CStruct('ccn_matmul_batch', ('rank', 'dims', 'a_strides', 'b_strides'))


def activation(inst) -> tuple[str, float]:
    """(the CCN_ACT_* enum, the slope) of ``inst``'s activation attribute
    (none: CCN_ACT_NONE)."""
    name = inst.attrs.get('activation')
    if name is None and inst.op != 'FusedGemm':
        return 'CCN_ACT_NONE', 0.0
    if name not in product_epilogues():
        raise Refuse('activation %r is not one of %s' % (name, ', '.join(product_epilogues())))
    return activation_enum(name), float(inst.attrs.get('activation_alpha',
                                                       epilogue_alpha(name, {})))


def activation_enum(op: str) -> str:
    """The C enum of epilogue ``op`` in ccn_gemm.h (LeakyRelu:
    CCN_ACT_LEAKY_RELU); a test checks the header has every one."""
    return 'CCN_ACT_' + re.sub(r'(?<!^)(?=[A-Z])', '_', op).upper()


@lowers('Gemm', CUSTOM_DOMAIN + '::FusedGemm')
def gemm(em, inst) -> Step:
    a = inst.attrs
    act, act_alpha = activation(inst)
    sa, sb = em.shape(inst, 0), em.shape(inst, 1)
    if len(sa) != 2 or len(sb) != 2:
        raise Refuse('Gemm needs 2-D A and B, got %s and %s' % (list(sa), list(sb)))
    trans_a, trans_b = int(a['transA']), int(a['transB'])
    alpha, beta = float(a['alpha']), float(a['beta'])
    M, K = (sa[1], sa[0]) if trans_a else sa
    Kb, N = (sb[1], sb[0]) if trans_b else sb
    if K != Kb:
        raise Refuse('Gemm inner sizes differ: %s x %s' % (list(sa), list(sb)))
    bias_rs = bias_cs = 0
    has_bias = em.has(inst, 2)
    if has_bias:
        sc = em.shape(inst, 2)
        padded = (1,) * (2 - len(sc)) + sc if len(sc) <= 2 else None
        if padded is None or padded[0] not in (1, M) or padded[1] not in (1, N):
            raise Refuse('Gemm bias of shape %s does not broadcast to %s' % (list(sc), [M, N]))
        bias_cs = 1 if padded[1] != 1 else 0
        bias_rs = padded[1] if padded[0] != 1 else 0
    b_reg = inst.inputs[1]
    b_const = em.const(b_reg) is not None
    # A run-time N x K B (a training step's weights) times a few rows: dot
    # products on B as it lies beat transposing it first.
    run_time_bt = not b_const and trans_b and (
        (M <= BT_MAX_ROWS and K >= BT_MIN_DEPTH) or (M <= BT_DEEP_MAX_ROWS and K >= BT_DEEP_DEPTH))
    # A constant B goes to ccn_gemm_strips in strips packed here once (a
    # few rows read them in one sequential pass); a run-time B to
    # ccn_gemm_ex as row-major K x N, transposed into scratch if need be.
    dots = run_time_bt and (not trans_a or M == 1)
    strips = None
    if b_const:
        b = numpy.asarray(em.const(b_reg), numpy.float32)
        strips = em.constant_array('strips%d' % inst.outputs[0],
                                   pack_panels(b if trans_b else b.T, STRIP_COLS))
    # B's rows: N x K for the dot products, else K x N (strips: N, unread).
    geometry = GEMM_GEOMETRY.literal(M=M, N=N, K=K, a_rs=1 if trans_a else K,
                                     a_cs=M if trans_a else 1, ldb=K if dots else N, ldc=N,
                                     act=act, act_alpha=act_alpha)

    def render(ref, scratch):
        y = ref(inst.outputs[0])
        lines = []
        b = strips or ref(b_reg)
        if trans_b and not b_const and not dots:
            lines.append('ccn_transpose(%d, %d, %s, %s);' % (N, K, ref(b_reg), scratch))
            b = scratch
        # Without a bias to start from, the product sets y (no zeroing);
        # the strips' first store adds a bias row itself.
        no_bias = not has_bias or beta == 0.0
        set_y = not dots and not strips and no_bias
        row_bias = strips and (no_bias or (bias_rs, bias_cs, beta) == (0, 1, 1.0))
        if not set_y and not row_bias:
            lines.append('ccn_gemm_init(%d, %d, %s, %s, %d, %d, %s);' % (
                M, N, y, ref(inst.inputs[2]) if has_bias else 'NULL', bias_rs, bias_cs,
                cfloat(beta)))
        if row_bias:
            lines += ['ccn_gemm_strips_set(%s,' % geometry, '    %s, %s, %s, %s, %s);' % (
                ref(inst.inputs[0]), strips, cfloat(alpha),
                'NULL' if no_bias else ref(inst.inputs[2]), y)]
            return lines
        function = ('ccn_gemm_bt' if dots else 'ccn_gemm_strips' if strips
                    else 'ccn_gemm_set' if set_y else 'ccn_gemm_ex')
        lines.append('%s(%s,' % (function, geometry))
        lines.append('    %s, %s, %s, %s);' % (ref(inst.inputs[0]), b, cfloat(alpha), y))
        return lines
    return Step('gemm', [(M, N)], render,
                scratch=K * N if trans_b and not b_const and not dots else 0)


@lowers('MatMul')
def matmul(em, inst) -> Step:
    """numpy.matmul: 1-D operands promoted to a row (A) or column (B)
    vector and dropped from the result, leading dims broadcast."""
    act, act_alpha = activation(inst)
    sa, sb = em.shape(inst, 0), em.shape(inst, 1)
    if not sa or not sb:
        raise Refuse('MatMul of a 0-d operand is not defined')
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    M, K, Kb, N = a2[-2], a2[-1], b2[-2], b2[-1]
    if K != Kb:
        raise Refuse('MatMul inner sizes differ: %s x %s' % (list(sa), list(sb)))
    try:
        batch = tuple(numpy.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise Refuse('MatMul batch dims %s and %s do not broadcast'
                     % (list(sa[:-2]), list(sb[:-2]))) from None
    out = batch + ((M,) if len(sa) > 1 else ()) + ((N,) if len(sb) > 1 else ())
    a_strides = _batch_strides(a2, batch)
    b_strides = _batch_strides(b2, batch)
    # A row-major B shared by every batch: one product with the batch
    # folded into A's rows.
    flat = not any(b_strides) and all(s == M * K * math.prod(batch[d + 1:]) or batch[d] == 1
                                      for d, s in enumerate(a_strides))
    rows = math.prod(batch) * M
    # Large products whose matrices lie one after the other: one by one.
    blocked = not flat and M * N * K >= BLOCKED_PRODUCT_MACS and \
        a_strides == _batch_strides(batch + (M, K), batch) and \
        b_strides == _batch_strides(batch + (K, N), batch)
    # A constant B: packed in strips here once.
    b_const = em.const(inst.inputs[1])
    strips = None
    if flat and b_const is not None:
        strips = em.constant_array('strips%d' % inst.outputs[0], pack_panels(
            numpy.asarray(b_const, numpy.float32).reshape(K, N).T, STRIP_COLS))

    # A bias of N values (runtime/native/fusion.py makes the Add after a
    # product by a constant B the third input): the product starts from it
    # (the strips add it at their first store).
    bias = inst.inputs[2] if len(inst.inputs) > 2 else None
    if bias is not None and (not strips or math.prod(em.shape(inst, 2)) != N):
        raise Refuse('a MatMul bias needs a constant B and %d values' % N)

    # Row-major A, B (K x N) and C.
    geometry = GEMM_GEOMETRY.literal(M=rows if flat else M, N=N, K=K, a_rs=K, a_cs=1,
                                     ldb=N, ldc=N, act=act, act_alpha=act_alpha)

    def render(ref, scratch):
        a, y = ref(inst.inputs[0]), ref(inst.outputs[0])
        if strips:
            return ['ccn_gemm_strips_set(%s,' % geometry, '    %s, %s, 1.0f, %s, %s);' % (
                a, strips, ref(bias) if bias is not None else 'NULL', y)]
        b = ref(inst.inputs[1])
        if flat:
            return ['ccn_gemm_set(%s,' % geometry, '    %s, %s, 1.0f, %s);' % (a, b, y)]
        if blocked:
            return ['for (long t = 0; t < %d; t++)' % math.prod(batch),
                    '    ccn_gemm_set(%s,' % geometry, '        %s + t * %d, %s + t * %d, '
                    '1.0f, %s + t * %d);' % (a, M * K, b, K * N, y, M * N)]
        return ['ccn_matmul_batched(%s,' % MATMUL_BATCH.literal(
                    rank=len(batch), dims=batch, a_strides=a_strides, b_strides=b_strides),
                '    %s, %s, %s, %s);' % (geometry, a, b, y)]
    return Step('gemm', [out], render)


def _batch_strides(shape, batch) -> tuple[int, ...]:
    """Strides in floats of a row-major operand of ``shape`` (its last two
    dims a matrix) along each of the broadcast ``batch`` dims: 0 where the
    operand has no such dim or size 1."""
    own = shape[:-2]
    offset = len(batch) - len(own)
    strides = []
    for d in range(len(batch)):
        k = d - offset
        size = own[k] if k >= 0 else 1
        strides.append(0 if size == 1 else math.prod(own[k + 1:]) * shape[-2] * shape[-1])
    return tuple(strides)


def images_per_product(batch, pixels, columns):
    """How many of ``batch`` images of ``pixels`` output pixels each share
    one product so that it has about ``columns`` columns."""
    return max(1, min(batch, -(-columns // max(1, pixels))))


def grad_columns(channels, taps, columns) -> int:
    """Floats of scratch for a block of the im2col columns of ``channels``
    channels, ``taps`` rows of ``columns`` each (ccn_grad_columns)."""
    return min(channels * taps * columns, max(GRAD_BLOCK_FLOATS, taps * columns))


def _check_conv(em, inst, sx, sw) -> int:
    """The Conv's group, after refusing a kernel_shape that is not the
    weight's, a group that does not divide the channels, or a bias that is
    not one value per output channel."""
    group, M = int(inst.attrs['group']), sw[0]
    kernel_shape = inst.attrs.get('kernel_shape')
    if kernel_shape is not None and tuple(kernel_shape) != tuple(sw[2:]):
        raise Refuse('kernel_shape %s differs from the weight' % list(kernel_shape))
    if group < 1 or sx[1] % group or M % group or sw[1] * group != sx[1]:
        raise Refuse('group=%d does not fit input %s and weight %s'
                     % (group, list(sx), list(sw)))
    if em.has(inst, 2) and em.shape(inst, 2) != (M,):
        raise Refuse('bias shape %s is not (%d,)' % (list(em.shape(inst, 2)), M))
    return group


def _tap_reads(size, out, kernel, strides, dilations, pads_begin):
    """Per spatial axis of a convolution, how many output positions each
    tap reads the input at (rather than padding)."""
    reads = []
    for n, o, k, s, d, p in zip(size, out, kernel, strides, dilations, pads_begin):
        at = numpy.arange(o)[:, None] * s - p + numpy.arange(k)[None, :] * d
        reads.append(((at >= 0) & (at < n)).sum(axis=0))
    return reads


def live_taps(size, out, kernel, strides, dilations, pads_begin):
    """Per spatial axis, the range [first, last + 1) of a convolution's
    taps that read the input at some output position (the others read only
    padding: a 3x3 kernel dilated by 24 over a 14x14 map reads the image
    through its centre tap alone).  An axis none of whose taps reads the
    input keeps all of them."""
    ranges = []
    for k, counts in zip(kernel, _tap_reads(size, out, kernel, strides, dilations, pads_begin)):
        live = numpy.flatnonzero(counts)
        ranges.append((int(live[0]), int(live[-1]) + 1) if live.size else (0, k))
    return tuple(ranges)


def image_share(size, out, kernel, strides, dilations, pads_begin) -> float:
    """The share of a 2-D convolution's (tap, output) pairs that read the
    input: what of im2col's product is not padding's zeros."""
    rows, cols = _tap_reads(size, out, kernel, strides, dilations, pads_begin)
    return float(rows.sum() * cols.sum()) / (kernel[0] * kernel[1] * out[0] * out[1])


@lowers('Conv')
def conv(em, inst) -> Step:
    a = inst.attrs
    act, act_alpha = activation(inst)
    sx, sw = em.shape(inst, 0), em.shape(inst, 1)
    residual = em.has(inst, 3)
    if residual and len(sx) != 4:
        raise Refuse('a residual is fused into 2-D convolutions only, not %d-D'
                     % (len(sx) - 2))
    if len(sx) == len(sw) == 3:  # 1-D: a unit height
        return unit_height(conv, em, inst, lifted=(0, 1))
    if len(sx) == len(sw) == 5:
        return conv3d(em, inst, sx, sw, (act, act_alpha))
    if len(sx) != 4 or len(sw) != 4:
        raise Refuse('only 1-D, 2-D and 3-D convolution (3-D to 5-D input and weight) is '
                     'supported, got %s and %s' % (list(sx), list(sw)))
    N, C, H, W = sx
    M, Cg, KH, KW = sw
    group = _check_conv(em, inst, sx, sw)
    win = window(a, (H, W), (KH, KW))
    OH, OW = win.out
    # The kernels read the residual as they write the output.
    if residual and em.shape(inst, 3) != (N, M, OH, OW):
        raise Refuse('residual of shape %s is not the output\'s %s'
                     % (list(em.shape(inst, 3)), [N, M, OH, OW]))
    geometry = conv_geometry(N, C, (H, W), M, (OH, OW), (KH, KW), group, win.strides,
                             win.dilations, win.pads_begin)
    if is_depthwise(C, M, group):
        return _add_residual(inst, depthwise_step(
            em, inst, geometry, band_rows(win.out, (KH, KW), win.strides, win.dilations),
            (N, M, OH, OW),
            ('CCN_ACT_NONE', 0.0) if residual else (act, act_alpha)), (act, act_alpha),
            N * M * OH * OW)
    w = em.const(inst.inputs[1])
    pads_begin = win.pads_begin
    taps = live_taps((H, W), win.out, (KH, KW), win.strides, win.dilations, pads_begin)
    trimmed = None
    if w is not None and taps != ((0, KH), (0, KW)):
        # Constant weights: the taps that only ever read padding (a dilation
        # wider than the image) are dropped, the padding shifted to match.
        (h0, h1), (w0, w1) = taps
        w = numpy.asarray(w, numpy.float32)[:, :, h0:h1, w0:w1]
        trimmed = em.constant_array('taps%d' % inst.outputs[0], w)
        KH, KW = h1 - h0, w1 - w0
        pads_begin = (pads_begin[0] - h0 * win.dilations[0],
                      pads_begin[1] - w0 * win.dilations[1])
        geometry = conv_geometry(N, C, (H, W), M, (OH, OW), (KH, KW), group, win.strides,
                                 win.dilations, pads_begin)
    if w is not None and group == 1 and win.dilations != (1, 1) and image_share(
            (H, W), win.out, (KH, KW), win.strides, win.dilations, pads_begin) < TAPS_SHARE:
        return _add_residual(inst, conv_taps(
            em, inst, geometry, numpy.asarray(w, numpy.float32), (N, C, M, OH, OW),
            ('CCN_ACT_NONE', 0.0) if residual else (act, act_alpha)), (act, act_alpha),
            N * M * OH * OW)
    tiles = winograd_tiles(N, C, M, (OH, OW), (KH, KW), win.strides, win.dilations, group,
                           phases=True, direct=takes_direct(w is not None, group, M // group,
                                                            (KH, KW), win.strides, win.dilations,
                                                            OW))
    if tiles is not None and trimmed is None:  # (Winograd reads the untrimmed weights)
        # The residual in a pass after: added inside the output transform
        # (each channel's rows in turn) the block took 1.14x the unfused
        # time (64 channels at 56x56, one thread), after it 1.0x.
        return _add_residual(inst, winograd_step(
            em, inst, geometry, sx, M, (OH, OW), tiles, 'filters',
            ('CCN_ACT_NONE', 0.0) if residual else (act, act_alpha), win.dilations),
            (act, act_alpha), N * M * OH * OW)
    if takes_direct(w is not None, group, M // group, (KH, KW), win.strides, win.dilations,
                    OW):
        return direct_step(em, inst, geometry, numpy.asarray(w, numpy.float32),
                           (N, C, H, W, M, OH, OW), (win.strides, pads_begin), (act, act_alpha))
    S = OH * OW
    has_bias = em.has(inst, 2)
    # Constant weights go in the panel layout, packed here once rather than
    # on every call.
    panels = None
    if w is not None and M // group >= PANEL_MIN_ROWS:
        mats = numpy.asarray(w, numpy.float32).reshape(group, M // group, -1)
        panels = em.constant_array('panels%d' % inst.outputs[0],
                                   numpy.concatenate([pack_panels(m) for m in mats]))
    pointwise = (KH, KW, OH, OW) == (1, 1, H, W) and win.strides == (1, 1) \
        and tuple(pads_begin) == (0, 0)
    # A 1x1 convolution of constant weights multiplies each image where it
    # lies (ccn_gemm_panels_images), however few its pixels: several images
    # per product copied their columns in and the result out (7x7 and 14x14
    # layers at batch 32 0.83x-0.97x the time; benchmarks/NOTES.md).
    images = 1 if pointwise and panels is not None else \
        images_per_product(N, S, CONV_COLUMNS)
    # Decided here, once: the kernel trusts it (no scratch on this path).
    direct = images == 1 and pointwise

    plan = CONV_PLAN.literal(images=images, direct=direct, w_panels=panels is not None,
                             act=act, act_alpha=act_alpha)

    def render(ref, scratch):
        return ['ccn_conv2d(%s,' % geometry,
                '           %s,' % plan,
                '           %s, %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), panels or trimmed or ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL',
                    ref(inst.inputs[3]) if residual else 'NULL', ref(inst.outputs[0]),
                    'NULL' if direct else scratch)]
    scratch = 0 if direct else Cg * KH * KW * S * images + (M // group * S * images
                                                            if images > 1 else 0)
    # The output may take a dying residual's memory: fill_start reads each
    # element before the product writes it.
    return Step('connection', [(N, M, OH, OW)], render, scratch=scratch, also=('gemm',),
                in_place=(3,) if residual else ())


def _add_residual(inst, step: Step, act, size: int) -> Step:
    """``step`` (run without its activation when the Conv has a residual)
    followed by the residual's Add and the activation ``act`` over the
    ``size`` outputs in one pass: for the kernels that do not add it as
    they store."""
    if len(inst.inputs) < 4:
        return step

    def render(ref, scratch):
        return step.render(ref, scratch) + ['ccn_add_activate(%d, %s, %s, %s, %s);' % (
            size, ref(inst.outputs[0]), ref(inst.inputs[3]), act[0], cfloat(act[1]))]
    return dataclasses.replace(step, render=render, also=tuple(dict.fromkeys(
        step.also + ('gemm',))))


def conv_taps(em, inst, geometry, w, sizes, act) -> Step:
    """A dilated Conv as ccn_conv2d_taps, tap by tap over the pixels each
    reads: ``w`` its constant (M, C, KH, KW) weights, ``sizes`` (N, C, M,
    OH, OW), ``act`` the epilogue (CCN_ACT_* enum, slope)."""
    N, C, M, OH, OW = sizes
    taps = em.constant_array('tappanels%d' % inst.outputs[0], numpy.concatenate(
        [pack_panels(w[:, :, kh, kw]) for kh in range(w.shape[2]) for kw in range(w.shape[3])]))
    has_bias = em.has(inst, 2)

    def render(ref, scratch):
        return ['ccn_conv2d_taps(%s, %s, %s,' % (geometry, act[0], cfloat(act[1])),
                '                %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), taps, ref(inst.inputs[2]) if has_bias else 'NULL',
                    ref(inst.outputs[0]), scratch)]
    return Step('connection', [(N, M, OH, OW)], render, scratch=(C + M) * OH * OW,
                also=('gemm',))


@lowers(CUSTOM_DOMAIN + '::ConvGradFilter')
def conv_grad_filter(em, inst) -> Step:
    a = inst.attrs
    sx, sg = em.shape(inst, 0), em.shape(inst, 1)
    kernel = tuple(a.get('kernel_shape') or ())
    if len(sx) != 4 or len(sg) != 4 or len(kernel) != 2:
        raise Refuse('only 2-D convolution (4-D input and gradient) is supported, got '
                     '%s and %s' % (list(sx), list(sg)))
    N, C, H, W = sx
    M, OH, OW = sg[1], sg[2], sg[3]
    group = int(a['group'])
    if sg[0] != N or group < 1 or C % group or M % group:
        raise Refuse('input %s, gradient %s and group=%d do not fit'
                     % (list(sx), list(sg), group))
    strides = tuple(a.get('strides') or (1, 1))
    dilations = tuple(a.get('dilations') or (1, 1))
    pads = tuple(a.get('pads') or (0, 0, 0, 0))
    KH, KW = kernel
    geometry = conv_geometry(N, C, (H, W), M, (OH, OW), kernel, group, strides, dilations,
                             pads[:2])
    tiles = winograd_tiles(N, C, M, (OH, OW), kernel, strides, dilations, group,
                           MIN_FILTER_GRADIENT_WIDTH)
    if tiles is not None:
        return winograd_grad_filter_step(em, inst, geometry, sx, M, tiles)
    Cg = C // group
    S = OH * OW
    images = images_per_product(N, S, min(GRAD_COLUMNS, GRAD_GY_FLOATS // (M // group)))

    plan = CONV_PLAN.literal(images=images, direct=False, w_panels=False, act='CCN_ACT_NONE',
                             act_alpha=0.0)

    def render(ref, scratch):
        return ['ccn_conv2d_grad_filter(%s,' % geometry,
                '                       %s,' % plan,
                '                       %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]), ref(inst.outputs[0]), scratch)]
    # ccn_conv2d_grad_filter's: a block of columns, gy, then the block
    # transposed or a part of gw^T no larger than it (or one row).
    columns = grad_columns(Cg, KH * KW, S * images)
    scratch = columns + S * images * (M // group) + max(columns, M // group)
    return Step('connection', [(M, Cg, KH, KW)], render, scratch=scratch, also=('gemm',))


CONV3D_GEOMETRY = CStruct('ccn_conv3d_geometry', (
    'batch', 'in_channels', 'out_channels', 'group', 'in', 'out', 'kernel', 'stride', 'dil',
    'pad_begin'))


def conv3d(em, inst, sx, sw, act) -> Step:
    """A 3-D Conv as ccn_conv3d (im2col and one product per image and
    group); ``act`` is its epilogue (the CCN_ACT_* enum, the slope)."""
    a = inst.attrs
    (N, C), (M, Cg) = sx[:2], sw[:2]
    group = _check_conv(em, inst, sx, sw)
    win = window(a, sx[2:], sw[2:])
    geometry = CONV3D_GEOMETRY.literal(**{  # 'in' is a Python keyword
        'batch': N, 'in_channels': C, 'out_channels': M, 'group': group, 'in': tuple(sx[2:]),
        'out': tuple(win.out), 'kernel': tuple(sw[2:]), 'stride': tuple(win.strides),
        'dil': tuple(win.dilations), 'pad_begin': tuple(win.pads_begin)})
    has_bias = em.has(inst, 2)

    def render(ref, scratch):
        return ['ccn_conv3d(%s, %s, %s,' % (geometry, act[0], cfloat(act[1])),
                '           %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]), scratch)]
    return Step('connection', [(N, M) + tuple(win.out)], render,
                scratch=max(1, Cg * math.prod(sw[2:]) * math.prod(win.out)), also=('gemm',))
