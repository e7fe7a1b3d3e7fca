/* Depthwise family: a convolution with one group per channel, summed
 * straight from the input plane.  A vector of VL consecutive outputs of
 * one row holds its sums in a register, four rows at a time; each tap is
 * one vector load of an input row (stride 2: two, and their even lanes)
 * times the tap's weight.  Rows of taps outside the plane are skipped,
 * columns outside it load as zeros (masked loads where the CPU has them):
 * no padded copy, no scratch.  Planes of rows narrower than half a vector
 * run as flat vectors across rows; 5x5 and larger kernels over narrow
 * rows or at stride 2, and 7x7 ones, a vector of channels at a time in
 * the lanes of a padded copy on the stack (channel_block).  The bias
 * starts the sums and the simple activations are applied in registers
 * before the store.  im2col
 * would copy each input KH*KW times for a product of depth KH*KW with one
 * output row: slower than the arithmetic it feeds
 * (benchmarks/NOTES.md, "Depthwise kernels"). */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the tap loops want them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <assert.h>
#include <string.h>
#if defined(__AVX__)
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

/* Lanes of a (indices from 0) and b (from VL) in the order of the
 * constant indices that follow. */
#if defined(__clang__) || __GNUC__ >= 12
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (ivec){__VA_ARGS__})
#endif
/* The even lanes of a followed by b's: stride 2's outputs from a
 * window of 2 VL consecutive inputs. */
#define EVEN_LANES(a, b) SHUFFLE(a, b, EVEN)

/* Which lanes of a load from column c of a row of W lie inside the row,
 * and the load of those lanes (the others zero, and not read): a mask
 * where the CPU has masked loads (AVX-512, AVX), else the lanes' range
 * [lo, hi) (lane_range; lo == hi: none); lanes_where, a mask of any
 * lanes. */
static inline void lane_range(long c, long W, long *lo, long *hi)
{
    *lo = c < 0 ? (-c < VL ? -c : VL) : 0;
    *hi = W - c < VL ? (W - c > *lo ? W - c : *lo) : VL;
}

#if defined(__AVX512F__)
#define MASKED_LOADS 1
typedef __mmask16 inside;

static inline inside inside_of(long c, long W)
{
    long lo, hi;
    lane_range(c, W, &lo, &hi);
    return (inside)((1u << hi) - (1u << lo));
}

static inline vec load(const float *row, long c, long W, inside m)
{
    (void)W;
    return (vec)_mm512_maskz_loadu_ps(m, row + c);
}

static inline inside lanes_where(const int *ok)
{
    inside m = 0;
    for (int l = 0; l < VL; l++)
        m |= (inside)((unsigned)(ok[l] != 0) << l);
    return m;
}
#elif defined(__AVX__)
#define MASKED_LOADS 1
typedef ivec inside;

static inline inside inside_of(long c, long W)
{
    long lo, hi;
    lane_range(c, W, &lo, &hi);
    const ivec lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return (lane >= lane * 0 + (int32_t)lo) & (lane < lane * 0 + (int32_t)hi);
}

static inline vec load(const float *row, long c, long W, inside m)
{
    (void)W;
    return (vec)_mm256_maskload_ps(row + c, (__m256i)m);
}

static inline inside lanes_where(const int *ok)
{
    inside m;
    for (int l = 0; l < VL; l++)
        m[l] = ok[l] ? -1 : 0;
    return m;
}
#else
#define MASKED_LOADS 0
typedef struct {
    long lo, hi;
} inside;

static inline inside inside_of(long c, long W)
{
    inside m;
    lane_range(c, W, &m.lo, &m.hi);
    return m;
}

/* A load that reaches past both ends of the row (narrower than a
 * vector), lane by lane; out of line: inlined, the tap loops around it
 * would no longer unroll. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static vec load_lanes(const float *row, long c, inside m)
{
    vec v = {0};
    for (int l = 0; l < VL; l++)
        if (l >= m.lo && l < m.hi)
            v[l] = row[c + l];
    return v;
}

/* Past the row's start, its first VL floats moved up by m.lo lanes;
 * past its end, its last VL moved down (VL is 4 here). */
