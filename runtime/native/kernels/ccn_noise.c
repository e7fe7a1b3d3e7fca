/* Noise family: training-mode dropout from the caller's uniform numbers
 * (see ccn_noise.h).  The float operations are the NumPy kernels' own
 * (runtime/ops/noise.py), so the results match the VM bit for bit. */
#include "ccn_noise.h"

void ccn_dropout_training(long n, double ratio, float scale, const float *x, const double *u,
                          float *y, uint8_t *mask)
{
    CCN_PARALLEL_FOR(n,
        for (long i = 0; i < n; i++) {
            const uint8_t keep = u[i] >= ratio;
            mask[i] = keep;
            /* NumPy computes x * mask * scale: the mask as 1.0f or 0.0f first. */
            y[i] = x[i] * (float)keep * scale;
        }
    );
}

void ccn_dropout_grad(long n, float scale, const float *gy, const uint8_t *mask, float *gx)
{
    CCN_PARALLEL_FOR(n,
        for (long i = 0; i < n; i++)
            gx[i] = mask[i] ? gy[i] * scale : 0.0f;
    );
}
