/* Depthwise family: a convolution with one group per channel, summed
 * straight from the input plane.  A vector of VL consecutive outputs of
 * one row holds its sums in a register; each tap is one vector load of an
 * input row (stride 2: two, and their even lanes) times the tap's weight.
 * Rows of taps outside the plane are skipped, columns outside it load as
 * zeros (masked loads where the CPU has them), and only the vectors that
 * reach the border check at all: no padded copy, no scratch.  The bias
 * starts the sums and the simple activations are applied in registers
 * before the store.  im2col would copy each input KH*KW times for a
 * product of depth KH*KW with one output row: slower than the arithmetic
 * it feeds. */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the tap loops want them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <assert.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "ccn_depthwise.h"
#include "ccn_threads.h"

/* Lanes of a vector: the widest this build has. */
#if defined(__AVX512F__)
#define VL 16
#define EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#elif defined(__AVX__)
#define VL 8
#define EVEN 0, 2, 4, 6, 8, 10, 12, 14
#else
#define VL 4
#define EVEN 0, 2, 4, 6
#endif
typedef float vec __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t ivec __attribute__((vector_size(VL * sizeof(float))));

/* The even lanes of a followed by b's: stride 2's outputs from a
 * window of 2 VL consecutive inputs. */
#if defined(__clang__) || __GNUC__ >= 12
#define EVEN_LANES(a, b) __builtin_shufflevector(a, b, EVEN)
#else
#define EVEN_LANES(a, b) __builtin_shuffle(a, b, (ivec){EVEN})
#endif

/* Which lanes of a load from column c of a row of W lie inside the row,
 * and the load of those lanes (the others zero, and not read): a mask
 * where the CPU has masked loads (AVX-512, AVX2), else the lanes'
 * range. */
#if defined(__AVX512F__)
typedef __mmask16 inside;

static inline inside inside_of(long c, long W)
{
    const long lo = c < 0 ? -c : 0, hi = W - c < VL ? W - c : VL;
    return lo < hi ? (inside)((1u << hi) - (1u << lo)) : 0;
}

static inline vec load(const float *row, long c, inside m)
{
    return (vec)_mm512_maskz_loadu_ps(m, row + c);
}
#elif defined(__AVX2__)
typedef ivec inside;

static inline inside inside_of(long c, long W)
{
    const ivec lane = {0, 1, 2, 3, 4, 5, 6, 7}, lo = lane * 0 - (int32_t)c,
               hi = lane * 0 + (int32_t)(W - c);
    return (lane >= lo) & (lane < hi);
}

static inline vec load(const float *row, long c, inside m)
{
    return (vec)_mm256_maskload_ps(row + c, (__m256i)m);
}
#else
typedef struct {
    long lo, hi;
} inside;

static inline inside inside_of(long c, long W)
{
    const long lo = c < 0 ? -c : 0, hi = W - c < VL ? W - c : VL;
    return (inside){lo < VL ? lo : VL, hi > lo ? hi : lo};
}

static inline vec load(const float *row, long c, inside m)
{
    vec v;
    if (m.lo == 0 && m.hi == VL) {
        memcpy(&v, row + c, sizeof v);
        return v;
    }
    /* Lane by lane into the register: through an array in memory, the
     * vector load would wait for the lanes' stores. */
    v = (vec){0};
    for (int l = 0; l < VL; l++)
        if (l >= m.lo && l < m.hi)
            v[l] = row[c + l];
    return v;
}
#endif

/* Tap inputs of VL outputs in one row: lane l = row[c + l sw], zero off
 * the row; m: inside_of c and of c + VL. */
CCN_ALWAYS_INLINE vec tap(const float *row, long c, long sw, long W, const inside *m)
{
    if (sw == 1)
        return load(row, c, m[0]);
    if (sw == 2)
        return EVEN_LANES(load(row, c, m[0]), load(row, c + VL, m[1]));
    float t[VL];
    for (long l = 0; l < VL; l++)
        t[l] = c + l * sw >= 0 && c + l * sw < W ? row[c + l * sw] : 0.0f;
    vec v;
    memcpy(&v, t, sizeof v);
    return v;
}

