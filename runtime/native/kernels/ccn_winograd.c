/* Winograd family: 3x3 stride-1 convolutions by minimal filtering F(2x2,
 * 3x3) and F(4x4, 3x3) (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2016).  Each 2x2 block (tile) of outputs
 * comes from the 4x4 input patch around it: with the patch transformed, V
 * = B^T d B, and each filter transformed, U = G g G^T, the outputs are A^T
 * (sum over input channels of U . V) A.  The sum is 16 matrix products,
 * one per element of the 4x4 transforms, over the channels: 16
 * multiply-adds per tile and channel pair where im2col's product takes 36.
 * F(4x4, 3x3) takes 4x4 tiles from 6x6 patches: 36 products per 16
 * outputs, and its transforms read and write 2.25 floats per output where
 * F(2x2, 3x3)'s take 4 (its filters come transformed, at emit time).
 *
 * The transforms run along whole rows of tiles, so that their loops are
 * vector operations on contiguous rows: a tile row's patches are tile + 2
 * input rows, and tile j's columns are the input's columns tile * j ..
 * tile * j + tile + 1.
 *
 * A convolution dilated by (dh, dw) is dh * dw undilated ones: output
 * (dh * a + py, dw * b + px) reads only the input's rows py - pad_top + dh
 * * k and columns px - pad_left + dw * k (its phase (py, px)).  The
 * patches gather a phase's rows and columns from the input in place, and
 * the outputs go back to their phase's positions; a row of tiles holds
 * the dw column phases of one row phase side by side, so that an output
 * row is whole when its tile row is done (FCN's and DeepLabV3's dilated
 * layers, 28x28 at dilations 2 and 4, took im2col's product of 9 taps). */
/* Multiply-adds as FMA where the CPU has it (-std=c99 turns GCC's
 * contraction off): the shallow products ran a multiply and an add. */
#pragma GCC optimize("fp-contract=fast")

#include <assert.h>
#include <string.h>

#include "ccn_gemm.h"
#include "ccn_winograd.h"

/* Floats from one of the 16 planes of a transform (U, V, the products) to
 * the next: its size plus CCN_WINOGRAD_SKEW.  Planes a multiple of 4 KiB
 * apart (256 x 256 filters, 64 channels by 256 tiles) put the 16 streams
 * of a transform's loads or stores in the same L1 sets; the filter
 * transform of 256 channels took half of its convolution. */
static long plane(long floats)
{
    return floats + CCN_WINOGRAD_SKEW;
}

/* What the stages of one convolution share: its sizes, its buffers and
 * the block of tile rows in progress.  Each stage is a loop that
 * ccn_parallel_for splits between threads and that ends when every thread
 * is done with it. */
typedef struct {
    /* TH tile rows per image and row phase; TW tiles per tile row: dw
     * phases of TWp. */
    long I, H, W, O, OH, OW, TH, TW, TWp, dh, dw, pad_top, pad_left, ld;
    long row0, rows; /* the block of tile rows */
    const float *x, *w, *gy, *bias;
    int weights, act, tile;
    float act_alpha;
    float *U, *V, *M, *y, *GY, *GYt, *dUt, *gw;
} winograd;

/* U[xi][o][i] (16 planes of O x I, plane(O * I) apart) = element xi of
 * G g G^T for the filter g of output o and input i, from w as `weights`
 * (CCN_WINOGRAD_FILTERS or _ROTATED) says, for o in [begin, end). */
static void transform_filters(void *context, long begin, long end)
{
    const winograd *c = context;
    const long O = c->O, I = c->I;
    const float *w = c->w;
    const int weights = c->weights;
    float *U = c->U;
    for (long o = begin; o < end; o++)
        for (long i = 0; i < I; i++) {
            float g[3][3], t[4][3];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    g[r][s] = weights == CCN_WINOGRAD_ROTATED
                                  ? w[(i * O + o) * 9 + (2 - r) * 3 + (2 - s)]
                                  : w[(o * I + i) * 9 + r * 3 + s];
            for (int s = 0; s < 3; s++) {  /* G g */
                t[0][s] = g[0][s];
                t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
                t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
                t[3][s] = g[2][s];
            }
            const long up = plane(O * I);
            for (int r = 0; r < 4; r++) {  /* (G g) G^T */
                float *u = U + 4 * r * up + o * I + i;
                u[0] = t[r][0];
                u[up] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
                u[2 * up] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
                u[3 * up] = t[r][2];
            }
        }
}

/* d[r * PW + s] = x[y0 + dh * r][x0 + dw * s] (zero outside the image:
 * padding) for the `rows` patch rows PW wide of a row of patches of one
 * channel's image x (H x W). */
