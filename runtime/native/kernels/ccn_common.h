/* ccn_common.h: what every kernel of chainer-compiler's native (C) backend
 * shares.
 *
 * Kernels work on row-major (C order) arrays and take their shapes as
 * arguments: the generated model code calls them with literal constants,
 * one call per Program instruction.  No kernel allocates memory; scratch
 * space (im2col columns, transposed operands) comes from the model's arena,
 * whose layout is planned when the C code is emitted.  Each family of ops
 * has one ccn_<family>.c and its ccn_<family>.h.  C99, libc and libm only.
 */
#ifndef CCN_COMMON_H
#define CCN_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CCN_BEGIN_DECLS extern "C" {
#define CCN_END_DECLS }
#else
#define CCN_BEGIN_DECLS
#define CCN_END_DECLS
#endif

/* Work (elements touched) from which a loop runs on the thread pool
 * (ccn_parallel_for in ccn_threads.h): below it, handing pieces to the
 * other threads costs more than it saves.  2^18, OpenMP's figure, kept
 * ShuffleNetV2's 1x1 products (2.6 M multiply-adds, 28 us) on one thread:
 * default threads 1.53 ms against 1.76 on one; 1.16 with 2^16 (2^15 no
 * better; beside a busy process even). */
#define CCN_PARALLEL_WORK (1L << 16)
/* Multiply-adds of a matrix product that count as one element of work
 * (vectorised and from cache, they cost much less than an element of a
 * memory-bound loop). */
#define CCN_MACS_PER_WORK 16

/* CCN_PARALLEL_FOR(work, loop): the `for` statement `loop` (the rest of
 * the arguments: commas in it are fine) on the calling thread.  C has no
 * closures, so a loop runs on the pool only as a function of a context:
 * ccn_parallel_for(count, work, task, &context), which every parallel
 * loop of the kernels uses; this macro keeps loops written for the OpenMP
 * version compiling, serially. */
#define CCN_PARALLEL_FOR(work, ...) \
    do {                            \
        (void)(work);               \
        __VA_ARGS__                 \
    } while (0)

/* Largest rank the broadcasting and strided kernels handle. */
#define CCN_MAX_RANK 8

/* A function inlined at every call, even into a build of its caller for
 * another instruction set (ccn_rnn.c's cells). */
#if defined(__GNUC__)
#define CCN_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define CCN_ALWAYS_INLINE static inline
#endif

/* A prefetch of the float `offset` elements after `base`, which may lie
 * past the array: computed on integers, since a pointer that far past an
 * array's end is undefined C, while a prefetch of any address never
 * faults. */
#define CCN_PREFETCH_AT(base, offset) \
    __builtin_prefetch((const void *)((uintptr_t)(base) + (uintptr_t)(offset) * sizeof(float)))
/* The same into L2 only (data read after the current tile's). */
#define CCN_PREFETCH_L2_AT(base, offset) \
    __builtin_prefetch((const void *)((uintptr_t)(base) + (uintptr_t)(offset) * sizeof(float)), \
                       0, 2)

/* Unrolls the loop after it up to n times: a loop over a tile's sums,
 * which stay in registers only when every index is a constant (a rolled
 * loop keeps the whole tile in memory).  GCC 8 on; nothing elsewhere. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define CCN_PRAGMA(text) _Pragma(#text)
#define CCN_UNROLL(n) CCN_PRAGMA(GCC unroll n)
#else
#define CCN_UNROLL(n)
#endif

/* Multi-versioning of the hot loops.  The emitted Makefile's default build
 * on x86-64 defines CCN_GEMM_VARIANTS: the products are also compiled for
 * x86-64-v3 (AVX2, FMA) and -v4 (AVX-512) and ccn_gemm_level() (ccn_gemm.c)
 * tells the one this CPU runs, asked once, so one level serves the whole
 * program.  CCN_LEVELS(DECL, NAME, BODY, PARAMS, ARGS) defines
 * `DECL void NAME PARAMS`, which runs `BODY ARGS` (a CCN_ALWAYS_INLINE
 * function, so that it and its inline helpers are compiled again for each
 * target) built for that level, and `NAME##_best()`, that build's address
 * (for a caller that calls it per row).  Without CCN_GEMM_VARIANTS (other
 * CPUs, ARCH=..., the in-Python library's -march=native) NAME is BODY
 * alone. */