/* Whether activation act is applied in registers (epilogue); the others
 * by ccn_activate over the finished plane. */
static int in_registers(int act)
{
    return act == CCN_ACT_NONE || act == CCN_ACT_RELU || act == CCN_ACT_LEAKY_RELU ||
           act == CCN_ACT_CLIP || act == CCN_ACT_HARD_SWISH;
}

/* v clamped to [0, hi]; NaN stays NaN, as in ccn_gemm.c's activate_row. */
static inline vec clamp(vec v, float hi)
{
    const vec zero = {0}, top = zero + hi;
    const ivec below = v < zero, above = v > top;
    return (vec)(~below & ((above & (ivec)top) | (~above & (ivec)v)));
}

/* Activation act of v for those in_registers, the same values as
 * ccn_gemm.c's activate_row (the NaN cases included). */
static inline vec epilogue(vec v, int act, float a)
{
    const vec zero = {0};
    switch (act) {
    case CCN_ACT_RELU:
        return (vec)((ivec)v & (v > zero));
    case CCN_ACT_LEAKY_RELU: {
        const ivec keep = v >= zero;
        return (vec)(((ivec)v & keep) | ((ivec)(a * v) & ~keep));
    }
    case CCN_ACT_CLIP:
        return clamp(v, a);
    case CCN_ACT_HARD_SWISH:
        return v * clamp(v / 6.0f + 0.5f, 1.0f);
    default:
        return v;
    }
}

/* The first n lanes of v to out. */
static inline void store(float *out, vec v, long n)
{
#if defined(__AVX512F__)
    if (n < VL) {
        _mm512_mask_storeu_ps(out, (__mmask16)((1u << n) - 1), (__m512)v);
        return;
    }
#endif
    memcpy(out, &v, (size_t)n * sizeof(float));
}

/* Output rows computed together: their sums are independent chains of
 * multiply-adds, which the CPU overlaps (one chain waits out each
 * multiply-add's latency). */
#define ROWS 4

/* The strip's outputs from column ow0 (VL, or those before OW) of output
 * rows [oh, oh + R): each the bias plus its taps, then the epilogue.
 * Unless every tap row lies inside the plane (inside), a row of taps
 * outside it is skipped. */
CCN_ALWAYS_INLINE void rows(const ccn_conv_geometry *g, long KH, long KW, long sw, long R,
                            int inside_rows, const float *in, const vec *wv, inside (*m)[2],
                            float b, long ow0, long oh, float *out, int act, float act_alpha)
{
    const long H = g->in_h, W = g->in_w, OW = g->out_w, dh = g->dil_h, dw = g->dil_w;
    const long c0 = ow0 * sw - g->pad_left, n = OW - ow0 < VL ? OW - ow0 : VL;
    vec acc[ROWS];
    for (long r = 0; r < R; r++)
        acc[r] = (vec){0} + b;
    /* The rows innermost: with KH and KW variables, acc stays in
     * registers all the same. */
    for (long kh = 0; kh < KH; kh++) {
        const float *row[ROWS];
        int used[ROWS];
        for (long r = 0; r < R; r++) {
            const long ih = (oh + r) * g->stride_h - g->pad_top + kh * dh;
            used[r] = inside_rows || (ih >= 0 && ih < H);
            row[r] = in + (used[r] ? ih : 0) * W;
        }
        for (long kw = 0; kw < KW; kw++)
            for (long r = 0; r < R; r++)
                if (used[r])
                    acc[r] += wv[kh * KW + kw] * tap(row[r], c0 + kw * dw, sw, W, m[kw]);
    }
    for (long r = 0; r < R; r++)
        store(out + (oh + r) * OW + ow0, epilogue(acc[r], act, act_alpha), n);
}

/* Outputs [ow0, ow0 + VL) of every row of one plane (those before OW),
 * ROWS rows at a time.  Called with constant KH, KW and sw, the taps
 * unroll with their weights in registers. */