static void patch_rows(const winograd *c, const float *x, long y0, long x0, long PW, long rows,
                       float *d)
{
    const long W = c->W, dw = c->dw;
    /* Patch columns [s0, s1) read the image. */
    const long s0 = x0 >= 0 ? 0 : (-x0 + dw - 1) / dw < PW ? (-x0 + dw - 1) / dw : PW;
    const long past = x0 < W ? (W - x0 + dw - 1) / dw : 0;
    const long s1 = past < s0 ? s0 : past < PW ? past : PW;
    for (long r = 0; r < rows; r++, d += PW) {
        const long iy = y0 + c->dh * r;
        if (iy < 0 || iy >= c->H) {
            memset(d, 0, (size_t)PW * sizeof(float));
            continue;
        }
        const float *row = x + iy * W;
        memset(d, 0, (size_t)s0 * sizeof(float));
        if (dw == 1)
            memcpy(d + s0, row + x0 + s0, (size_t)(s1 - s0) * sizeof(float));
        else
            for (long s = s0; s < s1; s++)
                d[s] = row[x0 + dw * s];
        memset(d + s1, 0, (size_t)(PW - s1) * sizeof(float));
    }
}

/* V[xi][j] = element xi of B^T d B for the patch d of tile j of a phase's
 * row of TWp tiles whose patches read one channel's image x from row y0
 * and column x0 (patch_rows); xi's rows of V are plane(I * ld) apart.  The
 * row is computed in whole vectors of CCN_WINOGRAD_LANES tiles (rows of 7
 * tiles ran scalar), so each row of V takes that many floats less one past
 * its TWp (the tiles past the image's edge read zeros). */
static void transform_patch_row(const winograd *c, const float *x, long y0, long x0, float *V)
{
    const long L = CCN_WINOGRAD_LANES, TWL = (c->TWp + L - 1) / L * L, PW = 2 * TWL + 2;
    const long rows_apart = plane(c->I * c->ld);
    float t[4][PW];  /* B^T d for the whole row of patches */
    {
        float d[4][PW];
        patch_rows(c, x, y0, x0, PW, 4, d[0]);
        for (long s = 0; s < PW; s++) {
            t[0][s] = d[0][s] - d[2][s];
            t[1][s] = d[1][s] + d[2][s];
            t[2][s] = d[2][s] - d[1][s];
            t[3][s] = d[1][s] - d[3][s];
        }
    }
    for (long r = 0; r < 4; r++) {
        float *v0 = V + 4 * r * rows_apart, *v1 = v0 + rows_apart, *v2 = v1 + rows_apart,
              *v3 = v2 + rows_apart;
        for (long j = 0; j < TWL; j++) {
            /* Tile j's columns are t[r][2j .. 2j + 3]. */
            const float *q = t[r] + 2 * j;
            v0[j] = q[0] - q[2];
            v1[j] = q[1] + q[2];
            v2[j] = q[2] - q[1];
            v3[j] = q[1] - q[3];
        }
    }
}

/* transform_patch_row for F(4x4, 3x3): 6x6 patches 4 apart, 36 elements
 * xi = 6 r + c of B^T d B, B^T's rows (4, 0, -5, 0, 1, 0), (0, -4, -4, 1,
 * 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0),
 * (0, 4, 0, -5, 0, 1).  The row is computed in whole vectors of
 * CCN_WINOGRAD_LANES tiles, so each row of V takes that many floats less
 * one past its TWp (the tiles past the image's edge read zeros). */