#ifdef CCN_GEMM_VARIANTS
CCN_BEGIN_DECLS
int ccn_gemm_level(void);
CCN_END_DECLS
#define CCN_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#define CCN_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define CCN_LEVELS(DECL, NAME, BODY, PARAMS, ARGS)                                   \
    static void NAME##_base PARAMS { BODY ARGS; }                                    \
    CCN_TARGET_V3 static void NAME##_v3 PARAMS { BODY ARGS; }                        \
    CCN_TARGET_V4 static void NAME##_v4 PARAMS { BODY ARGS; }                        \
    static inline void (*NAME##_best(void)) PARAMS                                   \
    {                                                                                \
        const int level = ccn_gemm_level();                                          \
        return level == 4 ? NAME##_v4 : level == 3 ? NAME##_v3 : NAME##_base;        \
    }                                                                                \
    DECL void NAME PARAMS { NAME##_best() ARGS; }
/* A level family's file (render.LEVEL_FAMILIES) is also compiled for
 * x86-64-v3 and -v4 with its functions renamed NAME_v3 and NAME_v4:
 * CCN_RUN_LEVEL_BUILD, first in the baseline NAME, calls the build of the
 * products' level, if any, with ARGS and returns. */
#define CCN_RUN_LEVEL_BUILD(NAME, ...)                                               \
    do {                                                                             \
        const int level_ = ccn_gemm_level();                                         \
        if (level_ >= 3) {                                                           \
            (level_ == 4 ? NAME##_v4 : NAME##_v3)(__VA_ARGS__);                      \
            return;                                                                  \
        }                                                                            \
    } while (0)
#else
#define CCN_RUN_LEVEL_BUILD(NAME, ...) (void)0
#define CCN_LEVELS(DECL, NAME, BODY, PARAMS, ARGS)                                   \
    DECL void NAME PARAMS { BODY ARGS; }                                             \
    static inline void (*NAME##_best(void)) PARAMS { return NAME; }
#endif

/* float32 e^v and sigmoid as a polynomial after range reduction (Cephes'
 * expf, within 3 ulp of the exact values), tanh as a rational function
 * (within 5 ulp; tests/runtime/native/test_recurrent_fast_paths.py): the
 * compiler inlines and vectorises them, where libm's are a call per
 * element (the gates of a recurrent cell spent three quarters of their
 * time there).
 * A file that uses them in loops with selects also wants GCC's
 * no-trapping-math (see ccn_activation.c). */
#define CCN_EXP_LO -87.3365447505531f /* the smallest normal result's log */

/* e^x for x from CCN_EXP_LO to 89 (beyond 88.38, Cephes' MAXLOGF, a
 * little before float32 overflows: +inf): ccn_exp_poly without its selects
 * for the values outside, for a caller that clamps (ccn_activation.c's
 * Swish). */
static inline float ccn_exp_reduced(float x)
{
    /* floor(t): t + 128 is positive for such x, and truncates. */
    const float t = x * 1.44269504088896341f + 0.5f;
    const int32_t k = (int32_t)(t + 128.0f) - 128;
    const float n = (float)k;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    const float p = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                       4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) *
                        r * r + r + 1.0f;
    union { int32_t i; float f; } scale = { (k + 127) << 23 };
    return p * scale.f;
}

static inline float ccn_exp_poly(float v)
{
    const float lo = CCN_EXP_LO, hi = 88.3762626647949f;
    /* Clamped so that the reduction stays finite, for NaN too. */
    const float x = v < hi ? (v > lo ? v : lo) : hi;
    /* 0 below the smallest normal result, infinite from Cephes' MAXLOGF;
     * NaN stays NaN. */
    return v > lo ? (v < hi ? ccn_exp_reduced(x) : INFINITY) : v == v ? 0.0f : v;
}

/* e^-|v| never overflows; mirrored for negative v.  As -|v| <= 0, one
 * select does what ccn_exp_poly's do: 0 below CCN_EXP_LO, and for NaN
 * (then v itself).  1.37x faster than through ccn_exp_poly, the same
 * values. */
static inline float ccn_sigmoid_poly(float v)
{
    const float a = -fabsf(v), lo = CCN_EXP_LO;
    const float e = a > lo ? ccn_exp_reduced(a) : 0.0f, r = 1.0f / (1.0f + e);
    return v >= 0.0f ? r : (v == v ? e * r : v);
}

/* Swish (SiLU) v sigmoid(a v) as v / (1 + e^-av): one exponential of a
 * clamped argument, without the sigmoid's selects (1.6x faster, within
 * 3e-7 of v sigmoid(a v)).  Above 88.38 e^-av is +inf: tiny v give -0,
 * -inf gives NaN, as in the VM.  The element-wise Swish and the products'
 * Swish epilogue (ccn_gemm.c) both use it. */
static inline float ccn_swish_poly(float v, float a)
{
    const float x = -a * v;
    return v / (1.0f + ccn_exp_reduced(x < 89.0f ? (x > CCN_EXP_LO ? x : CCN_EXP_LO) : 89.0f));
}

/* Eigen's rational function of v clamped to +-7.9 (where it reaches 1),
 * an odd polynomial over an even one: one division and no exp, 2.7x
 * faster than 1 - 2 / (e^2|v| + 1), within 5 ulp; below 0.0004, v itself
 * (tanh's v^3 / 3 is below half an ulp there).  NaN stays NaN. */
static inline float ccn_tanh_poly(float v)
{
    const float m = 7.90531110763549805f, x = v < m ? (v > -m ? v : -m) : m, z = x * x;
    const float p = ((((((-2.76076847742355e-16f * z + 2.00018790482477e-13f) * z -
                         8.60467152213735e-11f) * z + 5.12229709037114e-08f) * z +
                       1.48572235717979e-05f) * z + 6.37261928875436e-04f) * z +
                     4.89352455891786e-03f) * x;
    const float q = ((1.19825839466702e-06f * z + 1.18534705686654e-04f) * z +
                     2.26843463243900e-03f) * z + 4.89352518554385e-03f;
    return fabsf(v) < 0.0004f ? v : (v == v ? p / q : v);
}

/* float32 erf as a rational function of v on [-4, 4] (Eigen's and XLA's;
 * within 8 ulp of erf, +-1 beyond, where float32's erf is): inlined and
 * vectorised, where libm's erff is a call per element (GELU in BERT and
 * ConvNeXt).  NaN stays NaN.  The element-wise Erf and Gelu and the
 * products' Gelu epilogue (ccn_gemm.c) use it. */
static inline float ccn_erf_poly(float v)
{
    const float x = v < 4.0f ? (v > -4.0f ? v : -4.0f) : 4.0f, z = x * x;
    const float p = ((((((-2.72614225801306e-10f * z + 2.77068142495902e-08f) * z -
                         2.10102402082508e-06f) * z - 5.69250639462346e-05f) * z -
                       7.34990630326855e-04f) * z - 2.95459980854025e-03f) * z -
                     1.60960333262415e-02f) * x;
    const float q = (((-1.45660718464996e-05f * z - 2.13374055278905e-04f) * z -
                      1.68282697438203e-03f) * z - 7.37332916720468e-03f) * z -
                    1.42647390514189e-02f;
    return v == v ? p / q : v;
}

/* GELU, v (1 + erf(v / sqrt 2)) / 2, and its tanh form (approximate
 * 'tanh'), of float32: the element-wise Gelu and the products' epilogue
 * (ccn_gemm.c). */
static inline float ccn_gelu_poly(float v)
{
    return 0.5f * v * (1.0f + ccn_erf_poly(v * 0.70710678118654752f));
}

static inline float ccn_gelu_tanh_poly(float v)
{
    return 0.5f * v * (1.0f + ccn_tanh_poly(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}

#endif /* CCN_COMMON_H */

/* After the guard's end: ccn_threads.h includes this file for the macros
 * above. */
#include "ccn_threads.h"
