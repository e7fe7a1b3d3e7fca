"""The blocked convolutions blocked.py puts in chains (NchwcConv) and the
reorders at their edges, as calls into ccn_nchwc.c; the weights, biases
re-laid here, once, in blocks of BLOCK output channels (zero past the
channels, so that the padded lanes of the inputs add nothing)."""
import numpy

from ...ops.registry import CUSTOM_DOMAIN
from ..cformat import CStruct
from ..lowering import BLOCK, Refuse, Step, blocked_shape, conv_geometry, lowers, window
from .connection import activation
from .conv_direct import direct_step, stem_conv
from .winograd import filter_transforms

#: ccn_nchwc.h's geometry of a blocked convolution.
NCHWC_GEOMETRY = CStruct('ccn_nchwc_geometry', (
    'batch', 'in_channels', 'in_blocks', 'out_blocks', 'in_h', 'in_w', 'out_h', 'out_w',
    'kernel_h', 'kernel_w', 'stride_h', 'stride_w', 'pad_top', 'pad_left', 'act', 'act_alpha'))


#: Most input blocks of a dense 3x3 stride-1 Conv on ccn_nchwc_winograd
#: (its header's CCN_NCHWC_WINOGRAD_MAX_IN_BLOCKS: the transforms of a
#: piece's tiles stay on the stack).  Up to there, F(4x4, 3x3) took
#: 0.33x-0.56x the dense kernel's time from 16 to 128 channels at 7x7 to
#: 112x112, and less than the NCHW Winograd's (benchmarks/NOTES.md); past,
#: the chains' 3x3 Convs are ResNet's 512 at 7x7, where the dense kernel
#: runs at its peak on few tiles.
WINOGRAD_MAX_IN_BLOCKS = 8
#: The smallest output side that takes F(4x4, 3x3) on blocks, else F(2x2,
#: 3x3): at 6x6, 4 tiles of 4x4 compute 64 outputs for 36 (0.85x the
#: dense kernel's time against F(2x2)'s 0.77x), at 7x7 0.56x against 0.70x.
WINOGRAD_TILE4_MIN_SIDE = 7


