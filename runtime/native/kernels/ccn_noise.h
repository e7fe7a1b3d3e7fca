/* ccn_noise.h: Noise family: Chainer's training-mode dropout
 * (DropoutTraining of the org.chainer_compiler domain) and its gradient.
 *
 * The keep-mask is not drawn in C.  The caller passes n uniform numbers in
 * [0, 1), doubles, drawn as the NumPy VM draws them (numpy.random.rand of
 * the input's shape, from NumPy's global generator); element i is kept when
 * u[i] >= ratio, as on the VM.  So a native step and a NumPy step from the
 * same seed drop the same elements. */
#ifndef CCN_NOISE_H
#define CCN_NOISE_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* mask[i] = u[i] >= ratio; y[i] = x[i] * mask[i] * scale, scale being
 * float32(1 / (1 - ratio)) (0 when ratio is 1). */
void ccn_dropout_training(long n, double ratio, float scale, const float *x, const double *u,
                          float *y, uint8_t *mask);

/* gx[i] = mask[i] ? gy[i] * scale : 0. */
void ccn_dropout_grad(long n, float scale, const float *gy, const uint8_t *mask, float *gx);

CCN_END_DECLS
#endif /* CCN_NOISE_H */
