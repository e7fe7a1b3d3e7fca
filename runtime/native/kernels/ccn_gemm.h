/* ccn_gemm.h: the matrix products (GEMM) the other families multiply
 * with, their emit-time operand layouts and epilogue activations. */
#ifndef CCN_GEMM_H
#define CCN_GEMM_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* Activations a product applies as it stores its results (epilogue). */
enum {
    CCN_ACT_NONE, CCN_ACT_RELU, CCN_ACT_LEAKY_RELU, CCN_ACT_SIGMOID, CCN_ACT_TANH,
    CCN_ACT_HARD_SWISH, CCN_ACT_CLIP /* to [0, act_alpha]: ReLU6 */,
    CCN_ACT_SWISH /* v sigmoid(act_alpha v) */,
    CCN_ACT_GELU /* act_alpha 0: the erf form; else the tanh form */
};

/* C[m, n] = beta * bias[m * bias_rs + n * bias_cs] for an M x N C; bias NULL
 * gives zeros.  A broadcast axis of the bias has stride 0. */
void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta);
/* C[M, N] += alpha * A[M, K] * B[K, N]; A is read through strides (so a
 * transposed A costs nothing), B must be row-major K x N. */
void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C);
/* One product of the entry points below, filled field by field (the
 * lowerings write it with designated initialisers: GEMM_GEOMETRY of
 * lowerings/connection.py), so two sizes cannot trade places.  The scale
 * alpha stays an argument: it may be a run-time value (an SGD step's
 * learning rate). */
typedef struct {
    long M, N, K;     /* C is M x N, the sum runs over K */
    long a_rs, a_cs;  /* A[m, k] is A[m * a_rs + k * a_cs] */
    long ldb, ldc;    /* rows of B and of C lie ldb and ldc floats apart */
    int act;          /* then CCN_ACT_* applied to C (the epilogue) */
    float act_alpha;  /* the LeakyRelu slope */
} ccn_gemm_geometry;
/* C += alpha * A B, then the epilogue. */
void ccn_gemm_ex(const ccn_gemm_geometry *g, const float *A, const float *B, float alpha,
                 float *C);
/* ccn_gemm_ex with C = the product rather than C += it: C needs no
 * zeroing first, and is written once rather than read and written. */
void ccn_gemm_set(const ccn_gemm_geometry *g, const float *A, const float *B, float alpha,
                  float *C);
/* C = A B (set) or C += A B for row-major A (rows lda apart), B (ldb)
 * and C (ldc), on the calling thread only: for kernels that split their
 * work between threads themselves. */
void ccn_gemm_one_thread(long M, long N, long K, const float *A, long lda, const float *B,
                         long ldb, float *C, long ldc, int set);
/* x[0:n] = activation act (CCN_ACT_*) of x, in place. */
void ccn_activate(long n, float *x, int act, float act_alpha);
/* The epilogues of a few vector operations (and none), applied to the n
 * floats of c where the kernel calls it; returns 0 for the others, which
 * it leaves to ccn_activate (with n 0: says which act is).  Inlined with a
 * constant n, a tile's row, they run as vector operations on the row just
 * stored, where activate_row was a call per row of every tile: ReLU6 so
 * took a tenth to a quarter of a shallow 1x1 convolution. */
CCN_ALWAYS_INLINE int ccn_activate_simple(long n, float *restrict c, int act, float act_alpha)
{
    switch (act) {
    case CCN_ACT_NONE:
        return 1;
    case CCN_ACT_RELU:
        for (long j = 0; j < n; j++)
            c[j] = c[j] < 0.0f ? 0.0f : c[j];
        return 1;
    case CCN_ACT_LEAKY_RELU:
        for (long j = 0; j < n; j++)
            c[j] = c[j] >= 0.0f ? c[j] : act_alpha * c[j];
        return 1;
    case CCN_ACT_HARD_SWISH:  /* x * clip(x / 6 + 1/2, 0, 1), as the NumPy kernel */
        for (long j = 0; j < n; j++) {
            const float h = c[j] / 6.0f + 0.5f;
            c[j] *= h < 0.0f ? 0.0f : h > 1.0f ? 1.0f : h;
        }
        return 1;
    case CCN_ACT_CLIP:  /* NaN stays NaN, as NumPy's clip leaves it */
        for (long j = 0; j < n; j++)
            c[j] = c[j] < 0.0f ? 0.0f : c[j] > act_alpha ? act_alpha : c[j];
        return 1;
    default:
        return 0;
    }
}

/* x += residual (n floats each), then the activation: a fused residual Add
 * after a convolution whose kernel does not add it as it stores. */
void ccn_add_activate(long n, float *x, const float *residual, int act, float act_alpha);
/* The panel layout of a constant M x K matrix A, packed at emit time
 * (lowerings/connection.py, pack_panels): M rounded up to whole panels of
 * CCN_PANEL_ROWS rows; for each depth slice k0 = 0, 256, ... (kc deep, the
 * last one shorter) and each panel p0 = 0, 24, ..., the kc x 24 block
 * panel[k * 24 + i] = A[p0 + i, k0 + k] (zero past row M) at
 * k0 * ccn_panel_rows(M) + p0 * kc. */
