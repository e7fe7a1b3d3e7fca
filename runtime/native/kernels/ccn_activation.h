/* ccn_activation.h: Activation family: every element-wise function of one
 * float tensor (math functions and activations alike, one table-driven
 * kernel per dtype; x and y may be the same array), Softmax, LogSoftmax,
 * and the gradient of Relu. */
#ifndef CCN_ACTIVATION_H
#define CCN_ACTIVATION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The element-wise functions; alpha and beta are the attributes of the ones
 * that take any (see each case in ccn_activation.c). */
enum ccn_unary_op {
    CCN_ABS, CCN_NEG, CCN_EXP, CCN_LOG, CCN_SQRT, CCN_RECIPROCAL,
    CCN_FLOOR, CCN_CEIL, CCN_ROUND, CCN_SIGN, CCN_ERF,
    CCN_SIN, CCN_COS, CCN_TAN, CCN_ASIN, CCN_ACOS, CCN_ATAN,
    CCN_SINH, CCN_COSH, CCN_ASINH, CCN_ACOSH, CCN_ATANH,
    CCN_RELU, CCN_LEAKY_RELU, CCN_SIGMOID, CCN_TANH,
    CCN_SOFTPLUS, CCN_SOFTSIGN, CCN_ELU, CCN_SELU, CCN_CELU,
    CCN_HARD_SIGMOID, CCN_HARD_SWISH, CCN_THRESHOLDED_RELU,
    CCN_GELU, CCN_GELU_TANH, CCN_CLIP, CCN_SWISH
};

/* y[i] = op(x[i]) for i < n. */
void ccn_unary_float32(enum ccn_unary_op op, long n, double alpha, double beta,
                       const float *x, float *y);
void ccn_unary_float64(enum ccn_unary_op op, long n, double alpha, double beta,
                       const double *x, double *y);

/* Softmax (or its log) over axis of length len of an (outer, len, inner)
 * array; y may be x for Softmax, not for LogSoftmax. */
void ccn_softmax(long outer, long len, long inner, int log_softmax, const float *x, float *y);

/* x[r, :] = Softmax(scale * x[r, :] + mask[r * mask_rs, :]) for the rows
 * r < rows of len floats, in place, on the calling thread (mask NULL:
 * none): a block of an attention's scores (ccn_attention.c). */
void ccn_softmax_scores(long rows, long len, float scale, const float *mask, long mask_rs,
                        float *x);

/* Gradient of Relu from its output y: gx[i] = y[i] > 0 ? gy[i] : 0 (gx may
 * be gy). */
void ccn_relu_grad(long n, const float *y, const float *gy, float *gx);

CCN_END_DECLS
#endif /* CCN_ACTIVATION_H */
