"""3x3 stride-1 Conv, ConvTranspose (the gradient of a convolution's
input) and ConvGradFilter by Winograd's minimal filtering F(2x2, 3x3), as
calls into ccn_winograd.c: 16 multiply-adds per 2x2 outputs and channel
pair where im2col's product takes 36, for transforms of the input and
output that cost memory traffic.  A Conv with constant weights takes
F(4x4, 3x3) (36 per 4x4 outputs) where its outputs are TILE4_MIN_WIDTH
wide; a dilated Conv runs as an undilated one per phase of its input.

Measured against im2col and GEMM on 2 cores at batch 8 (forward, filter
gradient; the input gradient about as the forward): 64 channels at 32x32
-44% to -52%, -23% to -31%; 128 at 16x16 -37% to -45%, -30%; 256 at 8x8
-19% to -31%, -3% to -20%; 16 at 32x32 -44%, -34%; 8 at 32x32 -24%, -20%.
It loses where rows of tiles are short or the products shallow: 512
channels at 4x4 +31% (forward), 16 at 8x8 +46%, +61%, 64 at 8x8 +14%
(filter gradient), 3 channels at 64x64 +58% (filter gradient).  The
ResNet-18-style training step at batch 8, the two lowerings alternating in
one process: 105 to 88 ms (-15%)."""
import numpy

from ..cformat import CStruct
from ..gemm_layout import pack_panels
from ..lowering import Step

