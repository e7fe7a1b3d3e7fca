/* Pooling family: MaxPool, AveragePool (2-D), GlobalAveragePool, and the
 * gradients of MaxPool and AveragePool. */
/* GCC's default -ftrapping-math keeps loops that select (max_nan) scalar,
 * for floating-point exception flags nobody reads (as in ccn_activation.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <assert.h>
#include <math.h>
#include <string.h>

#include "ccn_pooling.h"

/* A 2-D pooling's planes [begin, end): the call of ccn_maxpool2d
 * (average 0) or ccn_avgpool2d (1); wide: by chunks of 16 (pool_run). */
typedef struct {
    const ccn_pool_geometry *g;
    int average;
    const float *x;
    float *y;
    long inner0, inner1; /* inner_outputs */
    int wide;
} pool2d_call;

/* The larger of m and v, or v when it is NaN (NumPy's maximum, which the
 * VM's kernel takes): two selects, no branch (the scalar loops' tails
 * would mispredict on every other random value). */
static inline float max_nan(float m, float v)
{
    const float larger = v > m ? v : m;
    return v != v ? v : larger;
}

static inline float add(float s, float v)
{
    return s + v;
}

/* Columns of pool2d_range's row of vertical maxima or sums (on the stack). */
#define MAX_SPAN 1024L

/* m[j] for j < span: the maximum (average: the sum) down the rows ih0 +
 * kh * dil_h (kh < KH) of input column c0 + j of the H x W plane `in`;
 * -inf (0) outside the input. */
CCN_ALWAYS_INLINE void pool_rows(float *restrict m, const float *in, long H, long W, long c0,
                                 long span, long ih0, long KH, long dil_h, int average)
{
    const float pad = average ? 0.0f : -INFINITY;
    /* m's columns [lo, hi) lie inside the input. */
    const long lo = c0 < 0 ? (-c0 < span ? -c0 : span) : 0;
    const long hi = W - c0 < span ? (W - c0 > lo ? W - c0 : lo) : span;
    for (long j = 0; j < lo; j++)
        m[j] = pad;
    for (long j = hi; j < span; j++)
        m[j] = pad;
    /* The window's rows inside the plane: [k0, k1). */
    long k0 = 0, k1 = KH;
    while (k0 < KH && ih0 + k0 * dil_h < 0)
        k0++;
    while (k1 > k0 && ih0 + (k1 - 1) * dil_h >= H)
        k1--;
    if (k0 == k1) {  /* no row inside */
        for (long j = lo; j < hi; j++)
            m[j] = pad;
        return;
    }
    const float *restrict r = in + (ih0 + k0 * dil_h) * W + c0;
    const long step = dil_h * W;
    /* The first two rows in one pass (a 2x2 window's whole work). */
    if (k1 - k0 >= 2 && average)
        for (long j = lo; j < hi; j++)
            m[j] = r[j] + r[step + j];
    else if (k1 - k0 >= 2)
        for (long j = lo; j < hi; j++)
            m[j] = max_nan(r[j], r[step + j]);
    else
        for (long j = lo; j < hi; j++)
            m[j] = r[j];
    for (long kh = k0 + 2; kh < k1; kh++) {
        const float *restrict t = r + (kh - k0) * step;
        if (average)
            for (long j = lo; j < hi; j++)
                m[j] += t[j];
        else
            for (long j = lo; j < hi; j++)
                m[j] = max_nan(m[j], t[j]);
    }
}

/* n outputs from pool_rows' m: each the maximum (JOIN max_nan) or the sum
 * (add) of its KW taps m[j * STRIDE + kw * dil_w].  The constant strides 1
 * and 2 let the compiler vectorise the taps' loads. */
#define POOL_COLUMNS(STRIDE, JOIN)                                            \
    do {                                                                      \
        if (KW == 1)                                                          \
            for (long j = 0; j < n; j++)                                      \
                o[j] = m[j * (STRIDE)];                                       \
        else /* the first two taps in one pass */                             \
            for (long j = 0; j < n; j++)                                      \
                o[j] = JOIN(m[j * (STRIDE)], m[j * (STRIDE) + dil_w]);        \
        for (long kw = 2; kw < KW; kw++) {                                    \
            const float *restrict t = m + kw * dil_w;                         \
            for (long j = 0; j < n; j++)                                      \
                o[j] = JOIN(o[j], t[j * (STRIDE)]);                           \
        }                                                                     \
    } while (0)

