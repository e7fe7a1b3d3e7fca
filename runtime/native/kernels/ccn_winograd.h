/* ccn_winograd.h: Winograd family: 3x3 stride-1 convolutions by minimal
 * filtering, F(2x2, 3x3) and, for constant weights, F(4x4, 3x3). */
#ifndef CCN_WINOGRAD_H
#define CCN_WINOGRAD_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* Floats between consecutive planes of a transform beyond its size. */
#define CCN_WINOGRAD_SKEW 16
/* Tiles the transforms take at a time, in vectors: a row of their inputs
 * and products has this many floats of slack. */
#define CCN_WINOGRAD_LANES 8
/* Most tiles the shallow products (the plan's `shallow`) take at a time:
 * two vectors of up to 16. */
#define CCN_WINOGRAD_SHALLOW_CHUNK 32
/* Floats of slack after each row of transformed inputs and products: the
 * transforms' vectors, or the shallow products' chunk. */
#define CCN_WINOGRAD_SLACK(shallow) ((shallow) ? CCN_WINOGRAD_SHALLOW_CHUNK : CCN_WINOGRAD_LANES)
/* How ccn_conv2d_winograd's weights come: (O, I, 3, 3) filters; a
 * ConvTranspose's (I, O, 3, 3), read rotated half a turn (so that the
 * gradient of a convolution's input is this convolution of the output's
 * gradient); or transformed already (constant weights, at emit time): a
 * plane per element of G g G^T ((tile + 2)^2 of them, row-major), each an
 * O x I matrix in the panel layout of ccn_gemm.h (ccn_panel_rows(O) * I
 * floats), CCN_WINOGRAD_SKEW floats after one another. */
enum { CCN_WINOGRAD_FILTERS, CCN_WINOGRAD_ROTATED, CCN_WINOGRAD_TRANSFORMED };
/* Floats of scratch ccn_conv2d_winograd needs for I input and O output
 * channels and blocks of `tiles` output tiles `tile` wide (the weights'
 * transforms too unless they come transformed), the products shallow or
 * not. */
#define CCN_WINOGRAD_SCRATCH(I, O, tiles, weights, tile, shallow)                \
    (((tile) + 2) * ((tile) + 2) *                                               \
     (((weights) == CCN_WINOGRAD_TRANSFORMED ? 0 : (O) * (I) + CCN_WINOGRAD_SKEW) + \
      ((I) + (O)) * ((tiles) + CCN_WINOGRAD_SLACK(shallow)) + 2 * CCN_WINOGRAD_SKEW))
/* The same for ccn_conv2d_grad_filter_winograd. */
#define CCN_WINOGRAD_GRAD_SCRATCH(I, O, tiles)                                 \
    (16 * ((O) * (I) + ((I) + 2 * (O)) * ((tiles) + CCN_WINOGRAD_LANES) + \
           4 * CCN_WINOGRAD_SKEW))

/* How a Winograd convolution runs, decided when the C is emitted
 * (WINOGRAD_PLAN in lowerings/winograd.py): the output tiles taken at a
 * time (whole rows of tiles: a multiple of dil_w * ((ceil(out_w / dil_w)
 * + tile - 1) / tile)), how the weights come (CCN_WINOGRAD_*), the
 * epilogue activation (CCN_ACT_*, act_alpha its LeakyRelu slope) and the
 * tiles' width: 2, F(2x2, 3x3), or
 * 4, F(4x4, 3x3), whose 36 products per 16 outputs take 0.56x the
 * multiply-adds of 16 per 4 but whose filters come transformed only; the
 * filter gradient reads only tiles (F(2x2, 3x3)).  `shallow` (a
 * convolution's, at most 256 input channels): each few output channels'
 * products, over the whole depth in registers, then their outputs at once,
 * rather than each plane's product by ccn_gemm.c, then every output. */
typedef struct {
    long tiles;
    int weights;
    int act;
    float act_alpha;
    int tile;
    int shallow;
} ccn_winograd_plan;

/* y (batch, out_channels, out_h, out_w) = the 3x3 convolution, stride 1,
 * of x (batch, in_channels, in_h, in_w) padded by pad_top and pad_left
 * (and zeros past the bottom and right edges as far as out_h and out_w
 * reach), plus bias (may be NULL), then the plan's activation; the
 * geometry's kernel is 3x3 with stride 1 in one group, at any dilation
 * (an undilated convolution per phase of the input; the plan's tiles are
 * then whole rows of dil_w phases' tiles, ccn_winograd.c).
 * scratch holds CCN_WINOGRAD_SCRATCH(in_channels, out_channels, tiles,
 * weights, tile, shallow) floats. */
void ccn_conv2d_winograd(const ccn_conv_geometry *geometry, const ccn_winograd_plan *plan,
                         const float *x, const float *w, const float *bias, float *y,
                         float *scratch);

/* The gradient gw (O, I, 3, 3) of ccn_conv2d_winograd's weights (not
 * transposed; dilation 1) from its input x and the gradient gy (N, O, OH, OW) of its
 * output, by the same transforms: the 16 products sum over the tiles.
 * scratch holds CCN_WINOGRAD_GRAD_SCRATCH(I, O, tiles) floats. */
void ccn_conv2d_grad_filter_winograd(const ccn_conv_geometry *geometry,
                                     const ccn_winograd_plan *plan, const float *x,
                                     const float *gy, float *gw, float *scratch);

CCN_END_DECLS
#endif /* CCN_WINOGRAD_H */
