/* Training family: Chainer's optimizer updates, in place (see
 * ccn_training.h).  The order of the float operations is Chainer's own
 * (update_core_cpu in chainer/optimizers), so a step matches Chainer on
 * NumPy to the last bits or nearly. */
#include <math.h>

#include "ccn_training.h"

void ccn_sgd_update(long n, double lr, float *param, const float *grad)
{
    const float rate = (float)lr;
    CCN_PARALLEL_FOR(n,
        for (long i = 0; i < n; i++)
            param[i] -= rate * grad[i];
    );
}

void ccn_momentum_sgd_update(long n, double lr, double momentum, float *param,
                             const float *grad, float *v)
{
    const float rate = (float)lr, mu = (float)momentum;
    CCN_PARALLEL_FOR(n,
        for (long i = 0; i < n; i++) {
            v[i] *= mu;
            v[i] -= rate * grad[i];
            param[i] += v[i];
        }
    );
}

void ccn_adam_update(long n, double alpha_t, double beta1, double beta2, double eps,
                     double eta, double weight_decay_rate, float *param, const float *grad,
                     float *m, float *v)
{
    /* Python computes 1 - beta1 and friends in double; NumPy rounds each
     * scalar to float32 when it meets a float32 array. */
    const float b1 = (float)(1.0 - beta1), b2 = (float)(1.0 - beta2);
    const float alpha = (float)alpha_t, epsilon = (float)eps, minus_eta = (float)-eta;
    const double keep = 1.0 - eta * weight_decay_rate;
    const float decay = (float)keep;
    const int decays = keep != 1.0; /* Chainer skips the product when it is 1 */
    CCN_PARALLEL_FOR(n,
        for (long i = 0; i < n; i++) {
            const float g = grad[i];
            m[i] += b1 * (g - m[i]);
            v[i] += b2 * (g * g - v[i]);
            const float step = alpha / (sqrtf(v[i]) + epsilon);
            const float delta = minus_eta * (step * m[i]);
            param[i] = decays ? decay * param[i] + delta : param[i] + delta;
        }
    );
}
