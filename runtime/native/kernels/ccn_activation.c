/* Activation family: Relu, LeakyRelu, Sigmoid, Tanh, Softmax, LogSoftmax. */
#include <math.h>

#include "ccn_activation.h"

void ccn_relu(long n, const float *x, float *y)
{
    for (long i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void ccn_leaky_relu(long n, float alpha, const float *x, float *y)
{
    for (long i = 0; i < n; i++)
        y[i] = x[i] >= 0.0f ? x[i] : alpha * x[i];
}

void ccn_sigmoid(long n, const float *x, float *y)
{
    /* Written so that exp never overflows. */
    for (long i = 0; i < n; i++) {
        if (x[i] >= 0.0f) {
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        } else {
            const float e = expf(x[i]);
            y[i] = e / (1.0f + e);
        }
    }
}

void ccn_tanh(long n, const float *x, float *y)
{
    for (long i = 0; i < n; i++)
        y[i] = tanhf(x[i]);
}

void ccn_softmax(long outer, long len, long inner, int log_softmax, const float *x, float *y)
{
    for (long o = 0; o < outer; o++)
        for (long j = 0; j < inner; j++) {
            const float *in = x + o * len * inner + j;
            float *out = y + o * len * inner + j;
            /* Subtract the maximum first, as NumPy's kernel does. */
            float top = -INFINITY;
            for (long i = 0; i < len; i++)
                if (in[i * inner] > top)
                    top = in[i * inner];
            float sum = 0.0f;
            for (long i = 0; i < len; i++)
                sum += expf(in[i * inner] - top);
            if (log_softmax) {
                const float lse = logf(sum);
                for (long i = 0; i < len; i++)
                    out[i * inner] = in[i * inner] - top - lse;
            } else {
                for (long i = 0; i < len; i++)
                    out[i * inner] = expf(in[i * inner] - top) / sum;
            }
        }
}
