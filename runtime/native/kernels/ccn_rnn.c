/* RNN family: RNN, GRU and LSTM, and their gradients (below).  Per
 * direction, the input projection X W^T of every step is one matrix
 * product; each step then computes h R^T (one more product, R^T in
 * strips when it is a constant; GRU's second one adds Rb_h) and
 * applies the cell, biases included, to the rows whose sequence is still
 * running: one loop per gate block, whose sigmoid and tanh are the
 * vectorised polynomial and rational function of ccn_common.h. */
/* The cells' loops select (the clip, the sigmoid's mirror); GCC's default
 * -ftrapping-math keeps such loops scalar (see ccn_activation.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "ccn_gemm.h"
#include "ccn_rnn.h"

/* Comparisons (not fminf/fmaxf) so that NaN stays NaN. */
CCN_ALWAYS_INLINE float clipped(float x, float clip)
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

/* The cells' pre-activations are xg + rg + bs: the input projection's
 * row, the recurrent product's and the biases. */

/* RNN: h = tanh(xg + rg + bs). */
CCN_ALWAYS_INLINE void rnn_row(long H, float clip, const float *xg, const float *rg,
                               const float *bs, float *h)
{
    for (long j = 0; j < H; j++)
        h[j] = ccn_tanh_poly(clipped(xg[j] + rg[j] + bs[j], clip));
}

/* LSTM, gates i, o, f, c; peep (i, o, f) may be NULL.  The peepholes
 * are added to the pre-activations in rg (scratch) in loops of their own,
 * so that the cell's loops have no branch and vectorise: o's peephole
 * reads the new c, hence two loops. */
CCN_ALWAYS_INLINE void lstm_row(long H, float clip, const float *restrict xg,
                                float *restrict rg, const float *restrict bs,
                                const float *restrict peep, float *restrict h, float *restrict c)
{
    if (peep)
        for (long j = 0; j < H; j++) {
            rg[j] += peep[j] * c[j];
            rg[2 * H + j] += peep[2 * H + j] * c[j];
        }
    for (long j = 0; j < H; j++) {
        const float i = ccn_sigmoid_poly(clipped(xg[j] + rg[j] + bs[j], clip));
        const float f = ccn_sigmoid_poly(clipped(xg[2 * H + j] + rg[2 * H + j] + bs[2 * H + j],
                                                 clip));
        const float cand = ccn_tanh_poly(clipped(xg[3 * H + j] + rg[3 * H + j] + bs[3 * H + j],
                                                 clip));
        c[j] = f * c[j] + i * cand;
    }
    if (peep)
        for (long j = 0; j < H; j++)
            rg[H + j] += peep[H + j] * c[j];
    for (long j = 0; j < H; j++)
        h[j] = ccn_sigmoid_poly(clipped(xg[H + j] + rg[H + j] + bs[H + j], clip)) *
               ccn_tanh_poly(c[j]);
}

/* GRU, first half: the z and r gates (overwriting their pre-activations in
 * rg) and the row hin that multiplies R_h^T: r * h, or h when the linear
 * transformation comes before the reset. */
CCN_ALWAYS_INLINE void gru_gates(long H, float clip, int lbr, const float *xg, float *rg,
                                 const float *bs, const float *h, float *hin)
{
    for (long j = 0; j < 2 * H; j++)
        rg[j] = ccn_sigmoid_poly(clipped(xg[j] + rg[j] + bs[j], clip));
    for (long j = 0; j < H; j++)
        hin[j] = lbr ? h[j] : rg[H + j] * h[j];
}

/* GRU, second half: rh = hin R_h^T + Rb_h; h = (1 - z) * candidate + z * h. */
CCN_ALWAYS_INLINE void gru_update(long H, float clip, int lbr, const float *xg, const float *zr,
                                  const float *bs, const float *rh, float *h)
{
    for (long j = 0; j < H; j++) {
        const float z = zr[j], r = zr[H + j];
        const float cand = ccn_tanh_poly(
            clipped(xg[2 * H + j] + bs[2 * H + j] + (lbr ? r * rh[j] : rh[j]), clip));
        h[j] = (1.0f - z) * cand + z * h[j];
    }
}

