/* ccn_connection.h: Connection family: Gemm, MatMul and Conv. */
#ifndef CCN_CONNECTION_H
#define CCN_CONNECTION_H

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
/* 2-D convolution, NCHW input, (M, C/group, KH, KW) weights, bias may be
 * NULL, then activation act.  Up to `images` images share one product;
 * col is scratch of (C/group)*KH*KW*OH*OW*images floats, plus
 * (M/group)*OH*OW*images when images > 1 (NULL for a 1x1 convolution
 * without stride or padding and images == 1). */
void ccn_conv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                long group, long stride_h, long stride_w, long dil_h, long dil_w,
                long pad_top, long pad_left, long images, const float *x, const float *w,
                const float *bias, float *y, float *col, int act, float act_alpha);

CCN_END_DECLS
#endif /* CCN_CONNECTION_H */