static void transform_patch_row4(const winograd *c, const float *x, long y0, long x0, float *V)
{
    const long L = CCN_WINOGRAD_LANES, TWL = (c->TWp + L - 1) / L * L, PW = 4 * TWL + 2;
    const long rows_apart = plane(c->I * c->ld);
    float t[6][PW];  /* B^T d for the whole row of patches */
    {
        float d[6][PW];
        patch_rows(c, x, y0, x0, PW, 6, d[0]);
        for (long s = 0; s < PW; s++) {
            const float d0 = d[0][s], d1 = d[1][s], d2 = d[2][s], d3 = d[3][s], d4 = d[4][s];
            t[0][s] = 4.0f * d0 - 5.0f * d2 + d4;
            t[1][s] = d3 + d4 - 4.0f * (d1 + d2);
            t[2][s] = 4.0f * (d1 - d2) + d4 - d3;
            t[3][s] = 2.0f * (d3 - d1) + d4 - d2;
            t[4][s] = 2.0f * (d1 - d3) + d4 - d2;
            t[5][s] = 4.0f * d1 - 5.0f * d3 + d[5][s];
        }
    }
    /* Tile j's columns are p0[j], p1[j], p2[j], p3[j], p0[j + 1], p1[j + 1]. */
    float p[4][TWL + 1], *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];
    for (long r = 0; r < 6; r++) {
        for (long j = 0; j < TWL; j++) {
            p0[j] = t[r][4 * j];
            p1[j] = t[r][4 * j + 1];
            p2[j] = t[r][4 * j + 2];
            p3[j] = t[r][4 * j + 3];
        }
        p0[TWL] = t[r][4 * TWL];
        p1[TWL] = t[r][4 * TWL + 1];
        /* Three rows of V per loop: six took GCC past its checks of
         * aliasing, and it did not vectorise. */
        float *v0 = V + 6 * r * rows_apart, *v1 = v0 + rows_apart, *v2 = v1 + rows_apart,
              *v3 = v2 + rows_apart, *v4 = v3 + rows_apart, *v5 = v4 + rows_apart;
        for (long j = 0; j < TWL; j++) {
            v0[j] = 4.0f * p0[j] - 5.0f * p2[j] + p0[j + 1];
            v1[j] = p3[j] + p0[j + 1] - 4.0f * (p1[j] + p2[j]);
            v2[j] = 4.0f * (p1[j] - p2[j]) + p0[j + 1] - p3[j];
        }
        for (long j = 0; j < TWL; j++) {
            v3[j] = 2.0f * (p3[j] - p1[j]) + p0[j + 1] - p2[j];
            v4[j] = 2.0f * (p1[j] - p3[j]) + p0[j + 1] - p2[j];
            v5[j] = 4.0f * p1[j] - 5.0f * p3[j] + p1[j + 1];
        }
    }
}

/* V[xi][i][t] (rows ld apart, planes plane(I * ld) apart) for the tiles of
 * the block's tile rows, of the N x dh x TH rows of TW tiles over images x
 * (N x I x H x W, padded), for channels i in [begin, end): a channel's rows
 * and phases in order, so that each overwrites what the vectors wrote past
 * the one before. */
static void transform_patches(void *context, long begin, long end)
{
    const winograd *c = context;
    const long I = c->I, TH = c->TH, TW = c->TW, ld = c->ld, dh = c->dh;
    for (long i = begin; i < end; i++)
        for (long q = 0; q < c->rows; q++) {
            const long row = c->row0 + q, n = row / (dh * TH), py = row / TH % dh;
            const long y0 = dh * c->tile * (row % TH) + py - c->pad_top;
            for (long px = 0; px < c->dw; px++)
                (c->tile == 4 ? transform_patch_row4 : transform_patch_row)(
                    c, c->x + (n * I + i) * c->H * c->W, y0, px - c->pad_left,
                    c->V + i * ld + q * TW + px * c->TWp);
        }
}

/* The `cols` outputs of one of a phase's rows from out, dw apart in y. */
static void store_row(const float *out, long cols, long dw, float *y)
{
    if (dw == 1)
        memcpy(y, out, (size_t)cols * sizeof(float));
    else
        for (long j = 0; j < cols; j++)
            y[dw * j] = out[j];
}

/* A phase's output rows y0 and y0 + 1 (those below its `rows`, `cols`
 * wide; row r at y + r * dh * OW) of one channel from the products m[xi][j]
 * (rows plane(O * ld) apart) of a row of TWp tiles: A^T m A, plus bias; in
 * whole vectors of CCN_WINOGRAD_LANES tiles (so m's rows are read that
 * many floats less one past TWp). */
static void transform_output_row(const winograd *c, long y0, long rows, long cols,
                                 const float *m, float bias, float *y)
{
    const long L = CCN_WINOGRAD_LANES, TWL = (c->TWp + L - 1) / L * L;
    const long rows_apart = plane(c->O * c->ld);
    for (long a = 0; a < 2 && y0 + a < rows; a++) {
        /* Row a of A^T m: element c of tile j in r[c][j]. */
        float r[4][TWL];
        for (long c = 0; c < 4; c++) {
            const float *m0 = m + c * rows_apart, *m1 = m0 + 4 * rows_apart,
                        *m2 = m1 + 4 * rows_apart, *m3 = m2 + 4 * rows_apart;
            if (a == 0)
                for (long j = 0; j < TWL; j++)
                    r[c][j] = m0[j] + m1[j] + m2[j];
            else
                for (long j = 0; j < TWL; j++)
                    r[c][j] = m1[j] - m2[j] - m3[j];
        }
        float out[2 * TWL];  /* the row, past OW too */
        for (long j = 0; j < TWL; j++) {
            out[2 * j] = bias + r[0][j] + r[1][j] + r[2][j];
            out[2 * j + 1] = bias + r[1][j] - r[2][j] - r[3][j];
        }
        ccn_activate_simple(cols, out, c->act, c->act_alpha);
        store_row(out, cols, c->dw, y + (y0 + a) * c->dh * c->OW);
    }
}

