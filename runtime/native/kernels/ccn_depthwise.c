/* Depthwise family: a convolution with one group per channel as KH*KW
 * multiply-adds per output, summed in registers.  im2col would copy each
 * input KH*KW times for a product of depth KH*KW with one output row:
 * slower than the arithmetic it feeds. */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the tap loops want them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <assert.h>
#include <string.h>

#include "ccn_depthwise.h"
#include "ccn_threads.h"

/* How a convolution runs (see ccn_depthwise_scratch). */
enum { STRIDE1, PHASES, GENERAL };

/* A convolution's plan: its way, the padded plane (PH x PW), whether the
 * input is copied into it, the rows the tap loops run over (`rows` of
 * `row` floats: OH, and PW or QW = ceil(PW/2)) and the scratch per plane. */
typedef struct {
    int way, copies;
    long PH, PW, rows, row, per_plane;
} plan;

static long extent(long in, long pad, long out, long stride, long kernel, long dil)
{
    const long reach = (out - 1) * stride + (kernel - 1) * dil + 1;
    return in + pad > reach ? in + pad : reach;
}

static plan plan_of(const ccn_conv_geometry *g)
{
    plan p;
    p.PH = extent(g->in_h, g->pad_top, g->out_h, g->stride_h, g->kernel_h, g->dil_h);
    p.PW = extent(g->in_w, g->pad_left, g->out_w, g->stride_w, g->kernel_w, g->dil_w);
    p.copies = g->pad_top || g->pad_left || p.PH > g->in_h || p.PW > g->in_w;
    p.way = g->stride_h == 1 && g->stride_w == 1 ? STRIDE1
            : g->stride_h == 2 && g->stride_w == 2 ? PHASES
            : GENERAL;
    p.rows = g->out_h;
    p.row = p.way == PHASES ? (p.PW + 1) / 2 : p.PW;
    p.per_plane = p.way == STRIDE1 ? p.copies * p.PH * p.PW + p.rows * p.row
                  : p.way == PHASES ? 4 * ((p.PH + 1) / 2) * p.row + p.rows * p.row
                  : p.copies * p.PH * p.PW;
    return p;
}

long ccn_depthwise_scratch(const ccn_conv_geometry *g)
{
    return g->batch * g->in_channels * plan_of(g).per_plane;
}

/* Where tap (kh, kw) of output o reads, from o.  Stride 1: padded
 * element (oh + kh dh, ow + kw dw), rows PW apart and o = oh * PW + ow.
 * Stride 2, from the four phases of the padded plane (QS floats apart,
 * rows QW apart, o = oh * QW + ow): padded element (2 oh + kh dh,
 * 2 ow + kw dw) is element (oh + kh dh / 2, ow + kw dw / 2) of phase
 * (kh dh % 2, kw dw % 2). */
static long tap_offset(const ccn_conv_geometry *g, const plan *p, long kh, long kw)
{
    const long r = kh * g->dil_h, c = kw * g->dil_w, QS = (p->PH + 1) / 2 * p->row;
    return p->way == PHASES ? ((r & 1) * 2 + (c & 1)) * QS + (r >> 1) * p->row + (c >> 1)
                            : r * p->row + c;
}

/* out[o] = b + the sum over the KH x KW taps t of wc[t] * in[o + off[t]],
 * for o < n: each tap a fixed offset from o (tap_offset), over whole
 * padded rows whose last outputs go unused.  Called with KH and KW
 * constant the taps unroll (two loops: GCC unrolls up to 16 trips each),
 * and the loop over o vectorises whatever the stride and dilation. */
static inline void taps(long KH, long KW, const long *off, long n, const float *in,
                        const float *wc, float b, float *restrict out)
{
    for (long o = 0; o < n; o++) {
        float s = b;
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++)
                s += wc[kh * KW + kw] * in[o + off[kh * KW + kw]];
        out[o] = s;
    }
}

/* The same for other sizes, one tap at a time over all n outputs: each
 * pass a loop that vectorises however many taps, the sum in the same
 * order. */
static void tap_by_tap(const ccn_conv_geometry *g, const plan *p, long n, const float *in,
                       const float *wc, float b, float *restrict out)
{
    for (long o = 0; o < n; o++)
        out[o] = b;
    for (long kh = 0; kh < g->kernel_h; kh++)
        for (long kw = 0; kw < g->kernel_w; kw++) {
            const float *at = in + tap_offset(g, p, kh, kw), w = wc[kh * g->kernel_w + kw];
            for (long o = 0; o < n; o++)
                out[o] += w * at[o];
        }
}

/* Any stride and dilation, output by output. */
static void general_taps(const ccn_conv_geometry *g, long PW, const float *in, const float *wc,
                         float b, float *out)
{
    CCN_CONV_LOCALS(g);
    (void)N, (void)C, (void)H, (void)W, (void)M, (void)group, (void)pad_top, (void)pad_left;
    for (long oh = 0; oh < OH; oh++)
        for (long ow = 0; ow < OW; ow++) {
            const float *at = in + oh * stride_h * PW + ow * stride_w;
            float s = b;
            for (long kh = 0; kh < KH; kh++)
                for (long kw = 0; kw < KW; kw++)
                    s += wc[kh * KW + kw] * at[kh * dil_h * PW + kw * dil_w];
            out[oh * OW + ow] = s;
        }
}

