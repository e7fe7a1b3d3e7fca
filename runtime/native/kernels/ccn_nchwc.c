/* NCHWc family: a chain of mobile convolutions in blocks of 16 channels
 * per pixel (runtime/native/blocked.py chooses the chains).  A 1x1
 * product keeps a tile of pixels by output blocks in vector registers and
 * adds, per input channel, its broadcast value times the weights' vector
 * (as onnxruntime's MLAS runs its NCHWc products); a depthwise one sums
 * each output pixel's taps as whole vectors of 16 channels, so neither
 * repacks its input and a plane's border costs no masked lanes.  The
 * block is 16 channels in every build (render.LEVEL_FAMILIES compiles the
 * file for x86-64-v3 and -v4 too), written with GCC's vector extension:
 * one AVX-512 register, two AVX2 ones. */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the tile loops want them.  GCC schedules x86 code
 * only after register allocation unless asked; scheduled before it too,
 * minding register pressure, the tiles' loads and FMAs interleave better
 * (MNASNet-1.0's 72-channel depthwise at 56x56 0.044 -> 0.037 ms, its
 * 16 -> 48 product at 112x112 0.107 -> 0.102; SqueezeNet's 512 -> 1000
 * one 0.690 -> 0.682).  The other kernel files measured even or slower
 * so (ccn_depthwise.c's NCHW rows 2-3% slower). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast", "schedule-insns", "sched-pressure")
#endif
#include <stdint.h>
#include <string.h>

#include "ccn_gemm.h"
#include "ccn_nchwc.h"
#include "ccn_threads.h"

#define B CCN_NCHWC_BLOCK
typedef float v16 __attribute__((vector_size(B * sizeof(float))));
typedef int32_t iv16 __attribute__((vector_size(B * sizeof(float))));
/* Any 4-byte aligned address: the arena's offsets are whole floats. */
typedef float v16u __attribute__((vector_size(B * sizeof(float)), aligned(4), may_alias));
#define LOAD(p) ((v16) * (const v16u *)(p))
#define STORE(p, v) (*(v16u *)(p) = (v))

/* Output blocks and pixels of a product's tile, and pixels of a depthwise
 * row's tile: what the build's registers hold (AVX-512: 32 of 16 lanes;
 * AVX2: 16 of 8; SSE: 16 of 4). */
#if defined(__AVX512F__)
#define PW_BLOCKS 4
#define PW_PIXELS 6
#define PW_PIXELS_ONE 12
#define DW_PIXELS 8
#elif defined(__AVX__)
#define PW_BLOCKS 1
#define PW_PIXELS 6
#define PW_PIXELS_ONE PW_PIXELS
#define DW_PIXELS 4
#else
#define PW_BLOCKS 1
#define PW_PIXELS 3
#define PW_PIXELS_ONE PW_PIXELS
#define DW_PIXELS 2
#endif

#ifdef CCN_GEMM_VARIANTS
/* The default build also compiles this file for x86-64-v3 and -v4, its
 * functions renamed (render.LEVEL_FAMILIES: the tiles are chosen at
 * compile time), and runs the products' level (ccn_common.h). */
typedef void conv_fn(const ccn_nchwc_geometry *, const float *, const float *, const float *,
                     const float *, float *);
typedef void pointwise_fn(const ccn_nchwc_geometry *, const float *, const float *,
                          const float *, const float *, const float *, float *);
pointwise_fn ccn_nchwc_pointwise_v3, ccn_nchwc_pointwise_v4;
conv_fn ccn_nchwc_depthwise_v3, ccn_nchwc_depthwise_v4, ccn_nchwc_dense_v3, ccn_nchwc_dense_v4;
typedef void winograd_fn(const ccn_nchwc_geometry *, long, const float *, const float *,
                         const float *, const float *, float *);
winograd_fn ccn_nchwc_winograd_v3, ccn_nchwc_winograd_v4;
typedef void pool_fn(const ccn_nchwc_geometry *, const float *, float *);
pool_fn ccn_nchwc_maxpool_v3, ccn_nchwc_maxpool_v4;
/* The reorders and the pool too: the baseline's 16-float vectors are four
 * SSE ones, and its pool took 10x the v4 one's time (EfficientNet-B0's
 * executable 0.73 ms against 0.08 in its 17 squeeze-excitations). */
typedef void blocks_fn(long, long, long, const float *, float *);
blocks_fn ccn_nchwc_reorder_in_v3, ccn_nchwc_reorder_in_v4, ccn_nchwc_reorder_out_v3,
    ccn_nchwc_reorder_out_v4, ccn_nchwc_global_average_pool_v3, ccn_nchwc_global_average_pool_v4;
#endif

typedef struct {
    long channels, pixels, blocks;
    const float *x;
    float *y;
} reorder_call;

#if defined(__AVX512F__) && (defined(__clang__) || __GNUC__ >= 12)
/* Lanes of a stage of transpose16 (a's lanes 0-15, b's 16-31): stage s
 * swaps the s x s blocks off the diagonal of each 2s x 2s block. */
#define TRANSPOSE_LO_1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define TRANSPOSE_HI_1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define TRANSPOSE_LO_2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define TRANSPOSE_HI_2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define TRANSPOSE_LO_4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define TRANSPOSE_HI_4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define TRANSPOSE_LO_8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define TRANSPOSE_HI_8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define TRANSPOSE_STAGE(v, S)                                                        \
    for (int i = 0; i < B; i++)                                                      \
        if (!(i & (S))) {                                                            \
            const v16 a_ = v[i], b_ = v[i + (S)];                                    \
            v[i] = __builtin_shufflevector(a_, b_, TRANSPOSE_LO_##S);                \
            v[i + (S)] = __builtin_shufflevector(a_, b_, TRANSPOSE_HI_##S);          \
        }

/* v[i][j] = v[j][i]: 16 vectors of 16 floats transposed in registers
 * (AVX-512 builds: in the narrower ones the shuffles go lane by lane). */
CCN_ALWAYS_INLINE void transpose16(v16 v[B])
{
    TRANSPOSE_STAGE(v, 1)
    TRANSPOSE_STAGE(v, 2)
    TRANSPOSE_STAGE(v, 4)
    TRANSPOSE_STAGE(v, 8)
}
#define REORDER_TRANSPOSES 1
#else
#define REORDER_TRANSPOSES 0
#endif

static void reorder_in_range(void *context, long begin, long end)
{
    const reorder_call *a = context;
    for (long t = begin; t < end; t++) {
        const long n = t / a->blocks, c0 = t % a->blocks * B;
        const long live = a->channels - c0 < B ? a->channels - c0 : B;
        const float *x = a->x + (n * a->channels + c0) * a->pixels;
        float *y = a->y + t * a->pixels * B;
        long p = 0;
#if REORDER_TRANSPOSES
        /* 16 pixels at a time: each channel's 16 a vector, transposed
         * (element by element, MobileViT's 32 x 128 x 128 took 2x
         * onnxruntime's time). */
        for (; p + B <= a->pixels; p += B) {
            v16 v[B];
            for (int c = 0; c < B; c++)
                v[c] = c < live ? LOAD(x + c * a->pixels + p) : (v16){0};
            transpose16(v);
            for (int i = 0; i < B; i++)
                STORE(y + (p + i) * B, v[i]);
        }
#endif
        for (; p < a->pixels; p++) {
            float *yp = y + p * B;
            for (long c = 0; c < live; c++)
                yp[c] = x[c * a->pixels + p];
            for (long c = live; c < B; c++)
                yp[c] = 0.0f;
        }
    }
}

#define REORDER_SPAN 64

static void reorder_out_range(void *context, long begin, long end)
{
    const reorder_call *a = context;
    for (long t = begin; t < end; t++) {
        const long n = t / a->blocks, c0 = t % a->blocks * B;
        const long live = a->channels - c0 < B ? a->channels - c0 : B;
        const float *x = a->x + t * a->pixels * B;
        float *y = a->y + (n * a->channels + c0) * a->pixels;
        long p0 = 0;
#if REORDER_TRANSPOSES
        for (; p0 + B <= a->pixels; p0 += B) {  /* as reorder_in_range */
            v16 v[B];
            for (int i = 0; i < B; i++)
                v[i] = LOAD(x + (p0 + i) * B);
            transpose16(v);
            for (int c = 0; c < B; c++)
                if (c < live)
                    STORE(y + c * a->pixels + p0, v[c]);
        }
#endif
        /* By spans of pixels whose blocks stay in L1 over the block's
         * channels: a channel's pass over the whole plane (64 bytes a pixel)
         * read it from L2 once a channel (3x the time at 56x56). */
        for (; p0 < a->pixels; p0 += REORDER_SPAN) {
            const long p1 = p0 + REORDER_SPAN < a->pixels ? p0 + REORDER_SPAN : a->pixels;
            for (long c = 0; c < live; c++)
                for (long p = p0; p < p1; p++)
                    y[c * a->pixels + p] = x[p * B + c];
        }
    }
}

/* The mean of each channel of one block of one image (t = n * blocks + b). */
static void pool_range(void *context, long begin, long end)
{
    const reorder_call *a = context;
    for (long t = begin; t < end; t++) {
        const long n = t / a->blocks, c0 = t % a->blocks * B;
        const long live = a->channels - c0 < B ? a->channels - c0 : B;
        const float *x = a->x + t * a->pixels * B;
        v16 sum = {0};
        for (long p = 0; p < a->pixels; p++)
            sum += LOAD(x + p * B);
        for (long c = 0; c < live; c++)
            a->y[n * a->channels + c0 + c] = sum[c] / (float)a->pixels;
    }
}

static void reorder(long batch, long channels, long pixels, const float *x, float *y,
                    ccn_task task)
{
    reorder_call a = {.channels = channels, .pixels = pixels,
                      .blocks = (channels + B - 1) / B, .x = x, .y = y};
    ccn_parallel_for(batch * a.blocks, batch * a.blocks * pixels * B, task, &a);
}

void ccn_nchwc_reorder_in(long batch, long channels, long pixels, const float *x, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_reorder_in, batch, channels, pixels, x, y);
    reorder(batch, channels, pixels, x, y, reorder_in_range);
}

void ccn_nchwc_reorder_out(long batch, long channels, long pixels, const float *x, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_reorder_out, batch, channels, pixels, x, y);
    reorder(batch, channels, pixels, x, y, reorder_out_range);
}

void ccn_nchwc_global_average_pool(long batch, long channels, long pixels, const float *x,
                                   float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_global_average_pool, batch, channels, pixels, x, y);
    reorder(batch, channels, pixels, x, y, pool_range);
}

