/* ccn_pooling.h: Pooling family: MaxPool, AveragePool, GlobalAveragePool,
 * and the gradients of MaxPool and AveragePool. */
#ifndef CCN_POOLING_H
#define CCN_POOLING_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* NC planes of H x W into OH x OW; taps in the padding never count. */
void ccn_maxpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long dil_h, long dil_w,
                   long pad_top, long pad_left, const float *x, float *y);
/* Averages over the taps inside the input, or, with count_include_pad,
 * inside the input plus its explicit padding (pad_bottom, pad_right). */
void ccn_avgpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long pad_top, long pad_left,
                   long pad_bottom, long pad_right, int count_include_pad,
                   const float *x, float *y);
/* y[p] = mean of the S values of plane p, for NC planes. */
void ccn_global_avgpool(long NC, long S, const float *x, float *y);
/* Gradient of ccn_avgpool2d (AveragePoolGrad): each window's gy divided by
 * its count of taps (as ccn_avgpool2d counts them) goes to every tap of
 * the window inside the input; gx is (NC, H, W). */
void ccn_avgpool2d_grad(long NC, long H, long W, long OH, long OW, long KH, long KW,
                        long stride_h, long stride_w, long pad_top, long pad_left,
                        long pad_bottom, long pad_right, int count_include_pad,
                        const float *gy, float *gx);
/* Gradient of ccn_maxpool2d (MaxPoolGrad) from its input x and output y:
 * each window's gy goes to the first of its in-bounds taps (row-major)
 * that equals the window's maximum y, as Chainer and the NumPy kernel do;
 * gx is (NC, H, W). */
void ccn_maxpool2d_grad(long NC, long H, long W, long OH, long OW, long KH, long KW,
                        long stride_h, long stride_w, long dil_h, long dil_w,
                        long pad_top, long pad_left, const float *x, const float *y,
                        const float *gy, float *gx);

CCN_END_DECLS
#endif /* CCN_POOLING_H */
