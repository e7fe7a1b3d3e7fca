/* Recurrent family: RNN, GRU and LSTM.  Per direction, the input
 * projection X W^T + Wb of every step is one matrix product; each step then
 * adds h R^T + Rb (one more product, two for GRU) and applies the cell to
 * the rows whose sequence is still running. */
#include <math.h>

#include "ccn_connection.h"
#include "ccn_recurrent.h"

/* Written so that exp never overflows. */
static float sigmoid(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

/* Comparisons (not fminf/fmaxf) so that NaN stays NaN. */
static float clipped(float x, float clip)
{
    return x < -clip ? -clip : (x > clip ? clip : x);
}

/* Length of sequence b, clamped to [0, seq]. */
static long seq_len(const ccn_rnn_call *c, long b)
{
    if (c->lens == NULL)
        return c->seq;
    const long n = c->lens[b];
    return n < 0 ? 0 : (n > c->seq ? c->seq : n);
}

/* Row of (time t, batch b) in X and in the input projection. */
static long x_row(const ccn_rnn_call *c, long t, long b)
{
    return c->batch_major ? b * c->seq + t : t * c->batch + b;
}

/* Offset of Y[t, d, b, :] (layout 0) or Y[b, t, d, :] (layout 1). */
static long y_offset(const ccn_rnn_call *c, long t, long d, long b)
{
    const long D = c->directions;
    return (c->batch_major ? (b * c->seq + t) * D + d : (t * D + d) * c->batch + b) * c->hidden;
}

/* Offset of state[d, b, :] (layout 0) or state[b, d, :] (layout 1). */
static long state_offset(const ccn_rnn_call *c, long d, long b)
{
    return (c->batch_major ? b * c->directions + d : d * c->batch + b) * c->hidden;
}

/* RNN: h = tanh(xg + rg). */
static void rnn_row(long H, float clip, const float *xg, const float *rg, float *h)
{
    for (long j = 0; j < H; j++)
        h[j] = tanhf(clipped(xg[j] + rg[j], clip));
}

/* LSTM, gates i, o, f, c; peep (i, o, f) may be NULL. */
static void lstm_row(long H, float clip, const float *xg, const float *rg, const float *peep,
                     float *h, float *c)
{
    for (long j = 0; j < H; j++) {
        const float pi = peep ? peep[j] : 0.0f, po = peep ? peep[H + j] : 0.0f;
        const float pf = peep ? peep[2 * H + j] : 0.0f;
        const float i = sigmoid(clipped(xg[j] + rg[j] + pi * c[j], clip));
        const float f = sigmoid(clipped(xg[2 * H + j] + rg[2 * H + j] + pf * c[j], clip));
        const float cand = tanhf(clipped(xg[3 * H + j] + rg[3 * H + j], clip));
        c[j] = f * c[j] + i * cand;
        const float o = sigmoid(clipped(xg[H + j] + rg[H + j] + po * c[j], clip));
        h[j] = o * tanhf(c[j]);
    }
}

/* GRU, first half: the z and r gates (overwriting their pre-activations in
 * rg) and the row hin that multiplies R_h^T: r * h, or h when the linear
 * transformation comes before the reset. */
static void gru_gates(long H, float clip, int lbr, const float *xg, float *rg, const float *h,
                      float *hin)
{
    for (long j = 0; j < 2 * H; j++)
        rg[j] = sigmoid(clipped(xg[j] + rg[j], clip));
    for (long j = 0; j < H; j++)
        hin[j] = lbr ? h[j] : rg[H + j] * h[j];
}

/* GRU, second half: rh = hin R_h^T + Rb_h; h = (1 - z) * candidate + z * h. */
static void gru_update(long H, float clip, int lbr, const float *xg, const float *zr,
                       const float *rh, float *h)
{
    for (long j = 0; j < H; j++) {
        const float z = zr[j], r = zr[H + j];
        const float cand = tanhf(clipped(xg[2 * H + j] + (lbr ? r * rh[j] : rh[j]), clip));
        h[j] = (1.0f - z) * cand + z * h[j];
    }
}

/* One direction d of the node: proj, rec, h, c (or hin) and rh are scratch. */
static void run_direction(const ccn_rnn_call *c, long d, int reverse, float *proj, float *rec,
                          float *h, float *cs, float *rh)
{
    const long T = c->seq, B = c->batch, I = c->input, H = c->hidden, GH = c->cell * H;
    const int gru = c->cell == CCN_CELL_GRU;
    const long n_rec = gru ? 2 * H : GH;  /* columns of the first recurrent product */
    const float *wb = c->bias ? c->bias + d * 2 * GH : NULL;
    const float *rb = c->bias ? wb + GH : NULL;
    const float *rt = c->rt + d * H * GH;
    const float *peep = c->peep ? c->peep + d * 3 * H : NULL;

    /* X is contiguous whatever the layout: one product for every step. */
    ccn_gemm_init(T * B, GH, proj, wb, 0, 1, 1.0f);
    ccn_gemm(T * B, GH, I, c->x, I, 1, c->wt + d * I * GH, 1.0f, proj);
    for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) {
            h[b * H + j] = c->h0 ? c->h0[state_offset(c, d, b) + j] : 0.0f;
            cs[b * H + j] = c->c0 ? c->c0[state_offset(c, d, b) + j] : 0.0f;
        }
    for (long s = 0; s < T; s++) {
        ccn_gemm_init(B, n_rec, rec, rb, 0, 1, 1.0f);
        ccn_gemm(B, n_rec, H, h, H, 1, rt, 1.0f, rec);
        if (gru) {
            for (long b = 0; b < B; b++) {
                const long n = seq_len(c, b);
                const long t = reverse ? n - 1 - s : s;
                if (s < n)
                    gru_gates(H, c->clip, c->linear_before_reset, proj + x_row(c, t, b) * GH,
                              rec + b * n_rec, h + b * H, cs + b * H);
            }
            ccn_gemm_init(B, H, rh, rb ? rb + 2 * H : NULL, 0, 1, 1.0f);
            ccn_gemm(B, H, H, cs, H, 1, rt + 2 * H * H, 1.0f, rh);
        }
        for (long b = 0; b < B; b++) {
            const long n = seq_len(c, b);
            const long t = reverse ? n - 1 - s : s;
            if (s >= n) {
                /* Finished (or empty) sequence: its state stays, Y is zero. */
                if (c->y)
                    for (long j = 0; j < H; j++)
                        c->y[y_offset(c, s, d, b) + j] = 0.0f;
                continue;
            }
            const float *xg = proj + x_row(c, t, b) * GH;
            if (c->cell == CCN_CELL_RNN)
                rnn_row(H, c->clip, xg, rec + b * n_rec, h + b * H);
            else if (c->cell == CCN_CELL_LSTM)
                lstm_row(H, c->clip, xg, rec + b * n_rec, peep, h + b * H, cs + b * H);
            else
                gru_update(H, c->clip, c->linear_before_reset, xg, rec + b * n_rec,
                           rh + b * H, h + b * H);
            if (c->y)
                for (long j = 0; j < H; j++)
                    c->y[y_offset(c, t, d, b) + j] = h[b * H + j];
        }
    }
    for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) {
            if (c->yh)
                c->yh[state_offset(c, d, b) + j] = h[b * H + j];
            if (c->yc)
                c->yc[state_offset(c, d, b) + j] = cs[b * H + j];
        }
}

void ccn_recurrent(const ccn_rnn_call *call, float *scratch)
{
    const long B = call->batch, H = call->hidden, GH = call->cell * H;
    float *proj = scratch;
    float *rec = proj + call->seq * B * GH;
    float *h = rec + B * GH;
    float *cs = h + B * H;  /* LSTM: the cell state; GRU: the row hin */
    float *rh = cs + B * H;
    for (long d = 0; d < call->directions; d++)
        run_direction(call, d, call->directions == 2 ? d == 1 : call->reverse, proj, rec, h,
                      cs, rh);
}