typedef struct {
    const ccn_nchwc_geometry *g;
    const float *x, *scale, *w, *bias, *residual;
    float *y;
} conv_call;

/* m ? a : b, lane by lane (m from a comparison). */
#define SELECT(m, a, b) ((v16)(((iv16)(a) & (m)) | ((iv16)(b) & ~(m))))

/* Stores the outputs *v of one pixel of one block at y, plus the residual
 * res (or NULL), with the simple epilogues (ccn_activate_simple's, as it
 * computes them) in registers; the others are left to finish. */
static inline void store(float *y, const v16 *v, const float *res, int act, float act_alpha)
{
    const v16 zero = {0}, one = zero + 1.0f;
    v16 u = res ? *v + LOAD(res) : *v, h;
    switch (act) {
    case CCN_ACT_RELU:
        u = SELECT(u < zero, zero, u);  /* NaN stays NaN, as NumPy's maximum */
        break;
    case CCN_ACT_LEAKY_RELU:
        u = SELECT(u >= zero, u, u * act_alpha);
        break;
    case CCN_ACT_CLIP:  /* NaN stays NaN */
        u = SELECT(u < zero, zero, u);
        u = SELECT(u > act_alpha, zero + act_alpha, u);
        break;
    case CCN_ACT_HARD_SWISH:
        h = u / 6.0f + 0.5f;
        h = SELECT(h < zero, zero, h);
        u *= SELECT(h > one, one, h);
        break;
    default:
        break;
    }
    STORE(y, u);
}

/* The epilogues store leaves, on the n floats stored at y. */
static inline void finish(float *y, long n, int act, float act_alpha)
{
    if (!ccn_activate_simple(0, y, act, act_alpha))
        ccn_activate(n, y, act, act_alpha);
}

/* The outputs of `blocks` output blocks at `pixels` pixels from p0 of one
 * image, stored from pixel `skip` of the tile on (those before it another
 * tile stores): x, its channels' scales sc (when `scaled`) and y that
 * image's, w the first block's weights.  Scaling the weights' vectors per
 * input channel costs `blocks` multiplies against blocks x pixels FMAs; a
 * pass of the Mul would read and write the whole input. */
CCN_ALWAYS_INLINE void pointwise_tile(const conv_call *a, const float *x, const float *sc,
                                      const float *w, long ob0, long p0, long skip, float *y,
                                      const float *res, int blocks, int pixels, int scaled)
{
    const ccn_nchwc_geometry *g = a->g;
    const long plane = g->out_h * g->out_w, depth = g->in_blocks * B;
    v16 acc[PW_BLOCKS][PW_PIXELS_ONE];
    for (int o = 0; o < blocks; o++) {
        const v16 start = a->bias ? LOAD(a->bias + (ob0 + o) * B) : (v16){0};
        for (int p = 0; p < pixels; p++)
            acc[o][p] = start;
    }
    for (long cb = 0; cb < g->in_blocks; cb++) {
        const float *xb = x + (cb * plane + p0) * B;
        const float *wb = w + cb * B * B;
        /* The next tile's pixels of this block, fetched meanwhile: a tile
         * reads every input block, a stream a plane apart from the next,
         * more than the hardware prefetcher follows once the input comes
         * from memory (ResNet-50 at batch 32: 512 -> 128 at 28x28 took
         * 2.5x onnxruntime's time). */
        for (int p = 0; p < pixels; p++)
            CCN_PREFETCH_AT(xb, (pixels + p) * B);
        /* The input's padded channels have zero weights: skipped. */
        const long live = g->in_channels - cb * B < B ? g->in_channels - cb * B : B;
        for (long c = 0; c < live; c++) {
            v16 wv[PW_BLOCKS];
            for (int o = 0; o < blocks; o++)
                wv[o] = LOAD(wb + o * depth * B + c * B);
            if (scaled)
                for (int o = 0; o < blocks; o++)
                    wv[o] *= sc[cb * B + c];
            for (int p = 0; p < pixels; p++) {
                const float xv = xb[p * B + c];
                for (int o = 0; o < blocks; o++)
                    acc[o][p] += wv[o] * xv;
            }
        }
    }
    CCN_UNROLL(4)
    for (int o = 0; o < blocks; o++) {
        const long at = ((ob0 + o) * plane + p0) * B;
        CCN_UNROLL(12)
        for (int p = 0; p < pixels; p++)  /* constant indices: acc stays in registers */
            if (p >= skip)
                store(y + at + p * B, &acc[o][p], res ? res + at + p * B : NULL, g->act,
                      g->act_alpha);
    }
    /* After every store: a call between them would keep acc in memory
     * (MNASNet's 16 -> 48 at 112x112: 0.139 ms so, 0.105 now). */
    for (int o = 0; o < blocks; o++)
        finish(y + ((ob0 + o) * plane + p0 + skip) * B, (pixels - skip) * B, g->act,
               g->act_alpha);
}

