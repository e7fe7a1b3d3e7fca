/* ccn_nchwc.h: NCHWc family: chains of convolutions (1x1 products,
 * depthwise 3x3 and 5x5, dense ones) in a blocked channel layout, converted
 * to and from NCHW only at the chain's edges (runtime/native/blocked.py). */
#ifndef CCN_NCHWC_H
#define CCN_NCHWC_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* Channels per block: a tensor of C channels is (N, ceil(C / 16), H, W,
 * 16), the channels past C padding.  Fixed for every build level (the
 * buffers and re-laid weights are sized at emit time, the level chosen at
 * run time): one AVX-512 vector, two AVX2 ones. */
#define CCN_NCHWC_BLOCK 16

/* A blocked convolution: the input's channels and blocks, the output's
 * blocks, the planes, the window (a 1x1 product takes stride 1 and no
 * padding) and the epilogue (CCN_ACT_*).  The padded channels of a result hold finite values (the
 * epilogue of 0, Sigmoid's 1/2) that the next convolution's zero weights
 * drop, and the reorder out never reads. */
typedef struct {
    long batch, in_channels, in_blocks, out_blocks, in_h, in_w, out_h, out_w;
    long kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left;
    int act;
    float act_alpha;
} ccn_nchwc_geometry;

/* y (blocked) = x (N, C, pixels) in blocks of CCN_NCHWC_BLOCK channels. */
void ccn_nchwc_reorder_in(long batch, long channels, long pixels, const float *x, float *y);
/* y (N, C, pixels) = the first C channels of blocked x. */
void ccn_nchwc_reorder_out(long batch, long channels, long pixels, const float *x, float *y);
/* y (N, C) = the means of blocked x's first C channels over its pixels:
 * a squeeze-excitation's pool. */
void ccn_nchwc_global_average_pool(long batch, long channels, long pixels, const float *x,
                                   float *y);
/* y = the 2-D MaxPool of blocked x (g's in_blocks blocks, its window and
 * padding; out_blocks = in_blocks, no activation), blocked: a NaN wins,
 * as in ccn_maxpool2d. */
void ccn_nchwc_maxpool(const ccn_nchwc_geometry *g, const float *x, float *y);
/* A 1x1 convolution of blocked x by w, (out_blocks, in_blocks * 16, 16)
 * (w[ob][ci][o] the weight of output 16 ob + o from input ci, zero past
 * the channels), its input channel c of image n first scaled by
 * scale[n * in_channels + c] (a squeeze-excitation's Mul; NULL: none),
 * plus bias (out_blocks * 16 or NULL) and residual (blocked like y, or
 * NULL), then the activation. */
void ccn_nchwc_pointwise(const ccn_nchwc_geometry *g, const float *x, const float *scale,
                         const float *w, const float *bias, const float *residual, float *y);
/* A depthwise convolution of blocked x by w, (blocks, KH, KW, 16), plus
 * bias and residual as ccn_nchwc_pointwise, then the activation. */
void ccn_nchwc_depthwise(const ccn_nchwc_geometry *g, const float *x, const float *w,
                         const float *bias, const float *residual, float *y);
/* A dense convolution (one group) of blocked x by w, (out_blocks,
 * in_blocks, KH, KW, 16, 16) (w[ob][cb][kh][kw][c][o] the weight of
 * output 16 ob + o from input 16 cb + c, zero past the channels), plus
 * bias and residual as ccn_nchwc_pointwise, then the activation. */
void ccn_nchwc_dense(const ccn_nchwc_geometry *g, const float *x, const float *w,
                     const float *bias, const float *residual, float *y);
/* ccn_nchwc_dense for a 3x3 stride-1 convolution by Winograd's F(tile x
 * tile, 3x3), tile 2 or 4, its filters u transformed, ((tile + 2)^2,
 * out_blocks, in_blocks * 16, 16) (u[xi][ob][ci][o] element xi of G g G^T
 * for the filter g of output 16 ob + o from input ci, zero past the
 * channels), at most CCN_NCHWC_WINOGRAD_MAX_IN_BLOCKS input blocks (its
 * transforms stay on the stack). */
#define CCN_NCHWC_WINOGRAD_MAX_IN_BLOCKS 8
void ccn_nchwc_winograd(const ccn_nchwc_geometry *g, long tile, const float *x, const float *u,
                        const float *bias, const float *residual, float *y);

CCN_END_DECLS
#endif /* CCN_NCHWC_H */