CCN_ALWAYS_INLINE void pool_columns(float *restrict o, const float *restrict m, long n,
                                    long stride_w, long KW, long dil_w, int average)
{
    if (average && stride_w == 1)
        POOL_COLUMNS(1, add);
    else if (average && stride_w == 2)
        POOL_COLUMNS(2, add);
    else if (average)
        POOL_COLUMNS(stride_w, add);
    else if (stride_w == 1)
        POOL_COLUMNS(1, max_nan);
    else if (stride_w == 2)
        POOL_COLUMNS(2, max_nan);
    else
        POOL_COLUMNS(stride_w, max_nan);
}

static inline long min_long(long a, long b)
{
    return a < b ? a : b;
}

/* Lanes of pool_run's shuffles (of a and b: a's lanes from 0, b's from
 * the vector's length L), listed in parentheses: the even lanes, the odd
 * ones, the even ones from lane 2 (the last repeated), then those and
 * lane L - 1 of a third vector (c) or its lane 0 (next). */
#define LANES_8 (0, 2, 4, 6, 8, 10, 12, 14), (1, 3, 5, 7, 9, 11, 13, 15),                   \
                (2, 4, 6, 8, 10, 12, 14, 14), (0, 1, 2, 3, 4, 5, 6, 15), (0, 1, 2, 3, 4, 5, 6, 8)
#define LANES_16                                                                           \
    (0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),                           \
        (1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31),                       \
        (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 30),                      \
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 31),                            \
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16)
#define UNPAREN(...) __VA_ARGS__
#if defined(__clang__) || __GNUC__ >= 12
#define SHUFFLE(IVEC, a, b, lanes) __builtin_shufflevector(a, b, UNPAREN lanes)
#else
#define SHUFFLE(IVEC, a, b, lanes) __builtin_shuffle(a, b, (IVEC){UNPAREN lanes})
#endif

/* m = max_nan(m, v) lane by lane for vectors of type VEC: two selects,
 * in bits (C has no ?: on vectors).  Macros: passing these vectors by
 * value from a function built for SSE changes the ABI, and through a
 * pointer they left registers (1.1x the time). */
#define JOIN_INTO(VEC, IVEC, m, v)                                                         \
    do {                                                                                   \
        const IVEC take_ = ((v) > (m)) | ((v) != (v));                                     \
        (m) = (VEC)(((IVEC)(v) & take_) | ((IVEC)(m) & ~take_));                           \
    } while (0)

/* MAX_L(v, m) = v > m ? v : m for vectors of L floats: max_nan when
 * neither is NaN, one MAXPS on x86 (which returns its second operand
 * when either is NaN), or a compare and a select. */
#define SELECT_MAX(VEC, IVEC, v, m) \
    ((VEC)(((IVEC)(v) & ((v) > (m))) | ((IVEC)(m) & ~((v) > (m)))))
#if defined(__AVX__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#define MAX_16(v, m) ((vec16)_mm512_max_ps((__m512)(v), (__m512)(m)))
#endif
#if defined(__AVX__)
#define MAX_8(v, m) ((vec8)_mm256_max_ps((__m256)(v), (__m256)(m)))
#else
#define MAX_8(v, m) SELECT_MAX(vec8, ivec8, v, m)
#endif

/* d = the maxima down `rows` rows (step apart) of the columns at r, a
 * vector of type VEC: exactly (JOIN_INTO), or (exact 0) by MAX_L, adding
 * the rows to `seen`, which is then NaN if any of them is. */