static inline vec load(const float *row, long c, long W, inside m)
{
    const vec z = {0};
    vec v;
    if (m.lo == 0 && m.hi == VL) {
        memcpy(&v, row + c, sizeof v);
        return v;
    }
    if (m.lo == m.hi)
        return z;
    if (W < VL)
        return load_lanes(row, c, m);
    if (m.hi == VL) {
        memcpy(&v, row, sizeof v);
        return m.lo == 1 ? SHUFFLE(v, z, 4, 0, 1, 2)
               : m.lo == 2 ? SHUFFLE(v, z, 4, 4, 0, 1)
                           : SHUFFLE(v, z, 4, 4, 4, 0);
    }
    memcpy(&v, row + W - VL, sizeof v);
    return m.hi == 3 ? SHUFFLE(v, z, 1, 2, 3, 4)
           : m.hi == 2 ? SHUFFLE(v, z, 2, 3, 4, 4)
                       : SHUFFLE(v, z, 3, 4, 4, 4);
}
#endif

/* Tap inputs of VL outputs in one row: lane l = row[c + l sw], zero off
 * the row; m: inside_of c and of c + VL, NULL when all are inside;
 * gather: lane by lane instead (strides past 2, kernels past MAX_KW). */
CCN_ALWAYS_INLINE vec tap(const float *row, long c, long sw, long W, const inside *m,
                          int gather)
{
    vec v;
    if (!gather && !m && sw == 1) {
        memcpy(&v, row + c, sizeof v);
        return v;
    }
    if (!gather && !m && sw == 2) {
        vec u;
        memcpy(&v, row + c, sizeof v);
        memcpy(&u, row + c + VL, sizeof u);
        return EVEN_LANES(v, u);
    }
    if (!gather && sw == 1)
        return load(row, c, W, m[0]);
    if (!gather && sw == 2)
        return EVEN_LANES(load(row, c, W, m[0]), load(row, c + VL, W, m[1]));
    float t[VL];
    for (long l = 0; l < VL; l++)
        t[l] = c + l * sw >= 0 && c + l * sw < W ? row[c + l * sw] : 0.0f;
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
        return (vec)((ivec)v & ~(v < zero));
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
    if (n == VL)  /* a constant size: one store, not a call */
        memcpy(out, &v, sizeof v);
    else
#if defined(__AVX512F__)
        _mm512_mask_storeu_ps(out, (__mmask16)((1u << n) - 1), (__m512)v);
#else
        memcpy(out, &v, (size_t)n * sizeof(float));
#endif
}

/* Output rows computed together: their sums are independent chains of
 * multiply-adds, which the CPU overlaps (one chain waits out each
 * multiply-add's latency). */
#define ROWS 4

/* The strip's outputs from column ow0 (VL, or those before OW) of output
 * rows [oh, oh + R): each the bias plus its taps, then the epilogue.
 * Unless every tap row lies inside the plane (inside_rows), a row of taps
 * outside it is skipped; m: the strip's inside_of by column of taps
 * (NULL: every load inside the rows). */
CCN_ALWAYS_INLINE void rows(const ccn_conv_geometry *g, long KH, long KW, long sw, long R,
                            int inside_rows, const float *in, const float *wc,
                            inside (*m)[2], int gather, float b, long ow0, long oh, float *out,
                            int act, float act_alpha)
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
        for (long kw = 0; kw < KW; kw++) {
            const vec w = (vec){0} + wc[kh * KW + kw];
            for (long r = 0; r < R; r++)
                if (used[r])
                    acc[r] += w * tap(row[r], c0 + kw * dw, sw, W, m ? m[kw] : NULL, gather);
        }
    }
    for (long r = 0; r < R; r++)
        store(out + (oh + r) * OW + ow0, epilogue(acc[r], act, act_alpha), n);
}

/* Columns of taps whose masks a strip keeps, on the stack: a kernel's
 * size comes from the model, and an array sized by it could overflow the
 * stack.  Wider kernels load lane by lane. */
#define MAX_KW 16

/* Outputs [ow0, ow0 + VL) of every row of one plane (those before OW),
 * ROWS rows at a time, gathered lane by lane or not (tap).  Called with
 * constant KH, KW and sw, the taps unroll. */
