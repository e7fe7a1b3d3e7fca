/* Depthwise family: a convolution with one group per channel as KH*KW
 * multiply-adds per output, row by row.  im2col would copy each input
 * KH*KW times for a product of depth KH*KW with one output row: slower
 * than the arithmetic it feeds. */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the row loops want them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <assert.h>
#include <string.h>

#include "ccn_depthwise.h"
#include "ccn_threads.h"

/* out[o] = b + the KH x KW taps of in at o, for o < n: a stride-1
 * convolution of a plane padded to rows PW wide, computed over whole
 * padded rows (their last PW - OW outputs unused) so that the loop is
 * long enough to vectorise well even for narrow planes. */
static inline void flat_taps(long KH, long KW, long dh, long dw, long n, long PW,
                             const float *in, const float *wc, float b, float *restrict out)
{
    for (long o = 0; o < n; o++) {
        float s = b;
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++)
                s += wc[kh * KW + kw] * in[o + kh * dh * PW + kw * dw];
        out[o] = s;
    }
}

/* The same for any stride, row by row into out (OW wide). */
static inline void row_taps(long KH, long KW, long sh, long sw, long dh, long dw, long OH,
                            long OW, long PW, const float *in, const float *wc, float b,
                            float *restrict out)
{
    for (long oh = 0; oh < OH; oh++)
        for (long ow = 0; ow < OW; ow++) {
            const float *at = in + oh * sh * PW + ow * sw;
            float s = b;
            for (long kh = 0; kh < KH; kh++)
                for (long kw = 0; kw < KW; kw++)
                    s += wc[kh * KW + kw] * at[kh * dh * PW + kw * dw];
            out[oh * OW + ow] = s;
        }
}

/* One channel's plane in (rows PW apart, padded) into out, with the
 * common sizes (3x3 and 5x5, strides 1 and 2, no dilation) as constants
 * so that the taps unroll and their weights stay in registers.  rows is
 * scratch of OH * PW floats for a stride-1 one. */
static void plane(const ccn_conv_geometry *g, long PW, const float *in, const float *wc,
                  float b, float *out, float *rows)
{
    const long KH = g->kernel_h, KW = g->kernel_w, OH = g->out_h, OW = g->out_w;
    const long sh = g->stride_h, sw = g->stride_w, dh = g->dil_h, dw = g->dil_w;
    const int square = KH == KW && dh == 1 && dw == 1;
    if (sh == 1 && sw == 1) {
        const long n = (OH - 1) * PW + OW;
        if (square && KH == 3)
            flat_taps(3, 3, 1, 1, n, PW, in, wc, b, rows);
        else if (square && KH == 5)
            flat_taps(5, 5, 1, 1, n, PW, in, wc, b, rows);
        else
            flat_taps(KH, KW, dh, dw, n, PW, in, wc, b, rows);
        for (long oh = 0; oh < OH; oh++)
            memcpy(out + oh * OW, rows + oh * PW, (size_t)OW * sizeof(float));
    } else if (square && sh == 2 && sw == 2 && KH == 3) {
        row_taps(3, 3, 2, 2, 1, 1, OH, OW, PW, in, wc, b, out);
    } else if (square && sh == 2 && sw == 2 && KH == 5) {
        row_taps(5, 5, 2, 2, 1, 1, OH, OW, PW, in, wc, b, out);
    } else {
        row_taps(KH, KW, sh, sw, dh, dw, OH, OW, PW, in, wc, b, out);
    }
}

/* The arguments of ccn_conv2d_depthwise, for its planes' task. */
typedef struct {
    const ccn_conv_geometry *g;
    int act;
    float act_alpha;
    const float *x, *w, *bias;
    float *y, *scratch;
} depthwise_call;

/* Planes [begin, end) (image * channels + channel) of the convolution. */
static void depthwise_range(void *context, long begin, long end)
{
    const depthwise_call *a = context;
    CCN_CONV_LOCALS(a->g);
    const long PH = CCN_DEPTHWISE_PADDED_H(a->g), PW = CCN_DEPTHWISE_PADDED_W(a->g);
    const int copy = CCN_DEPTHWISE_COPIES(a->g);
    const long rows = stride_h == 1 && stride_w == 1 ? OH * PW : 0;
    (void)N, (void)M, (void)group, (void)dil_h, (void)dil_w;
    for (long p = begin; p < end; p++) {
        /* Scratch per plane: its padded copy, then its padded rows. */
        float *own = a->scratch ? a->scratch + p * (copy * PH * PW + rows) : NULL;
        const float *in = a->x + p * H * W;
        float *out = a->y + p * OH * OW;
        if (copy) {
            memset(own, 0, (size_t)(PH * PW) * sizeof(float));
            for (long h = 0; h < H; h++)
                memcpy(own + (h + pad_top) * PW + pad_left, in + h * W,
                       (size_t)W * sizeof(float));
            in = own;
        }
        plane(a->g, PW, in, a->w + (p % C) * KH * KW, a->bias ? a->bias[p % C] : 0.0f, out,
              own ? own + copy * PH * PW : NULL);
        ccn_activate(OH * OW, out, a->act, a->act_alpha);
    }
}

void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, int act, float act_alpha,
                          const float *x, const float *w, const float *bias, float *y,
                          float *scratch)
{
    const ccn_conv_geometry *g = geometry;
    assert(g->group == g->in_channels && g->out_channels == g->in_channels);
    assert(scratch != NULL || CCN_DEPTHWISE_SCRATCH(g) == 0);
    depthwise_call a = {g, act, act_alpha, x, w, bias, y, scratch};
    const long planes = g->batch * g->in_channels;
    ccn_parallel_for(planes, planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w,
                     depthwise_range, &a);
}
