/* Normalization family: BatchNormalization in its inference form. */
#include <math.h>

#include "ccn_normalization.h"

void ccn_batchnorm(long N, long C, long S, float epsilon, const float *x, const float *scale,
                   const float *bias, const float *mean, const float *var, float *y)
{
    for (long c = 0; c < C; c++) {
        /* y = (x - mean) / sqrt(var + eps) * scale + bias = x * k + d */
        const float k = scale[c] / sqrtf(var[c] + epsilon);
        const float d = bias[c] - mean[c] * k;
        for (long n = 0; n < N; n++) {
            const float *in = x + (n * C + c) * S;
            float *out = y + (n * C + c) * S;
            for (long s = 0; s < S; s++)
                out[s] = in[s] * k + d;
        }
    }
}