CCN_ALWAYS_INLINE void strip(const ccn_conv_geometry *g, long KH, long KW, long sw,
                             int gather, const float *in, const float *wc, float b, long ow0, float *out,
                             int act, float act_alpha)
{
    const long W = g->in_w, dw = g->dil_w, c0 = ow0 * sw - g->pad_left;
    inside m[MAX_KW][2];
    for (long kw = 0; !gather && kw < KW; kw++) {
        m[kw][0] = inside_of(c0 + kw * dw, W);
        m[kw][1] = inside_of(c0 + kw * dw + VL, W);
    }
    /* Without masked loads, a strip away from the left and right edges
     * loads without checking its lanes (NULL masks). */
    const int cols_inside = !MASKED_LOADS && !gather && c0 >= 0 &&
                            c0 + (KW - 1) * dw + sw * VL <= W;
    const long sh = g->stride_h, pt = g->pad_top, reach = (KH - 1) * g->dil_h;
#define CCN_ROWS(R, INSIDE_ROWS)                                                              \
    (cols_inside ? rows(g, KH, KW, sw, R, INSIDE_ROWS, in, wc, NULL, gather, b, ow0, oh, out,  \
                        act, act_alpha)                                                       \
                 : rows(g, KH, KW, sw, R, INSIDE_ROWS, in, wc, m, gather, b, ow0, oh, out, act, \
                        act_alpha))
    long oh = 0;
    for (; oh + ROWS <= g->out_h; oh += ROWS) {
        /* Blocks away from the top and bottom check no rows. */
        if (oh * sh - pt >= 0 && (oh + ROWS - 1) * sh - pt + reach < g->in_h)
            CCN_ROWS(ROWS, 1);
        else
            CCN_ROWS(ROWS, 0);
    }
    for (; oh < g->out_h; oh++)
        CCN_ROWS(1, 0);
#undef CCN_ROWS
}

/* One channel's plane: strip by strip, the 3x3 and 5x5 kernels at strides
 * 1 and 2 unrolled, others with their sizes and strides as variables. */
static void plane(const ccn_conv_geometry *g, const float *in, const float *wc, float b,
                  float *out, int act, float act_alpha)
{
    const long KH = g->kernel_h, KW = g->kernel_w, sw = g->stride_w, OW = g->out_w;
    for (long ow0 = 0; ow0 < OW; ow0 += VL) {
        if (KH == 3 && KW == 3 && sw == 1)
            strip(g, 3, 3, 1, 0, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 3 && KW == 3 && sw == 2)
            strip(g, 3, 3, 2, 0, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 5 && KW == 5 && sw == 1)
            strip(g, 5, 5, 1, 0, in, wc, b, ow0, out, act, act_alpha);
        else if (KH == 5 && KW == 5 && sw == 2)
            strip(g, 5, 5, 2, 0, in, wc, b, ow0, out, act, act_alpha);
        else if (sw == 1 && KW <= MAX_KW)  /* ConvNeXt's 7x7, MixNet's 7x7 and 9x9 */
            strip(g, KH, KW, 1, 0, in, wc, b, ow0, out, act, act_alpha);
        else
            strip(g, KH, KW, sw, 1, in, wc, b, ow0, out, act, act_alpha);
    }
    if (!in_registers(act))
        ccn_activate(g->out_h * OW, out, act, act_alpha);
}

/* Masks of a flat plane's loads (flat_plane) at most. */
#define FLAT_MASKS 128

/* The arguments of ccn_conv2d_depthwise, for its planes' task, and a flat
 * plane's tap offsets and masks (flat is its vectors; 0: by strips). */
typedef struct {
    const ccn_conv_geometry *g;
    int act;
    float act_alpha;
    const float *x, *w, *bias;
    float *y;
    long flat;
    long band;  /* channel_block's output rows per band; 0: the strips */
    int channels_last;  /* y is (N, OH, OW, C): ccn_conv2d_depthwise_nhwc */
#if MASKED_LOADS
    long off[FLAT_MASKS];
    inside mask[FLAT_MASKS];  /* vector j's tap t: mask[j * KH * KW + t] */
#endif
} depthwise_call;

#if MASKED_LOADS
/* Whether flat_plane takes convolution g, and if so its vectors: rows of
 * half a vector or less (strips would leave half their lanes idle, the
 * 7x7 planes of the mobile models' last stage), stride 1 and as wide as
 * the input, so that a tap is a fixed offset from its output in the
 * flattened plane too. */
