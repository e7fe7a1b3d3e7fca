/* Loss family: SoftmaxCrossEntropyLoss and its gradient (see ccn_loss.h). */
#include <math.h>

#include "ccn_activation.h"
#include "ccn_loss.h"

/* *w = the weight of a sample of label t; returns 1 (and leaves *w) when t
 * is neither ignored nor a class in [0, C). */
static int weight_of(long t, long C, const float *weights, int has_ignore, long ignore_index,
                     float *w)
{
    if (has_ignore && t == ignore_index) {
        *w = 0.0f;
        return 0;
    }
    if (t < 0 || t >= C)
        return 1;
    *w = weights ? weights[t] : 1.0f;
    return 0;
}

/* *total = the sum of the sample weights (the divisor of CCN_LOSS_MEAN);
 * returns 1 when a label is out of range. */
#define CCN_TOTAL_WEIGHT(NAME, L)                                                      \
static int NAME(long ND, long C, const L *labels, const float *weights, int has_ignore, \
                long ignore_index, double *total)                                      \
{                                                                                      \
    *total = 0.0;                                                                      \
    for (long s = 0; s < ND; s++) {                                                    \
        float w;                                                                       \
        if (weight_of((long)labels[s], C, weights, has_ignore, ignore_index, &w))      \
            return 1;                                                                  \
        *total += w;                                                                   \
    }                                                                                  \
    return 0;                                                                          \
}

CCN_TOTAL_WEIGHT(total_weight_int32, int32_t)
CCN_TOTAL_WEIGHT(total_weight_int64, int64_t)

#define CCN_SOFTMAX_CROSS_ENTROPY(NAME, TOTAL, L)                                      \
int NAME(long N, long C, long D, const float *x, const L *labels, const float *weights, \
         int has_ignore, long ignore_index, enum ccn_loss_reduction reduction,         \
         float *loss, float *log_prob)                                                 \
{                                                                                      \
    ccn_softmax(N, C, D, 1, x, log_prob);                                              \
    double sum = 0.0; /* a double sum: as accurate as NumPy's pairwise one */          \
    for (long n = 0; n < N; n++)                                                       \
        for (long d = 0; d < D; d++) {                                                 \
            const long t = (long)labels[n * D + d];                                    \
            float w;                                                                   \
            if (weight_of(t, C, weights, has_ignore, ignore_index, &w))                \
                return 1;                                                              \
            const float l = w == 0.0f ? 0.0f : -w * log_prob[(n * C + t) * D + d];     \
            if (reduction == CCN_LOSS_NONE)                                            \
                loss[n * D + d] = l;                                                   \
            else                                                                       \
                sum += l;                                                              \
        }                                                                              \
    double total = 1.0;                                                                \
    if (reduction == CCN_LOSS_MEAN)                                                    \
        TOTAL(N * D, C, labels, weights, has_ignore, ignore_index, &total);            \
    if (reduction != CCN_LOSS_NONE)                                                    \
        loss[0] = (float)(sum / total);                                                \
    return 0;                                                                          \
}

CCN_SOFTMAX_CROSS_ENTROPY(ccn_softmax_cross_entropy_int32, total_weight_int32, int32_t)
CCN_SOFTMAX_CROSS_ENTROPY(ccn_softmax_cross_entropy_int64, total_weight_int64, int64_t)

#define CCN_SOFTMAX_CROSS_ENTROPY_GRAD(NAME, TOTAL, L)                                 \
int NAME(long N, long C, long D, const float *gy, const float *log_prob, const L *labels, \
         const float *weights, int has_ignore, long ignore_index,                      \
         enum ccn_loss_reduction reduction, float *gx)                                 \
{                                                                                      \
    float scale = reduction == CCN_LOSS_NONE ? 1.0f : gy[0];                           \
    if (reduction == CCN_LOSS_MEAN) {                                                  \
        double total;                                                                  \
        if (TOTAL(N * D, C, labels, weights, has_ignore, ignore_index, &total))        \
            return 1;                                                                  \
        scale = (float)(scale / total);                                                \
    }                                                                                  \
    for (long n = 0; n < N; n++)                                                       \
        for (long d = 0; d < D; d++) {                                                 \
            const long t = (long)labels[n * D + d];                                    \
            float w;                                                                   \
            if (weight_of(t, C, weights, has_ignore, ignore_index, &w))                \
                return 1;                                                              \
            const float k = w * (reduction == CCN_LOSS_NONE ? gy[n * D + d] : scale);  \
            const float *in = log_prob + n * C * D + d;                                \
            float *out = gx + n * C * D + d;                                           \
            for (long c = 0; c < C; c++)                                               \
                out[c * D] = expf(in[c * D]) * k;                                      \
            if (w != 0.0f)                                                             \
                out[t * D] -= k;                                                       \
        }                                                                              \
    return 0;                                                                          \
}

CCN_SOFTMAX_CROSS_ENTROPY_GRAD(ccn_softmax_cross_entropy_grad_int32, total_weight_int32,
                               int32_t)
CCN_SOFTMAX_CROSS_ENTROPY_GRAD(ccn_softmax_cross_entropy_grad_int64, total_weight_int64,
                               int64_t)