#: Fewest channels (input and output), narrowest output, and least product
#: of the two, with which a convolution goes to ccn_conv2d_winograd (and
#: its input gradient to the same); the filter gradient needs outputs
#: MIN_FILTER_GRADIENT_WIDTH wide.  At 7 wide Winograd's time against
#: im2col's at batch 8 (one thread, one process, CPU time): 512 channels
#: 0.93x (batch 1: FEW_TILES).
MIN_CHANNELS = 8
MIN_WIDTH = 7
MIN_WIDTH_CHANNELS = 224
MIN_FILTER_GRADIENT_WIDTH = 16
#: Most 2x2 tiles (all images) of a convolution that goes to im2col even
#: though it is wide enough: each of the 16 products reads a whole plane of
#: transformed filters (16 of them, 1.8x the filters) for these few columns.
#: 7 wide at batch 1 (16 tiles), one thread, CPU time, im2col / Winograd:
#: ResNet's 512 channels 0.62, 256 0.84, DenseNet's 128 -> 32 0.79; 512 at
#: 8x8 0.97.  Past it, Winograd / im2col: 256 at 10x10 (25 tiles) 0.85,
#: 512 at 7x7 batch 8 0.93; at batch 2 (32 tiles) 1.12, left to Winograd.
FEW_TILES = 16
#: Most 2x2 tiles per image, and most input times output channels, of a
#: convolution that ccn_conv_direct takes instead where it can (constant
#: weights; conv_direct.takes_direct): 13 and 14 wide.  There F(2x2)'s 16
#: products are 49 columns an image, shallow or of few rows; at batch 32
#: more images make longer products but blocks of 126 tiles whose scratch
#: overflows L2: SqueezeNet's 48 -> 192 and 64 -> 256 at 13x13, batch 32,
#: direct / Winograd 0.62, 0.75 (per layer in the model).  Batch 1, one
#: thread, CPU time, Conv + ReLU, direct / Winograd: SqueezeNet's 48 -> 192
#: and 64 -> 256 at 13x13 0.85, 0.87; DenseNet's 128 -> 32 at 14x14 0.58-0.62;
#: 64 -> 64 0.72, 128 -> 64 0.84, 256 -> 64 at 13x13 0.86, 128 -> 128 1.00;
#: past it 256 -> 256 at 13x13 and 14x14 1.14-1.16, 64 -> 64 at 16x16 (64
#: tiles) 1.05.
DIRECT_MAX_TILES = 49
DIRECT_MAX_CHANNELS = 128 * 128
#: Most output channels, and most 2x2 tiles, of a convolution that
#: ccn_conv_direct takes instead where it can, however deep its input: 28
#: wide at batch 1, where F(4x4, 3x3)'s products have a few rows.  The same
#: measure: 128 -> 16 at 28x28 0.60, DenseNet's 128 -> 32 0.82 (at 24x24
#: 0.78), 64 -> 32 0.87, 256 -> 32 0.79; past it 128 -> 48 1.15, 128 -> 32
#: at 56x56 (784 tiles) 1.17.
DIRECT_MAX_OUTPUTS = 32
DIRECT_MAX_OUTPUTS_TILES = 196
#: Widest output sent there: the transforms keep a few rows of the image
#: on the stack (at most about 56 bytes per output column: F(4x4, 3x3)'s
#: six rows and their transforms), which a worker thread's stack holds up
#: to this width with room to spare.
MAX_WIDTH = 1024
#: Floats of transformed inputs and products per block of tiles, the
#: scratch that goes round the 16 products (measured best against half and
#: twice this on an AMD Zen 5).
BLOCK_FLOATS = 16 * 65536
#: Fewest tiles per block (whole rows of tiles, all of them permitting),
#: past BLOCK_FLOATS: each block's products read every transformed filter,
#: and a few tiles per read left them bound by memory (FCN's 2048 -> 512
#: channels at 28x28, batch 1, F(4x4, 3x3): blocks of one row of 7 tiles
#: 122 ms, 2 rows 58 ms, all 49 tiles 46 ms; one thread, CPU time).
MIN_BLOCK_TILES = 64
#: Most tiles per block (whole rows of tiles permitting): on an Intel Xeon
#: with AVX-512 (2 MiB of L2), one thread, batch 8, blocks of 128 tiles
#: made the forward at 64 channels and 32x32 23% faster than 512 and the
#: filter gradient 10%, at 128 channels and 16x16 8% and 10% (than 256),
#: and left 256 at 8x8 as it was.
MAX_BLOCK_TILES = 128
#: CCN_WINOGRAD_SKEW of ccn_winograd.h: floats between the planes of a
#: transform beyond their size.
SKEW = 16
#: CCN_WINOGRAD_LANES of ccn_winograd.h: floats of slack after each row of
#: a convolution's transformed inputs and products (the transforms run in
#: vectors of that many tiles).
LANES = 8
#: Narrowest output of a Conv with constant weights that takes F(4x4, 3x3):
#: one thread, batch 1, against F(2x2, 3x3), C driver, CPU time: 0.62x to
#: 0.72x at 27 to 56 wide (32 to 128 channels), 0.76x at 20 (128 and 256);
#: 1.11x at 16 (64), 1.17x at 13 and 14 (256: rows of 4 tiles, products
#: of 16 columns).  A dilated output counts whole, as its phases share a row
#: of tiles: 28 wide at dilation 4 (rows of 4 x 2 tiles), 512 channels,
#: 0.69x F(2x2, 3x3)'s time; at dilation 2, 256 and 512 channels, 0.97x-1.03x.
TILE4_MIN_WIDTH = 20
#: Most input channels of a Conv with constant weights whose F(4x4, 3x3)
#: products run shallow (ccn_winograd.h's plan): a few output channels'
#: products over the whole depth in registers, then their outputs at once.
#: One thread, batch 1, C driver, CPU time, against ccn_gemm.c's products
#: of each plane: SqueezeNet's 16 -> 64 channels at 55x55 0.7x, 32 -> 128
#: at 27x27 0.83x-0.97x, 48 -> 192 0.93x-0.96x; ResNet's 64 -> 64 at 56x56
#: 0.81x-0.85x; 128 -> 128 at 28x28 1.16x-1.23x.
SHALLOW_MAX_CHANNELS = 64
#: The same for weights given at run time (F(2x2, 3x3): a training step's
#: forward and input gradient), whose blocks waste at most an eighth of
#: their last SHALLOW_CHUNK: batch 8, 64 channels at 32x32 0.94x, 128 at
#: 16x16 0.85x-0.90x (one run 1.02x); 256 at 8x8 1.16x-1.26x.
SHALLOW_MAX_RUNTIME_CHANNELS = 128
#: Most tiles per block of shallow products: their rows of V and M stay
#: in L1 and L2 (16 -> 64 channels at 55x55: blocks of 28 to 56 tiles
#: 0.70x the old time, of 126 0.8x-0.9x).
SHALLOW_BLOCK_TILES = 64
#: Tiles the shallow products take at a time (two vectors of 16; a block
#: of 49 tiles computes 64), and so the floats of slack after each row of
#: their transformed inputs and products (CCN_WINOGRAD_SLACK).
SHALLOW_CHUNK = 32
#: The plan struct of ccn_winograd.h: tiles per block, the weights' form
#: (CCN_WINOGRAD_*), the epilogue activation, the tiles' width and whether
#: the products run shallow.
WINOGRAD_PLAN = CStruct('ccn_winograd_plan',
                        ('tiles', 'weights', 'act', 'act_alpha', 'tile', 'shallow'))


