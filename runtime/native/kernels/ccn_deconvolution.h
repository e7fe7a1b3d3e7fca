/* ccn_deconvolution.h: Deconvolution family: ConvTranspose. */
#ifndef CCN_DECONVOLUTION_H
#define CCN_DECONVOLUTION_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* 2-D transposed convolution of x (batch, in_channels, in_h, in_w) with
 * (in_channels, out_channels/group, kernel_h, kernel_w) weights into y
 * (batch, out_channels, out_h, out_w): input pixel (h, w) and tap (kh,
 * kw) land on output (h*stride_h - pad_top + kh*dil_h, w*stride_w -
 * pad_left + kw*dil_w), dropped outside the output (pads may be negative:
 * output_shape larger than the full result).  bias may be NULL.  Up to
 * plan->images images share one product (the plan's other fields
 * unused), the columns by blocks of output channels; col is scratch of
 * ccn_grad_columns(M/group, KH*KW, H*W*images) floats, plus
 * (C/group)*H*W*images when images > 1. */
void ccn_deconv2d(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan, const float *x,
                  const float *w, const float *bias, float *y, float *col);

/* 3-D transposed convolution, as ccn_deconv2d in three axes: geometry->in
 * is x's spatial size, ->out y's, pad_begin the crop at the start (may be
 * negative); image by image and group by group, one product into ``col``
 * ((out_channels / group) * kernel volume * input volume floats), whose
 * columns are then added where their taps land. */
void ccn_deconv3d(const ccn_conv3d_geometry *geometry, const float *x, const float *w,
                  const float *bias, float *y, float *col);

CCN_END_DECLS
#endif /* CCN_DECONVOLUTION_H */