/* transform_output_row for F(4x4, 3x3): output rows y0 .. y0 + 3, A^T's
 * rows (1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0,
 * 1, -1, 8, -8, 1) over the 36 products of each tile, in whole vectors of
 * CCN_WINOGRAD_LANES tiles (so m's rows are read that many floats less one
 * past TWp). */
static void transform_output_row4(const winograd *c, long y0, long rows, long cols,
                                  const float *m, float bias, float *y)
{
    const long L = CCN_WINOGRAD_LANES, TWL = (c->TWp + L - 1) / L * L;
    const long rows_apart = plane(c->O * c->ld);
    float r[4][6][TWL];  /* element c of row a of A^T m for tile j: r[a][c][j] */
    for (long c = 0; c < 6; c++) {
        const float *m0 = m + c * rows_apart, *m1 = m0 + 6 * rows_apart,
                    *m2 = m1 + 6 * rows_apart, *m3 = m2 + 6 * rows_apart,
                    *m4 = m3 + 6 * rows_apart, *m5 = m4 + 6 * rows_apart;
        for (long j = 0; j < TWL; j++) {
            const float s12 = m1[j] + m2[j], d12 = m1[j] - m2[j];
            const float s34 = m3[j] + m4[j], d34 = m3[j] - m4[j];
            r[0][c][j] = m0[j] + s12 + s34;
            r[1][c][j] = d12 + 2.0f * d34;
            r[2][c][j] = s12 + 4.0f * s34;
            r[3][c][j] = d12 + 8.0f * d34 + m5[j];
        }
    }
    for (long a = 0; a < 4 && y0 + a < rows; a++) {
        const float(*q)[TWL] = r[a];
        float out[4 * TWL];  /* the row, past OW too */
        for (long j = 0; j < TWL; j++) {
            const float s12 = q[1][j] + q[2][j], d12 = q[1][j] - q[2][j];
            const float s34 = q[3][j] + q[4][j], d34 = q[3][j] - q[4][j];
            out[4 * j] = bias + q[0][j] + s12 + s34;
            out[4 * j + 1] = bias + d12 + 2.0f * d34;
            out[4 * j + 2] = bias + s12 + 4.0f * s34;
            out[4 * j + 3] = bias + d12 + 8.0f * d34 + q[5][j];
        }
        ccn_activate_simple(cols, out, c->act, c->act_alpha);
        store_row(out, cols, c->dw, y + (y0 + a) * c->dh * c->OW);
    }
}

/* M[xi] = U[xi] V[xi] for the block (O x rows * TW), xi in [begin, end).
 * U is w itself, in panels, when the filters come transformed (the
 * product, called from a task of the pool, runs on this thread alone). */
static void multiply_planes(void *context, long begin, long end)
{
    const winograd *c = context;
    const long vp = plane(c->I * c->ld), mp = plane(c->O * c->ld);
    for (long xi = begin; xi < end; xi++) {
        if (c->U == NULL)
            ccn_gemm_panels(c->O, c->rows * c->TW, c->I,
                            c->w + xi * plane(ccn_panel_rows(c->O) * c->I), c->V + xi * vp,
                            c->ld, c->M + xi * mp, c->ld, 1, CCN_ACT_NONE, 0.0f);
        else
            ccn_gemm_one_thread(c->O, c->rows * c->TW, c->I, c->U + xi * plane(c->O * c->I),
                                c->I, c->V + xi * vp, c->ld, c->M + xi * mp, c->ld, 1);
    }
}

/* Output tile row q of the block, channel o, from M: every column phase
 * of the row, then the activation over its output rows, whole now. */
static void transform_output_pair(const winograd *c, long q, long o)
{
    const long O = c->O, TH = c->TH, OH = c->OH, OW = c->OW, m = c->tile, dh = c->dh, dw = c->dw;
    const long row = c->row0 + q, n = row / (dh * TH), py = row / TH % dh;
    const long y0 = m * (row % TH), rows = (OH - py + dh - 1) / dh;
    float *y = c->y + (n * O + o) * OH * OW + py * OW;
    for (long px = 0; px < dw; px++)
        (m == 4 ? transform_output_row4 : transform_output_row)(
            c, y0, rows, (OW - px + dw - 1) / dw, c->M + o * c->ld + q * c->TW + px * c->TWp,
            c->bias ? c->bias[o] : 0.0f, y + px);
    /* The activations ccn_activate_simple left (the rows' stores applied
     * the others). */
    for (long a = y0; a < y0 + m && a < rows && !ccn_activate_simple(0, NULL, c->act, 0.0f); a++)
        ccn_activate(OW, y + a * dh * OW, c->act, c->act_alpha);
}

