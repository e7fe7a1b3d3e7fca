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
#include <string.h>
#include <tgmath.h> /* exp, erf... of a float are expf, erff... */

#include "ccn_activation.h"
#include "ccn_threads.h"

/* The sigmoids (float64 keeps libm's exp). */
static inline float sigmoid_float32(float v)
{
    return ccn_sigmoid_poly(v);
}

static inline double sigmoid_float64(double v)
{
    const double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Tanh and erf of each type: the polynomials for float32, libm's for
 * float64.  GELU's 1 + erf(v / sqrt 2) is erfc(-v / sqrt 2) for float64
 * (accurate where it is tiny); for float32 the difference is below 1e-7
 * of v. */
#define tanh_float32 ccn_tanh_poly
#define tanh_float64 tanh
#define erf_float32 ccn_erf_poly
#define erf_float64 erf
#define gelu_float32 ccn_gelu_poly
#define gelu_tanh_float32 ccn_gelu_tanh_poly
static inline double gelu_float64(double v)
{
    return 0.5 * v * erfc(-v * 0.70710678118654752);
}

static inline double gelu_tanh_float64(double v)
{
    return 0.5 * v * (1.0 + tanh(0.79788456080286536 * (v + 0.044715 * v * v * v)));
}

/* Swish (SiLU: EfficientNet's and MixNet's activation) of float32. */
static inline float swish_float32(float v, float a)
{
    return ccn_swish_poly(v, a);
}

static inline double swish_float64(double v, double a)
{
    return v * sigmoid_float64(a * v);
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

/* ccn_unary_<T>, with SIGMOID, TANH, ERF, GELU, GELU_TANH and SWISH those
 * of T. */
#define CCN_UNARY(NAME, T, SIGMOID, TANH, ERF, GELU, GELU_TANH, SWISH)        \
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
    case CCN_ERF: CCN_MAP(ERF(v))                                             \
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
    case CCN_RELU: CCN_MAP(v < 0 ? (elem)0 : v)                               \
    case CCN_LEAKY_RELU: CCN_MAP(v >= 0 ? v : a * v)                          \
    case CCN_SIGMOID: CCN_MAP(SIGMOID(v))                                     \
    case CCN_SWISH: CCN_MAP(SWISH(v, a))                                      \
    case CCN_TANH: CCN_MAP(TANH(v))                                           \
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
    case CCN_GELU: CCN_MAP(GELU(v))                                           \
    case CCN_GELU_TANH: CCN_MAP(GELU_TANH(v))                                 \
    /* min, max: the lower bound first, so that min > max gives max. */       \
    case CCN_CLIP: CCN_MAP(v < a ? (a > b ? b : a) : v > b ? b : v)           \
    }                                                                         \
}

/* float32 built for the CPU's level (CCN_LEVELS, ccn_common.h): Swish,
 * Sigmoid, Gelu... in AVX2 or AVX-512 in the default build. */
CCN_ALWAYS_INLINE CCN_UNARY(unary_float32, float, sigmoid_float32, tanh_float32, erf_float32,
                            gelu_float32, gelu_tanh_float32, swish_float32)
CCN_LEVELS(, ccn_unary_float32, unary_float32,
           (enum ccn_unary_op op, long n, double alpha, double beta, const float *x, float *y),
           (op, n, alpha, beta, x, y))
CCN_UNARY(ccn_unary_float64, double, sigmoid_float64, tanh_float64, erf_float64, gelu_float64,
          gelu_tanh_float64, swish_float64)

/* Softmax's loops (to ccn_softmax_scores) with the products of its
 * exponential's reduction and polynomial fused into the sums that follow
 * them (FMA where the CPU has it; -std=c99 turns GCC's contraction off):
 * 0.72x to 0.78x the time over rows of 256 and 1500 (of 64: 0.9x to 1.0x),
 * the values within an ulp. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif
/* The largest of the len values at in, stride apart, NaN ignored (-inf
 * when all are NaN).  A contiguous row runs in vectors compared and
 * selected whole (1.6x faster Softmax over rows of 256: GCC leaves the 16
 * running maxima of the scalar loop below as scalar compares and moves):
 * one of 16 floats with AVX-512, else two of 8, as GCC split a 16-float
 * compare and select into scalars without AVX-512 (Softmax 3.2x the time
 * at x86-64-v3, the default build's level 3 included); a strided row in 16
 * running maxima, selects rather than one maximum's branch, mispredicted
 * on unordered values. */