/* The padded plane of input plane in (H x W) at pad (PH x PW); with
 * phases, split into its four phases instead, each QH x QW, QS apart. */
static void pad_plane(const ccn_conv_geometry *g, const plan *p, const float *in, float *pad)
{
    const long H = g->in_h, W = g->in_w, pt = g->pad_top, pl = g->pad_left;
    if (p->way != PHASES) {
        memset(pad, 0, (size_t)(p->PH * p->PW) * sizeof(float));
        for (long h = 0; h < H; h++)
            memcpy(pad + (h + pt) * p->PW + pl, in + h * W, (size_t)W * sizeof(float));
        return;
    }
    const long QW = p->row, QS = (p->PH + 1) / 2 * QW;
    memset(pad, 0, (size_t)(4 * QS) * sizeof(float));
    for (long h = 0; h < H; h++) {
        const long r = h + pt;
        float *row = pad + (r & 1) * 2 * QS + (r >> 1) * QW;
        /* Column c = w + pl goes to phase c % 2, column c / 2: the even
         * columns of the input row to one phase, the odd to the other. */
        for (long k = 0; k < 2; k++) {
            const long c0 = (pl + k) & 1;  /* the phase of columns w = k, k + 2, ... */
            float *to = row + c0 * QS + (k + pl) / 2;
            const float *from = in + h * W + k;
            for (long j = 0; 2 * j + k < W; j++)
                to[j] = from[2 * j];
        }
    }
}

/* One channel's plane in (padded as plan p says, unless it needs no copy)
 * into out: the common sizes (3x3 and 5x5) with their taps unrolled
 * whatever the stride and dilation (DeepLabV3's and LR-ASPP's 5x5 taps
 * dilated by 2), others tap by tap.  rows is the plane's scratch for
 * whole padded rows of outputs. */
static void plane(const ccn_conv_geometry *g, const plan *p, const float *in, const float *wc,
                  float b, float *out, float *rows)
{
    const long KH = g->kernel_h, KW = g->kernel_w, OW = g->out_w;
    const long n = (p->rows - 1) * p->row + OW;
    if (p->way == GENERAL) {
        general_taps(g, p->PW, in, wc, b, out);
        return;
    }
    if (KH == KW && (KH == 3 || KH == 5)) {
        long off[25];
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++)
                off[kh * KW + kw] = tap_offset(g, p, kh, kw);
        if (KH == 3)
            taps(3, 3, off, n, in, wc, b, rows);
        else
            taps(5, 5, off, n, in, wc, b, rows);
    } else {
        tap_by_tap(g, p, n, in, wc, b, rows);
    }
    for (long oh = 0; oh < p->rows; oh++)
        memcpy(out + oh * OW, rows + oh * p->row, (size_t)OW * sizeof(float));
}

/* The arguments of ccn_conv2d_depthwise, for its planes' task. */
typedef struct {
    const ccn_conv_geometry *g;
    plan p;
    int act;
    float act_alpha;
    const float *x, *w, *bias;
    float *y, *scratch;
} depthwise_call;

/* Planes [begin, end) (image * channels + channel) of the convolution. */
static void depthwise_range(void *context, long begin, long end)
{
    const depthwise_call *a = context;
    const ccn_conv_geometry *g = a->g;
    const long C = g->in_channels, S = g->out_h * g->out_w, taps = g->kernel_h * g->kernel_w;
    /* Scratch per plane: the padded plane (or its phases), then the rows. */
    const long padded = a->p.per_plane - (a->p.way == GENERAL ? 0 : a->p.rows * a->p.row);
    for (long i = begin; i < end; i++) {
        float *own = a->scratch ? a->scratch + i * a->p.per_plane : NULL;
        const float *in = a->x + i * g->in_h * g->in_w;
        if (padded) {
            pad_plane(g, &a->p, in, own);
            in = own;
        }
        plane(g, &a->p, in, a->w + (i % C) * taps, a->bias ? a->bias[i % C] : 0.0f,
              a->y + i * S, own ? own + padded : NULL);
        ccn_activate(S, a->y + i * S, a->act, a->act_alpha);
    }
}

void ccn_conv2d_depthwise(const ccn_conv_geometry *geometry, int act, float act_alpha,
                          const float *x, const float *w, const float *bias, float *y,
                          float *scratch)
{
    const ccn_conv_geometry *g = geometry;
    const plan p = plan_of(g);
    assert(g->group == g->in_channels && g->out_channels == g->in_channels);
    assert(scratch != NULL || p.per_plane == 0);
    depthwise_call a = {g, p, act, act_alpha, x, w, bias, y, scratch};
    const long planes = g->batch * g->in_channels;
    ccn_parallel_for(planes, planes * g->out_h * g->out_w * g->kernel_h * g->kernel_w,
                     depthwise_range, &a);
}
