"""Direct convolutions (ccn_conv_direct.c): which Conv the rule sends there,
and its Step.  The kernel sums blocks of output channels by vectors of
outputs in registers from a padded copy of the input (for stride 2, its
four phases), where im2col would write each input KH*KW times into columns
that the product then packs back (benchmarks/NOTES.md, "Direct
convolutions")."""
import numpy

from ..cformat import CStruct
from ..lowering import BLOCK, Refuse, Step, blocked_shape, window
from .depthwise import _extent

#: ccn_conv_direct.h's CCN_DIRECT_ROWS, CCN_DIRECT_MAX_TAPS,
#: CCN_DIRECT_TILE, CCN_DIRECT_STEM_TAIL and CCN_DIRECT_STEM_FLOATS
#: (test_kernel_contract checks them).
DIRECT_ROWS = 8
DIRECT_MAX_TAPS = 64
DIRECT_TILE = 64
DIRECT_STEM_TAIL = 16
DIRECT_STEM_FLOATS = 16384
#: Input channels up to which a direct convolution is a stem (an image's
#: RGB or RGBA): read a row at a time, no planes.
DIRECT_STEM_CHANNELS = 4
#: Outputs per row from which the rule sends a convolution direct.
DIRECT_MIN_WIDTH = 12
#: The struct of ccn_conv_direct.h: how the input is laid out in scratch.
DIRECT_PLAN = CStruct('ccn_conv_direct_plan', ('stride', 'rows', 'row', 'plane', 'stem',
                                                'blocked', 'act', 'act_alpha'))


def takes_direct(weights_constant, group, group_outputs, kernel, strides, dilations,
                 out_width) -> bool:
    """The rule, stated here once, for a Conv that Winograd does not take
    (3x3 at stride 1 with 8 channels or more goes there first): it runs
    direct when its weights are constant (laid out at emit time), in one
    group or in groups of ``group_outputs`` output channels that the
    kernel's blocks of DIRECT_ROWS divide, undilated, with more than one tap
    (at most DIRECT_MAX_TAPS), stride 1 or 2 on both axes and, in one
    group, outputs at least DIRECT_MIN_WIDTH wide.
    Measured against im2col's product (one thread, batch 1,
    benchmarks/NOTES.md "Direct convolutions"): ResNet's 7x7 stride-2 conv1
    0.60x the time, its 3x3 stride-2 layers 0.81-0.88x, 5x5 and 7x7 at
    stride 1 0.61-0.78x, VGG's 3x3 over 3 channels 0.66x.  At 7x7 outputs a
    row fills half of the 16-float vectors, and the product's wide tiles,
    vectors down the output channels, win (1.10-1.13x direct); a 1x1
    convolution would copy the input to read it as it lies (at stride 2,
    four phases to read one: 2.7x).  RegNetY-400MF's 3x3 groups of 8
    channels, which im2col ran group by group through one buffer on one
    thread, run in blocks on every thread, its 7x7 ones too (the whole
    model on one thread: 0.88x its time with those of 56x56 to 14x14
    direct, then 0.91x of that with the 7x7 ones too)."""
    taps = kernel[0] * kernel[1]
    return (weights_constant and (group == 1 or group_outputs % DIRECT_ROWS == 0)
            and tuple(dilations) == (1, 1)
            and tuple(strides) in ((1, 1), (2, 2)) and 1 < taps <= DIRECT_MAX_TAPS
            and (out_width >= DIRECT_MIN_WIDTH or group > 1))