static long flat_vectors(const ccn_conv_geometry *g)
{
    const long S = g->out_h * g->out_w, n = (S + VL - 1) / VL;
    return 2 * g->out_w <= VL && g->stride_h == 1 && g->stride_w == 1 &&
                   g->out_w == g->in_w && n * g->kernel_h * g->kernel_w <= FLAT_MASKS
               ? n
               : 0;
}

/* Fills a's tap offsets and masks for flat_plane: output o reads tap
 * (kh, kw) at o + off, if the tap's row and column lie in the plane. */
static void flat_masks(depthwise_call *a)
{
    const ccn_conv_geometry *g = a->g;
    const long KH = g->kernel_h, KW = g->kernel_w, OW = g->out_w, S = g->out_h * OW;
    for (long kh = 0; kh < KH; kh++)
        for (long kw = 0; kw < KW; kw++) {
            const long dy = kh * g->dil_h - g->pad_top, dx = kw * g->dil_w - g->pad_left;
            a->off[kh * KW + kw] = dy * g->in_w + dx;
            for (long j = 0; j < a->flat; j++) {
                int ok[VL];
                for (long l = 0; l < VL; l++) {
                    const long o = j * VL + l, ih = o / OW + dy, iw = o % OW + dx;
                    ok[l] = o < S && ih >= 0 && ih < g->in_h && iw >= 0 && iw < g->in_w;
                }
                a->mask[j * KH * KW + kh * KW + kw] = lanes_where(ok);
            }
        }
}

/* One channel's plane as flat vectors of consecutive outputs, up to ROWS
 * of them summed together, each tap one masked load. */
static void flat_plane(const depthwise_call *a, const float *in, const float *wc, float b,
                       float *out)
{
    const long T = a->g->kernel_h * a->g->kernel_w, S = a->g->out_h * a->g->out_w;
    for (long j0 = 0; j0 < a->flat; j0 += ROWS) {
        const long R = a->flat - j0 < ROWS ? a->flat - j0 : ROWS;
        vec acc[ROWS];
        for (long r = 0; r < ROWS; r++)
            acc[r] = (vec){0} + b;
        for (long t = 0; t < T; t++) {
            const vec w = (vec){0} + wc[t];
            for (long r = 0; r < ROWS; r++)
                if (r < R)
                    acc[r] += w * load(in, (j0 + r) * VL + a->off[t], 0,
                                       a->mask[(j0 + r) * T + t]);
        }
        for (long r = 0; r < R; r++) {
            const long o = (j0 + r) * VL;
            store(out + o, epilogue(acc[r], a->act, a->act_alpha), S - o < VL ? S - o : VL);
        }
    }
    if (!in_registers(a->act))
        ccn_activate(S, out, a->act, a->act_alpha);
}
#endif

/* Padded input pixels, and outputs, of a band of a plane that channel_block
 * holds at most (34x34, ConvNeXt's 7x7 at 28x28 whole: two such blocks of
 * vectors are 154 KB of stack with AVX-512; the pool's threads have 8 MB),
 * and its taps (11x11, MixNet's). */
#define BLOCK_PIXELS 1200
#define BLOCK_TAPS 121

/* Columns of the zero-padded input that g's taps reach. */
static long reach_w(const ccn_conv_geometry *g)
{
    return (g->out_w - 1) * g->stride_w + (g->kernel_w - 1) * g->dil_w + 1;
}

/* Whether bands of `band` output rows fit channel_block's blocks of padded
 * input pixels and of outputs, and its taps.  Which convolutions run by
 * channels, in bands of how many rows, is the emitter's choice
 * (lowerings/depthwise.py's band_rows, the rule stated once); this is only
 * the bound that keeps a band inside the stack. */
static int band_fits(const ccn_conv_geometry *g, long band)
{
    const long in_rows = (band - 1) * g->stride_h + (g->kernel_h - 1) * g->dil_h + 1;
    return band >= 1 && g->kernel_h * g->kernel_w <= BLOCK_TAPS && band * g->out_w <= BLOCK_PIXELS
        && in_rows * reach_w(g) <= BLOCK_PIXELS;
}

/* Outputs computed together by channel_block (independent chains). */
#define BLOCK_OUTPUTS 8

/* Output rows [oh0, oh0 + nr) of planes [i, i + nc) for channel_block:
 * the input rows they reach copied into a zero-padded block of pixels,
 * the taps summed, the outputs copied back. */
