/* ccn_rnn.h: RNN family: ONNX RNN, GRU and LSTM (one layer,
 * forward, reverse or bidirectional, default activations) and their
 * gradients RNNGrad, GRUGrad and LSTMGrad (custom domain). */
#ifndef CCN_RNN_H
#define CCN_RNN_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The cell of a recurrence; its number of gates is 1, 3 and 4. */
enum { CCN_CELL_RNN = 1, CCN_CELL_GRU = 3, CCN_CELL_LSTM = 4 };

/* One RNN, GRU or LSTM node.  G is the number of gates, D the number of
 * directions.  Layout 0 (batch_major 0): X is (seq, batch, input), Y is
 * (seq, D, batch, hidden) and the states are (D, batch, hidden); layout 1:
 * X is (batch, seq, input), Y (batch, seq, D, hidden), states (batch, D,
 * hidden).  Optional pointers are NULL when absent. */
typedef struct {
    int cell;                 /* CCN_CELL_* */
    long seq, batch, input, hidden;
    int directions;           /* D: 1 or 2 (bidirectional) */
    int reverse;              /* with D 1: the 'reverse' direction */
    int batch_major;          /* ONNX layout 1 */
    int linear_before_reset;  /* GRU only */
    float clip;               /* gate pre-activations clipped to [-clip, clip]; INFINITY: none */
    const float *x;
    /* Per direction, W^T: input x G*hidden, row-major. */
    const float *wt;
    /* Per direction, R^T: hidden x G*hidden, row-major; for GRU the (z, r)
     * block R[0:2H]^T (hidden x 2*hidden) followed by R[2H:3H]^T. */
    const float *rt;
    /* ccn_rnn only: each block of rt in the strip layout of ccn_gemm.h
     * (hidden x ccn_strip_cols(columns) floats) rather than row-major. */
    int rt_strips;
    const float *bias;        /* (D, 2*G*hidden): Wb then Rb */
    const int32_t *lens;      /* (batch): sequence lengths, clamped to [0, seq] */
    const float *h0, *c0;     /* initial hidden and cell state */
    const float *peep;        /* LSTM peepholes (D, 3*hidden): i, o, f */
    float *y, *yh, *yc;       /* outputs Y, Y_h, Y_c */
} ccn_rnn_call;

/* Runs ``call``; scratch holds seq*batch*G*hidden + batch*G*hidden +
 * 3*batch*hidden + G*hidden floats.  Steps past a sequence's length keep the state and
 * write zeros to Y; the reverse direction reverses each sequence within its
 * own length. */
void ccn_rnn(const ccn_rnn_call *call, float *scratch);

/* One LSTMGrad, GRUGrad or RNNGrad node: the forward node's call (its
 * outputs unused) with W and R as given too, the forward's Y and the
 * gradients of Y, Y_h and Y_c (NULL: zero).  Each result pointer may be
 * NULL (not wanted); the shapes are those of the forward inputs X, W, R, B,
 * initial_h, initial_c and P. */
typedef struct {
    ccn_rnn_call fwd;
    const float *w, *r;       /* (D, G*hidden, input) and (D, G*hidden, hidden) */
    const float *y;           /* the forward's Y */
    const float *gy, *gyh, *gyc;
    float *gx, *gw, *gr, *gb, *gh0, *gc0, *gpeep;
} ccn_rnn_grad_call;

/* Back-propagates through time as the NumPy kernels of runtime/ops/rnn.py
 * do: steps past a sequence's length pass the state's gradient through and
 * get none of Y's.  With rows = seq*batch, scratch holds 4*rows*G*hidden +
 * 4*rows*hidden + batch*G*hidden + 3*batch*hidden floats. */
void ccn_rnn_grad(const ccn_rnn_grad_call *call, float *scratch);

CCN_END_DECLS
#endif /* CCN_RNN_H */
