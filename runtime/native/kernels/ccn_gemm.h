/* ccn_gemm.h: the matrix products (GEMM) the other families multiply
 * with, their emit-time operand layouts and epilogue activations. */
#ifndef CCN_GEMM_H
#define CCN_GEMM_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* Activations a product applies as it stores its results (epilogue). */
enum { CCN_ACT_NONE, CCN_ACT_RELU, CCN_ACT_LEAKY_RELU, CCN_ACT_SIGMOID, CCN_ACT_TANH };

/* C[m, n] = beta * bias[m * bias_rs + n * bias_cs] for an M x N C; bias NULL
 * gives zeros.  A broadcast axis of the bias has stride 0. */
void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta);
/* C[M, N] += alpha * A[M, K] * B[K, N]; A is read through strides (so a
 * transposed A costs nothing), B must be row-major K x N. */
void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C);
/* ccn_gemm with row strides ldb of B and ldc of C, then activation act
 * (CCN_ACT_*, act_alpha the LeakyRelu slope) applied to C. */
void ccn_gemm_ex(long M, long N, long K, const float *A, long a_rs, long a_cs,
                 const float *B, long ldb, float alpha, float *C, long ldc, int act,
                 float act_alpha);
/* ccn_gemm_ex with C = the product rather than C += it: C needs no
 * zeroing first, and is written once rather than read and written. */
void ccn_gemm_set(long M, long N, long K, const float *A, long a_rs, long a_cs,
                  const float *B, long ldb, float alpha, float *C, long ldc, int act,
                  float act_alpha);
/* C = A B (set) or C += A B for row-major A (rows lda apart), B (ldb)
 * and C (ldc), on the calling thread only: for kernels that split their
 * work between threads themselves. */
void ccn_gemm_one_thread(long M, long N, long K, const float *A, long lda, const float *B,
                         long ldb, float *C, long ldc, int set);
/* x[0:n] = activation act (CCN_ACT_*) of x, in place. */
void ccn_activate(long n, float *x, int act, float act_alpha);
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
/* ccn_gemm_ex for B given in the strip layout (C's rows ldc apart). */
void ccn_gemm_strips(long M, long N, long K, const float *A, long a_rs, long a_cs,
                     const float *strips, float alpha, float *C, long ldc, int act,
                     float act_alpha);
/* C[m, n] = act(C[m, n] + alpha * sum_k A[m, k] Bt[n, k]): the product
 * with B given transposed (row-major N x K, A's rows a_rs apart and
 * contiguous), as dot products that read Bt once in order: for few rows
 * of A (a batch-1 layer), where B's reading is the cost. */
void ccn_gemm_bt(long M, long N, long K, const float *A, long a_rs, const float *Bt,
                 float alpha, float *C, long ldc, int act, float act_alpha);
/* Batched MatMul: C[t] = act(A[t] B[t]) for every index t of the batch
 * dims[0..rank) (C row-major over them), with A[t] a row-major M x K
 * matrix at sum(t[d] * a_strides[d]) floats into A and B[t] a K x N one at
 * sum(t[d] * b_strides[d]) into B; a stride of 0 broadcasts. */
void ccn_matmul_batched(long rank, const long *dims, const long *a_strides,
                        const long *b_strides, long M, long N, long K, const float *A,
                        const float *B, float *C, int act, float act_alpha);
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
/* dst_i (C x R) = src_i (R x C) transposed for nb matrices, src_i at
 * src + i*src_stride and dst_i at dst + i*dst_stride: one parallel loop over
 * every matrix's rows of 8x8 blocks, as each is small in a late layer. */
void ccn_transpose_batch(long nb, long R, long C, const float *src, long src_stride, float *dst,
                         long dst_stride);
/* The share of an m x n block that the micro-kernel's tiles covering it
 * compute: how well a product of that shape fills them. */
double ccn_gemm_tile_fill(long m, long n);

CCN_END_DECLS
#endif /* CCN_GEMM_H */
