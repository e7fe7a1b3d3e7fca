/* ccn_depthwise.h: Depthwise family: 2-D convolutions with one group per
 * channel (MobileNet's 3x3 and 5x5 blocks), computed directly. */
#ifndef CCN_DEPTHWISE_H
#define CCN_DEPTHWISE_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* The convolution `geometry` (group == in_channels == out_channels) of x
 * by (C, 1, KH, KW) weights w plus bias (may be NULL), then activation
 * act (CCN_ACT_*, act_alpha its parameter): each output sums its KH*KW
 * taps in a vector register, straight from x (no scratch); the 3x3 and
 * 5x5 kernels at strides 1 and 2 unrolled, any other size, stride and
 * dilation with them as variables.  A band above 0 sums a vector's worth
 * of channels at a time instead, in the lanes of a zero-padded copy of
 * `band` output rows' inputs on the stack (lowerings/depthwise.py's
 * band_rows chooses it; one that does not fit aborts). */
void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, long band, int act,
                          float act_alpha, const float *x, const float *w, const float *bias,
                          float *y);

/* ccn_conv2d_depthwise written channels-last: y is (N, OH, OW, C), each
 * pixel's channels together (the Transpose after it folded in;
 * channels_last.py); band above 0, as band_rows gives it. */
void ccn_conv2d_depthwise_nhwc(const ccn_conv_geometry *geometry, long band, int act,
                               float act_alpha, const float *x, const float *w,
                               const float *bias, float *y);

CCN_END_DECLS
#endif /* CCN_DEPTHWISE_H */
