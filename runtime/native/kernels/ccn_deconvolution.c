/* Deconvolution family: ConvTranspose as the adjoint of im2col + GEMM: one
 * GEMM per image and group into columns, then col2im adds them up. */
#include <string.h>

#include "ccn_connection.h"
#include "ccn_deconvolution.h"

/* y[m, h*sh - pt + kh*dh, w*sw - pl + kw*dw] += col[(m, kh, kw), (h, w)]
 * for every tap landing inside the OH x OW output. */
static void col2im(long M, long H, long W, long KH, long KW, long OH, long OW,
                   long sh, long sw, long dh, long dw, long pt, long pl,
                   const float *col, float *y)
{
    CCN_OMP_FOR_IF(M * KH * KW * OH * OW)
    for (long m = 0; m < M; m++)
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++) {
                const float *row = col + ((m * KH + kh) * KW + kw) * H * W;
                float *out = y + m * OH * OW;
                for (long h = 0; h < H; h++) {
                    const long oh = h * sh - pt + kh * dh;
                    if (oh < 0 || oh >= OH)
                        continue;
                    for (long w = 0; w < W; w++) {
                        const long ow = w * sw - pl + kw * dw;
                        if (ow >= 0 && ow < OW)
                            out[oh * OW + ow] += row[h * W + w];
                    }
                }
            }
}

void ccn_deconv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                  long group, long stride_h, long stride_w, long dil_h, long dil_w,
                  long pad_top, long pad_left, const float *x, const float *w,
                  const float *bias, float *y, float *col)
{
    const long Cg = C / group, Mg = M / group, K = Mg * KH * KW, S = H * W;
    for (long n = 0; n < N; n++)
        for (long g = 0; g < group; g++) {
            float *yg = y + (n * M + g * Mg) * OH * OW;
            for (long m = 0; m < Mg; m++) {
                const float b = bias ? bias[g * Mg + m] : 0.0f;
                for (long s = 0; s < OH * OW; s++)
                    yg[m * OH * OW + s] = b;
            }
            /* col (K x S) = w_g^T x_g: w_g is row-major Cg x K, read
             * transposed through the strides. */
            memset(col, 0, (size_t)(K * S) * sizeof(float));
            ccn_gemm(K, S, Cg, w + g * Cg * K, 1, K, x + (n * C + g * Cg) * S, 1.0f, col);
            col2im(Mg, H, W, KH, KW, OH, OW, stride_h, stride_w, dil_h, dil_w, pad_top,
                   pad_left, col, yg);
        }
}
