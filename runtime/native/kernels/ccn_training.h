/* ccn_training.h: Training family: the in-place parameter updates of
 * Chainer's optimizers (SGD, MomentumSGD, Adam and AdamW), with the
 * formulas of chainer.optimizers in float32.
 *
 * Each updates the n elements of param, and of its optimizer state arrays,
 * where they lie: they are the caller's own arrays (the model's parameters
 * and the optimizer's state), so nothing is copied back.  Hyperparameters
 * are doubles, as Python gives them; each is rounded to float where
 * NumPy's float32 arithmetic would round it. */
#ifndef CCN_TRAINING_H
#define CCN_TRAINING_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* SGD: param -= lr * grad. */
void ccn_sgd_update(long n, double lr, float *param, const float *grad);

/* MomentumSGD: v = momentum * v - lr * grad; param += v. */
void ccn_momentum_sgd_update(long n, double lr, double momentum, float *param,
                             const float *grad, float *v);

/* Adam (AdamW: a weight_decay_rate), alpha_t the bias-corrected step size
 * at this update's t:
 *   m += (1 - beta1) * (grad - m);  v += (1 - beta2) * (grad^2 - v);
 *   param = (1 - eta * weight_decay_rate) * param
 *           - eta * (alpha_t / (sqrt(v) + eps)) * m.
 * On x86 (SSE) it computes with subnormal floats flushed to zero, read and
 * written, where NumPy computes them: the moments differ from NumPy's only
 * below 2^-126 / (1 - beta) (a dead unit's stop decaying there). */
void ccn_adam_update(long n, double alpha_t, double beta1, double beta2, double eps,
                     double eta, double weight_decay_rate, float *param, const float *grad,
                     float *m, float *v);

CCN_END_DECLS
#endif /* CCN_TRAINING_H */