/* A tile of pointwise_tile from output block ob0 (weights w), the scaling
 * chosen at compile time. */
#define TILE(BLOCKS, P0, SKIP, PIXELS)                                               \
    (sc ? pointwise_tile(a, x, sc, w, ob0, P0, SKIP, y, res, BLOCKS, PIXELS, 1)     \
        : pointwise_tile(a, x, NULL, w, ob0, P0, SKIP, y, res, BLOCKS, PIXELS, 0))

/* The statement CALL(k, ...) with k = blocks (1 to PW_BLOCKS) a constant:
 * each size its own code, so that the sums stay in registers. */
#if PW_BLOCKS == 4
#define WITH_BLOCKS(blocks, CALL, ...)                                              \
    switch (blocks) {                                                               \
    case 4:                                                                         \
        CALL(4, __VA_ARGS__);                                                       \
        break;                                                                      \
    case 3:                                                                         \
        CALL(3, __VA_ARGS__);                                                       \
        break;                                                                      \
    case 2:                                                                         \
        CALL(2, __VA_ARGS__);                                                       \
        break;                                                                      \
    default:                                                                        \
        CALL(1, __VA_ARGS__);                                                       \
    }
#else
#define WITH_BLOCKS(blocks, CALL, ...)                                              \
    {                                                                               \
        (void)(blocks);                                                             \
        CALL(1, __VA_ARGS__);                                                       \
    }
#endif

/* The `pixels` from p0 (stored from `skip` on) of `blocks` output blocks
 * by CALL(blocks, p0, skip, pixels), every size a constant: a whole tile
 * of PW_PIXELS, else by pairs of pixels of every block at once (one pixel
 * of one block was a single chain of FMAs, bound by their latency:
 * MNASNet's products at 7x7, 8 tiles and a pixel, spent a tenth of their
 * time on that pixel). */
#define BLOCKS_TILE(CALL, blocks, p0, skip, pixels)                                 \
    do {                                                                            \
        if ((pixels) == PW_PIXELS) {                                                \
            WITH_BLOCKS(blocks, CALL, p0, skip, PW_PIXELS)                          \
        } else {                                                                    \
            for (long p_ = (p0); p_ < (p0) + (pixels); p_ += 2)                     \
                if (p_ + 1 < (p0) + (pixels)) {                                     \
                    WITH_BLOCKS(blocks, CALL, p_, 0, 2)                             \
                } else {                                                            \
                    WITH_BLOCKS(blocks, CALL, p_, 0, 1)                             \
                }                                                                   \
        }                                                                           \
    } while (0)

/* Pixels of a product's tile: one of a single output block keeps more,
 * its 6 sums otherwise too few chains to hide the FMA's latency (MNASNet's
 * 32 -> 16 at 112x112: 0.081 ms with 6, 0.072 with 12). */
static inline long tile_pixels(const ccn_nchwc_geometry *g)
{
    return g->out_blocks == 1 ? PW_PIXELS_ONE : PW_PIXELS;
}

static void pointwise_range(void *context, long begin, long end)
{
    const conv_call *a = context;
    const ccn_nchwc_geometry *g = a->g;
    const long plane = g->out_h * g->out_w, depth = g->in_blocks * B;
    const long width = tile_pixels(g), tiles = (plane + width - 1) / width;
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    for (long t = begin; t < end; t++) {
        const long n = t / (tiles * groups), ob0 = t / tiles % groups * PW_BLOCKS;
        long p0 = t % tiles * width, skip = 0;
        if (plane - p0 < width && 2 * (plane - p0) >= width && plane >= width) {
            /* Half a tile or more of the plane's last pixels: a whole tile
             * ending at its end, which stores only these (by pairs, each
             * loads every weight vector: 196 = 32 x 6 + 4 pixels at 14x14;
             * fewer cost less so than a tile). */
            skip = p0 - (plane - width);
            p0 = plane - width;
        }
        const float *x = a->x + n * g->in_blocks * plane * B;
        const float *sc = a->scale ? a->scale + n * g->in_channels : NULL;
        const float *w = a->w + ob0 * depth * B;
        float *y = a->y + n * g->out_blocks * plane * B;
        const float *res = a->residual ? a->residual + n * g->out_blocks * plane * B : NULL;
        const long blocks = g->out_blocks - ob0 < PW_BLOCKS ? g->out_blocks - ob0 : PW_BLOCKS;
        const long pixels = plane - p0 < width ? plane - p0 : width;
        if (pixels == width && width != PW_PIXELS)  /* one output block */
            TILE(1, p0, skip, PW_PIXELS_ONE);
        else
            BLOCKS_TILE(TILE, blocks, p0, skip, pixels);
    }
}

void ccn_nchwc_pointwise(const ccn_nchwc_geometry *g, const float *x, const float *scale,
                         const float *w, const float *bias, const float *residual, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_pointwise, g, x, scale, w, bias, residual, y);
    const long plane = g->out_h * g->out_w;
    const long tiles = (plane + tile_pixels(g) - 1) / tile_pixels(g);
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    conv_call a = {.g = g, .x = x, .scale = scale, .w = w, .bias = bias, .residual = residual,
                   .y = y};
    ccn_parallel_for(g->batch * groups * tiles,
                     g->batch * g->out_blocks * plane * g->in_blocks * B * B, pointwise_range, &a);
}

/* What a dense tile reads for a tap outside the input: zeros. */
static const float zero_block[B];

/* pointwise_tile for a dense KH x KW convolution (any stride and
 * padding), input block cb's share of the sums: started from the bias at
 * the first block, from y's partial sums after it, stored with the
 * epilogue at the last.  The tile's pixels follow the output plane (across
 * rows); each tap reads each pixel's input at its own address, the zero
 * block for one outside the input (a select per pixel and tap against 16
 * x blocks x pixels FMAs), so border pixels need no other path. */
