/* ccn_connection.h: Connection family: Gemm, MatMul and Conv. */
#ifndef CCN_CONNECTION_H
#define CCN_CONNECTION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* C[m, n] = beta * bias[m * bias_rs + n * bias_cs] for an M x N C; bias NULL
 * gives zeros.  A broadcast axis of the bias has stride 0. */
void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta);
/* C[M, N] += alpha * A[M, K] * B[K, N]; A is read through strides (so a
 * transposed A costs nothing), B must be row-major K x N. */
void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C);
/* dst[c, r] = src[r, c] for an R x C src. */
void ccn_transpose(long R, long C, const float *src, float *dst);
/* 2-D convolution, NCHW input, (M, C/group, KH, KW) weights, bias may be
 * NULL; col is scratch of (C/group)*KH*KW*OH*OW floats. */
void ccn_conv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                long group, long stride_h, long stride_w, long dil_h, long dil_w,
                long pad_top, long pad_left, const float *x, const float *w,
                const float *bias, float *y, float *col);

CCN_END_DECLS
#endif /* CCN_CONNECTION_H */
