/* Pooling family: MaxPool, AveragePool (2-D) and GlobalAveragePool. */
#include <math.h>

#include "ccn_pooling.h"

void ccn_maxpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long dil_h, long dil_w,
                   long pad_top, long pad_left, const float *x, float *y)
{
    CCN_OMP_FOR_IF(NC * OH * OW * KH * KW)
    for (long p = 0; p < NC; p++) {
        const float *in = x + p * H * W;
        float *out = y + p * OH * OW;
        for (long oh = 0; oh < OH; oh++)
            for (long ow = 0; ow < OW; ow++) {
                /* Padding is -inf: it never wins, as in the NumPy kernel. */
                float best = -INFINITY;
                for (long kh = 0; kh < KH; kh++) {
                    const long ih = oh * stride_h - pad_top + kh * dil_h;
                    if (ih < 0 || ih >= H)
                        continue;
                    for (long kw = 0; kw < KW; kw++) {
                        const long iw = ow * stride_w - pad_left + kw * dil_w;
                        if (iw >= 0 && iw < W && in[ih * W + iw] > best)
                            best = in[ih * W + iw];
                    }
                }
                out[oh * OW + ow] = best;
            }
    }
}

void ccn_avgpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long pad_top, long pad_left,
                   long pad_bottom, long pad_right, int count_include_pad,
                   const float *x, float *y)
{
    CCN_OMP_FOR_IF(NC * OH * OW * KH * KW)
    for (long p = 0; p < NC; p++) {
        const float *in = x + p * H * W;
        float *out = y + p * OH * OW;
        for (long oh = 0; oh < OH; oh++)
            for (long ow = 0; ow < OW; ow++) {
                float sum = 0.0f;
                long count = 0;
                for (long kh = 0; kh < KH; kh++) {
                    const long ih = oh * stride_h - pad_top + kh;
                    for (long kw = 0; kw < KW; kw++) {
                        const long iw = ow * stride_w - pad_left + kw;
                        const int inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
                        /* ceil_mode's extra windows reach past the explicit
                         * padding: those taps never count. */
                        const int in_pads = ih >= -pad_top && ih < H + pad_bottom &&
                                            iw >= -pad_left && iw < W + pad_right;
                        if (inside)
                            sum += in[ih * W + iw];
                        if (count_include_pad ? in_pads : inside)
                            count++;
                    }
                }
                out[oh * OW + ow] = sum / (float)count;
            }
    }
}

void ccn_global_avgpool(long NC, long S, const float *x, float *y)
{
    for (long p = 0; p < NC; p++) {
        float sum = 0.0f;
        for (long s = 0; s < S; s++)
            sum += x[p * S + s];
        y[p] = sum / (float)S;
    }
}
