/* Conv_direct family: a convolution summed in registers, as onnxruntime's
 * NCHWc kernels do, but on NCHW: each channel of the input is copied once
 * into a padded plane (for stride 2, its four phases), and output o of a
 * plane-shaped output space (rows of the plane's width, the columns past
 * the output's unused) reads tap (kh, kw) of every channel at o plus a
 * fixed offset.  A tile sums CCN_DIRECT_ROWS output channels by up to three
 * vectors of consecutive o over every channel and tap, broadcasting the
 * weights: no im2col columns are written and read back (ResNet's 7x7
 * stride-2 first layer wrote 7.4 MB of them per image). */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the tiles want them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "ccn_conv_direct.h"
#include "ccn_gemm.h"
#include "ccn_threads.h"

typedef float v16 __attribute__((vector_size(16 * sizeof(float))));
typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
typedef float v4 __attribute__((vector_size(4 * sizeof(float))));

/* Where a tile kernel stores: rows i < `rows` of t (ldt floats apart),
 * nv vectors each but only `last` floats of the last one, as act(sum +
 * res), res (laid out as t, read before t is written: t may be res) unless
 * NULL, act one of ccn_activate_simple's (CCN_ACT_*, its alpha). */
typedef struct {
    float *t;
    const float *res;
    long ldt;
    int rows, last, act;
    float alpha;
} tile_out;

/* m ? a : b for each lane of float vectors a and b, m their comparison
 * (-1 true, 0 false): C has no ?: on vectors. */
#define CCN_DIRECT_SELECT(m, a, b) \
    ((__typeof__(a))(((__typeof__(m))(a) & (m)) | ((__typeof__(m))(b) & ~(m))))

/* Channels ahead from which a tile fetches its planes' lines into L1 as it
 * sums: a tap's address moves by a whole plane from channel to channel,
 * farther than the hardware's stride prefetcher follows. */
#define CCN_DIRECT_AHEAD 1

/* A tile kernel: t[i][0:nv*VL] = start[i] plus the sums over C channels
 * and T taps of w's row i (a block: [c][tap][row]) times the planes (plane
 * floats apart) at the tap's offset off[tap], nv of its vectors. */
typedef void tile_fn(long C, long T, const long *off, const float *planes, long plane,
                     const float *w, const float *start, int nv, const tile_out *out);

/* A tile's rows i < out->rows of acc (nv vectors each) stored whole to T
 * (rows LDT floats apart) as EXPR of v, the vector, and r, where the
 * residual's vector is (NULL without one). */
#define CCN_DIRECT_STORE(T, LDT, EXPR)                                                     \
    for (int i = 0; i < CCN_DIRECT_ROWS; i++)                                              \
        for (int j = 0; j < nv && i < out->rows; j++) {                                    \
            __typeof__(acc[0][0]) v = acc[i][j];                                           \
            const long at = j * (long)(sizeof v / sizeof(float));                          \
            const float *r = out->res ? out->res + i * out->ldt + at : NULL;               \
            (void)r;                                                                       \
            v = EXPR;                                                                      \
            memcpy((T) + i * (LDT) + at, &v, sizeof v);                                    \
        }
/* CCN_DIRECT_STORE to out->t of ACT (a tile kernel's activation) of v plus
 * the residual, if any: one unrolled loop per case. */