static void channel_band(const depthwise_call *a, long i, long nc, const vec *wv, vec bv,
                         long oh0, long nr)
{
    const ccn_conv_geometry *g = a->g;
    const long H = g->in_h, W = g->in_w, OW = g->out_w, S = g->out_h * OW;
    const long KH = g->kernel_h, KW = g->kernel_w, C = g->in_channels;
    const long wp = reach_w(g), pt = g->pad_top, pl = g->pad_left;
    const long hb = (nr - 1) * g->stride_h + (KH - 1) * g->dil_h + 1;
    const long top = oh0 * g->stride_h - pt, Sb = nr * OW, o_first = oh0 * OW;
    vec pix[BLOCK_PIXELS], res[BLOCK_PIXELS];
    /* Lane by lane through floats: a lane of a vector in memory is a
     * load, an insert and a store of the whole vector. */
    float *pf = (float *)pix;
    const float *rf = (const float *)res;
    memset(pix, 0, (size_t)(hb * wp) * sizeof(vec));
    /* Pixel by pixel, each channel's lane: with a constant count of
     * lanes GCC transposes whole vectors (channel by channel, the layers
     * took 1.2x-1.5x the time). */
    const long first = top < 0 ? -top : 0, last = H - top < hb ? H - top : hb;
    const long cols = W < wp - pl ? W : wp - pl;
    for (long r = first; r < last; r++) {
        const float *in = a->x + i * H * W + (top + r) * W;
        float *p = pf + (r * wp + pl) * VL;
        for (long iw = 0; nc == VL && iw < cols; iw++)
            for (long l = 0; l < VL; l++)
                p[iw * VL + l] = in[l * H * W + iw];
        for (long iw = 0; nc < VL && iw < cols; iw++)
            for (long l = 0; l < nc; l++)
                p[iw * VL + l] = in[l * H * W + iw];
    }
    for (long o0 = 0; o0 < Sb; o0 += BLOCK_OUTPUTS) {
        /* Past Sb, the chains repeat output o0 (not stored). */
        long at[BLOCK_OUTPUTS];
        vec acc[BLOCK_OUTPUTS];
        for (long r = 0; r < BLOCK_OUTPUTS; r++) {
            const long o = o0 + r < Sb ? o0 + r : o0;
            at[r] = o / OW * g->stride_h * wp + o % OW * g->stride_w;
            acc[r] = bv;
        }
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++) {
                const vec w = wv[kh * KW + kw];
                const long off = kh * g->dil_h * wp + kw * g->dil_w;
                for (long r = 0; r < BLOCK_OUTPUTS; r++)
                    acc[r] += w * pix[at[r] + off];
            }
        for (long r = 0; r < BLOCK_OUTPUTS && o0 + r < Sb; r++)
            res[o0 + r] = epilogue(acc[r], a->act, a->act_alpha);
    }
    if (!in_registers(a->act))
        ccn_activate(Sb * VL, (float *)res, a->act, a->act_alpha);
    if (a->channels_last) { /* each pixel's nc channels one run of y */
        float *y = a->y + (i / C * S + o_first) * C + i % C;
        for (long o = 0; o < Sb; o++)
            memcpy(y + o * C, rf + o * VL, (size_t)nc * sizeof(float));
        return;
    }
    for (long l = 0; l < nc; l++)
        for (long o = 0; o < Sb; o++)
            a->y[(i + l) * S + o_first + o] = rf[o * VL + l];
}

/* Planes [i, i + nc) (nc <= VL, one image) with the channels in the
 * lanes, as onnxruntime's NCHWc kernels: band by band of output rows
 * (a->band rows, channel_band), the input rows they reach are copied into a
 * zero-padded block of pixels, so that each tap is one full, unmasked
 * vector load at any stride, and the outputs copied back; the sums are
 * in the strips' order (the same values). */
static void channel_block(const depthwise_call *a, long i, long nc)
{
    const ccn_conv_geometry *g = a->g;
    const long KH = g->kernel_h, KW = g->kernel_w, C = g->in_channels, band = a->band;
    vec wv[BLOCK_TAPS], bv = {0};
    float *wf = (float *)wv, *bf = (float *)&bv;
    memset(wv, 0, (size_t)(KH * KW) * sizeof(vec));
    for (long l = 0; l < nc; l++) {
        const long c = (i + l) % C;
        for (long t = 0; t < KH * KW; t++)
            wf[t * VL + l] = a->w[c * KH * KW + t];
        bf[l] = a->bias ? a->bias[c] : 0.0f;
    }
    for (long oh0 = 0; oh0 < g->out_h; oh0 += band)
        channel_band(a, i, nc, wv, bv, oh0, g->out_h - oh0 < band ? g->out_h - oh0 : band);
}