/* Floats of a block of R^T with n columns (see ccn_rnn_call.rt_strips). */
static long r_block(long H, long n, int strips)
{
    return H * (strips ? ccn_strip_cols(n) : n);
}

/* C = (set) or += the B rows of a (H apart) times a block of R^T with n
 * columns: at batch 1 bound by reading R^T (from L2 after the first
 * step); in strips, no packing of R^T at each step (a 32-row step 1.1x
 * faster) and one sequential pass at a few rows (two LSTMs of 128 at
 * batch 1, 32 steps: 0.19 ms with a row-major GEMV, 0.15 in strips). */
static void step_product(long B, long n, long H, const float *a, const float *rt, int strips,
                         float *C, int set)
{
    const ccn_gemm_geometry g = {.M = B, .N = n, .K = H, .a_rs = H, .a_cs = 1, .ldb = n,
                                 .ldc = n, .act = CCN_ACT_NONE};
    if (!strips) {
        (set ? ccn_gemm_set : ccn_gemm_ex)(&g, a, rt, 1.0f, C);
        return;
    }
    if (set)
        ccn_gemm_init(B, n, C, NULL, 0, 0, 0.0f);
    ccn_gemm_strips(&g, a, rt, 1.0f, C);
}

/* One direction d of the node: proj, rec, h, c (or hin), rh and bs are
 * scratch. */
