/* ccn_normalization.h: Normalization family: BatchNormalization (inference,
 * training and its gradient),
 * LayerNormalization (and its gradient), InstanceNormalization and LRN. */
#ifndef CCN_NORMALIZATION_H
#define CCN_NORMALIZATION_H

#include "ccn_common.h"
#include "ccn_gemm.h" /* the epilogues (CCN_ACT_*) */

CCN_BEGIN_DECLS

/* Inference BatchNormalization over axis 1 of an (N, C, S) array, then the
 * epilogue act (CCN_ACT_* of ccn_gemm.h: those ccn_activate_simple
 * applies, NONE, RELU, LEAKY_RELU, HARD_SWISH or CLIP; act_alpha its
 * slope or bound). */
void ccn_batchnorm(long N, long C, long S, float epsilon, const float *x, const float *scale,
                   const float *bias, const float *mean, const float *var, int act,
                   float act_alpha, float *y);

/* Training BatchNormalization over axis 1 of an (N, C, S) array: y is x
 * normalised with the batch's mean and population variance, then scaled
 * and shifted.  Each of the other outputs may be NULL: running_mean and
 * running_var = the mean and var inputs * momentum + the batch's * (1 -
 * momentum); batch_mean and batch_var = the batch's statistics. */
void ccn_batchnorm_training(long N, long C, long S, float epsilon, float momentum,
                            const float *x, const float *scale, const float *bias,
                            const float *mean, const float *var, float *y, float *running_mean,
                            float *running_var, float *batch_mean, float *batch_var);

/* Gradient of BatchNormalization over axis 1 of (N, C, S) arrays from x and
 * gy: gx, gscale and gbias.  The statistics are mean and var, or (NULL)
 * the batch's, recomputed; with training, x's gradient flows through them
 * too.  gmean and gvar (may be NULL) are the gradients of the inference
 * form's mean and var inputs. */
void ccn_batchnorm_grad(long N, long C, long S, float epsilon, int training, const float *x,
                        const float *scale, const float *gy, const float *mean,
                        const float *var, float *gx, float *gscale, float *gbias, float *gmean,
                        float *gvar);

/* Where row r of a standardization reads its scale and bias: element i of
 * the row uses param[(r % period) * row_stride + i * inner_stride].
 * LayerNormalization: period 1 (or rows), row_stride S, inner_stride 1;
 * InstanceNormalization: period C, row_stride 1, inner_stride 0. */
typedef struct {
    long period, row_stride, inner_stride;
} ccn_param_layout;

/* y[r, i] = (x[r, i] - mean_r) / sqrt(var_r + epsilon) * scale + bias for
 * each of R rows of S elements (population variance); bias may be NULL.
 * mean and inv_std, when not NULL, receive each row's mean and
 * 1 / sqrt(var + epsilon). */
void ccn_standardize(long R, long S, float epsilon, const float *x, const float *scale,
                     const float *bias, ccn_param_layout layout, float *y, float *mean,
                     float *inv_std);

/* y[n, c, s] = scale[c] * x[n, s, c] + residual[n, c, s]: a channels-last
 * (N, S, C) x back to (N, C, S), times a scale per channel, plus a residual
 * (ConvNeXt's layer scale and skip; channels_last.py).  y may be
 * residual. */
void ccn_scale_add_nhwc(long N, long C, long S, const float *x, const float *scale,
                        const float *residual, float *y);

/* Gradient of ccn_standardize's y = xhat * scale + bias over R rows of S
 * elements (LayerNormalization's, scale laid out as there: period 1 or R,
 * row stride S, inner stride 1) from x and gy: gx, and gscale[p * S + i] =
 * the sum of gy * xhat at element i of the rows r with r % period = p
 * (gscale may be NULL: not computed).  The statistics are mean and inv_std
 * (1 / sqrt(var + epsilon)) per row, or (NULL) recomputed into stats, 2 * R
 * floats of scratch. */
void ccn_layernorm_grad(long R, long S, long period, float epsilon, const float *x,
                        const float *scale, const float *gy, const float *mean,
                        const float *inv_std, float *gx, float *gscale, float *stats);

/* dst = src broadcast to shape (rank <= CCN_MAX_RANK): src is read at
 * element strides src_strides (0 along broadcast axes). */
void ccn_broadcast_copy(int rank, const long *shape, const float *src,
                        const long *src_strides, float *dst);

/* LRN across the C channels of an (N, C, S) array:
 * y = x / (bias + alpha / size * sum of x^2 over the window) ^ beta, the
 * window of channel c being [c - floor((size-1)/2), c + ceil((size-1)/2)]
 * clipped to the channels. */
void ccn_lrn(long N, long C, long S, long size, float alpha, float beta, float bias,
             const float *x, float *y);

CCN_END_DECLS
#endif /* CCN_NORMALIZATION_H */