/* The outputs of the block's (tile row, output channel) pairs [begin,
 * end) from M. */
static void transform_outputs(void *context, long begin, long end)
{
    const winograd *c = context;
    for (long p = begin; p < end; p++)
        transform_output_pair(c, p / c->O, p % c->O);
}

/* The shallow products' vectors and output channels at a time: 2 x 8
 * accumulators in the 32 registers of AVX-512 (each of V's vectors read
 * from L2 serves 8 channels), 2 x 4 in the 16 of AVX2. */
#ifdef __AVX512F__
#define SHALLOW_VL 16
#define SHALLOW_OB 8
#else
#define SHALLOW_VL 8
#define SHALLOW_OB 4
#endif
typedef float shallow_vec __attribute__((vector_size(SHALLOW_VL * sizeof(float))));
/* Most input channels of shallow products: the panels' depth (ccn_gemm.h),
 * so that one slice holds a row of transformed filters. */
#define SHALLOW_MAX_I 256
/* Blocks of SHALLOW_OB output channels whose products read each plane's V
 * in turn: against one, 16 -> 64 channels at 55x55 and 32 -> 128 at 27x27
 * 0.93x the time (4: about as 2, 8: 0.97x). */
#define SHALLOW_GROUP 2

/* m[r * ldm + t] = sum over i < I of u[r * u_o + i * u_i] v[i * ldv + t]
 * for rows r < R (at most SHALLOW_OB) and tiles t < count, rounded up to
 * 2 * SHALLOW_VL (m's and v's rows have that much slack): the R rows'
 * 2 * R accumulators stay in registers over the whole depth, and m is
 * written once. */
CCN_ALWAYS_INLINE void shallow_product(long R, long I, const float *u, long u_o, long u_i,
                                       const float *v, long ldv, long count, float *m, long ldm)
{
    for (long t = 0; t < count; t += 2 * SHALLOW_VL) {
        shallow_vec acc[SHALLOW_OB][2] = {{{0}}};
        for (long i = 0; i < I; i++) {
            shallow_vec v0, v1;
            memcpy(&v0, v + i * ldv + t, sizeof v0);
            memcpy(&v1, v + i * ldv + t + SHALLOW_VL, sizeof v1);
            /* The next chunk's row i (rows ld apart: the hardware did not
             * fetch them ahead; 0.94x and 0.87x the time at 55x55, 27x27). */
            __builtin_prefetch(v + i * ldv + t + 2 * SHALLOW_VL);
            __builtin_prefetch(v + i * ldv + t + 3 * SHALLOW_VL);
            for (long r = 0; r < R; r++) {
                const float s = u[r * u_o + i * u_i];
                acc[r][0] += s * v0;
                acc[r][1] += s * v1;
            }
        }
        for (long r = 0; r < R; r++) {
            memcpy(m + r * ldm + t, &acc[r][0], sizeof acc[r][0]);
            memcpy(m + r * ldm + t + SHALLOW_VL, &acc[r][1], sizeof acc[r][1]);
        }
    }
}

/* For blocks [begin, end) of SHALLOW_OB output channels, SHALLOW_GROUP
 * blocks at a time: their rows of M, plane by plane (each plane's V read
 * from L2 once for the group), by shallow_product, then their outputs
 * (transform_output_pair) while those rows are still in cache: for
 * shallow inputs, whose products through ccn_gemm_panels were mostly the
 * products' overhead and M's traffic (SqueezeNet's 16 -> 64 channels at
 * 55x55, F(4x4, 3x3)). */