static inline float row_max(long len, long stride, const float *in)
{
    float tops[16], top = -INFINITY;
    long i = 0;
#if defined(__GNUC__) && defined(__AVX512F__)
    typedef float vec16 __attribute__((vector_size(16 * sizeof(float))));
    typedef int32_t mask16 __attribute__((vector_size(16 * sizeof(float))));
    if (stride == 1) {
        vec16 m = -INFINITY + (vec16){0}, v;
        for (; i + 16 <= len; i += 16) {
            memcpy(&v, in + i, sizeof v);
            const mask16 up = v > m;
            m = (vec16)((up & (mask16)v) | (~up & (mask16)m));
        }
        memcpy(tops, &m, sizeof m);
    } else
#elif defined(__GNUC__)
    typedef float vec8 __attribute__((vector_size(8 * sizeof(float))));
    typedef int32_t mask8 __attribute__((vector_size(8 * sizeof(float))));
    if (stride == 1) {
        vec8 m0 = -INFINITY + (vec8){0}, m1 = m0, v0, v1;
        for (; i + 16 <= len; i += 16) {
            memcpy(&v0, in + i, sizeof v0);
            memcpy(&v1, in + i + 8, sizeof v1);
            const mask8 up0 = v0 > m0, up1 = v1 > m1;
            m0 = (vec8)((up0 & (mask8)v0) | (~up0 & (mask8)m0));
            m1 = (vec8)((up1 & (mask8)v1) | (~up1 & (mask8)m1));
        }
        memcpy(tops, &m0, sizeof m0);
        memcpy(tops + 8, &m1, sizeof m1);
    } else
#endif
    {
        for (long k = 0; k < 16; k++)
            tops[k] = -INFINITY;
        for (; i + 16 <= len; i += 16)
            for (long k = 0; k < 16; k++) {
                const float v = in[(i + k) * stride];
                tops[k] = v > tops[k] ? v : tops[k];
            }
    }
    for (; i < len; i++)
        top = in[i * stride] > top ? in[i * stride] : top;
    for (long k = 0; k < 16; k++)
        top = tops[k] > top ? tops[k] : top;
    return top;
}

/* The bound below which Softmax's terms e^(x - max) over rows of len are
 * 0: the sum is at most len (each term at most 1), so a term above
 * FLT_MIN len divided by it stays normal.  What is dropped is below
 * 1.2e-38 len of the row's largest, 1. */
static float softmax_cut(long len)
{
    return CCN_EXP_LO + logf((float)len);
}

/* e^d for d = x - max, at most 0 (so only the lower clamp is needed): 0
 * at or below cut; NaN (x NaN, or inf - inf) passes through both selects
 * and the arithmetic.  ccn_exp_reduced's reduction and polynomial, but
 * n = round(d log2 e) is read from the low bits of d log2 e + 1.5 2^23
 * (no conversions to and from int, nor their clamps): 0.9x the time of
 * the Softmax over rows of 197 or 256, the same values.  d is clamped at
 * cut (at least CCN_EXP_LO), whose lanes come out 0 all the same: lower,
 * e^d came out subnormal before that select, a microcode assist per vector
 * with AVX2 (rows mostly far below their maximum, a masked attention's,
 * took 10x the time at x86-64-v3). */
static inline float softmax_exp(float d, float cut)
{
    const float x = d < cut ? cut : d, shift = 0x1.8p23f;
    const float shifted = x * 1.44269504088896341f + shift, n = shifted - shift;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    const float p = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                       4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) *
                        r * r + r + 1.0f;
    union { float f; uint32_t u; } bits = {shifted}, scale;
    /* 2^n: n (in shifted's low bits) + 127 in the exponent field. */
    scale.u = (bits.u - 0x4B400000u + 127u) << 23;
    return d <= cut ? 0.0f : p * scale.f;
}

/* Softmax (or its log) of scale times the len values at in, stride apart,
 * into out (stride apart too); scale > 0, so that the largest of scale x
 * is scale times the largest x (rounding keeps the order), and the
 * products go into the exponentials' pass (FMA) rather than a pass of
 * their own (0.87x to 0.91x the time over rows of 64 to 1500).  e^(x - max) is written to out by the vectorised
 * softmax_exp and summed in 16 running sums, which also keeps a long sum
 * from losing its small terms.  Softmax may run in place (out == in: each
 * value is read before it is written over; a dying input's memory spares
 * the output's first write a read of memory, 1.15x faster over 4 MB);
 * LogSoftmax reads in again after out is written, so never does.
 * Terms with x - max at most cut (softmax_cut) are 0, so that no output is
 * subnormal: a masked attention score (x - max near -3.4e38) otherwise
 * came out near FLT_MIN / sum, and every product reading it took a
 * microcode assist per vector (the scores times V 20x slower).
 * next, when not NULL, is the row after (contiguous): each cache line of it
 * is prefetched as the same line of this row is exponentiated, so that its
 * maximum's pass does not wait for memory (rows of 1500 from memory in
 * place 0.76x the time, of 256 0.81x to 0.87x, of 64 0.93x). */