CCN_ALWAYS_INLINE void dense_tile(const conv_call *a, const float *x, const float *w, long ob0,
                                  long p0, long skip, float *y, const float *res, long cb0,
                                  long cb1, int blocks, int pixels)
{
    const ccn_nchwc_geometry *g = a->g;
    const long plane = g->out_h * g->out_w, in_plane = g->in_h * g->in_w * B;
    const long taps = g->kernel_h * g->kernel_w, depth = g->in_blocks * taps * B;
    long ih0[PW_PIXELS], iw0[PW_PIXELS];
    for (int p = 0; p < pixels; p++) {
        ih0[p] = (p0 + p) / g->out_w * g->stride_h - g->pad_top;
        iw0[p] = (p0 + p) % g->out_w * g->stride_w - g->pad_left;
    }
    v16 acc[PW_BLOCKS][PW_PIXELS];
    for (int o = 0; o < blocks; o++) {
        const float *at = y + ((ob0 + o) * plane + p0) * B;
        const v16 start = a->bias ? LOAD(a->bias + (ob0 + o) * B) : (v16){0};
        for (int p = 0; p < pixels; p++)
            acc[o][p] = cb0 ? LOAD(at + p * B) : start;
    }
    for (long cb = cb0; cb < cb1; cb++) {
        const float *xc = x + cb * in_plane;
        const long live = g->in_channels - cb * B < B ? g->in_channels - cb * B : B;
        for (long kh = 0; kh < g->kernel_h; kh++)
            for (long kw = 0; kw < g->kernel_w; kw++) {
                const float *xp[PW_PIXELS];
                for (int p = 0; p < pixels; p++) {
                    const long ih = ih0[p] + kh, iw = iw0[p] + kw;
                    xp[p] = (unsigned long)ih < (unsigned long)g->in_h &&
                            (unsigned long)iw < (unsigned long)g->in_w
                            ? xc + (ih * g->in_w + iw) * B : zero_block;
                }
                const float *wb = w + ((cb * g->kernel_h + kh) * g->kernel_w + kw) * B * B;
                if (taps == 1)  /* a 1x1 reads every block per tile: as pointwise_tile */
                    for (int p = 0; p < pixels; p++)
                        CCN_PREFETCH_AT(xp[p], g->stride_w * pixels * B);
                for (long c = 0; c < live; c++) {
                    v16 wv[PW_BLOCKS];
                    for (int o = 0; o < blocks; o++)
                        wv[o] = LOAD(wb + o * depth * B + c * B);
                    for (int p = 0; p < pixels; p++) {
                        const float xv = xp[p][c];
                        for (int o = 0; o < blocks; o++)
                            acc[o][p] += wv[o] * xv;
                    }
                }
            }
    }
    const int last = cb1 == g->in_blocks;
    CCN_UNROLL(4)
    for (int o = 0; o < blocks; o++) {
        const long at = ((ob0 + o) * plane + p0) * B;
        CCN_UNROLL(12)
        for (int p = 0; p < pixels; p++)
            if (p >= skip && last)
                store(y + at + p * B, &acc[o][p], res ? res + at + p * B : NULL, g->act,
                      g->act_alpha);
            else if (p >= skip)
                STORE(y + at + p * B, acc[o][p]);
    }
    for (int o = 0; o < blocks && last; o++)  /* after the stores, as pointwise_tile */
        finish(y + ((ob0 + o) * plane + p0 + skip) * B, (pixels - skip) * B, g->act,
               g->act_alpha);
}

/* Tiles of a dense convolution's band: a group of output blocks by
 * DENSE_BAND pixel tiles, summed one input block at a time over the whole
 * band, so that the block's weights (16 channels x taps x the group's
 * blocks: 36 KiB for 4 blocks of 3x3) stay in L1 while the band's pixels
 * go by; per tile the partial sums cost a load and a store per vector
 * against 16 x taps FMAs. */
#define DENSE_BAND 16

/* A tile of dense_tile over input blocks [cb, cb1). */
#define DENSE_TILE(BLOCKS, P0, SKIP, PIXELS)                                         \
    dense_tile(a, x, w, ob0, P0, SKIP, y, res, cb, cb1, BLOCKS, PIXELS)

static void dense_range(void *context, long begin, long end)
{
    const conv_call *a = context;
    const ccn_nchwc_geometry *g = a->g;
    const long plane = g->out_h * g->out_w;
    const long depth = g->in_blocks * g->kernel_h * g->kernel_w * B;
    const long tiles = (plane + PW_PIXELS - 1) / PW_PIXELS;
    const long bands = (tiles + DENSE_BAND - 1) / DENSE_BAND;
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    /* Input blocks a tile sums between loading and storing its partial
     * sums: a KxK one block; a 1x1 (a stride-2 downsample) every one, as
     * ccn_nchwc_pointwise (0.85x the time of nine at a time in ResNet-50). */
    const long chunk = g->kernel_h * g->kernel_w > 1 ? 1 : g->in_blocks;
    for (long t = begin; t < end; t++) {
        const long n = t / (bands * groups), ob0 = t / bands % groups * PW_BLOCKS;
        const long band = t % bands * DENSE_BAND;
        const long band_end = band + DENSE_BAND < tiles ? band + DENSE_BAND : tiles;
        const float *x = a->x + n * g->in_blocks * g->in_h * g->in_w * B;
        const float *w = a->w + ob0 * depth * B;
        float *y = a->y + n * g->out_blocks * plane * B;
        const float *res = a->residual ? a->residual + n * g->out_blocks * plane * B : NULL;
        const long blocks = g->out_blocks - ob0 < PW_BLOCKS ? g->out_blocks - ob0 : PW_BLOCKS;
        for (long cb = 0; cb < g->in_blocks; cb += chunk)
            for (long tile = band; tile < band_end; tile++) {
                long p0 = tile * PW_PIXELS, skip = 0;
                if (plane - p0 < PW_PIXELS && 2 * (plane - p0) >= PW_PIXELS &&
                    plane >= PW_PIXELS) {
                    /* Half a tile or more of the plane's last pixels: a whole
                     * tile ending at its end (pointwise_range), storing only
                     * these. */
                    skip = p0 - (plane - PW_PIXELS);
                    p0 = plane - PW_PIXELS;
                }
                const long cb1 = cb + chunk < g->in_blocks ? cb + chunk : g->in_blocks;
                const long pixels = plane - p0 < PW_PIXELS ? plane - p0 : PW_PIXELS;
                BLOCKS_TILE(DENSE_TILE, blocks, p0, skip, pixels);
            }
    }
}

void ccn_nchwc_dense(const ccn_nchwc_geometry *g, const float *x, const float *w,
                     const float *bias, const float *residual, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_dense, g, x, w, bias, residual, y);
    const long plane = g->out_h * g->out_w;
    const long tiles = (plane + PW_PIXELS - 1) / PW_PIXELS;
    const long bands = (tiles + DENSE_BAND - 1) / DENSE_BAND;
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    conv_call a = {.g = g, .x = x, .w = w, .bias = bias, .residual = residual, .y = y};
    ccn_parallel_for(g->batch * groups * bands, g->batch * g->out_blocks * plane * g->in_blocks *
                     g->kernel_h * g->kernel_w * B * B, dense_range, &a);
}

/* Winograd on blocks (Lavin and Gray 2016): a dense 3x3 stride-1
 * convolution's outputs in square tiles, each from the input patch of
 * tile + 2 pixels a side around it, 16 channels a vector: F(2x2, 3x3) or
 * F(4x4, 3x3).  Per tile and input block the patch becomes V = B^T d B; per
 * element xi of the transforms the products M_xi = U_xi V_xi sum the input
 * channels as a 1x1 product does (U, the filters' G g G^T, laid out at emit
 * time); the outputs are A^T M A.  Per output and channel pair, 16 / 4 or
 * 36 / 16 multiply-adds where the dense kernel takes 9.  A piece of work is
 * WG_TILES tiles of one image by PW_BLOCKS output blocks, its transforms on
 * the stack (162 KiB at most with AVX-512). */
#define WG_TILES PW_PIXELS
#define WG_MAX_IN_BLOCKS CCN_NCHWC_WINOGRAD_MAX_IN_BLOCKS
#define WG_MOST_POINTS 36 /* of F(4x4, 3x3)'s 6 x 6 transforms */

typedef struct {
    const ccn_nchwc_geometry *g;
    const float *x, *u, *bias, *residual;
    float *y;
    long tile, tiles_h, tiles_w;
} winograd_call;

