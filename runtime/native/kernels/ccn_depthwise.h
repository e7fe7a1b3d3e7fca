/* ccn_depthwise.h: Depthwise family: 2-D convolutions with one group per
 * channel (MobileNet's 3x3 and 5x5 blocks), computed directly. */
#ifndef CCN_DEPTHWISE_H
#define CCN_DEPTHWISE_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* Floats of scratch ccn_conv2d_depthwise needs for `geometry`
 * (lowerings/depthwise.py's depthwise_scratch computes the same), per
 * plane (batch * in_channels of them), with the plane padded to PH x PW
 * (the padding before, the input, and zeros after as far as the last tap
 * reaches): stride 1, the padded copy (unless the convolution has no
 * padding and its taps stay inside) and OH rows of PW outputs; stride 2
 * (any dilation), the padded plane split into its four phases (even
 * and odd rows and columns: 4 x ceil(PH/2) x ceil(PW/2)) and OH rows of
 * ceil(PW/2) outputs; anything else, the padded copy if any. */
long ccn_depthwise_scratch(const ccn_conv_geometry *geometry);

/* The convolution `geometry` (group == in_channels == out_channels) of x
 * by (C, 1, KH, KW) weights w plus bias (may be NULL), then activation
 * act (CCN_ACT_*, act_alpha its LeakyRelu slope): each output sums its
 * KH*KW taps without im2col (3x3 and 5x5 in registers, at any dilation;
 * other sizes a tap at a time), over whole padded rows so that the loops
 * are long however narrow the plane.  scratch holds
 * ccn_depthwise_scratch(geometry) floats (NULL when that is 0). */
void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, int act, float act_alpha,
                          const float *x, const float *w, const float *bias, float *y,
                          float *scratch);

CCN_END_DECLS
#endif /* CCN_DEPTHWISE_H */
