/* ccn_winograd.h: Winograd family: 3x3 stride-1 convolutions by minimal
 * filtering, F(2x2, 3x3). */
#ifndef CCN_WINOGRAD_H
#define CCN_WINOGRAD_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* Floats between consecutive planes of a transform beyond its size. */
#define CCN_WINOGRAD_SKEW 16
/* Floats of scratch ccn_conv2d_winograd needs for I input and O output
 * channels and blocks of `tiles` 2x2 output tiles. */
#define CCN_WINOGRAD_SCRATCH(I, O, tiles) \
    (16 * ((O) * (I) + ((I) + (O)) * (tiles) + 3 * CCN_WINOGRAD_SKEW))
/* The same for ccn_conv2d_grad_filter_winograd. */
#define CCN_WINOGRAD_GRAD_SCRATCH(I, O, tiles) \
    (16 * ((O) * (I) + ((I) + 2 * (O)) * (tiles) + 4 * CCN_WINOGRAD_SKEW))

/* y (N, O, OH, OW) = the 3x3 convolution, stride 1, of x (N, I, H, W)
 * padded by pad_top and pad_left (and zeros past the bottom and right
 * edges as far as OH and OW reach), plus bias (may be NULL), then
 * activation act (CCN_ACT_*).  Weights w are (O, I, 3, 3), or, when
 * transposed, (I, O, 3, 3) read rotated half a turn: a ConvTranspose's
 * weights, so that the gradient of a convolution's input is this
 * convolution of the output's gradient.  The 2x2 output tiles are taken
 * `tiles` at a time (whole rows of tiles: a multiple of (OW + 1) / 2);
 * scratch holds CCN_WINOGRAD_SCRATCH(I, O, tiles) floats. */
void ccn_conv2d_winograd(long N, long I, long H, long W, long O, long OH, long OW,
                         long pad_top, long pad_left, long tiles, const float *x,
                         const float *w, int transposed, const float *bias, float *y,
                         float *scratch, int act, float act_alpha);

/* The gradient gw (O, I, 3, 3) of ccn_conv2d_winograd's weights (not
 * transposed) from its input x and the gradient gy (N, O, OH, OW) of its
 * output, by the same transforms: the 16 products sum over the tiles.
 * scratch holds CCN_WINOGRAD_GRAD_SCRATCH(I, O, tiles) floats. */
void ccn_conv2d_grad_filter_winograd(long N, long I, long H, long W, long O, long OH, long OW,
                                     long pad_top, long pad_left, long tiles, const float *x,
                                     const float *gy, float *gw, float *scratch);

CCN_END_DECLS
#endif /* CCN_WINOGRAD_H */