/* o = B^T d for one line of tile + 2 values of a patch. */
CCN_ALWAYS_INLINE void winograd_input_line(v16 *o, const v16 *d, int tile)
{
    if (tile == 2) {
        o[0] = d[0] - d[2];
        o[1] = d[1] + d[2];
        o[2] = d[2] - d[1];
        o[3] = d[1] - d[3];
    } else {
        o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
        o[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);
        o[2] = 4.0f * (d[1] - d[2]) + d[4] - d[3];
        o[3] = 2.0f * (d[3] - d[1]) + d[4] - d[2];
        o[4] = 2.0f * (d[1] - d[3]) + d[4] - d[2];
        o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
    }
}

/* o = A^T m for one line of tile + 2 products. */
CCN_ALWAYS_INLINE void winograd_output_line(v16 *o, const v16 *m, int tile)
{
    if (tile == 2) {
        o[0] = m[0] + m[1] + m[2];
        o[1] = m[1] - m[2] - m[3];
    } else {
        const v16 s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
        o[0] = m[0] + s12 + s34;
        o[1] = d12 + 2.0f * d34;
        o[2] = s12 + 4.0f * s34;
        o[3] = d12 + 8.0f * d34 + m[5];
    }
}

/* V[xi][cb][p] (B floats each) for the `count` tiles from tile t0 of one
 * image x; zeros for tiles past `count` (their products are not stored). */
CCN_ALWAYS_INLINE void winograd_inputs(const winograd_call *a, const float *x, long t0,
                                       long count, float *V, int tile)
{
    const ccn_nchwc_geometry *g = a->g;
    const int n = tile + 2;
    const long cbs = g->in_blocks, stride = cbs * WG_TILES * B; /* from xi to xi + 1 */
    for (long p = 0; p < WG_TILES; p++) {
        const long t = t0 + p;
        const long ih0 = t / a->tiles_w * tile - g->pad_top;
        const long iw0 = t % a->tiles_w * tile - g->pad_left;
        for (long cb = 0; cb < cbs; cb++) {
            const float *xc = x + cb * g->in_h * g->in_w * B;
            v16 d[6][6], column[6], line[6];
            for (int r = 0; r < n; r++)
                for (int s = 0; s < n; s++) {
                    const long ih = ih0 + r, iw = iw0 + s;
                    d[r][s] = p < count && (unsigned long)ih < (unsigned long)g->in_h &&
                                      (unsigned long)iw < (unsigned long)g->in_w
                                  ? LOAD(xc + (ih * g->in_w + iw) * B)
                                  : (v16){0};
                }
            v16 bd[6][6]; /* B^T d, column by column */
            for (int s = 0; s < n; s++) {
                for (int r = 0; r < n; r++)
                    column[r] = d[r][s];
                winograd_input_line(line, column, tile);
                for (int r = 0; r < n; r++)
                    bd[r][s] = line[r];
            }
            float *v = V + (cb * WG_TILES + p) * B;
            for (int r = 0; r < n; r++) { /* (B^T d) B, row by row */
                winograd_input_line(line, bd[r], tile);
                for (int s = 0; s < n; s++)
                    STORE(v + (r * n + s) * stride, line[s]);
            }
        }
    }
}

/* Output block ob of tile t as the dense kernel sums it, for a tile
 * whose Winograd outputs are not all finite: the transforms mix the whole
 * input patch, so an infinity or a NaN would reach outputs whose windows do
 * not hold it (and an infinity become a NaN).  Each filter tap's vector of
 * 16 outputs comes back from u (rows of G that pick one tap: g = L u L^T,
 * within rounding). */
static void winograd_exact_tile(const winograd_call *a, const float *x, long t, long ob,
                                float *y, const float *res)
{
    const ccn_nchwc_geometry *g = a->g;
    const int tile = (int)a->tile, n = tile + 2;
    const int rows[3][2] = {{0, 0}, {1, 2}, {n - 1, n - 1}};
    const float weights[2][3][2] = {{{1.0f, 0.0f}, {1.0f, -1.0f}, {1.0f, 0.0f}},
                                    {{4.0f, 0.0f}, {-3.0f, 3.0f}, {1.0f, 0.0f}}};
    const float(*const l)[2] = weights[tile == 4];
    const long plane = g->out_h * g->out_w, depth = g->in_blocks * B;
    const long oh0 = t / a->tiles_w * tile, ow0 = t % a->tiles_w * tile;
    for (int i = 0; i < tile && oh0 + i < g->out_h; i++)
        for (int j = 0; j < tile && ow0 + j < g->out_w; j++) {
            v16 acc = a->bias ? LOAD(a->bias + ob * B) : (v16){0};
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++) {
                    const long ih = oh0 + i + kh - g->pad_top, iw = ow0 + j + kw - g->pad_left;
                    if ((unsigned long)ih >= (unsigned long)g->in_h ||
                        (unsigned long)iw >= (unsigned long)g->in_w)
                        continue;
                    for (long ci = 0; ci < g->in_channels; ci++) {
                        const float xv = x[((ci / B * g->in_h + ih) * g->in_w + iw) * B + ci % B];
                        v16 w = {0};
                        for (int p = 0; p < 2; p++)
                            for (int q = 0; q < 2; q++) {
                                const long xi = rows[kh][p] * n + rows[kw][q];
                                w += l[kh][p] * l[kw][q] *
                                     LOAD(a->u + ((xi * g->out_blocks + ob) * depth + ci) * B);
                            }
                        acc += w * xv;
                    }
                }
            const long at = ob * plane * B + ((oh0 + i) * g->out_w + ow0 + j) * B;
            store(y + at, &acc, res ? res + at : NULL, g->act, g->act_alpha);
            finish(y + at, B, g->act, g->act_alpha);
        }
}

/* M[xi][o][p] = U_xi's blocks ob0 .. ob0 + blocks by V_xi, WG_TILES tiles. */
CCN_ALWAYS_INLINE void winograd_products(const winograd_call *a, const float *V, long ob0,
                                         float *M, int blocks, int points)
{
    const ccn_nchwc_geometry *g = a->g;
    const long cbs = g->in_blocks, depth = cbs * B;
    for (int xi = 0; xi < points; xi++) {
        const float *u = a->u + (xi * g->out_blocks + ob0) * depth * B;
        const float *v = V + xi * cbs * WG_TILES * B;
        v16 acc[PW_BLOCKS][WG_TILES];
        for (int o = 0; o < blocks; o++)
            for (int p = 0; p < WG_TILES; p++)
                acc[o][p] = (v16){0};
        for (long cb = 0; cb < cbs; cb++) {
            const long live = g->in_channels - cb * B < B ? g->in_channels - cb * B : B;
            const float *vb = v + cb * WG_TILES * B, *ub = u + cb * B * B;
            for (long c = 0; c < live; c++) {
                v16 wv[PW_BLOCKS];
                for (int o = 0; o < blocks; o++)
                    wv[o] = LOAD(ub + o * depth * B + c * B);
                for (int p = 0; p < WG_TILES; p++) {
                    const float xv = vb[p * B + c];
                    for (int o = 0; o < blocks; o++)
                        acc[o][p] += wv[o] * xv;
                }
            }
        }
        for (int o = 0; o < blocks; o++)
            for (int p = 0; p < WG_TILES; p++)
                STORE(M + ((xi * PW_BLOCKS + o) * WG_TILES + p) * B, acc[o][p]);
    }
}

/* y's tiles = A^T M A plus the bias, the residual and the activation, for
 * `count` tiles from t0 of one image's blocks ob0 .. ob0 + blocks (x that
 * image's input), by winograd_exact_tile where they are not all finite. */