def winograd_tiles(batch, channels_in, channels_out, out_size, kernel, strides, dilations,
                   group, min_width=MIN_WIDTH, phases=False, direct=False) -> int | None:
    """The 2x2 output tiles per block (whole rows of them) with which
    ccn_winograd.c computes this convolution or one of its gradients, or
    None when it should not: not 3x3 with stride 1 in one group, dilated
    unless ``phases`` (a Conv: ccn_conv2d_winograd runs it per phase of
    the input, and the widths below are a phase's), too few channels or
    too narrow an output (below ``min_width``) or too few tiles (FEW_TILES)
    for it to pay, or an output wider than MAX_WIDTH; or, when ``direct``
    (ccn_conv_direct can take it), few tiles an image and channels
    (DIRECT_MAX_TILES, DIRECT_MAX_CHANNELS) or few tiles and output
    channels (DIRECT_MAX_OUTPUTS_TILES, DIRECT_MAX_OUTPUTS)."""
    channels = min(channels_in, channels_out)
    width = -(-out_size[1] // dilations[1])
    tiles = batch * _tiles_across(out_size[0], dilations[0], 2) \
        * _tiles_across(out_size[1], dilations[1], 2)
    if tuple(kernel) != (3, 3) or tuple(strides) != (1, 1) or group != 1 \
            or (tuple(dilations) != (1, 1) and not phases) or channels < MIN_CHANNELS \
            or width < min_width or out_size[1] > MAX_WIDTH \
            or channels * width < MIN_WIDTH_CHANNELS or tiles <= FEW_TILES \
            or direct and (tiles <= DIRECT_MAX_TILES * batch
                           and channels_in * channels_out <= DIRECT_MAX_CHANNELS
                           or tiles <= DIRECT_MAX_OUTPUTS_TILES
                           and channels_out <= DIRECT_MAX_OUTPUTS):
        return None
    return block_tiles(batch, channels_in, channels_out, out_size, 2, dilations)


def _tiles_across(size, dilation, tile) -> int:
    """Tiles ``tile`` wide across an axis of ``size`` outputs dilated by
    ``dilation``: as many for each phase as the first (widest) takes."""
    phase = -(-size // dilation)
    return dilation * -(-phase // tile)


def block_tiles(batch, channels_in, channels_out, out_size, tile, dilations=(1, 1)) -> int:
    """The output tiles ``tile`` wide per block, whole rows of them (a row
    holds the tiles of every column phase): at most MAX_BLOCK_TILES (a row
    at least) and BLOCK_FLOATS of transformed inputs and products unless
    that leaves fewer than MIN_BLOCK_TILES, at most all of them."""
    tile_cols = _tiles_across(out_size[1], dilations[1], tile)
    tile_rows = batch * _tiles_across(out_size[0], dilations[0], tile)
    planes = (tile + 2) ** 2
    fit = BLOCK_FLOATS // (planes * (channels_in + channels_out) * tile_cols)
    rows = max(1, min(max(fit, MIN_BLOCK_TILES // tile_cols), MAX_BLOCK_TILES // tile_cols))
    return min(rows, tile_rows) * tile_cols


def shallow_block_tiles(batch, out_size, tile, dilations=(1, 1)) -> int:
    """The output tiles per block of shallow products: whole rows of them,
    at most SHALLOW_BLOCK_TILES (a row at least), the count that wastes
    least of its last SHALLOW_CHUNK (the most rows among equals)."""
    tile_cols = _tiles_across(out_size[1], dilations[1], tile)
    tile_rows = batch * _tiles_across(out_size[0], dilations[0], tile)
    candidates = range(1, max(1, min(tile_rows, SHALLOW_BLOCK_TILES // tile_cols)) + 1)
    rows = max(candidates, key=lambda r: (r * tile_cols / -(-r * tile_cols // SHALLOW_CHUNK), r))
    return rows * tile_cols


#: G of F(2x2, 3x3) and F(4x4, 3x3) by tile width: a filter g becomes G g
#: G^T (ccn_winograd.c's transform_filters does F(2x2, 3x3)'s at run time).
_G = {2: numpy.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
      4: numpy.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                      [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}


def filter_transforms(w, tile=2) -> numpy.ndarray:
    """G g G^T of each filter g of constant (O, I, 3, 3) weights for tiles
    ``tile`` wide, computed in float64: ((tile + 2)^2, O, I) float32, its
    element xi of every filter."""
    w = numpy.asarray(w, numpy.float64)
    g = _G[tile]
    u = numpy.einsum('ar,oirs,bs->aboi', g, w, g).astype(numpy.float32)
    return u.reshape(-1, *w.shape[:2])


def transformed_filters(w, tile=2) -> numpy.ndarray:
    """Constant (O, I, 3, 3) weights in the layout
    CCN_WINOGRAD_TRANSFORMED of ccn_winograd.h for tiles ``tile`` wide:
    (tile + 2)^2 planes (filter_transforms), each an O x I matrix in the
    panel layout of ccn_gemm.h (the products read it as it lies), SKEW
    floats after one another."""
    return numpy.concatenate([numpy.pad(pack_panels(plane), (0, SKEW))
                              for plane in filter_transforms(w, tile)])


def winograd_step(em, inst, geometry, x_shape, channels_out, out_size, tiles, weights,
                  act, dilations=(1, 1)) -> Step:
    """The Step of ``inst`` as ccn_conv2d_winograd: a convolution of input
    0 (``x_shape``, NCHW) into ``channels_out`` channels of ``out_size``
    (``geometry``: its ccn_conv_geometry, lowerings/connection.py's
    conv_geometry, with these ``dilations``), with input 1 the weights,
    'filters' (O, I, 3, 3) or a ConvTranspose's (I, O, 3, 3), 'rotated';
    constant filters are transformed here, once.  Input 2 is an optional
    bias; ``act`` the activation (its CCN_ACT_* enum, its slope)."""
    N, channels_in, H, W = x_shape
    OH, OW = out_size
    has_bias = em.has(inst, 2)
    constant = em.const(inst.inputs[1]) if weights == 'filters' else None
    transformed = None
    tile, shallow = 2, 0
    if constant is not None:
        weights = 'transformed'
        if OW >= TILE4_MIN_WIDTH:  # (a dilated one's row of tiles spans its phases)
            tile = 4
            tiles = block_tiles(N, channels_in, channels_out, out_size, tile, dilations)
            if channels_in <= SHALLOW_MAX_CHANNELS:
                shallow = 1
                tiles = shallow_block_tiles(N, out_size, tile, dilations)
        transformed = em.constant_array('winograd%d' % inst.outputs[0],
                                        transformed_filters(constant, tile))
    elif channels_in <= SHALLOW_MAX_RUNTIME_CHANNELS \
            and -(-tiles // SHALLOW_CHUNK) * SHALLOW_CHUNK * 8 <= tiles * 9:
        shallow = 1
    plan = WINOGRAD_PLAN.literal(tiles=tiles, weights='CCN_WINOGRAD_' + weights.upper(),
                                 act=act[0], act_alpha=act[1], tile=tile, shallow=shallow)

    def render(ref, scratch):
        return ['ccn_conv2d_winograd(%s,' % geometry,
                '                    %s,' % plan,
                '                    %s, %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), transformed or ref(inst.inputs[1]),
                    ref(inst.inputs[2]) if has_bias else 'NULL', ref(inst.outputs[0]),
                    scratch)]
    # CCN_WINOGRAD_SCRATCH of ccn_winograd.h.
    filters = 0 if transformed else channels_out * channels_in + SKEW
    slack = SHALLOW_CHUNK if shallow else LANES
    scratch = (tile + 2) ** 2 * (filters + (channels_in + channels_out) * (tiles + slack)
                                 + 2 * SKEW)
    return Step('winograd', [(N, channels_out, OH, OW)], render, scratch=scratch,
                also=('gemm',))


def winograd_grad_filter_step(em, inst, geometry, x_shape, channels_out, tiles) -> Step:
    """The Step of ConvGradFilter ``inst`` as
    ccn_conv2d_grad_filter_winograd: the gradient of the weights of the
    convolution ``geometry`` of input 0 (``x_shape``) into
    ``channels_out`` channels, from input 1, its output's gradient."""
    channels_in = x_shape[1]
    plan = WINOGRAD_PLAN.literal(tiles=tiles, weights='CCN_WINOGRAD_FILTERS',
                                 act='CCN_ACT_NONE', act_alpha=0.0, tile=2, shallow=0)

    def render(ref, scratch):
        return ['ccn_conv2d_grad_filter_winograd(%s,' % geometry,
                '                                %s,' % plan,
                '                                %s, %s, %s, %s);' % (
                    ref(inst.inputs[0]), ref(inst.inputs[1]), ref(inst.outputs[0]), scratch)]
    # CCN_WINOGRAD_GRAD_SCRATCH of ccn_winograd.h.
    scratch = 16 * (channels_out * channels_in + (channels_in + 2 * channels_out)
                    * (tiles + LANES)
                    + 4 * SKEW)
    return Step('winograd', [(channels_out, channels_in, 3, 3)], render, scratch=scratch,
                also=('gemm',))
