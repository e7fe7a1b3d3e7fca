/* ccn_connection.h: Connection family: Conv and its filter gradient
 * (ConvGradFilter), im2col plus the GEMM of ccn_gemm.h. */
#ifndef CCN_CONNECTION_H
#define CCN_CONNECTION_H

#include "ccn_common.h"
#include "ccn_gemm.h"

CCN_BEGIN_DECLS

/* The geometry of a 2-D convolution, filled field by field by the
 * generated code (lowerings/connection.py, CONV_GEOMETRY; a test checks
 * both list the same fields): batch images of in_channels x in_h x in_w
 * (NCHW) into out_channels x out_h x out_w, kernel_h x kernel_w taps in
 * `group` groups, strides, dilations and the padding before the first row
 * and column.  A transposed convolution (ccn_deconv2d) and Winograd's
 * (ccn_winograd.h) read the same fields. */
typedef struct {
    long batch, in_channels, in_h, in_w;
    long out_channels, out_h, out_w;
    long kernel_h, kernel_w, group;
    long stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
} ccn_conv_geometry;

/* The fields of geometry g as the locals of a kernel: N, C, H, W, M,
 * OH, OW, KH, KW, group, stride_h, stride_w, dil_h, dil_w, pad_top and
 * pad_left. */
#define CCN_CONV_LOCALS(g)                                                               \
    const long N = (g)->batch, C = (g)->in_channels, H = (g)->in_h, W = (g)->in_w;     \
    const long M = (g)->out_channels, OH = (g)->out_h, OW = (g)->out_w;                \
    const long KH = (g)->kernel_h, KW = (g)->kernel_w, group = (g)->group;             \
    const long stride_h = (g)->stride_h, stride_w = (g)->stride_w;                     \
    const long dil_h = (g)->dil_h, dil_w = (g)->dil_w;                                 \
    const long pad_top = (g)->pad_top, pad_left = (g)->pad_left

/* How an im2col convolution runs: decided once, when the C is emitted,
 * where its scratch is sized (CONV_PLAN in lowerings/connection.py). */
typedef struct {
    long images;     /* images per product, their columns side by side */
    int direct;      /* the input is the columns (no im2col): a 1x1
                      * convolution without stride or padding, one image
                      * per product; col may be NULL */
    int w_panels;    /* w comes in the panel layout of ccn_gemm.h, each
                      * group's out_channels/group rows one after the other */
    int act;         /* epilogue activation (CCN_ACT_*) */
    float act_alpha; /* its LeakyRelu slope */
} ccn_conv_plan;

/* 2-D convolution of x by (M, C/group, KH, KW) weights w plus bias and
 * residual (a fused Add's other operand, shaped as y; either may be NULL),
 * then the plan's activation: the product adds to them.  col is scratch of
 * (C/group)*KH*KW*OH*OW*images floats, plus (M/group)*OH*OW*images when
 * images > 1 (unused on the direct path). */
void ccn_conv2d(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan, const float *x,
                const float *w, const float *bias, const float *residual, float *y, float *col);
/* ccn_conv2d in one group, tap by tap, for a dilated convolution whose
 * taps mostly read padding (a 3x3 kernel dilated by 12 over a 14x14 map):
 * each tap multiplies its weights (M x C, in the panel layout of
 * ccn_gemm.h: tap (kh, kw)'s at (kh * KW + kw) * ccn_panel_rows(M) * C)
 * by the input pixels it reads, gathered, and adds the products to the
 * outputs that read them; im2col's product would multiply the padding's
 * zeros as well.  scratch holds C*OH*OW + M*OH*OW floats. */
void ccn_conv2d_taps(const ccn_conv_geometry *geometry, int act, float act_alpha,
                     const float *x, const float *w_taps, const float *bias, float *y,
                     float *scratch);
/* Floats of im2col columns that ConvGradFilter and ccn_deconv2d build
 * and multiply at a time, a block of channels' rows: all of a ResNet
 * layer's are megabytes, written by one pass and read back from memory
 * by the next, a block stays in L2 (lowerings/connection.py mirrors it as
 * GRAD_BLOCK_FLOATS).  One thread, batch 8, against whole columns: filter
 * gradients 3-27% less time, input gradients 3-8%. */
#define CCN_GRAD_BLOCK_FLOATS 65536

/* Channels per block of columns whose channels are taps*ld floats each. */
static inline long ccn_grad_block(long taps, long ld)
{
    const long fit = CCN_GRAD_BLOCK_FLOATS / (taps * ld);
    return fit > 1 ? fit : 1;
}

/* Floats of scratch for one block of the columns of `channels` channels,
 * taps*ld floats each, at any ld up to this one (lowerings/connection.py's
 * grad_columns). */
static inline long ccn_grad_columns(long channels, long taps, long ld)
{
    const long all = channels * taps * ld;
    const long block = taps * ld > CCN_GRAD_BLOCK_FLOATS ? taps * ld : CCN_GRAD_BLOCK_FLOATS;
    return all < block ? all : block;
}

/* Gradient of ccn_conv2d's weights (ConvGradFilter): gw (M, C/group, KH,
 * KW) = the sum over the N images of gy's (M/group) x OH*OW rows times the
 * im2col columns of x, group by group, plan->images images per product
 * (the plan's other fields unused), the columns by blocks of channels.
 * col is scratch of B + OH*OW*images*(M/group) + max(B, M/group) floats,
 * B = ccn_grad_columns(C/group, KH*KW, OH*OW*images) (a block of columns,
 * gy transposed or gathered, then the columns transposed or a part of
 * gw^T of at most max(B, M/group) floats). */
void ccn_conv2d_grad_filter(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan,
                            const float *x, const float *gy, float *gw, float *col);

/* A 3-D convolution: per axis (depth, height, width) the input and output
 * size, kernel, stride, dilation and padding before. */
typedef struct {
    long batch, in_channels, out_channels, group;
    long in[3], out[3], kernel[3], stride[3], dil[3], pad_begin[3];
} ccn_conv3d_geometry;
/* y = act(conv3d(x, w) + bias) (bias NULL: none), image by image and group
 * by group as im2col into ``col`` (in_channels / group * kernel volume *
 * output volume floats) and one product with ccn_gemm.c. */
void ccn_conv3d(const ccn_conv3d_geometry *geometry, int act, float act_alpha, const float *x,
                const float *w, const float *bias, float *y, float *col);

CCN_END_DECLS
#endif /* CCN_CONNECTION_H */