CCN_ALWAYS_INLINE void winograd_outputs(const winograd_call *a, const float *M, const float *x,
                                        long t0, long count, long ob0, long blocks, float *y,
                                        const float *res, int tile)
{
    const ccn_nchwc_geometry *g = a->g;
    const int n = tile + 2;
    const long plane = g->out_h * g->out_w, step = PW_BLOCKS * WG_TILES * B; /* xi to xi + 1 */
    for (long o = 0; o < blocks; o++) {
        const v16 start = a->bias ? LOAD(a->bias + (ob0 + o) * B) : (v16){0};
        for (long p = 0; p < count; p++) {
            const float *m = M + (o * WG_TILES + p) * B;
            v16 am[4][6], column[6], line[4], out[4][4]; /* A^T M, column by column */
            for (int s = 0; s < n; s++) {
                for (int r = 0; r < n; r++)
                    column[r] = LOAD(m + (r * n + s) * step);
                winograd_output_line(line, column, tile);
                for (int i = 0; i < tile; i++)
                    am[i][s] = line[i];
            }
            iv16 odd = {0}; /* out - out is 0 but for an infinity or a NaN */
            for (int i = 0; i < tile; i++) {
                winograd_output_line(out[i], am[i], tile); /* (A^T M) A */
                for (int j = 0; j < tile; j++)
                    odd |= out[i][j] - out[i][j] != 0.0f;
            }
            int exact = 0;
            for (int lane = 0; lane < B; lane++)
                exact |= odd[lane];
            const long t = t0 + p;
            if (exact) {
                winograd_exact_tile(a, x, t, ob0 + o, y, res);
                continue;
            }
            const long oh0 = t / a->tiles_w * tile, ow0 = t % a->tiles_w * tile;
            for (int i = 0; i < tile && oh0 + i < g->out_h; i++)
                for (int j = 0; j < tile && ow0 + j < g->out_w; j++) {
                    const long at = (ob0 + o) * plane * B + ((oh0 + i) * g->out_w + ow0 + j) * B;
                    const v16 value = start + out[i][j];
                    store(y + at, &value, res ? res + at : NULL, g->act, g->act_alpha);
                    finish(y + at, B, g->act, g->act_alpha);
                }
        }
    }
}

#define WG_PRODUCTS(BLOCKS, V, OB0, M, POINTS) winograd_products(a, V, OB0, M, BLOCKS, POINTS)

/* Pieces [begin, end) of one tile size. */
CCN_ALWAYS_INLINE void winograd_pieces(const winograd_call *a, long begin, long end, int tile)
{
    const ccn_nchwc_geometry *g = a->g;
    const long tiles = a->tiles_h * a->tiles_w, pieces = (tiles + WG_TILES - 1) / WG_TILES;
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    const long out_image = g->out_blocks * g->out_h * g->out_w * B;
    float V[WG_MOST_POINTS * WG_MAX_IN_BLOCKS * WG_TILES * B] __attribute__((aligned(64)));
    float M[WG_MOST_POINTS * PW_BLOCKS * WG_TILES * B] __attribute__((aligned(64)));
    for (long k = begin; k < end; k++) {
        const long n = k / (groups * pieces), ob0 = k / pieces % groups * PW_BLOCKS;
        const long t0 = k % pieces * WG_TILES;
        const long count = tiles - t0 < WG_TILES ? tiles - t0 : WG_TILES;
        const long blocks = g->out_blocks - ob0 < PW_BLOCKS ? g->out_blocks - ob0 : PW_BLOCKS;
        const float *x = a->x + n * g->in_blocks * g->in_h * g->in_w * B;
        winograd_inputs(a, x, t0, count, V, tile);
        WITH_BLOCKS(blocks, WG_PRODUCTS, V, ob0, M, (tile + 2) * (tile + 2))
        winograd_outputs(a, M, x, t0, count, ob0, blocks, a->y + n * out_image,
                         a->residual ? a->residual + n * out_image : NULL, tile);
    }
}

static void winograd_range(void *context, long begin, long end)
{
    const winograd_call *a = context;
    if (a->tile == 4)
        winograd_pieces(a, begin, end, 4);
    else
        winograd_pieces(a, begin, end, 2);
}

void ccn_nchwc_winograd(const ccn_nchwc_geometry *g, long tile, const float *x, const float *u,
                        const float *bias, const float *residual, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_winograd, g, tile, x, u, bias, residual, y);
    const long tiles_h = (g->out_h + tile - 1) / tile, tiles_w = (g->out_w + tile - 1) / tile;
    const long pieces = (tiles_h * tiles_w + WG_TILES - 1) / WG_TILES;
    const long groups = (g->out_blocks + PW_BLOCKS - 1) / PW_BLOCKS;
    winograd_call a = {.g = g, .x = x, .u = u, .bias = bias, .residual = residual, .y = y,
                       .tile = tile, .tiles_h = tiles_h, .tiles_w = tiles_w};
    ccn_parallel_for(g->batch * groups * pieces, g->batch * g->out_blocks * tiles_h * tiles_w *
                     g->in_blocks * (tile + 2) * (tile + 2) * B * B, winograd_range, &a);
}

/* How depthwise_pixels knows a tap's column lies inside the row: it does
 * for every tap (DW_INSIDE), or the tile lies at the left edge (DW_LEFT:
 * from column 0) or the right (DW_RIGHT: to the last, of a row of
 * in_w = out_w * stride) of a row padded by kernel_w / 2, the taps outside
 * known as it compiles (no FMA spent on them), or each tap is checked
 * (DW_CHECKED: a tile's taps outside read zeros). */
enum { DW_INSIDE = 0, DW_LEFT = 1, DW_RIGHT = 2, DW_CHECKED = 4 };

/* Output row oh of one block of one image (x and w that block's, y and
 * res that row's): `pixels` columns from ow0, stored from the tile's pixel
 * `skip` on (another tile stores those before), the taps' columns as
 * `columns` says, their rows kh0 to kh1. */
CCN_ALWAYS_INLINE void depthwise_pixels(const ccn_nchwc_geometry *g, const float *x,
                                        const float *w, const v16 *start, long oh, long ow0,
                                        long skip, float *y, const float *res, int pixels,
                                        int columns, long kernel_w, long stride_w)
{
    const long ih0 = oh * g->stride_h - g->pad_top;
    const long kh0 = ih0 < 0 ? -ih0 : 0;
    const long kh1 = g->in_h - ih0 < g->kernel_h ? g->in_h - ih0 : g->kernel_h;
    const long pad = kernel_w / 2; /* g->pad_left where an edge is known */
    v16 acc[DW_PIXELS];
    for (int p = 0; p < pixels; p++)
        acc[p] = *start;
    for (long kh = kh0; kh < kh1; kh++) {
        const float *row = x + (ih0 + kh) * g->in_w * B;
        for (long kw = 0; kw < kernel_w; kw++) {
            const v16 wv = LOAD(w + (kh * kernel_w + kw) * B);
            for (int p = 0; p < pixels; p++) {
                const long iw = (ow0 + p) * stride_w - g->pad_left + kw;
                const int within =
                    (!(columns & DW_CHECKED) || (unsigned long)iw < (unsigned long)g->in_w) &&
                    (!(columns & DW_LEFT) || p * stride_w - pad + kw >= 0) &&
                    (!(columns & DW_RIGHT) || (p - pixels) * stride_w - pad + kw < 0);
                /* A tile's checked tap outside reads zeros (a select rather
                 * than a branch per tap and pixel); a single column skips it. */
                if (pixels > 1 && (columns & DW_CHECKED))
                    acc[p] += LOAD(within ? row + iw * B : zero_block) * wv;
                else if (within)
                    acc[p] += LOAD(row + iw * B) * wv;
            }
        }
    }
    const long at = ow0 * B;
    CCN_UNROLL(12)
    for (int p = 0; p < pixels; p++)  /* constant indices: acc stays in registers */
        if (p >= skip)
            store(y + at + p * B, &acc[p], res ? res + at + p * B : NULL, g->act,
                  g->act_alpha);
}