static inline void softmax_row(long len, long stride, int log_softmax, float cut, float scale,
                               const float *in, float *out, const float *next)
{
    /* Subtract the maximum first, as NumPy's kernel does (NaN ignored
     * here; the row comes out NaN below). */
    const float top = row_max(len, stride, in) * scale;
    /* e^(x - max) stored and summed in the same pass. */
    float sums[16] = {0.0f}, sum = 0.0f;
    long i = 0;
    for (; i + 16 <= len; i += 16) {
#if defined(__GNUC__)
        if (next)
            __builtin_prefetch(next + i);
#endif
        for (long k = 0; k < 16; k++) {
            out[(i + k) * stride] = softmax_exp(in[(i + k) * stride] * scale - top, cut);
            sums[k] += out[(i + k) * stride];
        }
    }
    for (; i < len; i++) {
        out[i * stride] = softmax_exp(in[i * stride] * scale - top, cut);
        sum += out[i * stride];
    }
    for (long k = 0; k < 16; k++)
        sum += sums[k];
    if (log_softmax) {
        const float lse = logf(sum);
        for (i = 0; i < len; i++)
            out[i * stride] = in[i * stride] * scale - top - lse;
    } else {
        /* One division per row (a division per element took a fifth of
         * the time; the results differ from it by at most an ulp). */
        const float r = 1.0f / sum;
        for (i = 0; i < len; i++)
            out[i * stride] *= r;
    }
}

/* The arguments of ccn_softmax, for its task. */
typedef struct {
    long len, inner;
    int log_softmax;
    const float *x;
    float *y;
} softmax_call;

/* Slices [begin, end) of the outer axis of ccn_softmax. */
CCN_ALWAYS_INLINE void softmax_rows(void *context, long begin, long end)
{
    const softmax_call *a = context;
    const long len = a->len, inner = a->inner;
    const float cut = softmax_cut(len);
    for (long o = begin; o < end; o++) {
        const float *in = a->x + o * len * inner;
        float *out = a->y + o * len * inner;
        if (inner == 1)  /* the last axis: contiguous, the loops vectorise */
            softmax_row(len, 1, a->log_softmax, cut, 1.0f, in, out,
                        o + 1 < end ? in + len : NULL);
        else
            for (long j = 0; j < inner; j++)
                softmax_row(len, inner, a->log_softmax, cut, 1.0f, in + j, out + j, NULL);
    }
}

CCN_LEVELS(static, softmax_range, softmax_rows, (void *context, long begin, long end),
           (context, begin, end))

void ccn_softmax(long outer, long len, long inner, int log_softmax, const float *x, float *y)
{
    softmax_call a = {len, inner, log_softmax, x, y};
    ccn_parallel_for(outer, outer * len * inner * 8, softmax_range, &a);
}

/* ccn_softmax_scores's rows, built for the CPU's level. */
CCN_ALWAYS_INLINE void softmax_scores(long rows, long len, float scale, const float *mask,
                                      long mask_rs, float *x)
{
    const float cut = softmax_cut(len);
    for (long r = 0; r < rows; r++) {
        float *row = x + r * len;
        const float *m = mask ? mask + r * mask_rs : NULL;
        /* A positive scale without a mask goes into softmax_row's passes. */
        const int folded = !m && scale > 0.0f;
        if (m)
            for (long j = 0; j < len; j++)
                row[j] = row[j] * scale + m[j];
        else if (!folded && scale != 1.0f)
            for (long j = 0; j < len; j++)
                row[j] *= scale;
        /* in the L2 already: no prefetch */
        softmax_row(len, 1, 0, cut, folded ? scale : 1.0f, row, row, NULL);
    }
}

CCN_LEVELS(, ccn_softmax_scores, softmax_scores,
           (long rows, long len, float scale, const float *mask, long mask_rs, float *x),
           (rows, len, scale, mask, mask_rs, x))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

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
