/* ccn_pooling.h: Pooling family: MaxPool, AveragePool, GlobalAveragePool,
 * and the gradients of MaxPool and AveragePool. */
#ifndef CCN_POOLING_H
#define CCN_POOLING_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The geometry of a 2-D pooling, filled field by field by the generated
 * code (POOL_GEOMETRY in lowerings/pooling.py; a test checks both list the
 * same fields): `planes` (N*C) planes of in_h x in_w into out_h x out_w,
 * kernel_h x kernel_w windows with strides, dilations (1 for average
 * pooling) and the padding on each side; count_include_pad (average
 * pooling) counts the taps in the explicit padding. */
typedef struct {
    long planes, in_h, in_w, out_h, out_w;
    long kernel_h, kernel_w, stride_h, stride_w, dil_h, dil_w;
    long pad_top, pad_left, pad_bottom, pad_right;
    int count_include_pad;
} ccn_pool_geometry;

/* Max pooling; taps in the padding never count, NaN wins (NumPy's maximum).
 * A window's row spans at most 1024 columns ((kernel_w - 1) * dil_w + 1;
 * the lowering sends wider ones to ccn_pool3d), here and in ccn_avgpool2d. */
void ccn_maxpool2d(const ccn_pool_geometry *geometry, const float *x, float *y);
/* Averages over the taps inside the input, or, with count_include_pad,
 * inside the input plus its explicit padding (pad_bottom, pad_right):
 * the sums down the window's rows, then across, as in ccn_maxpool2d. */
void ccn_avgpool2d(const ccn_pool_geometry *geometry, const float *x, float *y);
/* y[p] = mean of the S values of plane p, for NC planes. */
void ccn_global_avgpool(long NC, long S, const float *x, float *y);
/* y[p] = max of the S >= 1 values of plane p (NaN if one is), for NC planes. */
void ccn_global_maxpool(long NC, long S, const float *x, float *y);
/* Gradient of ccn_avgpool2d (AveragePoolGrad): each window's gy divided by
 * its count of taps (as ccn_avgpool2d counts them) goes to every tap of
 * the window inside the input; gx is (planes, in_h, in_w). */
void ccn_avgpool2d_grad(const ccn_pool_geometry *geometry, const float *gy, float *gx);
/* Gradient of ccn_maxpool2d (MaxPoolGrad) from its input x and output y:
 * each window's gy goes to the first of its in-bounds taps (row-major)
 * that equals the window's maximum y, as Chainer and the NumPy kernel do;
 * gx is (planes, in_h, in_w). */
void ccn_maxpool2d_grad(const ccn_pool_geometry *geometry, const float *x, const float *y,
                        const float *gy, float *gx);

/* The window of a 3-D pooling of ``planes`` (depth, height, width) planes:
 * per axis its input and output size, kernel, stride, dilation and the
 * padding before and after. */
typedef struct {
    long planes, in[3], out[3], kernel[3], stride[3], dil[3], pad_begin[3], pad_end[3];
    int count_include_pad;
} ccn_pool3d_geometry;
/* 3-D MaxPool (average 0: padding never wins, NaN does) or AveragePool
 * (average 1: the sum over the taps inside the input divided by their
 * count, or by the count inside the input and its explicit padding with
 * count_include_pad), as the NumPy kernels compute them. */
void ccn_pool3d(const ccn_pool3d_geometry *geometry, int average, const float *x, float *y);

CCN_END_DECLS
#endif /* CCN_POOLING_H */
