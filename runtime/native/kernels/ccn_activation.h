/* ccn_activation.h: Activation family: element-wise activations (x and y may be the
 * same array), Softmax, LogSoftmax. */
#ifndef CCN_ACTIVATION_H
#define CCN_ACTIVATION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

void ccn_relu(long n, const float *x, float *y);
void ccn_leaky_relu(long n, float alpha, const float *x, float *y);
void ccn_sigmoid(long n, const float *x, float *y);
void ccn_tanh(long n, const float *x, float *y);
/* Softmax (or its log) over axis of length len of an (outer, len, inner)
 * array. */
void ccn_softmax(long outer, long len, long inner, int log_softmax, const float *x, float *y);

CCN_END_DECLS
#endif /* CCN_ACTIVATION_H */