static void multiply_transform_outputs(void *context, long begin, long end)
{
    const winograd *c = context;
    const long O = c->O, I = c->I, ld = c->ld, count = c->rows * c->TW;
    const long planes = (c->tile + 2) * (c->tile + 2);
    const long vp = plane(I * ld), mp = plane(O * ld);
    /* U[xi]'s rows o0 .. o0 + R at input i: in panels (one panel holds all
     * R; at most SHALLOW_MAX_I channels deep: one slice), or O x I as
     * transform_filters writes them. */
    const long u_o = c->U == NULL ? 1 : I, u_i = c->U == NULL ? CCN_PANEL_ROWS : 1;
    for (long g = begin; g < end; g += SHALLOW_GROUP) {
        const long o_end = (g + SHALLOW_GROUP < end ? g + SHALLOW_GROUP : end) * SHALLOW_OB;
        for (long xi = 0; xi < planes; xi++)
            for (long o0 = g * SHALLOW_OB; o0 < o_end && o0 < O; o0 += SHALLOW_OB) {
                const long R = O - o0 < SHALLOW_OB ? O - o0 : SHALLOW_OB;
                const float *u = c->U == NULL
                                     ? c->w + xi * plane(ccn_panel_rows(O) * I) +
                                           o0 / CCN_PANEL_ROWS * CCN_PANEL_ROWS * I +
                                           o0 % CCN_PANEL_ROWS
                                     : c->U + xi * plane(O * I) + o0 * I;
                const float *v = c->V + xi * vp;
                float *m = c->M + xi * mp + o0 * ld;
                if (R == SHALLOW_OB)
                    shallow_product(SHALLOW_OB, I, u, u_o, u_i, v, ld, count, m, ld);
                else
                    shallow_product(R, I, u, u_o, u_i, v, ld, count, m, ld);
            }
        for (long q = 0; q < c->rows; q++)
            for (long o = g * SHALLOW_OB; o < o_end && o < O; o++)
                transform_output_pair(c, q, o);
    }
}

/* The fields of geometry g and plan p as the locals the loops below use:
 * TH tile rows per image and row phase (the first phase, the tallest),
 * TWp tiles per column phase (the first), TW per tile row. */
#define CCN_WINOGRAD_LOCALS(g, p)                                                     \
    const long N = (g)->batch, I = (g)->in_channels, H = (g)->in_h, W = (g)->in_w;   \
    const long O = (g)->out_channels, OH = (g)->out_h, OW = (g)->out_w;              \
    const long pad_top = (g)->pad_top, pad_left = (g)->pad_left, tiles = (p)->tiles; \
    const long dh = (g)->dil_h, dw = (g)->dil_w, m = (p)->tile;                      \
    const long TH = ((OH + dh - 1) / dh + m - 1) / m;                                 \
    const long TWp = ((OW + dw - 1) / dw + m - 1) / m, TW = dw * TWp;                \
    assert((g)->kernel_h == 3 && (g)->kernel_w == 3 && (g)->group == 1 &&           \
           (g)->stride_h == 1 && (g)->stride_w == 1 && dh >= 1 && dw >= 1 &&        \
           tiles > 0 && tiles % TW == 0)

#ifdef CCN_GEMM_VARIANTS
/* The default build also compiles this file for x86-64-v3 and -v4, its
 * functions renamed (render.LEVEL_FAMILIES: the transforms in vectors of
 * that level), and runs the products' level (ccn_common.h). */
typedef void winograd_fn(const ccn_conv_geometry *, const ccn_winograd_plan *, const float *,
                         const float *, const float *, float *, float *);
typedef void winograd_grad_fn(const ccn_conv_geometry *, const ccn_winograd_plan *,
                              const float *, const float *, float *, float *);
winograd_fn ccn_conv2d_winograd_v3, ccn_conv2d_winograd_v4;
winograd_grad_fn ccn_conv2d_grad_filter_winograd_v3, ccn_conv2d_grad_filter_winograd_v4;
#endif

/* Work units (ccn_threads.h) per element a block's transforms write and
 * per product a shallow block computes: their element counts alone
 * said a block of SqueezeNet's 16 -> 64 at 55x55 (F(4x4), 56 tiles) was
 * just below CCN_PARALLEL_WORK, so it ran on one thread, where it took
 * about 70 us (at batch 32 two threads 1.0x one thread's time, 1.44x
 * counted so). */
#define BLOCK_COST 4
/* The most floats of a block's transformed inputs (V) whose transforms
 * split between the threads, half of Zen 5's 1 MiB L2: every thread's
 * products read all of V, and a larger one split between two cores went
 * back and forth (ResNet-50's 64 -> 64 at 56x56, 811 KiB a block, batch
 * 32: two threads 0.95x one thread's speed on that layer split, 1.33x
 * not; SqueezeNet's 16 -> 64 at 55x55, 203 KiB: 1.44x split, 1.26x not). */
#define SHARED_PATCH_FLOATS (1L << 17)

