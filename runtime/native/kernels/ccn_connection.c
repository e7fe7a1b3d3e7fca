/* Connection family: Gemm / MatMul / FusedGemm and Conv (im2col + GEMM). */
#include <string.h>

#include "ccn_connection.h"

/* Block sizes: a KB x NB panel of B (128 KiB) stays in L2 while every row
 * of A streams past it. */
#define CCN_KB 128
#define CCN_NB 256

void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta)
{
    for (long m = 0; m < M; m++) {
        float *restrict c = C + m * N;
        if (bias == NULL || beta == 0.0f) {
            for (long n = 0; n < N; n++)
                c[n] = 0.0f;
        } else {
            const float *b = bias + m * bias_rs;
            for (long n = 0; n < N; n++)
                c[n] = beta * b[n * bias_cs];
        }
    }
}

void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C)
{
    for (long n0 = 0; n0 < N; n0 += CCN_NB) {
        const long n1 = n0 + CCN_NB < N ? n0 + CCN_NB : N;
        for (long k0 = 0; k0 < K; k0 += CCN_KB) {
            const long k1 = k0 + CCN_KB < K ? k0 + CCN_KB : K;
            CCN_OMP_FOR
            for (long m = 0; m < M; m++) {
                float *restrict c = C + m * N;
                for (long k = k0; k < k1; k++) {
                    const float a = alpha * A[m * a_rs + k * a_cs];
                    const float *restrict b = B + k * N;
                    /* The loop gcc -O3 vectorises: contiguous c and b. */
                    for (long n = n0; n < n1; n++)
                        c[n] += a * b[n];
                }
            }
        }
    }
}

void ccn_transpose(long R, long C, const float *src, float *dst)
{
    /* 32 x 32 tiles keep both sides in cache. */
    for (long r0 = 0; r0 < R; r0 += 32)
        for (long c0 = 0; c0 < C; c0 += 32)
            for (long r = r0; r < R && r < r0 + 32; r++)
                for (long c = c0; c < C && c < c0 + 32; c++)
                    dst[c * R + r] = src[r * C + c];
}

/* col[(c, kh, kw), (oh, ow)] = x[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw],
 * zero outside the input. */
static void im2col(long C, long H, long W, long KH, long KW, long OH, long OW,
                   long sh, long sw, long dh, long dw, long pt, long pl,
                   const float *x, float *col)
{
    for (long c = 0; c < C; c++)
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++) {
                float *row = col + ((c * KH + kh) * KW + kw) * OH * OW;
                for (long oh = 0; oh < OH; oh++) {
                    const long ih = oh * sh - pt + kh * dh;
                    float *out = row + oh * OW;
                    if (ih < 0 || ih >= H) {
                        memset(out, 0, (size_t)OW * sizeof(float));
                        continue;
                    }
                    const float *in = x + (c * H + ih) * W;
                    for (long ow = 0; ow < OW; ow++) {
                        const long iw = ow * sw - pl + kw * dw;
                        out[ow] = (iw >= 0 && iw < W) ? in[iw] : 0.0f;
                    }
                }
            }
}

void ccn_conv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                long group, long stride_h, long stride_w, long dil_h, long dil_w,
                long pad_top, long pad_left, const float *x, const float *w,
                const float *bias, float *y, float *col)
{
    const long Cg = C / group, Mg = M / group, K = Cg * KH * KW, S = OH * OW;
    /* A 1x1 convolution without stride or padding needs no im2col. */
    const int direct = KH == 1 && KW == 1 && stride_h == 1 && stride_w == 1 &&
                       pad_top == 0 && pad_left == 0 && OH == H && OW == W;
    for (long n = 0; n < N; n++)
        for (long g = 0; g < group; g++) {
            const float *xg = x + (n * C + g * Cg) * H * W;
            float *yg = y + (n * M + g * Mg) * S;
            for (long m = 0; m < Mg; m++) {
                const float b = bias ? bias[g * Mg + m] : 0.0f;
                for (long s = 0; s < S; s++)
                    yg[m * S + s] = b;
            }
            const float *cols = xg;
            if (!direct) {
                im2col(Cg, H, W, KH, KW, OH, OW, stride_h, stride_w, dil_h, dil_w,
                       pad_top, pad_left, xg, col);
                cols = col;
            }
            ccn_gemm(Mg, S, K, w + g * Mg * K, K, 1, cols, 1.0f, yg);
        }
}