/* A row padded by kernel_w / 2 with in_w = out_w * stride_w (PyTorch's
 * depthwise layers at strides 1 and 2) as equal tiles of `pixels`
 * columns, the edges' taps outside known as the tile compiles: where a
 * row had columns one by one at each edge, each a chain of multiply-adds
 * that loads every weight again, or was one checked tile of 8 (7x7
 * planes, 40 multiply-adds per row of 5x5 windows where 29 count). */
CCN_ALWAYS_INLINE void depthwise_same_row(const ccn_nchwc_geometry *g, const float *x,
                                          const float *w, const v16 *start, long oh, float *y,
                                          const float *res, int pixels, long kernel_w,
                                          long stride_w)
{
    const long last = g->out_w - pixels;
    if (last == 0) {
        depthwise_pixels(g, x, w, start, oh, 0, 0, y, res, pixels, DW_LEFT | DW_RIGHT,
                         kernel_w, stride_w);
        return;
    }
    depthwise_pixels(g, x, w, start, oh, 0, 0, y, res, pixels, DW_LEFT, kernel_w, stride_w);
    for (long ow = pixels; ow < last; ow += pixels)
        depthwise_pixels(g, x, w, start, oh, ow, 0, y, res, pixels, DW_INSIDE, kernel_w,
                         stride_w);
    depthwise_pixels(g, x, w, start, oh, last, 0, y, res, pixels, DW_RIGHT, kernel_w, stride_w);
}

/* One output row: the columns whose taps all lie inside by whole tiles,
 * the others one by one; a row of three quarters of a tile's columns to a
 * whole tile's as one tile from before its start, every tap checked.  (One
 * by one, each column reloads every weight: a 7x7 plane's 5x5 depthwise
 * took 1.15x as long so.  Fewer columns, and checked tiles over wider
 * rows' edges, cost more than that.) */
CCN_ALWAYS_INLINE void depthwise_row(const ccn_nchwc_geometry *g, const float *x,
                                     const float *w, const v16 *start, long oh, float *y,
                                     const float *res,
                                     long kernel_w, long stride_w)
{
    if (g->pad_left == kernel_w / 2 && g->in_w == g->out_w * stride_w &&
        kernel_w / 2 < DW_PIXELS) {
        /* (A build's vectors take tiles of DW_PIXELS; AVX-512's 8 take 7.) */
        if (g->out_w % DW_PIXELS == 0) {
            depthwise_same_row(g, x, w, start, oh, y, res, DW_PIXELS, kernel_w, stride_w);
            return;
        }
        if (DW_PIXELS == 8 && g->out_w % 7 == 0) {
            depthwise_same_row(g, x, w, start, oh, y, res, 7, kernel_w, stride_w);
            return;
        }
    }
    if (4 * g->out_w >= 3 * DW_PIXELS && g->out_w <= DW_PIXELS) {
        depthwise_pixels(g, x, w, start, oh, g->out_w - DW_PIXELS, DW_PIXELS - g->out_w, y,
                         res, DW_PIXELS, DW_CHECKED, kernel_w, stride_w);
        return;
    }
    /* Columns [lo, hi) read inside the row at every tap. */
    long lo = (g->pad_left + stride_w - 1) / stride_w;
    long hi = g->in_w + g->pad_left - kernel_w < 0 ? 0
              : (g->in_w + g->pad_left - kernel_w) / stride_w + 1;
    hi = hi < g->out_w ? hi : g->out_w;
    lo = lo < hi ? lo : hi;
    long ow = 0;
    for (; ow < lo; ow++)
        depthwise_pixels(g, x, w, start, oh, ow, 0, y, res, 1, DW_CHECKED, kernel_w, stride_w);
    for (; ow + DW_PIXELS <= hi; ow += DW_PIXELS)
        depthwise_pixels(g, x, w, start, oh, ow, 0, y, res, DW_PIXELS, DW_INSIDE, kernel_w,
                         stride_w);
    if (2 * (hi - ow) >= DW_PIXELS && hi - lo >= DW_PIXELS) {
        /* As pointwise_range's last pixels: half a tile or more costs less
         * as a whole tile than one by one. */
        depthwise_pixels(g, x, w, start, oh, hi - DW_PIXELS, ow - (hi - DW_PIXELS), y, res,
                         DW_PIXELS, DW_INSIDE, kernel_w, stride_w);
        ow = hi;
    }
    for (; ow < hi; ow++)
        depthwise_pixels(g, x, w, start, oh, ow, 0, y, res, 1, DW_INSIDE, kernel_w, stride_w);
    for (; ow < g->out_w; ow++)
        depthwise_pixels(g, x, w, start, oh, ow, 0, y, res, 1, DW_CHECKED, kernel_w, stride_w);
}

/* Output row oh of block cb of one image (x that block's, y and res that
 * row's), with its epilogue: the common windows with constant sizes, the
 * others as they come. */
CCN_ALWAYS_INLINE void depthwise_block_row(const conv_call *a, const float *x, long cb, long oh,
                                           float *y, const float *res)
{
    const ccn_nchwc_geometry *g = a->g;
    const float *w = a->w + cb * g->kernel_h * g->kernel_w * B;
    const v16 start = a->bias ? LOAD(a->bias + cb * B) : (v16){0};
    const long kw = g->kernel_w, sw = g->stride_w;
    if (kw == 3 && sw == 1)
        depthwise_row(g, x, w, &start, oh, y, res, 3, 1);
    else if (kw == 3 && sw == 2)
        depthwise_row(g, x, w, &start, oh, y, res, 3, 2);
    else if (kw == 5 && sw == 1)
        depthwise_row(g, x, w, &start, oh, y, res, 5, 1);
    else if (kw == 5 && sw == 2)
        depthwise_row(g, x, w, &start, oh, y, res, 5, 2);
    else
        depthwise_row(g, x, w, &start, oh, y, res, kw, sw);
    finish(y, g->out_w * B, g->act, g->act_alpha);
}

static void depthwise_range(void *context, long begin, long end)
{
    const conv_call *a = context;
    const ccn_nchwc_geometry *g = a->g;
    const long in_plane = g->in_h * g->in_w * B, out_plane = g->out_h * g->out_w * B;
    for (long t = begin; t < end; t++) {
        const long oh = t % g->out_h, nb = t / g->out_h, row = nb * out_plane + oh * g->out_w * B;
        depthwise_block_row(a, a->x + nb * in_plane, nb % g->out_blocks, oh, a->y + row,
                            a->residual ? a->residual + row : NULL);
    }
}

void ccn_nchwc_depthwise(const ccn_nchwc_geometry *g, const float *x, const float *w,
                         const float *bias, const float *residual, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_depthwise, g, x, w, bias, residual, y);
    const long rows = g->batch * g->out_blocks * g->out_h;
    const long work = rows * g->out_w * g->kernel_h * g->kernel_w * B;
    conv_call a = {.g = g, .x = x, .w = w, .bias = bias, .residual = residual, .y = y};
    ccn_parallel_for(rows, work, depthwise_range, &a);
}

