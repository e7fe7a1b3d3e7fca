/* Noise family: training-mode dropout from the caller's uniform numbers
 * (see ccn_noise.h).  The float operations are the NumPy kernels' own
 * (runtime/ops/noise.py), so the results match the VM bit for bit. */
#include "ccn_noise.h"

/* ccn_dropout_training: its elements [begin, end). */
typedef struct {
    long n;
    double ratio;
    float scale;
    const float *x;
    const double *u;
    float *y;
    uint8_t *mask;
} dropout_training_call;

static void dropout_training_range(void *context, long begin, long end)
{
    const dropout_training_call *a = context;
    double ratio = a->ratio;
    float scale = a->scale;
    const float *x = a->x;
    const double *u = a->u;
    float *y = a->y;
    uint8_t *mask = a->mask;
    for (long i = begin; i < end; i++) {
        const uint8_t keep = u[i] >= ratio;
        mask[i] = keep;
        /* NumPy computes x * mask * scale: the mask as 1.0f or 0.0f first. */
        y[i] = x[i] * (float)keep * scale;
    }
}

void ccn_dropout_training(long n, double ratio, float scale, const float *x, const double *u,
                          float *y, uint8_t *mask)
{
    dropout_training_call a = {n, ratio, scale, x, u, y, mask};
    ccn_parallel_for(n, n, dropout_training_range, &a);
}

/* ccn_dropout_grad: its elements [begin, end). */
typedef struct {
    long n;
    float scale;
    const float *gy;
    const uint8_t *mask;
    float *gx;
} dropout_grad_call;

static void dropout_grad_range(void *context, long begin, long end)
{
    const dropout_grad_call *a = context;
    float scale = a->scale;
    const float *gy = a->gy;
    const uint8_t *mask = a->mask;
    float *gx = a->gx;
    for (long i = begin; i < end; i++)
        gx[i] = mask[i] ? gy[i] * scale : 0.0f;
}

void ccn_dropout_grad(long n, float scale, const float *gy, const uint8_t *mask, float *gx)
{
    dropout_grad_call a = {n, scale, gy, mask, gx};
    ccn_parallel_for(n, n, dropout_grad_range, &a);
}
