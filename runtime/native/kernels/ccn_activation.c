/* Activation family: the element-wise functions of one float tensor
 * (ccn_unary_*), Softmax and LogSoftmax, and the gradient of Relu. */
/* The loops below select between results (x < 0 ? ... : ...); GCC's
 * default -ftrapping-math keeps such loops scalar, for floating-point
 * exception flags nobody reads.  The values are the same. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <stdint.h>
#include <tgmath.h> /* exp, erf... of a float are expf, erff... */

#include "ccn_activation.h"

/* e^v for float v, as a polynomial after range reduction (Cephes' expf,
 * within 2 ulp of libm's; 0 below the smallest normal result) that the
 * compiler inlines and vectorises, where libm's expf is a call per
 * element.  float64 keeps libm's exp. */
static inline float exp_poly(float v)
{
    const float lo = -87.3365447505531f, hi = 88.3762626647949f;
    /* Clamped so that the reduction stays finite, for NaN too. */
    const float x = v < hi ? (v > lo ? v : lo) : hi;
    /* floor(t): t + 128 is positive for such x, and truncates. */
    const float t = x * 1.44269504088896341f + 0.5f;
    const int32_t k = (int32_t)(t + 128.0f) - 128;
    const float n = (float)k;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    const float p = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                       4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) *
                        r * r + r + 1.0f;
    union { int32_t i; float f; } scale = { (k + 127) << 23 };
    return v > lo ? (v < hi ? p * scale.f : INFINITY) : v == v ? 0.0f : v;
}

/* The sigmoids: e^-|v| never overflows; mirrored for negative v. */
static inline float sigmoid_float32(float v)
{
    const float e = exp_poly(-fabsf(v)), r = 1.0f / (1.0f + e);
    return v >= 0 ? r : e * r;
}

