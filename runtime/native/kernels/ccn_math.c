/* Math family: Add, Sub, Mul, Div with NumPy broadcasting. */
#include "ccn_math.h"

/* One row along the last axis: a separate loop per operator and the common
 * stride patterns, so each one vectorises. */
static void binary_row(enum ccn_binary_op op, long n, const float *a, long as,
                       const float *b, long bs, float *y)
{
#define CCN_ROW(EXPR)                                                         \
    if (as == 1 && bs == 1) {                                                 \
        for (long i = 0; i < n; i++) { const float u = a[i], v = b[i]; y[i] = (EXPR); } \
    } else {                                                                  \
        for (long i = 0; i < n; i++) {                                        \
            const float u = a[i * as], v = b[i * bs];                         \
            y[i] = (EXPR);                                                    \
        }                                                                     \
    }
    switch (op) {
    case CCN_ADD: CCN_ROW(u + v) break;
    case CCN_SUB: CCN_ROW(u - v) break;
    case CCN_MUL: CCN_ROW(u * v) break;
    case CCN_DIV: CCN_ROW(u / v) break;
    }
#undef CCN_ROW
}

void ccn_binary(enum ccn_binary_op op, int rank, const long *shape,
                const float *a, const long *a_strides, const float *b, const long *b_strides,
                float *y)
{
    if (rank == 0) {
        binary_row(op, 1, a, 0, b, 0, y);
        return;
    }
    const long n = shape[rank - 1];
    long rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= shape[d];
    long index[CCN_MAX_RANK] = {0};
    long ao = 0, bo = 0;
    for (long r = 0; r < rows; r++) {
        binary_row(op, n, a + ao, a_strides[rank - 1], b + bo, b_strides[rank - 1], y + r * n);
        /* Step the multi-index over the leading axes like an odometer. */
        for (int d = rank - 2; d >= 0; d--) {
            index[d]++;
            ao += a_strides[d];
            bo += b_strides[d];
            if (index[d] < shape[d])
                break;
            ao -= index[d] * a_strides[d];
            bo -= index[d] * b_strides[d];
            index[d] = 0;
        }
    }
}