/* v > m ? v : m, lane by lane: one MAXPS where vectors are AVX-512's. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define MAX_LANES(v, m) ((v16)_mm512_max_ps((__m512)(v), (__m512)(m)))
#else
#define MAX_LANES(v, m) SELECT((v) > (m), v, m)
#endif

/* y = the maximum of rows [kh0, kh1) by columns [kw0, kw1) of the window
 * whose top left tap is pixel `at` of plane x (rows in_w pixels apart; it
 * may lie in the padding): exactly (a NaN wins, as in the VM), or by
 * MAX_LANES, adding the taps to *seen.  (Stored here: a returned vector
 * changes the ABI of the builds without AVX-512.) */
CCN_ALWAYS_INLINE void window_max(float *y, const float *x, long at, long in_w, long kh0,
                                  long kh1, long kw0, long kw1, int exact, v16 *seen)
{
    v16 top = (v16){0} - INFINITY, sum = {0};
    for (long kh = kh0; kh < kh1; kh++)
        for (long kw = kw0; kw < kw1; kw++) {
            const v16 v = LOAD(x + (at + kh * in_w + kw) * B);
            if (exact) {
                top = SELECT((v > top) | (v != v), v, top);
            } else {
                top = MAX_LANES(v, top);
                sum += v;
            }
        }
    *seen += sum;
    STORE(y, top);
}

/* *top = the maximum of column c of three rows (r, r + row, r + 2 * row),
 * by MAX_LANES, its taps added to *seen.  (Stored, as window_max.) */
CCN_ALWAYS_INLINE void column_max3(v16 *top, const float *r, long row, long c, v16 *seen)
{
    const v16 a = LOAD(r + c * B), b = LOAD(r + (row + c) * B), d = LOAD(r + (2 * row + c) * B);
    *seen += a + b + d;
    *top = MAX_LANES(MAX_LANES(a, b), d);
}

/* Outputs [ow0, ow1) of a row of 3x3 windows at column stride `stride`
 * (1 or 2, a constant) whose taps all lie inside rows r to r + 2 (r: the
 * top row at the first window's left column), by MAX_LANES: a column's
 * maximum over the three rows is taken once and serves every window that
 * has it (at stride 2, 6 loads and 6 maxima a window where each window by
 * itself takes 9 and 8: SqueezeNet's pooling of 111x111 0.044 -> 0.038 ms
 * in the model). */
CCN_ALWAYS_INLINE void windows_max3(float *y, const float *r, long in_w, long ow0, long ow1,
                                    int stride, v16 *seen)
{
    v16 left, mid, right;
    column_max3(&left, r, in_w, 0, seen);
    if (stride == 2) {
        for (long ow = ow0, c = 0; ow < ow1; ow++, c += 2) {
            column_max3(&mid, r, in_w, c + 1, seen);
            column_max3(&right, r, in_w, c + 2, seen);
            STORE(y + ow * B, MAX_LANES(MAX_LANES(left, mid), right));
            left = right;
        }
    } else {
        column_max3(&mid, r, in_w, 1, seen);
        for (long ow = ow0, c = 0; ow < ow1; ow++, c++) {
            column_max3(&right, r, in_w, c + 2, seen);
            STORE(y + ow * B, MAX_LANES(MAX_LANES(left, mid), right));
            left = mid;
            mid = right;
        }
    }
}

/* Window ow of output row oh (its top input row ih0, its rows kh0 to kh1
 * inside the input) by window_max: a whole 3x3 window with constant
 * bounds. */
CCN_ALWAYS_INLINE void maxpool_window(const ccn_nchwc_geometry *g, const float *x, float *y,
                                      long ih0, long kh0, long kh1, long ow, int exact,
                                      v16 *seen)
{
    const long iw0 = ow * g->stride_w - g->pad_left;
    const long kw0 = iw0 < 0 ? -iw0 : 0;
    const long kw1 = g->in_w - iw0 < g->kernel_w ? g->in_w - iw0 : g->kernel_w;
    const long at = ih0 * g->in_w + iw0;
    if (g->kernel_h == 3 && kh0 == 0 && kh1 == 3 && g->kernel_w == 3 && kw0 == 0 && kw1 == 3)
        window_max(y + ow * B, x, at, g->in_w, 0, 3, 0, 3, exact, seen);
    else
        window_max(y + ow * B, x, at, g->in_w, kh0, kh1, kw0, kw1, exact, seen);
}

/* Output row oh of one block of one image (t = (n * blocks + b) * out_h +
 * oh) of ccn_nchwc_maxpool, 16 channels a vector: first by MAX_LANES,
 * then again exactly only when a tap it read may be NaN (their sum is), as
 * ccn_maxpool2d's rows; 3x3 windows at column stride 1 or 2 inside the
 * input by windows_max3. */
CCN_ALWAYS_INLINE int maxpool_row(const ccn_nchwc_geometry *g, const float *x, float *y, long oh,
                                  int exact)
{
    const long ih0 = oh * g->stride_h - g->pad_top;
    const long kh0 = ih0 < 0 ? -ih0 : 0;
    const long kh1 = g->in_h - ih0 < g->kernel_h ? g->in_h - ih0 : g->kernel_h;
    const long sw = g->stride_w;
    /* Windows [inside, outside) have every column inside the row. */
    long inside = g->out_w, outside = g->out_w;
    if (!exact && g->kernel_h == 3 && kh0 == 0 && kh1 == 3 && g->kernel_w == 3 &&
        (sw == 1 || sw == 2) && g->in_w + g->pad_left >= 3) {
        inside = (g->pad_left + sw - 1) / sw;
        outside = (g->in_w + g->pad_left - 3) / sw + 1;
        outside = outside < g->out_w ? outside : g->out_w;
        inside = inside < outside ? inside : outside;
    }
    v16 seen = {0};
    for (long ow = 0; ow < inside; ow++)
        maxpool_window(g, x, y, ih0, kh0, kh1, ow, exact, &seen);
    if (inside < outside) {
        const float *r = x + (ih0 * g->in_w + inside * sw - g->pad_left) * B;
        if (sw == 1)
            windows_max3(y, r, g->in_w, inside, outside, 1, &seen);
        else
            windows_max3(y, r, g->in_w, inside, outside, 2, &seen);
    }
    for (long ow = outside; ow < g->out_w; ow++)
        maxpool_window(g, x, y, ih0, kh0, kh1, ow, exact, &seen);
    for (int i = 0; i < B; i++)
        if (seen[i] != seen[i])
            return 1;
    return 0;
}

static void maxpool_range(void *context, long begin, long end)
{
    const conv_call *a = context;
    const ccn_nchwc_geometry *g = a->g;
    const long in_plane = g->in_h * g->in_w * B, out_plane = g->out_h * g->out_w * B;
    for (long t = begin; t < end; t++) {
        const long oh = t % g->out_h, nb = t / g->out_h;
        const float *x = a->x + nb * in_plane;
        float *y = a->y + nb * out_plane + oh * g->out_w * B;
        if (maxpool_row(g, x, y, oh, 0))
            maxpool_row(g, x, y, oh, 1);
    }
}

void ccn_nchwc_maxpool(const ccn_nchwc_geometry *g, const float *x, float *y)
{
    CCN_RUN_LEVEL_BUILD(ccn_nchwc_maxpool, g, x, y);
    const long rows = g->batch * g->in_blocks * g->out_h;
    conv_call a = {.g = g, .x = x, .y = y};
    ccn_parallel_for(rows, rows * g->out_w * g->kernel_h * g->kernel_w * B, maxpool_range, &a);
}