#define CCN_PANEL_ROWS 24
static inline long ccn_panel_rows(long M)
{
    return (M + CCN_PANEL_ROWS - 1) / CCN_PANEL_ROWS * CCN_PANEL_ROWS;
}
/* The strip layout of a constant K x N matrix B, packed at emit time
 * (pack_strips): N rounded up to whole strips of CCN_STRIP_COLS columns;
 * for each depth slice k0 = 0, 256, ... (kc deep) and each strip n0 = 0,
 * 32, ..., the kc x 32 block strip[k * 32 + j] = B[k0 + k, n0 + j] (zero
 * past column N) at k0 * ccn_strip_cols(N) + n0 * kc. */
#define CCN_STRIP_COLS 32
static inline long ccn_strip_cols(long N)
{
    return (N + CCN_STRIP_COLS - 1) / CCN_STRIP_COLS * CCN_STRIP_COLS;
}
/* ccn_gemm_ex for B given in the strip layout (its own: g->ldb is N). */
void ccn_gemm_strips(const ccn_gemm_geometry *g, const float *A, const float *strips,
                     float alpha, float *C);
/* ccn_gemm_strips with C = bias + the product (bias: N floats, each
 * column's, or NULL), C written once: the bias enters at the product's
 * first store, not in a pass over C before it. */
void ccn_gemm_strips_set(const ccn_gemm_geometry *g, const float *A, const float *strips,
                         float alpha, const float *bias, float *C);
/* C[m, n] = act(C[m, n] + alpha * sum_k A[m, k] Bt[n, k]): the product
 * with B given transposed (row-major N x K: g->ldb is K) and A's rows
 * contiguous (g->a_cs is 1), as dot products that read Bt once in order:
 * for few rows of A (a batch-1 layer), where B's reading is the cost. */
void ccn_gemm_bt(const ccn_gemm_geometry *g, const float *A, const float *Bt, float alpha,
                 float *C);
/* The batch of ccn_matmul_batched: t ranges over dims[0..rank), and the
 * matrices of index t lie sum(t[d] * a_strides[d]) floats into A and
 * sum(t[d] * b_strides[d]) into B; a stride of 0 broadcasts. */
typedef struct {
    long rank;
    long dims[CCN_MAX_RANK], a_strides[CCN_MAX_RANK], b_strides[CCN_MAX_RANK];
} ccn_matmul_batch;
/* Batched MatMul: C[t] = act(A[t] B[t]) by ccn_gemm_ex's geometry g for
 * every index t of the batch, the M x N results one after the other in C
 * (row-major: g->ldc is N). */
void ccn_matmul_batched(const ccn_matmul_batch *batch, const ccn_gemm_geometry *g,
                        const float *A, const float *B, float *C);
/* dst[c, r] = src[r, c] for an R x C src. */
void ccn_transpose(long R, long C, const float *src, float *dst);
/* dst[m*dst_row + i*dst_image + s] = src[m*src_row + i*src_image + s] for
 * rows m < rows, images i < nb and s < S: moves images between NCHW
 * tensors and products whose columns are several images side by side. */
void ccn_copy_image_rows(long rows, long nb, long S, const float *src, long src_row,
                         long src_image, float *dst, long dst_row, long dst_image);

/* ccn_gemm_ex (set 0) or ccn_gemm_set (set 1) with A, M x K, given in
 * the panel layout above. */
void ccn_gemm_panels(long M, long N, long K, const float *panels, const float *B, long ldb,
                     float *C, long ldc, int set, int act, float act_alpha);
/* C = bias + residual + the product of ccn_gemm_panels, written once:
 * bias[m] (one per row; NULL: none) and residual[m * ldr + n] (NULL:
 * none; it may be C itself, ldr then ldc) enter at the product's first
 * store, not in a pass over C before it. */
void ccn_gemm_panels_start(long M, long N, long K, const float *panels, const float *B,
                           long ldb, const float *bias, const float *residual, long ldr,
                           float *C, long ldc, int act, float act_alpha);
/* ccn_gemm_panels_start for each of nb images, NCHW, read and written in
 * place (a 1x1 convolution of a batch): C_i = bias + residual_i + A B_i
 * with B_i (K x S, rows S apart) at B + i*b_image, C_i (M x S, rows S
 * apart) at C + i*c_image and residual_i (NULL: none) at residual +
 * i*r_image.  No copies: a product of several images' columns side by
 * side needed them gathered and its result scattered back. */
void ccn_gemm_panels_images(long M, long S, long K, const float *panels, long nb,
                            const float *B, long b_image, const float *bias,
                            const float *residual, long r_image, float *C, long c_image,
                            int act, float act_alpha);
/* dst_i (C x R) = src_i (R x C) transposed for nb matrices, src_i at
 * src + i*src_stride and dst_i at dst + i*dst_stride: one parallel loop over
 * every matrix's rows of 8x8 blocks, as each is small in a late layer. */
void ccn_transpose_batch(long nb, long R, long C, const float *src, long src_stride, float *dst,
                         long dst_stride);
/* The share of an m x n block that the micro-kernel's tiles covering it
 * compute: how well a product of that shape fills them. */
double ccn_gemm_tile_fill(long m, long n);
/* In the build with CCN_GEMM_VARIANTS (the emitted Makefile's default on
 * x86-64): the x86-64 level, 4, 3 or 0, of the products' build this CPU
 * runs, for the loops of other families built for those levels too
 * (ccn_rnn.c's cells). */
int ccn_gemm_level(void);

CCN_END_DECLS
#endif /* CCN_GEMM_H */