void ccn_conv2d_winograd(const ccn_conv_geometry *geometry, const ccn_winograd_plan *plan,
                         const float *x, const float *w, const float *bias, float *y,
                         float *scratch)
{
    CCN_RUN_LEVEL_BUILD(ccn_conv2d_winograd, geometry, plan, x, w, bias, y, scratch);
    CCN_WINOGRAD_LOCALS(geometry, plan);
    const int weights = plan->weights, act = plan->act, tile = plan->tile;
    const int shallow = plan->shallow;
    const float act_alpha = plan->act_alpha;
    /* Rows of V and M have CCN_WINOGRAD_SLACK floats of slack. */
    const long tile_rows = N * dh * TH, block_rows = tiles / TW;
    const long ld = tiles + CCN_WINOGRAD_SLACK(shallow);
    const long up = plane(O * I), vp = plane(I * ld), planes = (tile + 2) * (tile + 2);
    /* The filters' transforms, unless they come transformed, then V and M. */
    const int transformed = weights == CCN_WINOGRAD_TRANSFORMED;
    assert(tile == 2 || (tile == 4 && transformed));
    assert(!shallow || (I <= SHALLOW_MAX_I && 2 * SHALLOW_VL <= CCN_WINOGRAD_SHALLOW_CHUNK));
    float *V = transformed ? scratch : scratch + 16 * up, *M = V + planes * vp;
    winograd c = {.I = I, .H = H, .W = W, .O = O, .OH = OH, .OW = OW, .TH = TH, .TW = TW,
                  .TWp = TWp, .dh = dh, .dw = dw, .pad_top = pad_top, .pad_left = pad_left,
                  .ld = ld, .x = x, .w = w,
                  .bias = bias, .weights = weights, .act = act, .act_alpha = act_alpha,
                  .tile = tile, .U = transformed ? NULL : scratch, .V = V, .M = M, .y = y};
    (void)N;
    /* Each stage's work: the 16 elements it writes per filter or tile and
     * channel, or its products' multiply-adds, of which CCN_MACS_PER_WORK
     * make one element's work. */
    if (!transformed)
        ccn_parallel_for(O, 16 * O * I, transform_filters, &c);
    const long patch_cost = planes * vp <= SHARED_PATCH_FLOATS ? BLOCK_COST : 1;
    for (c.row0 = 0; c.row0 < tile_rows; c.row0 += block_rows) {
        c.rows = block_rows < tile_rows - c.row0 ? block_rows : tile_rows - c.row0;
        const long tiles_now = c.rows * TW;
        ccn_parallel_for(I, patch_cost * planes * tiles_now * I, transform_patches, &c);
        if (shallow) {
            ccn_parallel_for((O + SHALLOW_OB - 1) / SHALLOW_OB,
                             BLOCK_COST * planes * O * (I / CCN_MACS_PER_WORK + 1) * tiles_now,
                             multiply_transform_outputs, &c);
            continue;
        }
        ccn_parallel_for(planes, planes * O * I * tiles_now / CCN_MACS_PER_WORK,
                         multiply_planes, &c);
        ccn_parallel_for(c.rows * O, BLOCK_COST * planes * tiles_now * O, transform_outputs, &c);
    }
}

/* GY[xi][o][j] (xi's planes plane_apart apart) = element xi of A g A^T
 * for the 2x2 gradient g of tile j of a row of TW tiles whose outputs start
 * at row y0 of one output channel's gradient gy (OH x OW; outputs past its
 * edges have none). */
static void transform_gradient_row(long OH, long OW, long TW, long y0, const float *gy,
                                   float *GY, long plane_apart)
{
    float g[2][2][TW]; /* g[row][column of the tile][j] */
    for (long r = 0; r < 2; r++) {
        const float *row = gy + (y0 + r) * OW;
        const int inside = y0 + r < OH;
        for (long j = 0; j < TW; j++) {
            g[r][0][j] = inside ? row[2 * j] : 0.0f;
            g[r][1][j] = inside && 2 * j + 1 < OW ? row[2 * j + 1] : 0.0f;
        }
    }
    for (long r = 0; r < 4; r++) {
        /* Row r of A g, one column pair per tile, then times A^T. */
        float q[2][TW];
        for (long c = 0; c < 2; c++)
            for (long j = 0; j < TW; j++)
                q[c][j] = r == 0 ? g[0][c][j]
                        : r == 1 ? g[0][c][j] + g[1][c][j]
                        : r == 2 ? g[0][c][j] - g[1][c][j]
                                 : -g[1][c][j];
        float *g0 = GY + 4 * r * plane_apart, *g1 = g0 + plane_apart, *g2 = g1 + plane_apart,
              *g3 = g2 + plane_apart;
        for (long j = 0; j < TW; j++) {
            g0[j] = q[0][j];
            g1[j] = q[0][j] + q[1][j];
            g2[j] = q[0][j] - q[1][j];
            g3[j] = -q[1][j];
        }
    }
}

/* gw[o][i] (3x3) = G^T dU G for dU[xi] at dUt[xi][i][o] (planes
 * plane(I * O) apart), for o in [begin, end). */