def _blocks(channels: int) -> int:
    return -(-channels // BLOCK)


def winograd_filters(w: numpy.ndarray, tile: int, in_blocks: int,
                     out_blocks: int) -> numpy.ndarray:
    """Filters ``w`` (M, C, 3, 3) as ccn_nchwc_winograd reads them for tiles
    ``tile`` wide: ((tile + 2)^2, out blocks, in blocks * BLOCK, BLOCK),
    element xi of each output and input channel's G g G^T
    (winograd.filter_transforms), zero past the channels."""
    m, c = w.shape[:2]
    points = (tile + 2) ** 2
    padded = numpy.zeros((points, in_blocks * BLOCK, out_blocks * BLOCK), numpy.float32)
    padded[:, :c, :m] = filter_transforms(w, tile).transpose(0, 2, 1)
    return padded.reshape(points, in_blocks * BLOCK, out_blocks, BLOCK).transpose(0, 2, 1, 3)


@lowers(CUSTOM_DOMAIN + '::NchwcReorderIn')
def reorder_in(em, inst) -> Step:
    s = em.shape(inst, 0)
    if len(s) != 4:
        raise Refuse('NchwcReorderIn takes (N, C, H, W), got %s' % list(s))
    n, c, h, w = s

    def render(ref, scratch):
        return ['ccn_nchwc_reorder_in(%d, %d, %d, %s, %s);' % (
            n, c, h * w, ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('nchwc', [blocked_shape(s)], render)


def _declared_4d(em, r: int, pooled: bool = False) -> tuple[int, ...] | None:
    """Register ``r``'s declared static 4-D shape, None when it has none
    (``pooled``: a declared (N, C) too, as the (N, C, 1, 1) it lies as)."""
    declared = em.p.types.get(r)
    out = tuple(declared.shape or ()) if declared is not None else ()
    if pooled and len(out) == 2:
        out += (1, 1)
    return out if len(out) == 4 and all(isinstance(d, int) and d >= 0 for d in out) else None


@lowers(CUSTOM_DOMAIN + '::NchwcReorderOut')
def reorder_out(em, inst) -> Step:
    s = em.shape(inst, 0)
    out = _declared_4d(em, inst.outputs[0])
    if len(s) != 5 or out is None:
        raise Refuse('NchwcReorderOut takes a blocked tensor to a declared (N, C, H, W)')
    if blocked_shape(out) != s:
        raise Refuse('blocked %s is not %s' % (list(s), list(out)))

    def render(ref, scratch):
        return ['ccn_nchwc_reorder_out(%d, %d, %d, %s, %s);' % (
            out[0], out[1], out[2] * out[3], ref(inst.inputs[0]), ref(inst.outputs[0]))]
    return Step('nchwc', [out], render)


@lowers(CUSTOM_DOMAIN + '::NchwcGlobalAveragePool')
def global_average_pool(em, inst) -> Step:
    """A squeeze-excitation's or a classifier's pool of a blocked tensor, to
    a plain (N, C, 1, 1) or (N, C)."""
    s = em.shape(inst, 0)
    out = _declared_4d(em, inst.outputs[0], pooled=True)
    if len(s) != 5 or out is None or out[2:] != (1, 1) or blocked_shape(out[:2] + s[2:4]) != s:
        raise Refuse('NchwcGlobalAveragePool takes a blocked tensor to a declared (N, C, 1, 1) '
                     'or (N, C) of its channels, got %s to %s' % (list(s), list(out or ())))

    def render(ref, scratch):
        return ['ccn_nchwc_global_average_pool(%d, %d, %d, %s, %s);' % (
            out[0], out[1], s[2] * s[3], ref(inst.inputs[0]), ref(inst.outputs[0]))]
    kept = len(em.p.types[inst.outputs[0]].shape) == 4
    return Step('nchwc', [out if kept else out[:2]], render)


@lowers(CUSTOM_DOMAIN + '::NchwcMaxPool')
def max_pool(em, inst) -> Step:
    """A 2-D MaxPool of a blocked tensor (no dilation, no Indices), blocked."""
    sx = em.shape(inst, 0)
    a = inst.attrs
    kernel = tuple(a.get('kernel_shape') or ())
    if len(sx) != 5 or sx[4] != BLOCK or len(kernel) != 2 or len(inst.outputs) != 1:
        raise Refuse('NchwcMaxPool pools a blocked tensor by a 2-D window to one output, got '
                     '%s by %s' % (list(sx), list(kernel)))
    n, blocks, h, wd, _ = sx
    win = window(a, (h, wd), kernel, int(a.get('ceil_mode', 0)))
    if win.dilations != (1, 1):
        raise Refuse('NchwcMaxPool takes no dilation, got %s' % list(win.dilations))
    geometry = NCHWC_GEOMETRY.literal(
        batch=n, in_channels=blocks * BLOCK, in_blocks=blocks, out_blocks=blocks, in_h=h,
        in_w=wd, out_h=win.out[0], out_w=win.out[1], kernel_h=kernel[0], kernel_w=kernel[1],
        stride_h=win.strides[0], stride_w=win.strides[1], pad_top=win.pads_begin[0],
        pad_left=win.pads_begin[1], act=0, act_alpha=0.0)

    def render(ref, scratch):
        return ['ccn_nchwc_maxpool(%s, %s, %s);' % (geometry, ref(inst.inputs[0]),
                                                     ref(inst.outputs[0]))]
    return Step('nchwc', [(n, blocks) + win.out + (BLOCK,)], render)


@lowers(CUSTOM_DOMAIN + '::NchwcStemConv')
def stem(em, inst) -> Step:
    """A stem Conv (conv_direct.stem_conv) writing a chain's blocked input:
    ccn_conv2d_direct's stem path, its output in blocks."""
    sx, w = em.shape(inst, 0), em.const(inst.inputs[1])
    sizes = stem_conv(sx, None if w is None else w.shape, inst.attrs)
    b = em.const(inst.inputs[2]) if em.has(inst, 2) else None
    if sizes is None or em.has(inst, 3) or len(inst.inputs) > 4 or \
            (em.has(inst, 2) and (b is None or b.shape != (sizes[4],))):
        raise Refuse('NchwcStemConv is a direct stem Conv (at most 4 input channels, constant '
                     'weights and bias, one group, no residual), got input %s' % list(sx))
    N, C, H, W, M, OH, OW = sizes
    win = window(inst.attrs, (H, W), w.shape[2:])
    geometry = conv_geometry(N, C, (H, W), M, (OH, OW), w.shape[2:], 1, win.strides,
                             win.dilations, win.pads_begin)
    return direct_step(em, inst, geometry, numpy.asarray(w, numpy.float32), sizes,
                       (win.strides, win.pads_begin), activation(inst), blocked=True)


@lowers(CUSTOM_DOMAIN + '::NchwcConv')
def nchwc_conv(em, inst) -> Step:
    """A Conv of blocked.blockable on blocked tensors: a 1x1 product, a
    depthwise or a dense convolution (a 3x3 stride-1 one of at most
    WINOGRAD_MAX_IN_BLOCKS input blocks by Winograd, F(4x4, 3x3) from
    WINOGRAD_TILE4_MIN_SIDE outputs a side); a product's input 4,
    (N, C, 1, 1), scales its input's channels per image (a
    squeeze-excitation's Mul)."""
    sx = em.shape(inst, 0)
    w = em.const(inst.inputs[1])
    if len(sx) != 5 or w is None or w.ndim != 4:
        raise Refuse('NchwcConv takes a blocked input and constant 4-D weights')
    n, blocks, h, wd, lanes = sx
    m, cg, kh, kw = w.shape
    win = window(inst.attrs, (h, wd), (kh, kw))
    group = int(inst.attrs.get('group', 1))
    depthwise = group > 1
    pointwise = not depthwise and (kh, kw, win.strides, win.out) == (1, 1, (1, 1), (h, wd))
    # What the kernels compute, nothing else (a Program may say anything).
    if lanes != BLOCK or win.dilations != (1, 1) or (depthwise and (group, cg) != (m, 1)):
        raise Refuse('NchwcConv is a dense or depthwise convolution without dilation, on '
                     'blocks of %d channels' % BLOCK)
    channels = m if depthwise else cg
    if _blocks(channels) != blocks:
        raise Refuse('%d channels are not %d blocks' % (channels, blocks))
    out = (n, _blocks(m), win.out[0], win.out[1], BLOCK)
    residual = em.has(inst, 3)
    if residual and em.shape(inst, 3) != out:
        raise Refuse('residual %s is not the output %s' % (list(em.shape(inst, 3)), list(out)))
    scaled = em.has(inst, 4)
    if scaled and (not pointwise or em.shape(inst, 4) != (n, channels, 1, 1)):
        raise Refuse('NchwcConv scales the input of a 1x1 product by (%d, %d, 1, 1), got %s'
                     % (n, channels, list(em.shape(inst, 4))))
    w = numpy.asarray(w, numpy.float32)
    winograd = not depthwise and (kh, kw, win.strides) == (3, 3, (1, 1)) and \
        blocks <= WINOGRAD_MAX_IN_BLOCKS
    tile = 4 if min(win.out) >= WINOGRAD_TILE4_MIN_SIDE else 2
    if winograd:
        laid = winograd_filters(w, tile, blocks, out[1])
    elif depthwise:  # (blocks, KH, KW, BLOCK)
        padded = numpy.zeros((out[1] * BLOCK, kh, kw), numpy.float32)
        padded[:m] = w[:, 0]
        laid = padded.reshape(out[1], BLOCK, kh, kw).transpose(0, 2, 3, 1)
    else:  # (out blocks, in blocks, KH, KW, BLOCK in, BLOCK out); a product's KH = KW = 1
        padded = numpy.zeros((out[1] * BLOCK, blocks * BLOCK, kh, kw), numpy.float32)
        padded[:m, :channels] = w
        laid = padded.reshape(out[1], BLOCK, blocks, BLOCK, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    weights = em.constant_array('nchwc%d' % inst.outputs[0], laid)
    bias = None
    if em.has(inst, 2):
        b = em.const(inst.inputs[2])
        if b is None or b.shape != (m,):
            raise Refuse('NchwcConv takes a constant bias of %d values' % m)
        bias = em.constant_array('nchwcb%d' % inst.outputs[0], numpy.pad(
            numpy.asarray(b, numpy.float32), (0, out[1] * BLOCK - m)))
    act, act_alpha = activation(inst)
    geometry = NCHWC_GEOMETRY.literal(
        batch=n, in_channels=channels, in_blocks=blocks, out_blocks=out[1], in_h=h, in_w=wd,
        out_h=out[2], out_w=out[3], kernel_h=kh, kernel_w=kw, stride_h=win.strides[0],
        stride_w=win.strides[1], pad_top=win.pads_begin[0], pad_left=win.pads_begin[1],
        act=act, act_alpha=act_alpha)
    function = 'ccn_nchwc_' + ('pointwise' if pointwise else 'depthwise' if depthwise else
                               'winograd' if winograd else 'dense')

    def render(ref, scratch):
        scale = '' if not pointwise else (ref(inst.inputs[4]) if scaled else 'NULL') + ', '
        size = ' %d,' % tile if winograd else ''
        return ['%s(%s,%s' % (function, geometry, size), '    %s, %s%s, %s, %s, %s);' % (
            ref(inst.inputs[0]), scale, weights, bias or 'NULL',
            ref(inst.inputs[3]) if residual else 'NULL', ref(inst.outputs[0]))]
    return Step('nchwc', [out], render, also=('gemm',))
