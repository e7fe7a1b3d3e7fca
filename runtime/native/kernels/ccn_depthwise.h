/* ccn_depthwise.h: Depthwise family: 2-D convolutions with one group per
 * channel (MobileNet's 3x3 and 5x5 blocks), computed directly. */
#ifndef CCN_DEPTHWISE_H
#define CCN_DEPTHWISE_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* The rows and columns of a padded input plane: the padding before,
 * the input, and zeros after as far as the last tap reaches (at least the
 * input's own size). */
#define CCN_DEPTHWISE_EXTENT(in, pad, out, stride, kernel, dil)                  \
    ((in) + (pad) > ((out) - 1) * (stride) + ((kernel) - 1) * (dil) + 1          \
         ? (in) + (pad)                                                          \
         : ((out) - 1) * (stride) + ((kernel) - 1) * (dil) + 1)
#define CCN_DEPTHWISE_PADDED_H(g) \
    CCN_DEPTHWISE_EXTENT((g)->in_h, (g)->pad_top, (g)->out_h, (g)->stride_h, (g)->kernel_h, (g)->dil_h)
#define CCN_DEPTHWISE_PADDED_W(g) \
    CCN_DEPTHWISE_EXTENT((g)->in_w, (g)->pad_left, (g)->out_w, (g)->stride_w, (g)->kernel_w, (g)->dil_w)

/* Whether the input needs a padded copy: it has padding, or the taps
 * reach past it. */
#define CCN_DEPTHWISE_COPIES(g)                                                   \
    ((g)->pad_top || (g)->pad_left || CCN_DEPTHWISE_PADDED_H(g) > (g)->in_h ||    \
     CCN_DEPTHWISE_PADDED_W(g) > (g)->in_w)
/* Floats of ccn_conv2d_depthwise's scratch, per plane (batch *
 * in_channels of them): the padded copy, PADDED_H * PADDED_W if it
 * COPIES, plus out_h * PADDED_W padded output rows for stride 1. */
#define CCN_DEPTHWISE_SCRATCH(g)                                                  \
    ((g)->batch * (g)->in_channels *                                              \
     ((CCN_DEPTHWISE_COPIES(g) ? CCN_DEPTHWISE_PADDED_H(g) * CCN_DEPTHWISE_PADDED_W(g) : 0) + \
      ((g)->stride_h == 1 && (g)->stride_w == 1 ? (g)->out_h * CCN_DEPTHWISE_PADDED_W(g) : 0)))

/* The convolution `geometry` (group == in_channels == out_channels) of x
 * by (C, 1, KH, KW) weights w plus bias (may be NULL), then activation
 * act (CCN_ACT_*, act_alpha its LeakyRelu slope): each output sums its
 * KH*KW taps in registers, without im2col.  scratch holds
 * CCN_DEPTHWISE_SCRATCH floats (NULL when that is 0). */
void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, int act, float act_alpha,
                          const float *x, const float *w, const float *bias, float *y,
                          float *scratch);

CCN_END_DECLS
#endif /* CCN_DEPTHWISE_H */