def direct_blocks(w) -> numpy.ndarray:
    """Constant (M, C, KH, KW) weights in ccn_conv_direct.h's layout:
    blocks of DIRECT_ROWS output channels (the last padded with zeros),
    each [c][kh][kw][row]."""
    w = numpy.asarray(w, numpy.float32)
    M = w.shape[0]
    padded = numpy.zeros((-(-M // DIRECT_ROWS) * DIRECT_ROWS,) + w.shape[1:], numpy.float32)
    padded[:M] = w
    return padded.reshape(-1, DIRECT_ROWS, w[0].size).transpose(0, 2, 1).ravel()


def lane_blocks(w) -> numpy.ndarray:
    """Constant (M, C, KH, KW) weights in the blocked stem's layout:
    blocks of 16 output channels (the last padded with zeros), each
    [c][kh][kw][lane]."""
    w = numpy.asarray(w, numpy.float32)
    lanes = blocked_shape((1,) + w.shape[:2] + (1,))[-1]
    padded = numpy.zeros((-(-w.shape[0] // lanes) * lanes,) + w.shape[1:], numpy.float32)
    padded[:w.shape[0]] = w
    return padded.reshape(-1, lanes, w[0].size).transpose(0, 2, 1).ravel()


def _padded(sizes, stride, pads_begin, kernel) -> tuple[int, int]:
    """Rows of a padded plane (or phase) and floats per row."""
    N, C, H, W, M, OH, OW = sizes
    PH = _extent(H, pads_begin[0], OH, stride, kernel[0], 1)
    PW = _extent(W, pads_begin[1], OW, stride, kernel[1], 1)
    return -(-PH // stride), -(-PW // stride)


def is_stem(sizes, stride, pads_begin, kernel) -> bool:
    """Whether a direct convolution of ``sizes`` (N, C, H, W, M, OH, OW)
    takes the stem path: few input channels, whose lines (C x KH, each
    `stride` phases) fit the kernel's stack array."""
    C, row = sizes[1], _padded(sizes, stride, pads_begin, kernel)[1]
    return C <= DIRECT_STEM_CHANNELS and \
        C * kernel[0] * stride * (row + DIRECT_STEM_TAIL) <= DIRECT_STEM_FLOATS


def stem_conv(x, w, attrs) -> tuple[int, ...] | None:
    """The sizes (N, C, H, W, M, OH, OW) of a one-group Conv of input shape
    ``x`` and weight shape ``w`` that ccn_conv2d_direct's stem path takes
    (is_stem), None when it takes no such Conv: the stems the NCHWc pass
    (blocked.py) may have write blocks."""
    if len(x) != 4 or w is None or len(w) != 4 or x[1] != w[1] or \
            int(attrs.get('group', 1)) != 1 or \
            tuple(attrs.get('kernel_shape') or w[2:]) != tuple(w[2:]):
        return None
    try:
        win = window(attrs, x[2:], w[2:])
    except Refuse:
        return None
    sizes = tuple(x) + (w[0],) + tuple(win.out)
    if win.dilations != (1, 1) or win.strides not in ((1, 1), (2, 2)) or \
            not 1 < w[2] * w[3] <= DIRECT_MAX_TAPS or min(sizes) < 1 or \
            not is_stem(sizes, win.strides[0], win.pads_begin, w[2:]):
        return None
    return sizes


def direct_lane_use(x, w, attrs) -> float:
    """The share of the outputs ccn_conv2d_direct's tiles sum that are
    outputs, for a one-group Conv of input shape ``x`` and weight shape
    ``w`` it runs on NCHW past the stem path: OH rows of the padded
    plane's width (the columns past OW lost), by vectors of BLOCK floats
    (the last one's lanes past the plane lost).  1 for one it does not run
    so.  At 13x13, 169 of 208 (SqueezeNet's 3x3 expansions: 1.3x their time
    on the NCHWc blocks, which lose no lanes)."""
    try:
        win = window(attrs, x[2:], w[2:])
    except Refuse:
        return 1.0
    sizes = tuple(x) + (w[0],) + tuple(win.out)
    group = int(attrs.get('group', 1))
    if not takes_direct(True, group, w[0] // group, w[2:], win.strides, win.dilations,
                        win.out[1]) or is_stem(sizes, win.strides[0], win.pads_begin, w[2:]):
        return 1.0
    row = _padded(sizes, win.strides[0], win.pads_begin, w[2:])[1]
    computed = -(-win.out[0] * row // BLOCK) * BLOCK
    return win.out[0] * win.out[1] / computed


def direct_step(em, inst, geometry, w, sizes, window, act, blocked=False) -> Step:
    """Conv ``inst`` as ccn_conv2d_direct: ``geometry`` its
    ccn_conv_geometry, ``w`` its constant weights (KH x KW taps), ``sizes``
    (N, C, H, W, M, OH, OW), ``window`` (strides, pads_begin), ``act`` the
    epilogue (CCN_ACT_* enum, slope).  A fourth input, the residual, is
    added before the activation as the outputs are stored.  ``blocked``
    (a stem without a residual: the caller checks) writes the output in
    blocks of 16 channels (blocked.py's layout)."""
    N, C, H, W, M, OH, OW = sizes
    (stride, _), pads_begin = window
    KH, KW = w.shape[2:]
    rows, row = _padded(sizes, stride, pads_begin, (KH, KW))
    stem = w.shape[1] == C and is_stem(sizes, stride, pads_begin, (KH, KW))  # one group
    assert stem or not blocked
    plan = DIRECT_PLAN.literal(stride=stride, rows=rows, row=row,
                               plane=rows * row * stride * stride, stem=int(stem),
                               blocked=int(blocked), act=act[0], act_alpha=act[1])
    blocks = em.constant_array('direct%d' % inst.outputs[0],
                               lane_blocks(w) if blocked else direct_blocks(w))
    extra = [em.has(inst, k) for k in (2, 3)]

    def render(ref, scratch):
        bias, residual = (ref(inst.inputs[k]) if has else 'NULL'
                          for k, has in zip((2, 3), extra))
        return ['ccn_conv2d_direct(%s,' % geometry,
                '                  %s,' % plan,
                '                  %s, %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), blocks, bias, residual, ref(inst.outputs[0]),
                    'NULL' if stem else scratch)]
    scratch = 0 if stem else C * rows * row * stride * stride + row + KW + DIRECT_TILE
    # The output may take a dying residual's memory: each element is read
    # before it is written.
    out = (N, M, OH, OW)
    return Step('conv_direct', [blocked_shape(out) if blocked else out], render,
                scratch=scratch, also=('gemm',), in_place=(3,) if extra[1] else ())