#define DOWN_INTO(L, d, r)                                                                 \
    do {                                                                                   \
        memcpy(&(d), (r), sizeof(d));                                                      \
        vec##L sum_ = (d);                                                                 \
        for (long kh = 1; kh < rows; kh++) {                                               \
            vec##L v_;                                                                     \
            memcpy(&v_, (r) + kh * step, sizeof v_);                                       \
            if (exact) {                                                                   \
                JOIN_INTO(vec##L, ivec##L, d, v_);                                         \
            } else {                                                                       \
                (d) = MAX_##L(v_, d);                                                      \
                sum_ += v_;                                                                \
            }                                                                              \
        }                                                                                  \
        if (!exact)                                                                        \
            seen += sum_;                                                                  \
    } while (0)

/* m = max_nan(m, u) (exact) or MAX_L(u, m): u's rows are in seen. */
#define ACROSS_INTO(L, m, u)                                                               \
    do {                                                                                   \
        if (exact)                                                                         \
            JOIN_INTO(vec##L, ivec##L, m, u);                                              \
        else                                                                               \
            (m) = MAX_##L(u, m);                                                           \
    } while (0)

/* pool_run##L: pool_run by chunks of L outputs, vectors of L floats (vec##L;
 * whole AVX-512 vectors for 16, two of SSE's for 8) whose lanes shuffle as
 * the lists EVEN, ODD, SHIFT, LAST and CARRY say (LANES_##L); exact or
 * not (DOWN_INTO), returning then whether a value it read may be NaN. */
#define POOL_RUN(L, EVEN, ODD, SHIFT, LAST, CARRY)                                        \
    typedef float vec##L __attribute__((vector_size(L * sizeof(float))));                 \
    typedef int32_t ivec##L __attribute__((vector_size(L * sizeof(float))));              \
    CCN_ALWAYS_INLINE int pool_run##L(float *o, const float *r, long step, long rows,      \
                                      long n, long KW, long stride_w, int exact)           \
    {                                                                                      \
        vec##L a, b, t, u, out, seen = {0};                                                \
        DOWN_INTO(L, a, r);                                                                \
        for (long j = 0; j < n; j += L) {                                                  \
            const long at = j + L <= n ? j : n - L;                                        \
            const float *q = r + at * stride_w;                                            \
            if (stride_w == 1) {                                                           \
                DOWN_INTO(L, out, q);                                                      \
                for (long kw = 1; kw < KW; kw++) {                                         \
                    DOWN_INTO(L, u, q + kw);                                               \
                    ACROSS_INTO(L, out, u);                                                \
                }                                                                          \
                memcpy(o + at, &out, sizeof out);                                          \
                continue;                                                                  \
            }                                                                              \
            if (at != j) /* the overlapping last chunk */                                  \
                DOWN_INTO(L, a, q);                                                        \
            DOWN_INTO(L, b, q + L);                                                        \
            out = SHUFFLE(ivec##L, a, b, EVEN);                                            \
            u = SHUFFLE(ivec##L, a, b, ODD);                                               \
            ACROSS_INTO(L, out, u);                                                        \
            /* The next chunk's first vector, when that chunk is a whole one               \
             * (for L 8, in the builds without POOL_WIDE only). */                         \
            const int carry = at + 2 * L <= n;                                             \
            vec##L next = a;                                                               \
            if (carry)                                                                     \
                DOWN_INTO(L, next, q + 2 * L);                                             \
            if (KW == 3) { /* columns 2, 4, .. 2 L */                                      \
                t = SHUFFLE(ivec##L, a, b, SHIFT);                                         \
                if (carry)                                                                 \
                    u = SHUFFLE(ivec##L, t, next, CARRY);                                  \
                else {                                                                     \
                    DOWN_INTO(L, u, q + L + 1);                                            \
                    u = SHUFFLE(ivec##L, t, u, LAST);                                      \
                }                                                                          \
                ACROSS_INTO(L, out, u);                                                    \
            }                                                                              \
            memcpy(o + at, &out, sizeof out);                                              \
            a = next;                                                                      \
        }                                                                                  \
        for (int i = 0; i < L; i++)                                                        \
            if (seen[i] != seen[i])                                                        \
                return 1;                                                                  \
        return 0;                                                                          \
    }
#define POOL_RUN_OF(L, LANES) POOL_RUN(L, LANES)
POOL_RUN_OF(8, LANES_8)
/* Chunks of 16 where the whole build has AVX-512 (the in-Python library's
 * -march=native): built for SSE or AVX2 (the default Makefile's levels),
 * their shuffles go lane by lane, and the file took 4x as long to compile. */
#if defined(__AVX512F__)
#define POOL_WIDE 1
POOL_RUN_OF(16, LANES_16)
#else
#define POOL_WIDE 0
#endif

/* Whether pool_run takes a MaxPool's windows of KW columns at stride_w
 * (dilation 1): those of the models' MaxPools.  (AveragePool keeps
 * pool_rows: by chunks, DenseNet's 2x2 took 0.8x the time, but the file
 * took 1.5x as long to compile.) */
static inline int chunked(long KW, long stride_w, long dil_w)
{
    return dil_w == 1 && (KW == 2 || KW == 3) && (stride_w == 1 || stride_w == 2);
}

/* n >= 8 MaxPool outputs at o of one row whose windows (a shape that
 * `chunked` takes) have every tap inside the plane: their `rows` rows (step apart)
 * start at r.  By chunks of 16 outputs (wide, POOL_WIDE; else 8), the last
 * overlapping the one before (writing the same values again), so that no
 * loop has a row's length (pool_rows' scalar tails took most of a 13-wide
 * output row): at stride 1 each column offset down the rows; at stride 2
 * 2 L columns down the rows, then their even and odd lanes (and, KW 3, the
 * evens one further: column 2 L from the next chunk's first vector).
 * First by one MAXPS a join (a third of the exact join's instructions:
 * SqueezeNet's 3x3 stride-2 pools took 0.114, 0.063 and 0.047 ms so, 0.079,
 * 0.047 and 0.035 now), then, only where a value read may be NaN, again
 * exactly: a NaN wins its windows, as in the VM (NumPy's maximum). */
CCN_ALWAYS_INLINE void pool_run(float *o, const float *r, long step, long rows, long n, long KW,
                                long stride_w, int wide)
{
#if POOL_WIDE
    if (wide) {
        if (pool_run16(o, r, step, rows, n, KW, stride_w, 0))
            pool_run16(o, r, step, rows, n, KW, stride_w, 1);
        return;
    }
#endif
    (void)wide;
    if (pool_run8(o, r, step, rows, n, KW, stride_w, 0))
        pool_run8(o, r, step, rows, n, KW, stride_w, 1);
}

/* Outputs [*inner0, *inner1) of a row have every window column inside it. */
static void inner_outputs(const ccn_pool_geometry *g, long *inner0, long *inner1)
{
    const long hi = g->in_w - ((g->kernel_w - 1) * g->dil_w + 1) + g->pad_left;
    *inner0 = (g->pad_left + g->stride_w - 1) / g->stride_w;
    *inner1 = hi < 0 ? 0 : min_long(hi / g->stride_w + 1, g->out_w);
}

/* The maximum of the taps inside the row of W columns of a window of KW
 * columns from column c0 (dilation 1), `rows` rows (step apart) from r:
 * an output at the padding's or ceil_mode's edge. */
CCN_ALWAYS_INLINE float pool_edge(const float *r, long step, long rows, long c0, long KW, long W)
{
    float top = -INFINITY;
    for (long c = c0 < 0 ? 0 : c0; c < c0 + KW && c < W; c++)
        for (long kh = 0; kh < rows; kh++)
            top = max_nan(top, r[kh * step + c]);
    return top;
}

/* How many of the K taps o*stride - pad + k (k < K) fall in [lo, hi). */
static long taps_within(long o, long stride, long pad, long K, long lo, long hi)
{
    const long first = o * stride - pad;
    const long a = first > lo ? first : lo, b = first + K < hi ? first + K : hi;
    return b > a ? b - a : 0;
}

/* How many of output column ow's window columns fall in [lo, hi). */
static inline long columns_in(const ccn_pool_geometry *g, long ow, long lo, long hi)
{
    return taps_within(ow, g->stride_w, g->pad_left, g->kernel_w, lo, hi);
}

/* The window's rows from ih0 inside the plane of H rows: [*k0, *k1);
 * whether there are any. */
static inline int rows_inside(long ih0, long KH, long dil_h, long H, long *k0, long *k1)
{
    *k0 = 0, *k1 = KH;
    while (*k0 < KH && ih0 + *k0 * dil_h < 0)
        ++*k0;
    while (*k1 > *k0 && ih0 + (*k1 - 1) * dil_h >= H)
        --*k1;
    return *k1 > *k0;
}

/* Whether g is an AveragePool of whole 2x2 windows at stride 2 (DenseNet's
 * transitions): pair_averages takes it. */
static int pairs_of_pairs(const ccn_pool_geometry *g, int average)
{
    return average && g->kernel_h == 2 && g->kernel_w == 2 && g->stride_h == 2 &&
           g->stride_w == 2 && g->dil_h == 1 && g->dil_w == 1 && g->pad_top == 0 &&
           g->pad_left == 0 && 2 * g->out_h <= g->in_h && 2 * g->out_w <= g->in_w;
}

/* Outputs per chunk of pair_averages: a constant count, one vector's
 * work with AVX-512. */
#define PAIR_CHUNK 16

/* Output j of pairs_of_pairs' pooling from rows a and b: the sum of its
 * two columns of the two rows' sums (pool_rows' and pool_columns' order,
 * the same values) over 4. */
CCN_ALWAYS_INLINE float pair_average(const float *a, const float *b, long j)
{
    return ((a[2 * j] + b[2 * j]) + (a[2 * j + 1] + b[2 * j + 1])) / 4.0f;
}

/* An output row of pairs_of_pairs' pooling, by chunks of PAIR_CHUNK, the
 * last overlapping the one before (no loop of a row's length: by pool_rows
 * and pool_columns, a row of 28 outputs took 6x onnxruntime's time,
 * DenseNet-121's pools); a row shorter than a chunk output by output. */
CCN_ALWAYS_INLINE void pair_averages(float *restrict o, const float *restrict r0,
                                     const float *restrict r1, long n)
{
    if (n < PAIR_CHUNK) {
        for (long j = 0; j < n; j++)
            o[j] = pair_average(r0, r1, j);
        return;
    }
    for (long j0 = 0; j0 < n; j0 += PAIR_CHUNK) {
        const long at = j0 + PAIR_CHUNK <= n ? j0 : n - PAIR_CHUNK;
        for (long j = 0; j < PAIR_CHUNK; j++)
            o[at + j] = pair_average(r0 + 2 * at, r1 + 2 * at, j);
    }
}

/* Pooling is separable: per output row, the maxima or sums down the
 * window's in-bounds rows (contiguous loads), then across each window's
 * columns.  A MaxPool's outputs whose windows have every column inside the
 * row go by pool_run, those at the padding's and ceil_mode's edges by
 * pool_edge; the others (other windows, AveragePool) in chunks whose span
 * of input columns fits MAX_SPAN
 * (wider windows go to ccn_pool3d).  An average divides by the count of
 * its taps inside the input (with count_include_pad, inside the explicit
 * padding; ceil_mode's extra windows reach past it: those taps never
 * count), rows times columns. */
CCN_ALWAYS_INLINE void pool2d_rows(void *context, long begin, long end)
{
    const pool2d_call *a = context;
    const ccn_pool_geometry *g = a->g;
    const long H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const long KH = g->kernel_h, KW = g->kernel_w, stride_h = g->stride_h, stride_w = g->stride_w;
    const long dil_h = g->dil_h, dil_w = g->dil_w, reach = (KW - 1) * dil_w + 1;
    const long chunk = (MAX_SPAN - reach) / stride_w + 1;
    const int padded = g->count_include_pad;
    const long rows_lo = padded ? -g->pad_top : 0, rows_hi = H + (padded ? g->pad_bottom : 0);
    const long cols_lo = padded ? -g->pad_left : 0, cols_hi = W + (padded ? g->pad_right : 0);
    const long inner0 = a->inner0, inner1 = a->inner1;
    const int by_chunks = !a->average && chunked(KW, stride_w, dil_w) && inner1 - inner0 >= 8;
    float m[MAX_SPAN];
    if (pairs_of_pairs(g, a->average)) {
        for (long p = begin; p < end; p++)
            for (long oh = 0; oh < OH; oh++) {
                const float *r = a->x + (p * H + 2 * oh) * W;
                pair_averages(a->y + (p * OH + oh) * OW, r, r + W, OW);
            }
        return;
    }
    for (long p = begin; p < end; p++) {
        const float *in = a->x + p * H * W;
        for (long oh = 0; oh < OH; oh++) {
            float *o = a->y + (p * OH + oh) * OW;
            const long ih0 = oh * stride_h - g->pad_top;
            long k0, k1;  /* asked only for the chunks (a tenth of 7-wide rows' time) */
            if (by_chunks && rows_inside(ih0, KH, dil_h, H, &k0, &k1)) {
                /* The outputs with every window column inside by pool_run,
                 * those at the edges one by one. */
                const float *r = in + (ih0 + k0 * dil_h) * W;
                const long step = dil_h * W, rows = k1 - k0;
                for (long ow = 0; ow < inner0; ow++)
                    o[ow] = pool_edge(r, step, rows, ow * stride_w - g->pad_left, KW, W);
                pool_run(o + inner0, r + inner0 * stride_w - g->pad_left, step, rows,
                         inner1 - inner0, KW, stride_w, a->wide);
                for (long ow = inner1; ow < OW; ow++)
                    o[ow] = pool_edge(r, step, rows, ow * stride_w - g->pad_left, KW, W);
            } else
                for (long ow0 = 0; ow0 < OW; ow0 += chunk) {
                    const long ow1 = min_long(ow0 + chunk, OW);
                    const long c0 = ow0 * stride_w - g->pad_left;
                    pool_rows(m, in, H, W, c0, (ow1 - 1 - ow0) * stride_w + reach, ih0, KH,
                              dil_h, a->average);
                    pool_columns(o + ow0, m, ow1 - ow0, stride_w, KW, dil_w, a->average);
                }
            if (!a->average)
                continue;
            /* Windows [in0, in1) have all KW columns inside: one divisor,
             * a loop that vectorises (a count per output left it scalar). */
            const long rows = taps_within(oh, stride_h, g->pad_top, KH, rows_lo, rows_hi);
            const long in0 = (cols_lo + g->pad_left + stride_w - 1) / stride_w;
            const long reach_hi = cols_hi + g->pad_left - KW;
            const long in1 = reach_hi < 0 ? 0 : reach_hi / stride_w + 1;
            const long d0 = in0 < OW ? in0 : OW, d1 = in1 > d0 ? (in1 < OW ? in1 : OW) : d0;
            const float full = (float)(rows * KW);
            for (long ow = d0; ow < d1; ow++)
                o[ow] /= full;
            for (long ow = 0; ow < d0; ow++)
                o[ow] /= (float)(rows * columns_in(g, ow, cols_lo, cols_hi));
            for (long ow = d1; ow < OW; ow++)
                o[ow] /= (float)(rows * columns_in(g, ow, cols_lo, cols_hi));
        }
    }
}

/* Built for the CPU's level (CCN_LEVELS, ccn_common.h). */
CCN_LEVELS(static, pool2d_range, pool2d_rows, (void *context, long begin, long end),
           (context, begin, end))

static void pool2d(const ccn_pool_geometry *g, int average, const float *x, float *y)
{
    assert((g->kernel_w - 1) * g->dil_w + 1 <= MAX_SPAN);
    pool2d_call a = {g, average, x, y, 0, 0, 0};
    const long work = g->planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w;
    inner_outputs(g, &a.inner0, &a.inner1);
    a.wide = POOL_WIDE && a.inner1 - a.inner0 >= 16;
    ccn_parallel_for(g->planes, work, pool2d_range, &a);
}

void ccn_maxpool2d(const ccn_pool_geometry *g, const float *x, float *y)
{
    pool2d(g, 0, x, y);
}

/* AveragePool's divisor for the window at (oh, ow), as pool2d_range counts
 * it (AveragePoolGrad's share of each tap). */
static long avg_divisor(long oh, long ow, long H, long W, long KH, long KW, long stride_h,
                        long stride_w, long pad_top, long pad_left, long pad_bottom,
                        long pad_right, int count_include_pad)
{
    if (count_include_pad)
        return taps_within(oh, stride_h, pad_top, KH, -pad_top, H + pad_bottom) *
               taps_within(ow, stride_w, pad_left, KW, -pad_left, W + pad_right);
    return taps_within(oh, stride_h, pad_top, KH, 0, H) *
           taps_within(ow, stride_w, pad_left, KW, 0, W);
}

void ccn_avgpool2d(const ccn_pool_geometry *g, const float *x, float *y)
{
    assert(g->dil_h == 1 && g->dil_w == 1);
    pool2d(g, 1, x, y);
}

/* Lanes of plane_sum's partial sums: one AVX-512 vector, two AVX ones
 * (measured: 4x the plain loop's speed on 196 to 12544 floats, and faster
 * than 32 or 64 lanes on MobileNet's 7 x 7 planes). */
#define SUM_LANES 16

/* The sum of the S floats at x: SUM_LANES independent partial sums that
 * the compiler keeps in vector registers (a single running sum is one
 * chain of dependent adds, which it may not reorder), then the tail. */
CCN_ALWAYS_INLINE float plane_sum(const float *restrict x, long S)
{
    float lanes[SUM_LANES] = {0.0f};
    long s = 0;
    for (; s + SUM_LANES <= S; s += SUM_LANES)
        for (int j = 0; j < SUM_LANES; j++)
            lanes[j] += x[s + j];
    float sum = 0.0f;
    for (; s < S; s++)
        sum += x[s];
    for (int j = 0; j < SUM_LANES; j++)
        sum += lanes[j];
    return sum;
}

/* ccn_global_avgpool's planes [begin, end). */
typedef struct {
    long S;
    const float *x;
    float *y;
} global_pool_call;

CCN_ALWAYS_INLINE void global_avgpool_planes(void *context, long begin, long end)
{
    const global_pool_call *a = context;
    for (long p = begin; p < end; p++)
        a->y[p] = plane_sum(a->x + p * a->S, a->S) / (float)a->S;
}
CCN_LEVELS(static, global_avgpool_range, global_avgpool_planes,
           (void *context, long begin, long end), (context, begin, end))

void ccn_global_avgpool(long NC, long S, const float *x, float *y)
{
    global_pool_call a = {S, x, y};
    ccn_parallel_for(NC, NC * S, global_avgpool_range, &a);
}

/* Along one axis of a 3-D window starting at ``start``: the first and
 * one-past-last taps inside [0, size), and how many taps the divisor
 * counts (inside [lo, hi)). */
static void axis_taps(long start, long K, long dil, long size, long lo, long hi,
                      long *first, long *end, long *counted)
{
    *first = 0;
    while (*first < K && start + *first * dil < 0)
        ++*first;
    *end = K;
    while (*end > *first && start + (*end - 1) * dil >= size)
        --*end;
    *counted = 0;
    for (long k = 0; k < K; ++k)
        *counted += start + k * dil >= lo && start + k * dil < hi;
}

void ccn_pool3d(const ccn_pool3d_geometry *g, int average, const float *x, float *y)
{
    const long ID = g->in[0], IH = g->in[1], IW = g->in[2];
    const long OD = g->out[0], OH = g->out[1], OW = g->out[2];
    long first[3], end[3], counted[3], start[3];
    for (long p = 0; p < g->planes; ++p) {
        const float *xp = x + p * ID * IH * IW;
        for (long o = 0; o < OD * OH * OW; ++o) {
            const long at[3] = {o / (OH * OW), o / OW % OH, o % OW};
            for (int a = 0; a < 3; ++a) {
                start[a] = at[a] * g->stride[a] - g->pad_begin[a];
                const long lo = g->count_include_pad ? -g->pad_begin[a] : 0;
                const long hi = g->in[a] + (g->count_include_pad ? g->pad_end[a] : 0);
                axis_taps(start[a], g->kernel[a], g->dil[a], g->in[a], lo, hi,
                          &first[a], &end[a], &counted[a]);
            }
            float acc = average ? 0.0f : -INFINITY;
            for (long kd = first[0]; kd < end[0]; ++kd)
                for (long kh = first[1]; kh < end[1]; ++kh)
                    for (long kw = first[2]; kw < end[2]; ++kw) {
                        const float v = xp[((start[0] + kd * g->dil[0]) * IH + start[1]
                                            + kh * g->dil[1]) * IW + start[2] + kw * g->dil[2]];
                        acc = average ? acc + v : v > acc || v != v ? v : acc;
                    }
            y[p * OD * OH * OW + o] =
                average ? acc / (float)(counted[0] * counted[1] * counted[2]) : acc;
        }
    }
}

void ccn_global_maxpool(long NC, long S, const float *x, float *y)
{
    for (long p = 0; p < NC; p++) {
        float top = x[p * S];
        for (long s = 1; s < S; s++) {
            const float v = x[p * S + s];
            top = v > top || v != v ? v : top; /* NaN wins, as in NumPy's max */
        }
        y[p] = top;
    }
}

/* The offset in an H x W plane of the first in-bounds tap of the window at
 * (oh, ow) equal to top, or -1 when none is. */
static long argmax_tap(const float *in, long H, long W, long oh, long ow, long KH, long KW,
                       long stride_h, long stride_w, long dil_h, long dil_w, long pad_top,
                       long pad_left, float top)
{
    const long ih0 = oh * stride_h - pad_top, iw0 = ow * stride_w - pad_left;
    if (ih0 >= 0 && ih0 + (KH - 1) * dil_h < H && iw0 >= 0 && iw0 + (KW - 1) * dil_w < W) {
        /* A window inside the plane: every tap compared, last to first,
         * keeping the earliest match with a select rather than a branch,
         * whose outcome (where the maximum sits) is random.  No tap exceeds
         * the maximum, so >= is == here, and unlike == (which must also
         * test for NaN) a single flag that the select can use. */
        long tap = -1;
        for (long kh = KH - 1; kh >= 0; kh--)
            for (long kw = KW - 1; kw >= 0; kw--) {
                const long at = (ih0 + kh * dil_h) * W + iw0 + kw * dil_w;
                tap = in[at] >= top ? at : tap;
            }
        return tap;
    }
    for (long kh = 0; kh < KH; kh++) {
        const long ih = oh * stride_h - pad_top + kh * dil_h;
        if (ih < 0 || ih >= H)
            continue;
        for (long kw = 0; kw < KW; kw++) {
            const long iw = ow * stride_w - pad_left + kw * dil_w;
            if (iw >= 0 && iw < W && in[ih * W + iw] == top)
                return ih * W + iw;
        }
    }
    return -1;
}

/* ccn_maxpool2d_grad: its planes [begin, end). */
typedef struct {
    const ccn_pool_geometry *g;
    const float *x;
    const float *y;
    const float *gy;
    float *gx;
} maxpool2d_grad_call;

static void maxpool2d_grad_range(void *context, long begin, long end)
{
    const maxpool2d_grad_call *a = context;
    const ccn_pool_geometry *g = a->g;
    const float *x = a->x;
    const float *y = a->y;
    const float *gy = a->gy;
    float *gx = a->gx;
    const long H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const long KH = g->kernel_h, KW = g->kernel_w, stride_h = g->stride_h, stride_w = g->stride_w;
    const long pad_top = g->pad_top, pad_left = g->pad_left;
    const long dil_h = g->dil_h, dil_w = g->dil_w;
    for (long p = begin; p < end; p++) {
        float *g = gx + p * H * W;
        for (long i = 0; i < H * W; i++)
            g[i] = 0.0f;
        for (long oh = 0; oh < OH; oh++)
            for (long ow = 0; ow < OW; ow++) {
                const long at = (p * OH + oh) * OW + ow;
                const long tap = argmax_tap(x + p * H * W, H, W, oh, ow, KH, KW, stride_h,
                                            stride_w, dil_h, dil_w, pad_top, pad_left, y[at]);
                if (tap >= 0)
                    g[tap] += gy[at];
            }
    }
}

void ccn_maxpool2d_grad(const ccn_pool_geometry *g, const float *x, const float *y,
                        const float *gy, float *gx)
{
    maxpool2d_grad_call a = {g, x, y, gy, gx};
    const long work = g->planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w;
    ccn_parallel_for(g->planes, work, maxpool2d_grad_range, &a);
}

/* ccn_avgpool2d_grad: its planes [begin, end). */
typedef struct {
    const ccn_pool_geometry *g;
    const float *gy;
    float *gx;
} avgpool2d_grad_call;

static void avgpool2d_grad_range(void *context, long begin, long end)
{
    const avgpool2d_grad_call *a = context;
    const ccn_pool_geometry *g = a->g;
    const float *gy = a->gy;
    float *gx = a->gx;
    const long H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const long KH = g->kernel_h, KW = g->kernel_w, stride_h = g->stride_h, stride_w = g->stride_w;
    const long pad_top = g->pad_top, pad_left = g->pad_left;
    const long pad_bottom = g->pad_bottom, pad_right = g->pad_right;
    const int count_include_pad = g->count_include_pad;
    assert(g->dil_h == 1 && g->dil_w == 1);
    for (long p = begin; p < end; p++) {
        float *g = gx + p * H * W;
        for (long i = 0; i < H * W; i++)
            g[i] = 0.0f;
        for (long oh = 0; oh < OH; oh++)
            for (long ow = 0; ow < OW; ow++) {
                const long count = avg_divisor(oh, ow, H, W, KH, KW, stride_h, stride_w,
                                               pad_top, pad_left, pad_bottom, pad_right,
                                               count_include_pad);
                const float share = gy[(p * OH + oh) * OW + ow] / (float)count;
                for (long kh = 0; kh < KH; kh++)
                    for (long kw = 0; kw < KW; kw++) {
                        const long ih = oh * stride_h - pad_top + kh;
                        const long iw = ow * stride_w - pad_left + kw;
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                            g[ih * W + iw] += share;
                    }
            }
    }
}

void ccn_avgpool2d_grad(const ccn_pool_geometry *g, const float *gy, float *gx)
{
    avgpool2d_grad_call a = {g, gy, gx};
    const long work = g->planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w;
    ccn_parallel_for(g->planes, work, avgpool2d_grad_range, &a);
}