CCN_ALWAYS_INLINE void strip(const ccn_conv_geometry *g, long KH, long KW, long sw,
                             const float *in, const float *wc, float b, long ow0, float *out,
                             int act, float act_alpha)
{
    const long W = g->in_w, dw = g->dil_w, c0 = ow0 * sw - g->pad_left;
    /* The weights in registers: read through wc, which might alias out,
     * they would be loaded again after every store. */
    vec wv[KH * KW];
    for (long t = 0; t < KH * KW; t++)
        wv[t] = (vec){0} + wc[t];
    inside m[KW][2];
    for (long kw = 0; kw < KW; kw++) {
        m[kw][0] = inside_of(c0 + kw * dw, W);
        m[kw][1] = inside_of(c0 + kw * dw + VL, W);
    }
    const long sh = g->stride_h, pt = g->pad_top, reach = (KH - 1) * g->dil_h;
    long oh = 0;
    for (; oh + ROWS <= g->out_h; oh += ROWS) {
        /* Blocks away from the top and bottom check no rows. */
        if (oh * sh - pt >= 0 && (oh + ROWS - 1) * sh - pt + reach < g->in_h)
            rows(g, KH, KW, sw, ROWS, 1, in, wv, m, b, ow0, oh, out, act, act_alpha);
        else
            rows(g, KH, KW, sw, ROWS, 0, in, wv, m, b, ow0, oh, out, act, act_alpha);
    }
    for (; oh < g->out_h; oh++)
        rows(g, KH, KW, sw, 1, 0, in, wv, m, b, ow0, oh, out, act, act_alpha);
}

/* One channel's plane: strip by strip, the 3x3 and 5x5 kernels at strides
 * 1 and 2 unrolled, others with their sizes and strides as variables. */
static void plane(const ccn_conv_geometry *g, const float *in, const float *wc, float b,
                  float *out, int act, float act_alpha)
{
    const long KH = g->kernel_h, KW = g->kernel_w, sw = g->stride_w, OW = g->out_w;
    for (long ow0 = 0; ow0 < OW; ow0 += VL) {
        if (KH == 3 && KW == 3 && sw == 1)
            strip(g, 3, 3, 1, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 3 && KW == 3 && sw == 2)
            strip(g, 3, 3, 2, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 5 && KW == 5 && sw == 1)
            strip(g, 5, 5, 1, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 5 && KW == 5 && sw == 2)
            strip(g, 5, 5, 2, in, wc, b, ow0, out, act, act_alpha);
        else if (sw == 1)  /* ConvNeXt's 7x7, MixNet's 7x7 and 9x9 */
            strip(g, KH, KW, 1, in, wc, b, ow0, out, act, act_alpha);
        else
            strip(g, KH, KW, sw, in, wc, b, ow0, out, act, act_alpha);
    }
    if (!in_registers(act))
        ccn_activate(g->out_h * OW, out, act, act_alpha);
}

/* The arguments of ccn_conv2d_depthwise, for its planes' task. */
typedef struct {
    const ccn_conv_geometry *g;
    int act;
    float act_alpha;
    const float *x, *w, *bias;
    float *y;
} depthwise_call;

/* Planes [begin, end) (image * channels + channel) of the convolution. */
static void depthwise_range(void *context, long begin, long end)
{
    const depthwise_call *a = context;
    const ccn_conv_geometry *g = a->g;
    const long C = g->in_channels, taps = g->kernel_h * g->kernel_w;
    for (long i = begin; i < end; i++)
        plane(g, a->x + i * g->in_h * g->in_w, a->w + (i % C) * taps,
              a->bias ? a->bias[i % C] : 0.0f, a->y + i * g->out_h * g->out_w, a->act,
              a->act_alpha);
}

void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, int act, float act_alpha,
                          const float *x, const float *w, const float *bias, float *y)
{
    const ccn_conv_geometry *g = geometry;
    assert(g->group == g->in_channels && g->out_channels == g->in_channels);
    depthwise_call a = {g, act, act_alpha, x, w, bias, y};
    const long planes = g->batch * g->in_channels;
    ccn_parallel_for(planes, planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w,
                     depthwise_range, &a);
}