CCN_ALWAYS_INLINE void run_direction(const ccn_rnn_call *c, long d, int reverse, float *proj,
                                     float *rec, float *h, float *cs, float *rh, float *bs)
{
    const long T = c->seq, B = c->batch, I = c->input, H = c->hidden, GH = c->cell * H;
    const int gru = c->cell == CCN_CELL_GRU;
    const long n_rec = gru ? 2 * H : GH;  /* columns of the first recurrent product */
    const float *wb = c->bias ? c->bias + d * 2 * GH : NULL;
    const float *rb = c->bias ? wb + GH : NULL;
    const int strips = c->rt_strips;
    const float *rt = c->rt + d * (r_block(H, n_rec, strips) + (gru ? r_block(H, H, strips) : 0));
    const float *peep = c->peep ? c->peep + d * 3 * H : NULL;

    /* The cells add the biases Wb + Rb (but GRU's Rb_h, which r may
     * multiply), so that the products set their results rather than add
     * to a bias (the projection at batch 32: 1.3x faster).  X is
     * contiguous whatever the layout: one product for every step. */
    for (long j = 0; j < GH; j++)
        bs[j] = wb ? wb[j] + (j < n_rec ? rb[j] : 0.0f) : 0.0f;
    ccn_gemm_set(&(const ccn_gemm_geometry){.M = T * B, .N = GH, .K = I, .a_rs = I, .a_cs = 1,
                                            .ldb = GH, .ldc = GH, .act = CCN_ACT_NONE},
                 c->x, c->wt + d * I * GH, 1.0f, proj);
    for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) {
            h[b * H + j] = c->h0 ? c->h0[state_offset(c, d, b) + j] : 0.0f;
            cs[b * H + j] = c->c0 ? c->c0[state_offset(c, d, b) + j] : 0.0f;
        }
    for (long s = 0; s < T; s++) {
        step_product(B, n_rec, H, h, rt, strips, rec, 1);
        if (gru) {
            for (long b = 0; b < B; b++) {
                const long n = seq_len(c, b);
                const long t = reverse ? n - 1 - s : s;
                if (s < n)
                    gru_gates(H, c->clip, c->linear_before_reset, proj + x_row(c, t, b) * GH,
                              rec + b * n_rec, bs, h + b * H, cs + b * H);
            }
            ccn_gemm_init(B, H, rh, rb ? rb + 2 * H : NULL, 0, 1, 1.0f);
            step_product(B, H, H, cs, rt + r_block(H, n_rec, strips), strips, rh, 0);
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
                rnn_row(H, c->clip, xg, rec + b * n_rec, bs, h + b * H);
            else if (c->cell == CCN_CELL_LSTM)
                lstm_row(H, c->clip, xg, rec + b * n_rec, bs, peep, h + b * H, cs + b * H);
            else
                gru_update(H, c->clip, c->linear_before_reset, xg, rec + b * n_rec, bs,
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

/* run_direction built for the CPU's level (CCN_LEVELS, ccn_common.h), as
 * the products are: the cells' loops use AVX2 or AVX-512 without -march
 * (LSTM at batch 32: 1.85x faster than SSE2). */
CCN_LEVELS(static, direction, run_direction,
           (const ccn_rnn_call *c, long d, int reverse, float *proj, float *rec, float *h,
            float *cs, float *rh, float *bs),
           (c, d, reverse, proj, rec, h, cs, rh, bs))

void ccn_rnn(const ccn_rnn_call *call, float *scratch)
{
    const long B = call->batch, H = call->hidden, GH = call->cell * H;
    float *proj = scratch;
    float *rec = proj + call->seq * B * GH;
    float *h = rec + B * GH;
    float *cs = h + B * H;  /* LSTM: the cell state; GRU: the row hin */
    float *rh = cs + B * H;
    float *bs = rh + B * H;
    for (long d = 0; d < call->directions; d++)
        direction(call, d, call->directions == 2 ? d == 1 : call->reverse, proj, rec, h, cs, rh,
                  bs);
}

/* ---- Gradients: LSTMGrad, GRUGrad and RNNGrad (custom domain) ----
 * Per direction, the hidden state before every step is read from the
 * forward's Y, so every gate pre-activation is one product over all steps
 * (GRU without linear_before_reset: two, the h block waiting for r).  The
 * LSTM cell state is recomputed step by step, elementwise.  The backward
 * loop over steps then needs one product per step (two for GRU without
 * linear_before_reset), to carry the gradient of h back through R.
 * Step-major buffers are indexed by x_row of the step's own time, so that
 * gW, gR, gB and gX are products over all rows whatever the direction. */

/* Activation a of a clipped gate pre-activation and its slope (zero where
 * the clip is active, as the NumPy kernel's mask (pre within [-clip, clip])
 * says). */
static float gate(float pre, float clip, int tanh_act, float *slope)
{
    const float z = clipped(pre, clip);
    const float a = tanh_act ? ccn_tanh_poly(z) : ccn_sigmoid_poly(z);
    const float inside = (pre >= -clip && pre <= clip) ? 1.0f : 0.0f;
    *slope = (tanh_act ? 1.0f - a * a : a * (1.0f - a)) * inside;
    return a;
}

/* Time of step s of sequence b in processing order, or -1 past its end. */
static long step_time(const ccn_rnn_call *c, long b, long s, int reverse)
{
    const long n = seq_len(c, b);
    return s >= n ? -1 : (reverse ? n - 1 - s : s);
}

/* Per-direction buffers of the gradient (scratch, see ccn_rnn.h). */
typedef struct {
    float *proj, *rec;     /* rows x G*H: X W^T + Wb, and h R^T + Rb */
    float *gproj, *grec;   /* rows x G*H: gradients of proj and of rec */
    float *hs, *rh;        /* rows x H: h before the step; GRU: the row times R_h^T */
    float *cprev, *cnew;   /* rows x H: LSTM cell state before and after the step */
    float *gstep;          /* batch x G*H: this step's gradient of rec */
    float *dh, *dc, *drh;  /* batch x H: carried gradients of h and c; GRU: of rh */
} grad_buffers;

/* hs (zeros past each sequence's end) and the pre-activation products
 * proj and rec of direction d. */
static void grad_products(const ccn_rnn_grad_call *g, long d, int reverse,
                          const grad_buffers *w)
{
    const ccn_rnn_call *c = &g->fwd;
    const long T = c->seq, B = c->batch, I = c->input, H = c->hidden, GH = c->cell * H;
    const long rows = T * B;
    const float *wb = c->bias ? c->bias + d * 2 * GH : NULL;
    const float *rb = c->bias ? wb + GH : NULL;
    const float *rt = c->rt + d * H * GH;
    ccn_gemm_init(rows, GH, w->proj, wb, 0, 1, 1.0f);
    ccn_gemm(rows, GH, I, c->x, I, 1, c->wt + d * I * GH, 1.0f, w->proj);
    for (long b = 0; b < B; b++)
        for (long s = 0; s < T; s++) {
            const long t = step_time(c, b, s, reverse);
            float *hs = w->hs + x_row(c, t < 0 ? s : t, b) * H;
            const long prev = s == 0 ? -1 : step_time(c, b, s - 1, reverse);
            for (long j = 0; j < H; j++)
                hs[j] = t < 0 ? 0.0f : (s == 0 ? (c->h0 ? c->h0[state_offset(c, d, b) + j] : 0.0f)
                                                : g->y[y_offset(c, prev, d, b) + j]);
        }
    ccn_gemm_init(rows, GH, w->rec, rb, 0, 1, 1.0f);
    if (c->cell != CCN_CELL_GRU) {
        ccn_gemm(rows, GH, H, w->hs, H, 1, rt, 1.0f, w->rec);
        return;
    }
    /* GRU: the z and r columns, then rh (r * h, or h with
     * linear_before_reset) times R_h^T. */
    ccn_gemm_ex(&(const ccn_gemm_geometry){.M = rows, .N = 2 * H, .K = H, .a_rs = H, .a_cs = 1,
                                           .ldb = 2 * H, .ldc = GH, .act = CCN_ACT_NONE},
                w->hs, rt, 1.0f, w->rec);
    for (long k = 0; k < rows; k++)
        for (long j = 0; j < H; j++) {
            const float r = ccn_sigmoid_poly(
                clipped(w->proj[k * GH + H + j] + w->rec[k * GH + H + j], c->clip));
            w->rh[k * H + j] = c->linear_before_reset ? w->hs[k * H + j] : r * w->hs[k * H + j];
        }
    ccn_gemm_ex(&(const ccn_gemm_geometry){.M = rows, .N = H, .K = H, .a_rs = H, .a_cs = 1,
                                           .ldb = H, .ldc = GH, .act = CCN_ACT_NONE},
                w->rh, rt + 2 * H * H, 1.0f, w->rec + 2 * H);
}

/* LSTM: the cell state before and after every step, forward. */
static void lstm_cells(const ccn_rnn_call *c, long d, int reverse, const grad_buffers *w)
{
    const long T = c->seq, B = c->batch, H = c->hidden, GH = 4 * H;
    const float *peep = c->peep ? c->peep + d * 3 * H : NULL;
    for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) {
            float cell = c->c0 ? c->c0[state_offset(c, d, b) + j] : 0.0f;
            for (long s = 0; s < T; s++) {
                const long t = step_time(c, b, s, reverse);
                if (t < 0)
                    break;
                const long k = x_row(c, t, b);
                const float *p = w->proj + k * GH, *r = w->rec + k * GH;
                const float i = ccn_sigmoid_poly(
                    clipped(p[j] + r[j] + (peep ? peep[j] * cell : 0.0f), c->clip));
                const float f = ccn_sigmoid_poly(
                    clipped(p[2 * H + j] + r[2 * H + j] + (peep ? peep[2 * H + j] * cell : 0.0f),
                            c->clip));
                const float cand = ccn_tanh_poly(clipped(p[3 * H + j] + r[3 * H + j], c->clip));
                w->cprev[k * H + j] = cell;
                cell = f * cell + i * cand;
                w->cnew[k * H + j] = cell;
            }
        }
}

/* LSTM, one row of one step: the gradient of the gates i, o, f, c into
 * gs, dh's share cleared for the product with R, dc carried, gP summed. */
static void lstm_grad_row(const ccn_rnn_call *c, const float *peep, float *gpeep, long k,
                          const grad_buffers *w, float *gs, float *dh, float *dc)
{
    const long H = c->hidden, GH = 4 * H;
    const float *p = w->proj + k * GH, *r = w->rec + k * GH;
    for (long j = 0; j < H; j++) {
        const float cp = w->cprev[k * H + j], cn = w->cnew[k * H + j];
        const float pi = peep ? peep[j] : 0.0f, po = peep ? peep[H + j] : 0.0f;
        const float pf = peep ? peep[2 * H + j] : 0.0f;
        float si, so, sf, sc;
        const float i = gate(p[j] + r[j] + pi * cp, c->clip, 0, &si);
        const float o = gate(p[H + j] + r[H + j] + po * cn, c->clip, 0, &so);
        const float f = gate(p[2 * H + j] + r[2 * H + j] + pf * cp, c->clip, 0, &sf);
        const float cand = gate(p[3 * H + j] + r[3 * H + j], c->clip, 1, &sc);
        const float hc = ccn_tanh_poly(cn);
        const float dpo = dh[j] * hc * so;
        const float dcn = dc[j] + dh[j] * o * (1.0f - hc * hc) + dpo * po;
        const float dpf = dcn * cp * sf, dpi = dcn * cand * si;
        gs[j] = dpi;
        gs[H + j] = dpo;
        gs[2 * H + j] = dpf;
        gs[3 * H + j] = dcn * i * sc;
        dc[j] = dcn * f + dpi * pi + dpf * pf;
        dh[j] = 0.0f;
        if (gpeep) {
            gpeep[j] += dpi * cp;
            gpeep[H + j] += dpo * cn;
            gpeep[2 * H + j] += dpf * cp;
        }
    }
}

/* GRU, one row of one step: the gradients of the z, r (with
 * linear_before_reset) and h pre-activations into gs (gproj's row gp
 * too), dh left as dh * z (its share that does not go through R). */
static void gru_grad_row(const ccn_rnn_call *c, long k, const grad_buffers *w, float *gs,
                         float *gp, float *dh)
{
    const long H = c->hidden, GH = 3 * H;
    const int lbr = c->linear_before_reset;
    const float *p = w->proj + k * GH, *r = w->rec + k * GH, *hs = w->hs + k * H;
    for (long j = 0; j < H; j++) {
        float sz, sr, sn;
        const float z = gate(p[j] + r[j], c->clip, 0, &sz);
        const float rr = gate(p[H + j] + r[H + j], c->clip, 0, &sr);
        const float n = gate(p[2 * H + j] + (lbr ? rr * r[2 * H + j] : r[2 * H + j]), c->clip, 1,
                             &sn);
        const float dpz = dh[j] * (hs[j] - n) * sz, dpn = dh[j] * (1.0f - z) * sn;
        gp[j] = gs[j] = dpz;
        gp[2 * H + j] = dpn;
        gs[2 * H + j] = lbr ? dpn * rr : dpn;
        /* Without linear_before_reset, r's gradient waits for dpn R_h. */
        gp[H + j] = gs[H + j] = lbr ? dpn * r[2 * H + j] * sr : 0.0f;
        dh[j] *= z;
    }
}

/* GRU without linear_before_reset: r's gradient from drh = dpn R_h (rows
 * of the step in gs), and drh * r added to dh. */
static void gru_reset_grad(const ccn_rnn_call *c, long k, const grad_buffers *w, float *gs,
                           float *gp, const float *drh, float *dh)
{
    const long H = c->hidden, GH = 3 * H;
    const float *p = w->proj + k * GH, *r = w->rec + k * GH, *hs = w->hs + k * H;
    for (long j = 0; j < H; j++) {
        float sr;
        const float rr = gate(p[H + j] + r[H + j], c->clip, 0, &sr);
        gp[H + j] = gs[H + j] = drh[j] * hs[j] * sr;
        dh[j] += drh[j] * rr;
    }
}

/* RNN, one row of one step. */
static void rnn_grad_row(const ccn_rnn_call *c, long k, const grad_buffers *w, float *gs,
                         float *dh)
{
    const long H = c->hidden;
    for (long j = 0; j < H; j++) {
        float slope;
        gate(w->proj[k * H + j] + w->rec[k * H + j], c->clip, 1, &slope);
        gs[j] = dh[j] * slope;
        dh[j] = 0.0f;
    }
}

/* Back through time for direction d: gproj and grec of every row, the
 * initial states' gradients left in dh and dc. */
static void grad_steps(const ccn_rnn_grad_call *g, long d, int reverse, const grad_buffers *w)
{
    const ccn_rnn_call *c = &g->fwd;
    const long T = c->seq, B = c->batch, H = c->hidden, GH = c->cell * H;
    const int gru = c->cell == CCN_CELL_GRU, lbr = c->linear_before_reset;
    const float *R = g->r + d * GH * H;
    const float *peep = c->peep ? c->peep + d * 3 * H : NULL;
    /* Without P, its gradient stays zero. */
    float *gpeep = g->gpeep && peep ? g->gpeep + d * 3 * H : NULL;
    /* Rows past a sequence's end keep these zeros. */
    ccn_gemm_init(T * B, GH, w->gproj, NULL, 0, 0, 0.0f);
    ccn_gemm_init(T * B, GH, w->grec, NULL, 0, 0, 0.0f);
    for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) {
            const long at = state_offset(c, d, b) + j;
            w->dh[b * H + j] = g->gyh ? g->gyh[at] : 0.0f;
            w->dc[b * H + j] = g->gyc ? g->gyc[at] : 0.0f;
        }
    for (long s = T - 1; s >= 0; s--) {
        for (long b = 0; b < B; b++) {
            const long t = step_time(c, b, s, reverse);
            float *gs = w->gstep + b * GH, *dh = w->dh + b * H;
            if (t < 0) {
                for (long j = 0; j < GH; j++)
                    gs[j] = 0.0f;
                continue;
            }
            const long k = x_row(c, t, b);
            if (g->gy)
                for (long j = 0; j < H; j++)
                    dh[j] += g->gy[y_offset(c, t, d, b) + j];
            if (c->cell == CCN_CELL_LSTM)
                lstm_grad_row(c, peep, gpeep, k, w, gs, dh, w->dc + b * H);
            else if (gru)
                gru_grad_row(c, k, w, gs, w->gproj + k * GH, dh);
            else
                rnn_grad_row(c, k, w, gs, dh);
        }
        if (gru && !lbr) {
            /* dh += drh * r + [dpz, dpr] R[0:2H], drh = dpn R_h. */
            ccn_gemm_init(B, H, w->drh, NULL, 0, 0, 0.0f);
            ccn_gemm(B, H, H, w->gstep + 2 * H, GH, 1, R + 2 * H * H, 1.0f, w->drh);
            for (long b = 0; b < B; b++) {
                const long t = step_time(c, b, s, reverse);
                if (t >= 0)
                    gru_reset_grad(c, x_row(c, t, b), w, w->gstep + b * GH,
                                   w->gproj + x_row(c, t, b) * GH, w->drh + b * H, w->dh + b * H);
            }
            ccn_gemm(B, H, 2 * H, w->gstep, GH, 1, R, 1.0f, w->dh);
        } else {
            ccn_gemm(B, H, GH, w->gstep, GH, 1, R, 1.0f, w->dh);
        }
        for (long b = 0; b < B; b++) {
            const long t = step_time(c, b, s, reverse);
            if (t < 0)
                continue;
            const long k = x_row(c, t, b);
            for (long j = 0; j < GH; j++) {
                w->grec[k * GH + j] = w->gstep[b * GH + j];
                if (!gru)
                    w->gproj[k * GH + j] = w->gstep[b * GH + j];
            }
        }
    }
}

/* Column sums of a rows x n matrix into out[0..n). */
static void column_sums(long rows, long n, const float *a, float *out)
{
    for (long j = 0; j < n; j++)
        out[j] = 0.0f;
    for (long k = 0; k < rows; k++)
        for (long j = 0; j < n; j++)
            out[j] += a[k * n + j];
}

/* gX, gW, gR, gB and the initial states' gradients of direction d. */
static void grad_results(const ccn_rnn_grad_call *g, long d, const grad_buffers *w)
{
    const ccn_rnn_call *c = &g->fwd;
    const long rows = c->seq * c->batch, I = c->input, H = c->hidden, GH = c->cell * H;
    if (g->gx)
        ccn_gemm(rows, I, GH, w->gproj, GH, 1, g->w + d * GH * I, 1.0f, g->gx);
    if (g->gw) {
        ccn_gemm_init(GH, I, g->gw + d * GH * I, NULL, 0, 0, 0.0f);
        ccn_gemm(GH, I, rows, w->gproj, 1, GH, c->x, 1.0f, g->gw + d * GH * I);
    }
    if (g->gr) {
        float *gr = g->gr + d * GH * H;
        ccn_gemm_init(GH, H, gr, NULL, 0, 0, 0.0f);
        if (c->cell == CCN_CELL_GRU && !c->linear_before_reset) {
            /* R_h multiplies r * h, the rest h. */
            ccn_gemm(2 * H, H, rows, w->grec, 1, GH, w->hs, 1.0f, gr);
            ccn_gemm(H, H, rows, w->grec + 2 * H, 1, GH, w->rh, 1.0f, gr + 2 * H * H);
        } else {
            ccn_gemm(GH, H, rows, w->grec, 1, GH, w->hs, 1.0f, gr);
        }
    }
    if (g->gb) {
        column_sums(rows, GH, w->gproj, g->gb + d * 2 * GH);
        column_sums(rows, GH, w->grec, g->gb + d * 2 * GH + GH);
    }
    for (long b = 0; b < c->batch; b++)
        for (long j = 0; j < H; j++) {
            const long at = state_offset(c, d, b) + j;
            if (g->gh0)
                g->gh0[at] = w->dh[b * H + j];
            if (g->gc0)
                g->gc0[at] = w->dc[b * H + j];
        }
}

void ccn_rnn_grad(const ccn_rnn_grad_call *g, float *scratch)
{
    const ccn_rnn_call *c = &g->fwd;
    const long rows = c->seq * c->batch, H = c->hidden, GH = c->cell * H;
    grad_buffers w;
    w.proj = scratch;
    w.rec = w.proj + rows * GH;
    w.gproj = w.rec + rows * GH;
    w.grec = w.gproj + rows * GH;
    w.hs = w.grec + rows * GH;
    w.rh = w.hs + rows * H;
    w.cprev = w.rh + rows * H;
    w.cnew = w.cprev + rows * H;
    w.gstep = w.cnew + rows * H;
    w.dh = w.gstep + c->batch * GH;
    w.dc = w.dh + c->batch * H;
    w.drh = w.dc + c->batch * H;
    if (g->gx)
        ccn_gemm_init(rows, c->input, g->gx, NULL, 0, 0, 0.0f);
    if (g->gpeep)
        ccn_gemm_init(c->directions, 3 * H, g->gpeep, NULL, 0, 0, 0.0f);
    for (long d = 0; d < c->directions; d++) {
        const int reverse = c->directions == 2 ? d == 1 : c->reverse;
        grad_products(g, d, reverse, &w);
        if (c->cell == CCN_CELL_LSTM)
            lstm_cells(c, d, reverse, &w);
        grad_steps(g, d, reverse, &w);
        grad_results(g, d, &w);
    }
}