/* Blocks [begin, end) (image * blocks + block) of VL channels of the
 * convolution by channels: whole vectors to a piece of the loop (pieces of
 * a few planes each copied their band of pixels for a part vector, and on
 * two threads MixNet-S's 7x7 from 56x56 took 1.3x one thread's time, 10x
 * beside a busy process). */
static void depthwise_blocks(void *context, long begin, long end)
{
    const depthwise_call *a = context;
    const long C = a->g->in_channels, blocks = (C + VL - 1) / VL;
    for (long k = begin; k < end; k++) {
        const long c = k % blocks * VL;
        channel_block(a, k / blocks * C + c, C - c < VL ? C - c : VL);
    }
}

/* Planes [begin, end) (image * channels + channel) of the convolution by
 * strips. */
static void depthwise_range(void *context, long begin, long end)
{
    const depthwise_call *a = context;
    const ccn_conv_geometry *g = a->g;
    const long C = g->in_channels, taps = g->kernel_h * g->kernel_w;
    for (long i = begin; i < end; i++) {
        const float *in = a->x + i * g->in_h * g->in_w, *wc = a->w + (i % C) * taps;
        const float b = a->bias ? a->bias[i % C] : 0.0f;
        float *out = a->y + i * g->out_h * g->out_w;
#if MASKED_LOADS
        if (a->flat) {
            flat_plane(a, in, wc, b, out);
            continue;
        }
#endif
        plane(g, in, wc, b, out, a->act, a->act_alpha);
    }
}

/* The convolution a describes: by channels in blocks of VL when a->band,
 * else plane by plane. */
static void run_depthwise(depthwise_call *a)
{
    const ccn_conv_geometry *g = a->g;
    const long planes = g->batch * g->in_channels;
    const long work = planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w;
    if (a->band)
        ccn_parallel_for(g->batch * ((g->in_channels + VL - 1) / VL), work, depthwise_blocks, a);
    else
        ccn_parallel_for(planes, work, depthwise_range, a);
}

#ifdef CCN_GEMM_VARIANTS
/* The default build also compiles this file for x86-64-v3 and -v4, its
 * functions renamed (render.LEVEL_FAMILIES: VL and the masked loads are
 * chosen at compile time), and runs the products' level (ccn_common.h). */
typedef void depthwise_fn(const ccn_conv_geometry *, long, int, float, const float *,
                          const float *, const float *, float *);
depthwise_fn ccn_conv2d_depthwise_v3, ccn_conv2d_depthwise_v4;
depthwise_fn ccn_conv2d_depthwise_nhwc_v3, ccn_conv2d_depthwise_nhwc_v4;
#endif

void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, long band, int act,
                          float act_alpha, const float *x, const float *w, const float *bias,
                          float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_conv2d_depthwise, geometry, band, act, act_alpha, x, w, bias, y);
    const ccn_conv_geometry *g = geometry;
    assert(g->group == g->in_channels && g->out_channels == g->in_channels);
    assert(band == 0 || band_fits(g, band));
    depthwise_call a = {.g = g, .act = act, .act_alpha = act_alpha, .x = x, .w = w,
                        .bias = bias, .y = y, .band = band};
#if MASKED_LOADS
    a.flat = band ? 0 : flat_vectors(g);
    if (a.flat)
        flat_masks(&a);
#endif
    run_depthwise(&a);
}

void ccn_conv2d_depthwise_nhwc(const ccn_conv_geometry *geometry, long band, int act,
                               float act_alpha, const float *x, const float *w,
                               const float *bias, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_conv2d_depthwise_nhwc, geometry, band, act, act_alpha, x, w, bias,
                        y);
    const ccn_conv_geometry *g = geometry;
    assert(g->group == g->in_channels && g->out_channels == g->in_channels);
    assert(band_fits(g, band));
    depthwise_call a = {.g = g, .act = act, .act_alpha = act_alpha, .x = x, .w = w,
                        .bias = bias, .y = y, .band = band, .channels_last = 1};
    run_depthwise(&a);
}