static inline double sigmoid_float64(double v)
{
    const double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* One loop per function, so that each one vectorises where it can; v is
 * x[i] and every constant is of the element type elem, as in the NumPy
 * kernels.  tgmath.h picks each math function's precision from elem. */
#define CCN_MAP(EXPR)                                                         \
    for (long i = 0; i < n; i++) {                                            \
        const elem v = x[i];                                                  \
        y[i] = (EXPR);                                                        \
    }                                                                         \
    break;

#define CCN_CLAMP01(E) ((E) < 0 ? (elem)0 : (E) > 1 ? (elem)1 : (E))

/* ccn_unary_<T>, with SIGMOID that of T. */
#define CCN_UNARY(NAME, T, SIGMOID)                                           \
void NAME(enum ccn_unary_op op, long n, double alpha, double beta,            \
          const T *x, T *y)                                                   \
{                                                                             \
    typedef T elem; /* for the expressions of the cases */                    \
    const elem a = (elem)alpha, b = (elem)beta;                               \
    switch (op) {                                                             \
    case CCN_ABS: CCN_MAP(fabs(v))                                            \
    case CCN_NEG: CCN_MAP(-v)                                                 \
    case CCN_EXP: CCN_MAP(exp(v))                                             \
    case CCN_LOG: CCN_MAP(log(v))                                             \
    case CCN_SQRT: CCN_MAP(sqrt(v))                                           \
    case CCN_RECIPROCAL: CCN_MAP((elem)1 / v)                                 \
    case CCN_FLOOR: CCN_MAP(floor(v))                                         \
    case CCN_CEIL: CCN_MAP(ceil(v))                                           \
    /* The default rounding mode rounds halves to even, as ONNX asks. */      \
    case CCN_ROUND: CCN_MAP(nearbyint(v))                                     \
    /* Zero and NaN are their own sign. */                                    \
    case CCN_SIGN: CCN_MAP(v > 0 ? (elem)1 : v < 0 ? (elem)-1 : v)            \
    case CCN_ERF: CCN_MAP(erf(v))                                             \
    case CCN_SIN: CCN_MAP(sin(v))                                             \
    case CCN_COS: CCN_MAP(cos(v))                                             \
    case CCN_TAN: CCN_MAP(tan(v))                                             \
    case CCN_ASIN: CCN_MAP(asin(v))                                           \
    case CCN_ACOS: CCN_MAP(acos(v))                                           \
    case CCN_ATAN: CCN_MAP(atan(v))                                           \
    case CCN_SINH: CCN_MAP(sinh(v))                                           \
    case CCN_COSH: CCN_MAP(cosh(v))                                           \
    case CCN_ASINH: CCN_MAP(asinh(v))                                         \
    case CCN_ACOSH: CCN_MAP(acosh(v))                                         \
    case CCN_ATANH: CCN_MAP(atanh(v))                                         \
    case CCN_RELU: CCN_MAP(v > 0 ? v : (elem)0)                               \
    case CCN_LEAKY_RELU: CCN_MAP(v >= 0 ? v : a * v)                          \
    case CCN_SIGMOID: CCN_MAP(SIGMOID(v))                                     \
    case CCN_SWISH: CCN_MAP(v * SIGMOID(a * v))                               \
    case CCN_TANH: CCN_MAP(tanh(v))                                           \
    /* log(1 + e^v) = max(v, 0) + log1p(e^-|v|): no overflow. */              \
    case CCN_SOFTPLUS: CCN_MAP((v > 0 ? v : (elem)0) + log1p(exp(-fabs(v))))  \
    case CCN_SOFTSIGN: CCN_MAP(v / ((elem)1 + fabs(v)))                       \
    case CCN_ELU: CCN_MAP(v > 0 ? v : a * expm1(v))                           \
    /* alpha, gamma */                                                        \
    case CCN_SELU: CCN_MAP(b * (v > 0 ? v : a * expm1(v)))                    \
    case CCN_CELU:                                                            \
        CCN_MAP((v > 0 ? v : (elem)0) + (v < 0 ? a * expm1(v / a) : (elem)0)) \
    /* alpha, beta */                                                         \
    case CCN_HARD_SIGMOID: CCN_MAP(CCN_CLAMP01(a * v + b))                    \
    case CCN_HARD_SWISH: CCN_MAP(v * CCN_CLAMP01(v / (elem)6 + (elem)0.5))    \
    case CCN_THRESHOLDED_RELU: CCN_MAP(v > a ? v : (elem)0)                   \
    /* 1 + erf(v/sqrt 2) as erfc(-v/sqrt 2): accurate where it is tiny. */    \
    case CCN_GELU:                                                            \
        CCN_MAP((elem)0.5 * v * erfc(-v * (elem)0.70710678118654752))         \
    case CCN_GELU_TANH:                                                       \
        CCN_MAP((elem)0.5 * v * ((elem)1 + tanh((elem)0.79788456080286536 *   \
                                          (v + (elem)0.044715 * v * v * v)))) \
    /* min, max: the lower bound first, so that min > max gives max. */       \
    case CCN_CLIP: CCN_MAP(v < a ? (a > b ? b : a) : v > b ? b : v)           \
    }                                                                         \
}

CCN_UNARY(ccn_unary_float32, float, sigmoid_float32)
CCN_UNARY(ccn_unary_float64, double, sigmoid_float64)

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

/* ccn_relu_grad: its elements [begin, end). */
typedef struct {
    long n;
    const float *y;
    const float *gy;
    float *gx;
} relu_grad_call;

static void relu_grad_range(void *context, long begin, long end)
{
    const relu_grad_call *a = context;
    const float *y = a->y;
    const float *gy = a->gy;
    float *gx = a->gx;
    for (long i = begin; i < end; i++)
        gx[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}

void ccn_relu_grad(long n, const float *y, const float *gy, float *gx)
{
    relu_grad_call a = {n, y, gy, gx};
    ccn_parallel_for(n, n, relu_grad_range, &a);
}