#define CCN_DIRECT_STORE_ACT(ACT, act)                                                     \
    do {                                                                                   \
        if (out->res) {                                                                    \
            CCN_DIRECT_STORE(out->t, out->ldt, ACT(v + ACT##_load(r), act, out->alpha))    \
        } else {                                                                           \
            CCN_DIRECT_STORE(out->t, out->ldt, ACT(v, act, out->alpha))                    \
        }                                                                                  \
    } while (0)

/* NAME, a tile_fn on vectors of type VEC, up to NV of them (the
 * accumulators, CCN_DIRECT_ROWS * NV vectors, fit the registers), compiled
 * with ATTRIBUTES (an instruction set).  Each nv is its own unrolled copy,
 * so that the sums stay in registers. */
#define CCN_DIRECT_TILE_FN(NAME, VEC, NV, ATTRIBUTES)                                     \
    ATTRIBUTES CCN_ALWAYS_INLINE VEC NAME##_act_load(const float *p)                      \
    {                                                                                      \
        VEC v;                                                                             \
        memcpy(&v, p, sizeof v);                                                           \
        return v;                                                                          \
    }                                                                                      \
    /* ccn_activate_simple's activations on a vector, in registers (as it   */           \
    /* computes them: NaN kept by ReLU and Clip, as by NumPy's).            */           \
    ATTRIBUTES CCN_ALWAYS_INLINE VEC NAME##_act(VEC v, int act, float alpha)              \
    {                                                                                      \
        const VEC zero = {0}, one = zero + 1.0f, top = zero + alpha;                      \
        VEC h = v / 6.0f + 0.5f;                                                           \
        switch (act) {                                                                     \
        case CCN_ACT_RELU:                                                                 \
            return CCN_DIRECT_SELECT(v < zero, zero, v);                                   \
        case CCN_ACT_LEAKY_RELU:                                                           \
            return CCN_DIRECT_SELECT(v >= zero, v, alpha * v);                             \
        case CCN_ACT_CLIP:                                                                 \
            return CCN_DIRECT_SELECT(v < zero, zero, CCN_DIRECT_SELECT(v > top, top, v));  \
        case CCN_ACT_HARD_SWISH:                                                           \
            h = CCN_DIRECT_SELECT(h < zero, zero, CCN_DIRECT_SELECT(h > one, one, h));     \
            return v * h;                                                                  \
        default:                                                                           \
            return v;                                                                      \
        }                                                                                  \
    }                                                                                      \
    ATTRIBUTES CCN_ALWAYS_INLINE void NAME##_nv(long C, long T, const long *off,          \
                                                const float *planes, long plane,          \
                                                const float *w, const float *start,       \
                                                const int nv, const tile_out *out)         \
    {                                                                                      \
        const long VL = (long)(sizeof(VEC) / sizeof(float));                              \
        VEC acc[CCN_DIRECT_ROWS][NV];                                                      \
        for (int i = 0; i < CCN_DIRECT_ROWS; i++)                                          \
            for (int j = 0; j < nv; j++)                                                   \
                acc[i][j] = (VEC){0} + start[i];                                           \
        for (long c = 0; c < C; c++, planes += plane)                                      \
            for (long k = 0; k < T; k++, w += CCN_DIRECT_ROWS) {                           \
                VEC v[NV];                                                                 \
                for (int j = 0; j <= nv; j++)                                              \
                    CCN_PREFETCH_AT(planes, CCN_DIRECT_AHEAD * plane + off[k] +            \
                                                (j < nv ? j * VL : nv * VL - 1));          \
                for (int j = 0; j < nv; j++)                                               \
                    memcpy(&v[j], planes + off[k] + j * VL, sizeof v[j]);                  \
                for (int i = 0; i < CCN_DIRECT_ROWS; i++)                                  \
                    for (int j = 0; j < nv; j++)                                           \
                        acc[i][j] += w[i] * v[j];                                          \
            }                                                                              \
        /* Whole vectors: each activation its own unrolled stores.  Through a */           \
        /* loop that could end in a part vector, acc left the registers and  */           \
        /* the stores took as long as the sums.                               */           \
        if (out->last == VL)                                                               \
            switch (out->act) {                                                            \
            case CCN_ACT_NONE:                                                             \
                CCN_DIRECT_STORE_ACT(NAME##_act, CCN_ACT_NONE);                            \
                return;                                                                    \
            case CCN_ACT_RELU:                                                             \
                CCN_DIRECT_STORE_ACT(NAME##_act, CCN_ACT_RELU);                            \
                return;                                                                    \
            case CCN_ACT_LEAKY_RELU:                                                       \
                CCN_DIRECT_STORE_ACT(NAME##_act, CCN_ACT_LEAKY_RELU);                      \
                return;                                                                    \
            case CCN_ACT_CLIP:                                                             \
                CCN_DIRECT_STORE_ACT(NAME##_act, CCN_ACT_CLIP);                            \
                return;                                                                    \
            case CCN_ACT_HARD_SWISH:                                                       \
                CCN_DIRECT_STORE_ACT(NAME##_act, CCN_ACT_HARD_SWISH);                      \
                return;                                                                    \
            }                                                                              \
        /* A part vector last: the sums to a buffer, then float by float. */             \
        float sums[CCN_DIRECT_ROWS * NV * VL];                                             \
        CCN_DIRECT_STORE(sums, NV * VL, v);                                                \
        const long n = (nv - 1) * VL + out->last;                                          \
        for (int i = 0; i < out->rows; i++) {                                              \
            float *o = out->t + i * out->ldt;                                              \
            const float *r = out->res ? out->res + i * out->ldt : NULL;                    \
            for (long k = 0; k < n; k++)                                                   \
                o[k] = r ? sums[i * NV * VL + k] + r[k] : sums[i * NV * VL + k];           \
            (void)ccn_activate_simple(n, o, out->act, out->alpha);                         \
        }                                                                                  \
    }                                                                                      \
    ATTRIBUTES static void NAME(long C, long T, const long *off, const float *planes,     \
                                long plane, const float *w, const float *start, int nv,   \
                                const tile_out *out)                                       \
    {                                                                                      \
        if (NV >= 3 && nv == 3)                                                            \
            NAME##_nv(C, T, off, planes, plane, w, start, NV >= 3 ? 3 : 1, out);           \
        else if (NV >= 2 && nv == 2)                                                       \
            NAME##_nv(C, T, off, planes, plane, w, start, NV >= 2 ? 2 : 1, out);           \
        else                                                                               \
            NAME##_nv(C, T, off, planes, plane, w, start, 1, out);                         \
    }

/* A tile kernel and its shape: VL floats per vector, up to nv vectors. */
typedef struct {
    tile_fn *fn;
    long vl, nv;
} tile_kernel;

/* This build's kernel: three 16-float vectors (24 accumulators of the 32
 * registers) with AVX-512, else one vector of the widest. */
#if defined(__AVX512F__)
CCN_DIRECT_TILE_FN(tile_native, v16, 3, )
static const tile_kernel native = {tile_native, 16, 3};
#elif defined(__AVX__)
CCN_DIRECT_TILE_FN(tile_native, v8, 1, )
static const tile_kernel native = {tile_native, 8, 1};
#else
CCN_DIRECT_TILE_FN(tile_native, v4, 1, )
static const tile_kernel native = {tile_native, 4, 1};
#endif
/* With CCN_GEMM_VARIANTS (the emitted Makefile's default build on x86-64),
 * builds for x86-64-v3 and -v4 too, chosen at the products' level
 * (ccn_common.h): not CCN_LEVELS, as each level has its own tile shape. */
#ifdef CCN_GEMM_VARIANTS
CCN_DIRECT_TILE_FN(tile_v3, v8, 1, CCN_TARGET_V3)
CCN_DIRECT_TILE_FN(tile_v4, v16, 3, CCN_TARGET_V4)
#endif

static const tile_kernel *best_kernel(void)
{
#ifdef CCN_GEMM_VARIANTS
    static const tile_kernel v3 = {tile_v3, 8, 1}, v4 = {tile_v4, 16, 3};
    const int level = ccn_gemm_level();
    if (level == 4)
        return &v4;
    if (level == 3 && native.vl < 8)
        return &v3;
#endif
    return &native;
}

/* Floats of the planes a band of output rows reads (512 KiB, a part of
 * L2). */
#define CCN_DIRECT_BAND_FLOATS (1L << 17)

static long min_long(long a, long b)
{
    return a < b ? a : b;
}

/* One image's call, shared by the blocks of output channels. */
typedef struct {
    const ccn_conv_geometry *g;
    const ccn_conv_direct_plan *p;
    const tile_kernel *kernel;
    const float *x, *planes, *w, *bias, *residual;
    float *y;
    long off[CCN_DIRECT_MAX_TAPS];
    long blocks, band;  /* blocks of output channels; output rows per band */
} direct_call;

/* Outputs [o0, o0 + width) of the plane-shaped space, rows m0.. of t (ldt
 * apart, the bias added), to y as act(t + residual): each row of the space
 * is one output row, its first out_w columns. */
static void store_tile(const direct_call *d, long m0, long o0, long width, float *t, long ldt)
{
    const ccn_conv_geometry *g = d->g;
    const long OW = g->out_w, S = g->out_h * OW, row = d->p->row;
    const int act = d->p->act;
    /* The runs of outputs (the same for every row of t): from t[src] to
     * y[dst], len of them. */
    long src[3 * 16], dst[3 * 16], len[3 * 16], runs = 0;
    for (long o = o0; o < o0 + width;) {
        const long ow = o % row, n = min_long(row - ow, o0 + width - o);
        if (ow < OW) {
            src[runs] = o - o0, dst[runs] = o / row * OW + ow;
            len[runs++] = min_long(n, OW - ow);
        }
        o += n;
    }
    for (long i = 0; i < CCN_DIRECT_ROWS && m0 + i < g->out_channels; i++) {
        float *out = d->y + (m0 + i) * S, *ti = t + i * ldt;
        if (d->residual == NULL) {
            /* One pass of the activation over the row (the simple ones
             * inlined: a call per row took 7% of a stem's time), then
             * copies. */
            if (!ccn_activate_simple(width, ti, act, d->p->act_alpha))
                ccn_activate(width, ti, act, d->p->act_alpha);
            for (long r = 0; r < runs; r++) {  /* (memcpy's calls took 11%) */
                float *restrict y = out + dst[r];
                const float *restrict a = ti + src[r];
                for (long j = 0; j < len[r]; j++)
                    y[j] = a[j];
            }
            continue;
        }
        const float *res = d->residual + (m0 + i) * S;
        for (long r = 0; r < runs; r++) {
            float *restrict y = out + dst[r];
            const float *restrict a = ti + src[r], *restrict b = res + dst[r];
            for (long j = 0; j < len[r]; j++)
                y[j] = a[j] + b[j];
            if (!ccn_activate_simple(len[r], y, act, d->p->act_alpha))
                ccn_activate(len[r], y, act, d->p->act_alpha);
        }
    }
}

/* Items [begin, end) of bands x blocks: band by band of output rows (band
 * rows of the plane-shaped output space, `row` floats each), each block of
 * CCN_DIRECT_ROWS output channels tile by tile, the tiles as even as the
 * vectors allow. */
static void direct_blocks(void *context, long begin, long end)
{
    const direct_call *d = context;
    const ccn_conv_geometry *g = d->g;
    const long vl = d->kernel->vl, T = g->kernel_h * g->kernel_w, row = d->p->row;
    const long ldt = 3 * 16;
    float t[CCN_DIRECT_ROWS * 3 * 16];
    for (long item = begin; item < end; item++) {
        const long band = item / d->blocks, b = item % d->blocks;
        const long o_begin = band * d->band * row;
        const long O = min_long(g->out_h, (band + 1) * d->band) * row - o_begin;
        const long vectors = (O + vl - 1) / vl;
        const long tiles = (vectors + d->kernel->nv - 1) / d->kernel->nv;
        /* The block's group: its input channels' planes, and its weights
         * over them. */
        const long Cg = g->in_channels / g->group, Mg = g->out_channels / g->group;
        const float *planes = d->planes + b * CCN_DIRECT_ROWS / Mg * Cg * d->p->plane;
        const float *w = d->w + b * CCN_DIRECT_ROWS * Cg * T;
        /* The sums start from the bias (the block's rows past M from 0). */
        float start[CCN_DIRECT_ROWS] = {0};
        const long rows = min_long(CCN_DIRECT_ROWS, g->out_channels - b * CCN_DIRECT_ROWS);
        for (long i = 0; d->bias != NULL && i < rows; i++)
            start[i] = d->bias[b * CCN_DIRECT_ROWS + i];
        const tile_out out = {t, NULL, ldt, CCN_DIRECT_ROWS, (int)vl, CCN_ACT_NONE, 0.0f};
        for (long k = 0, o0 = o_begin; k < tiles; k++) {
            const int nv = (int)(vectors / tiles + (k < vectors % tiles));
            d->kernel->fn(Cg, T, d->off, planes + o0, d->p->plane, w, start, nv, &out);
            store_tile(d, b * CCN_DIRECT_ROWS, o0, min_long(nv * vl, o_begin + O - o0), t, ldt);
            o0 += nv * vl;
        }
    }
}

/* The input row `in` (W floats) into the zeroed row `out` of a padded
 * plane, pad_left zeros before it: at stride 2, padded column pw to phase
 * pw % 2 (`phase` floats apart) at pw / 2, the even and odd input columns
 * in one loop (which vectorises: a loop per phase of strided reads took an
 * eighth of a 3 -> 64 stem's time). */
static void put_row(const float *in, long W, long pad_left, long s, float *out, long phase)
{
    if (s == 1) {
        memcpy(out + pad_left, in, (size_t)W * sizeof(float));
        return;
    }
    const long p = pad_left;
    float *restrict even = out + (p & 1) * phase + (p >> 1);           /* in[2k] */
    float *restrict odd = out + ((p + 1) & 1) * phase + ((p + 1) >> 1); /* in[2k + 1] */
    long k = 0;
    for (; 2 * k + 1 < W; k++) {
        even[k] = in[2 * k];
        odd[k] = in[2 * k + 1];
    }
    if (2 * k < W)
        even[k] = in[2 * k];
}

/* The image x (C x H x W) into the planes of scratch, zeros around it and
 * after the last plane (the tiles read that far). */
static void fill_planes(const ccn_conv_geometry *g, const ccn_conv_direct_plan *p,
                        const float *x, float *planes)
{
    const long C = g->in_channels, H = g->in_h, W = g->in_w, s = p->stride;
    memset(planes, 0, (size_t)(C * p->plane + p->row + g->kernel_w + CCN_DIRECT_TILE) *
                          sizeof(float));
    /* Phase (ph % 2, pw % 2) holds (ph, pw) at (ph / 2, pw / 2). */
    for (long c = 0; c < C; c++)
        for (long ih = 0; ih < H; ih++) {
            const long ph = ih + g->pad_top;
            const long at = s == 1 ? ph * p->row
                                   : (ph & 1) * 2 * p->rows * p->row + (ph >> 1) * p->row;
            put_row(x + (c * H + ih) * W, W, g->pad_left, s, planes + c * p->plane + at,
                    p->rows * p->row);
        }
}

/* Lanes per block of the blocked layout (ccn_nchwc.h's CCN_NCHWC_BLOCK). */
#define CCN_DIRECT_LANES 16

/* One output row of NB blocks of lanes of the blocked stem: y[b][ow][16]
 * (blocks y_block floats apart) = bias + the sums over C channels and T
 * taps of w ([b][c][tap][16], blocks w_block apart) times the line element
 * at off[tap] + ow (x, `plane` floats per channel), a vector of 16 output
 * channels per output, the input broadcast: no transposition to the
 * blocked layout.  A tile of P outputs of NB blocks takes NB weight vectors
 * and P broadcasts per tap for NB * P multiply-adds (one block at a time
 * took a broadcast for each, the loads bounding it: SqueezeNet's 3 -> 64
 * stem 1.35x onnxruntime's time).  `relu`: ReLU on the sums as they are
 * stored, a constant in each build of the tile (a pass over the rows after
 * took 6% of that stem's time, a choice at each store more). */
CCN_ALWAYS_INLINE void stem_row_blocks(const float *x, const long *off, long C, long T,
                                       long plane, long OW, const float *w, long w_block,
                                       const float *bias, float *y, long y_block, int NB,
                                       int relu)
{
    enum { MAX_NB = 4 };
    /* NB * P <= 28 accumulators; 16 and 14 pixels take a 112-wide row in
     * whole tiles (12 left a third of a tile: MNASNet's 16-channel stem
     * 0.084 -> 0.079 ms). */
    const int P = NB >= 4 ? 6 : NB == 3 ? 8 : NB == 2 ? 14 : 16;
    for (long ow0 = 0; ow0 < OW; ow0 += P) {
        v16 acc[MAX_NB][16];
        for (int b = 0; b < NB; b++) {
            v16 start;
            memcpy(&start, bias + b * 16, sizeof start);
            for (int p = 0; p < P; p++)
                acc[b][p] = start;
        }
        for (long c = 0; c < C; c++)
            for (long k = 0; k < T; k++) {
                v16 wv[MAX_NB];
                for (int b = 0; b < NB; b++)
                    memcpy(&wv[b], w + b * w_block + (c * T + k) * 16, sizeof wv[b]);
                const float *xp = x + c * plane + off[k] + ow0;
                for (int p = 0; p < P; p++)
                    for (int b = 0; b < NB; b++)
                        acc[b][p] += xp[p] * wv[b];
            }
        const v16 zero = {0};
        for (int b = 0; b < NB; b++)
            for (long p = 0; p < P && ow0 + p < OW; p++) {
                const v16 v = relu ? CCN_DIRECT_SELECT(acc[b][p] < zero, zero, acc[b][p])
                                   : acc[b][p];
                memcpy(y + b * y_block + (ow0 + p) * 16, &v, sizeof v);
            }
    }
}

/* stem_row_blocks for nb (1 to 4) blocks, each count unrolled. */
CCN_ALWAYS_INLINE void stem_row_counts(const float *x, const long *off, long C, long T,
                                       long plane, long OW, const float *w, long w_block,
                                       const float *bias, float *y, long y_block, long nb,
                                       int relu)
{
    switch (nb) {
    case 4:
        stem_row_blocks(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, 4, relu);
        break;
    case 3:
        stem_row_blocks(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, 3, relu);
        break;
    case 2:
        stem_row_blocks(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, 2, relu);
        break;
    default:
        stem_row_blocks(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, 1, relu);
    }
}

/* stem_row_counts with ReLU or without, each choice a build of its own. */
CCN_ALWAYS_INLINE void stem_lanes_body(const float *x, const long *off, long C, long T,
                                       long plane, long OW, const float *w, long w_block,
                                       const float *bias, float *y, long y_block, long nb,
                                       int relu)
{
    if (relu)
        stem_row_counts(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, nb, 1);
    else
        stem_row_counts(x, off, C, T, plane, OW, w, w_block, bias, y, y_block, nb, 0);
}
CCN_LEVELS(static, stem_lanes, stem_lanes_body,
           (const float *x, const long *off, long C, long T, long plane, long OW, const float *w,
            long w_block, const float *bias, float *y, long y_block, long nb, int relu),
           (x, off, C, T, plane, OW, w, w_block, bias, y, y_block, nb, relu))

/* stem_bands' output row oh of image n to the blocked y (plan->blocked, w
 * in blocks of 16 lanes, [c][tap][16]) from its lines (plane floats per
 * channel), lanes past M zero.  A chain then starts at the stem with no
 * reorder of its output (benchmarks/NOTES.md, "The stem into NCHWc
 * blocks"). */
static void stem_blocked_row(const direct_call *d, const float *lines, long plane, long n,
                             long oh)
{
    const ccn_conv_geometry *g = d->g;
    const long C = g->in_channels, M = g->out_channels, T = g->kernel_h * g->kernel_w;
    const long OW = g->out_w, S = g->out_h * OW;
    const long blocks = (M + CCN_DIRECT_LANES - 1) / CCN_DIRECT_LANES;
    const long lanes = M - (blocks - 1) * CCN_DIRECT_LANES; /* of the last block */
    const int relu = d->p->act == CCN_ACT_RELU;
    for (long b0 = 0; b0 < blocks; b0 += 4) {
        const long nb = min_long(4, blocks - b0);
        float bias[4 * CCN_DIRECT_LANES] = {0};
        for (long i = 0; d->bias != NULL && i < 4 * CCN_DIRECT_LANES; i++)
            if (b0 * CCN_DIRECT_LANES + i < M)
                bias[i] = d->bias[b0 * CCN_DIRECT_LANES + i];
        float *y = d->y + ((n * blocks + b0) * S + oh * OW) * CCN_DIRECT_LANES;
        stem_lanes(lines, d->off, C, T, plane, OW, d->w + b0 * C * T * CCN_DIRECT_LANES,
                   C * T * CCN_DIRECT_LANES, bias, y, S * CCN_DIRECT_LANES, nb, relu);
        for (long b = 0; !relu && b < nb; b++) { /* the others after */
            float *row = y + b * S * CCN_DIRECT_LANES;
            if (!ccn_activate_simple(OW * CCN_DIRECT_LANES, row, d->p->act, d->p->act_alpha))
                ccn_activate(OW * CCN_DIRECT_LANES, row, d->p->act, d->p->act_alpha);
        }
        float *last = y + (nb - 1) * S * CCN_DIRECT_LANES;
        for (long o = 0; b0 + nb == blocks && lanes < CCN_DIRECT_LANES && o < OW; o++)
            memset(last + o * CCN_DIRECT_LANES + lanes, 0,  /* act(0) may not be 0 */
                   (size_t)(CCN_DIRECT_LANES - lanes) * sizeof(float));
    }
}

/* Fetches into L1 the input rows that band `next` (of image n, first input
 * row ih0) copies into its lines, the stride's rows of them while this
 * band's output row oh of `rows` is summed and the rest with its last: the
 * copy of each line otherwise waited for its row (MNASNet's 3 -> 32 stem
 * 0.150 -> 0.136 ms; fetched all at once, or into L2, half that or
 * nothing).  Inlined: GCC finds a function that only prefetches pure, and
 * drops its calls. */
CCN_ALWAYS_INLINE void prefetch_band(const direct_call *d, long n, long ih0, long oh,
                                     long rows)
{
    const ccn_conv_geometry *g = d->g;
    const long s = d->p->stride, R = (d->band - 1) * s + g->kernel_h;
    const long from = ih0 + oh * s, to = oh + 1 == rows ? ih0 + R : from + s;
    for (long c = 0; c < g->in_channels; c++)
        for (long ih = from < 0 ? 0 : from; ih < to && ih < g->in_h; ih++) {
            const float *row = d->x + ((n * g->in_channels + c) * g->in_h + ih) * g->in_w;
            for (long j = 0; j < g->in_w; j += 16) /* a 64-byte line */
                __builtin_prefetch(row + j);
        }
}

/* The stem (plan->stem: few input channels): bands [begin, end) of
 * d->band output rows of every image, each read from the input where it
 * lies.  The input rows a band reads, of every channel, go to `lines` on
 * the stack, padded and split into phases (where the planes of the whole
 * image were written to memory and read back), and each block of output
 * channels is summed by tiles along the output rows, stored straight into
 * y with the residual: a stem's tiles spent three quarters of their time
 * again copying the tile buffer into eight output planes
 * (benchmarks/NOTES.md, "The 3-channel stem"). */
static void stem_bands(void *context, long begin, long end)
{
    const direct_call *d = context;
    const ccn_conv_geometry *g = d->g;
    const long C = g->in_channels, H = g->in_h, W = g->in_w, M = g->out_channels;
    const long KH = g->kernel_h, T = KH * g->kernel_w, s = d->p->stride;
    const long OH = g->out_h, OW = g->out_w, S = OH * OW, L = d->p->row + CCN_DIRECT_STEM_TAIL;
    /* The floats of each phase of a line before and after its row (at
     * least: put_row writes over the excess). */
    const long head = g->pad_left / s + 1, tail = (g->pad_left + W) / s - 1;
    const long bands = (OH + d->band - 1) / d->band, R = (d->band - 1) * s + KH;
    const long vl = d->kernel->vl, vectors = (OW + vl - 1) / vl;
    const long tiles = (vectors + d->kernel->nv - 1) / d->kernel->nv;
    /* The simple activations in the tiles' registers, the others a pass
     * over the band's rows after. */
    const int act = d->p->act, simple = ccn_activate_simple(0, NULL, act, 0.0f);
    const float alpha = d->p->act_alpha;
    const int aliased = d->residual == d->y;
    float lines[CCN_DIRECT_STEM_FLOATS];
    for (long item = begin; item < end; item++) {
        const long n = item / bands, oh0 = item % bands * d->band;
        const long rows = min_long(d->band, OH - oh0);
        /* Line r of channel c: input row oh0 * s - pad_top + r, its
         * padding zeros: a padding row all of it, else each phase's ends
         * (zeroing the whole band took a tenth of MNASNet's stem). */
        for (long c = 0; c < C; c++)
            for (long r = 0, ih = oh0 * s - g->pad_top; r < R; r++, ih++) {
                float *line = lines + (c * R + r) * s * L;
                if (ih < 0 || ih >= H) {
                    memset(line, 0, (size_t)(s * L) * sizeof(float));
                    continue;
                }
                for (long phase = 0; phase < s; phase++) {
                    memset(line + phase * L, 0, (size_t)head * sizeof(float));
                    memset(line + phase * L + tail, 0, (size_t)(L - tail) * sizeof(float));
                }
                put_row(d->x + ((n * C + c) * H + ih) * W, W, g->pad_left, s, line, L);
            }
        /* The next band of this range: its image and first input row. */
        const long next_n = (item + 1) / bands, next_ih0 = (item + 1) % bands * d->band * s -
                                                           g->pad_top;
        if (d->p->blocked) {
            for (long oh = 0; oh < rows; oh++) {
                if (item + 1 < end)
                    prefetch_band(d, next_n, next_ih0, oh, rows);
                stem_blocked_row(d, lines + oh * s * s * L, R * s * L, n, oh0 + oh);
            }
            continue;
        }
        float *y = d->y + n * M * S + oh0 * OW;
        const float *res = d->residual ? d->residual + n * M * S + oh0 * OW : NULL;
        for (long m0 = 0; m0 < M; m0 += CCN_DIRECT_ROWS) {
            const int block = (int)min_long(CCN_DIRECT_ROWS, M - m0);
            const float *w = d->w + m0 * C * T;
            float start[CCN_DIRECT_ROWS] = {0};
            for (int i = 0; d->bias != NULL && i < block; i++)
                start[i] = d->bias[m0 + i];
            for (long oh = 0; oh < rows; oh++) {
                if (m0 == 0 && item + 1 < end)
                    prefetch_band(d, next_n, next_ih0, oh, rows);
                for (long k = 0, c0 = 0, nv; k < tiles; k++, c0 += nv * vl) {
                    nv = vectors / tiles + (k < vectors % tiles);
                    /* A last tile reaching past the row ends where it
                     * does, storing whole vectors (a part one took a
                     * fifth of the time) and some outputs again, unless
                     * it would read back a residual y has overwritten. */
                    const long at = c0 + nv * vl > OW && OW >= nv * vl && !aliased
                                        ? OW - nv * vl
                                        : c0;
                    const long o0 = oh * OW + at, width = min_long(nv * vl, OW - at);
                    const tile_out out = {y + m0 * S + o0, res ? res + m0 * S + o0 : NULL, S,
                                          block, (int)(width - (nv - 1) * vl),
                                          simple ? act : CCN_ACT_NONE, alpha};
                    /* The tile's output lines fetched for writing as it sums:
                     * its stores otherwise waited for them (1.07-1.2x the
                     * time). */
                    for (int i = 0; i < block; i++)
                        for (long j = 0; j < width + vl; j += vl)
                            __builtin_prefetch(out.t + i * S + j, 1, 3);
                    d->kernel->fn(C, T, d->off, lines + oh * s * s * L + at, R * s * L, w, start,
                                  (int)nv, &out);
                }
            }
            for (int i = 0; !simple && i < block; i++)
                ccn_activate(rows * OW, y + (m0 + i) * S, act, alpha);
        }
    }
}

void ccn_conv2d_direct(const ccn_conv_geometry *g, const ccn_conv_direct_plan *plan,
                       const float *x, const float *w, const float *bias, const float *residual,
                       float *y, float *scratch)
{
    const long C = g->in_channels, M = g->out_channels, KH = g->kernel_h, KW = g->kernel_w;
    const long s = plan->stride, image = C * g->in_h * g->in_w, S = g->out_h * g->out_w;
    const long Cg = C / g->group;
    /* The emitter chose this path for these only (and sized the planes):
     * a block of output channels lies in one group. */
    assert((g->group == 1 || (!plan->stem && M / g->group % CCN_DIRECT_ROWS == 0)) &&
           g->dil_h == 1 && g->dil_w == 1 && g->stride_h == s &&
           g->stride_w == s && (s == 1 || s == 2) && KH * KW <= CCN_DIRECT_MAX_TAPS &&
           plan->plane == plan->rows * plan->row * s * s &&
           (!plan->blocked || (plan->stem && residual == NULL)));
    direct_call d = {g, plan, best_kernel(), x, scratch, w, bias, residual, y, {0}, 0, 0};
    if (plan->stem) {
        /* Tap (kh, kw) of output column ow: line kh's element ow + off
         * (each line's `s` phases L floats apart); bands of as many output
         * rows as their lines fit the stack array. */
        const long L = plan->row + CCN_DIRECT_STEM_TAIL;
        assert(C * KH * s * L <= CCN_DIRECT_STEM_FLOATS);
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++)
                d.off[kh * KW + kw] = kh * s * L + (s == 1 ? kw : (kw & 1) * L + (kw >> 1));
        d.band = (CCN_DIRECT_STEM_FLOATS / (C * s * L) - KH) / s + 1;
        ccn_parallel_for(g->batch * ((g->out_h + d.band - 1) / d.band),
                         g->batch * M * S * (C * KH * KW / CCN_MACS_PER_WORK + 1), stem_bands,
                         &d);
        return;
    }
    /* Tap (kh, kw) of output o: plane element o + off (in its phase). */
    for (long kh = 0; kh < KH; kh++)
        for (long kw = 0; kw < KW; kw++)
            d.off[kh * KW + kw] = s == 1 ? kh * plan->row + kw
                                         : ((kh & 1) * 2 + (kw & 1)) * plan->rows * plan->row +
                                               (kh >> 1) * plan->row + (kw >> 1);
    d.blocks = (M + CCN_DIRECT_ROWS - 1) / CCN_DIRECT_ROWS;
    /* Bands of output rows whose input (every channel) stays in L2 while
     * each block of weights runs over it: 128 channels of 56x56 at stride
     * 2 took 1.15x im2col's time read whole from memory. */
    const long band_rows = CCN_DIRECT_BAND_FLOATS / (C * s * s * plan->row) - KH / s;
    d.band = band_rows < 1 ? 1 : band_rows;
    const long bands = (g->out_h + d.band - 1) / d.band;
    for (long n = 0; n < g->batch; n++) {
        fill_planes(g, plan, x + n * image, scratch);
        d.residual = residual ? residual + n * M * S : NULL;
        d.y = y + n * M * S;
        ccn_parallel_for(bands * d.blocks, M * S * (Cg * KH * KW / CCN_MACS_PER_WORK + 1),
                         direct_blocks, &d);
    }
}