static void transform_filter_gradients(void *context, long begin, long end)
{
    const winograd *c = context;
    const long O = c->O, I = c->I;
    const float *dUt = c->dUt;
    float *gw = c->gw;
    for (long o = begin; o < end; o++)
        for (long i = 0; i < I; i++) {
            float u[4][4], t[3][4];
            for (int xi = 0; xi < 16; xi++)
                u[xi / 4][xi % 4] = dUt[xi * plane(I * O) + i * O + o];
            for (int c = 0; c < 4; c++) {  /* G^T dU */
                t[0][c] = u[0][c] + 0.5f * (u[1][c] + u[2][c]);
                t[1][c] = 0.5f * (u[1][c] - u[2][c]);
                t[2][c] = 0.5f * (u[1][c] + u[2][c]) + u[3][c];
            }
            float *g = gw + (o * I + i) * 9;
            for (int r = 0; r < 3; r++) {  /* (G^T dU) G */
                g[r * 3] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
                g[r * 3 + 1] = 0.5f * (t[r][1] - t[r][2]);
                g[r * 3 + 2] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
            }
        }
}

/* GY[xi] (O x rows * TW, transposed below for the product) for the
 * block's (tile row, output channel) pairs [begin, end). */
static void transform_gradients(void *context, long begin, long end)
{
    const winograd *c = context;
    const long O = c->O, TH = c->TH, TW = c->TW, OH = c->OH, OW = c->OW, count = c->rows * TW;
    for (long p = begin; p < end; p++) {
        const long row = c->row0 + p / O, o = p % O, n = row / TH, ty = row % TH;
        transform_gradient_row(OH, OW, TW, 2 * ty, c->gy + (n * O + o) * OH * OW,
                               c->GY + o * count + (p / O) * TW, plane(O * c->ld));
    }
}

/* dU^T[xi] (I x O) += V[xi] GY[xi]^T over the block's tiles (= for the
 * first block), xi in [begin, end). */
static void multiply_gradient_planes(void *context, long begin, long end)
{
    const winograd *c = context;
    const long O = c->O, I = c->I, count = c->rows * c->TW;
    const long up = plane(I * O), vp = plane(I * c->ld), gp = plane(O * c->ld);
    for (long xi = begin; xi < end; xi++) {
        ccn_transpose(O, count, c->GY + xi * gp, c->GYt + xi * gp);
        ccn_gemm_one_thread(I, O, count, c->V + xi * vp, c->ld, c->GYt + xi * gp, O,
                            c->dUt + xi * up, O, c->row0 == 0);
    }
}

void ccn_conv2d_grad_filter_winograd(const ccn_conv_geometry *geometry,
                                     const ccn_winograd_plan *plan, const float *x,
                                     const float *gy, float *gw, float *scratch)
{
    CCN_RUN_LEVEL_BUILD(ccn_conv2d_grad_filter_winograd, geometry, plan, x, gy, gw, scratch);
    CCN_WINOGRAD_LOCALS(geometry, plan);
    assert(m == 2 && dh == 1 && dw == 1);
    /* Rows of V have CCN_WINOGRAD_LANES floats of slack. */
    const long tile_rows = N * TH, block_rows = tiles / TW, ld = tiles + CCN_WINOGRAD_LANES;
    const long up = plane(I * O), vp = plane(I * ld), gp = plane(O * ld);
    float *dUt = scratch, *V = dUt + 16 * up, *GY = V + 16 * vp, *GYt = GY + 16 * gp;
    if (tile_rows == 0)
        memset(dUt, 0, (size_t)(16 * up) * sizeof(float));
    winograd c = {.I = I, .H = H, .W = W, .O = O, .OH = OH, .OW = OW, .TH = TH, .TW = TW,
                  .TWp = TW, .dh = 1, .dw = 1, .pad_top = pad_top, .pad_left = pad_left,
                  .ld = ld, .x = x, .gy = gy,
                  .tile = 2, .V = V, .GY = GY, .GYt = GYt, .dUt = dUt, .gw = gw};
    for (c.row0 = 0; c.row0 < tile_rows; c.row0 += block_rows) {
        c.rows = block_rows < tile_rows - c.row0 ? block_rows : tile_rows - c.row0;
        const long count = c.rows * TW;
        ccn_parallel_for(I, 16 * count * I, transform_patches, &c);
        ccn_parallel_for(c.rows * O, 16 * count * O, transform_gradients, &c);
        ccn_parallel_for(16, 16 * O * I * count / CCN_MACS_PER_WORK, multiply_gradient_planes,
                         &c);
    }
    ccn_parallel_for(O, 16 * O * I, transform_filter_gradients, &c);
}
