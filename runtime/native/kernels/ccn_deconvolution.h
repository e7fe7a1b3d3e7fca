/* ccn_deconvolution.h: Deconvolution family: ConvTranspose. */
#ifndef CCN_DECONVOLUTION_H
#define CCN_DECONVOLUTION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* 2-D transposed convolution of an NCHW input with (C, M/group, KH, KW)
 * weights into (N, M, OH, OW): input pixel (h, w) and tap (kh, kw) land on
 * output (h*stride_h - pad_top + kh*dil_h, w*stride_w - pad_left + kw*dil_w),
 * dropped outside the output (pads may be negative: output_shape larger
 * than the full result).  bias may be NULL.  Up to `images` images share
 * one product; col is scratch of (M/group)*KH*KW*H*W*images floats, plus
 * (C/group)*H*W*images when images > 1. */
void ccn_deconv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                  long group, long stride_h, long stride_w, long dil_h, long dil_w,
                  long pad_top, long pad_left, long images, const float *x, const float *w,
                  const float *bias, float *y, float *col);

CCN_END_DECLS
#endif /* CCN_DECONVOLUTION_H */
