/* Reduction family: Reduce* over any set of axes, ArgMax and ArgMin. */
#include <math.h>

#include "ccn_reduction.h"

/* Advance the multi-index over an array of rank dimensions like an
 * odometer, keeping *offset = sum index[d] * strides[d]. */
static void step(int rank, const long *shape, const long *strides, long *index, long *offset)
{
    for (int d = rank - 1; d >= 0; d--) {
        index[d]++;
        *offset += strides[d];
        if (index[d] < shape[d])
            return;
        *offset -= index[d] * strides[d];
        index[d] = 0;
    }
}

static double initial(enum ccn_reduce_op op)
{
    switch (op) {
    case CCN_REDUCE_MAX: return -INFINITY;
    case CCN_REDUCE_MIN: return INFINITY;
    case CCN_REDUCE_PROD: return 1.0;
    default: return 0.0;
    }
}

/* The result from the accumulated acc of count elements. */
static double finish(enum ccn_reduce_op op, double acc, long count, double shift)
{
    switch (op) {
    case CCN_REDUCE_MEAN: return acc / (double)count;
    case CCN_REDUCE_L2: return sqrt(acc);
    case CCN_REDUCE_LOG_SUM: return log(acc);
    case CCN_REDUCE_LOG_SUM_EXP: return log(acc) + shift;
    default: return acc;
    }
}

/* Fold one strided row of n elements into acc; v is each element.
 * LogSumExp sums exp(v - shift), shift being the maximum, so that exp
 * cannot overflow.  A NaN wins max and min, as in NumPy. */
#define CCN_FOLD(EXPR)                                                        \
    for (long i = 0; i < n; i++) {                                            \
        const double v = (double)x[i * s];                                    \
        acc = (EXPR);                                                         \
    }                                                                         \
    break;

#define CCN_REDUCE(NAME, T)                                                   \
static double NAME##_row(enum ccn_reduce_op op, long n, const T *x, long s,   \
                         double acc, double shift)                            \
{                                                                             \
    switch (op) {                                                             \
    case CCN_REDUCE_SUM: case CCN_REDUCE_MEAN: case CCN_REDUCE_LOG_SUM:       \
        CCN_FOLD(acc + v)                                                     \
    case CCN_REDUCE_MAX: CCN_FOLD(v > acc || isnan(v) ? v : acc)              \
    case CCN_REDUCE_MIN: CCN_FOLD(v < acc || isnan(v) ? v : acc)              \
    case CCN_REDUCE_PROD: CCN_FOLD(acc * v)                                   \
    case CCN_REDUCE_L1: CCN_FOLD(acc + fabs(v))                               \
    case CCN_REDUCE_L2: case CCN_REDUCE_SUM_SQUARE: CCN_FOLD(acc + v * v)     \
    case CCN_REDUCE_LOG_SUM_EXP: CCN_FOLD(acc + exp(v - shift))               \
    }                                                                         \
    return acc;                                                               \
}                                                                             \
                                                                              \
/* Fold every element of the reduced axes from x on into acc. */              \
static double NAME##_fold(enum ccn_reduce_op op, int rank, const long *shape, \
                          const long *strides, const T *x, double acc,        \
                          double shift)                                       \
{                                                                             \
    if (rank == 0)                                                            \
        return NAME##_row(op, 1, x, 0, acc, shift);                           \
    long rows = 1, index[CCN_MAX_RANK] = {0}, offset = 0;                     \
    for (int d = 0; d < rank - 1; d++)                                        \
        rows *= shape[d];                                                     \
    for (long r = 0; r < rows; r++) {                                         \
        acc = NAME##_row(op, shape[rank - 1], x + offset, strides[rank - 1],  \
                         acc, shift);                                         \
        step(rank - 1, shape, strides, index, &offset);                       \
    }                                                                         \
    return acc;                                                               \
}                                                                             \
                                                                              \
void NAME(enum ccn_reduce_op op, int kept_rank, const long *kept_shape,       \
          const long *kept_strides, int rank, const long *shape,              \
          const long *strides, const T *x, T *y)                              \
{                                                                             \
    long outputs = 1, count = 1, index[CCN_MAX_RANK] = {0}, base = 0;         \
    for (int d = 0; d < kept_rank; d++)                                       \
        outputs *= kept_shape[d];                                             \
    for (int d = 0; d < rank; d++)                                            \
        count *= shape[d];                                                    \
    for (long k = 0; k < outputs; k++) {                                      \
        double shift = 0.0;                                                   \
        if (op == CCN_REDUCE_LOG_SUM_EXP) {                                   \
            shift = NAME##_fold(CCN_REDUCE_MAX, rank, shape, strides,         \
                                x + base, -INFINITY, 0.0);                    \
            if (!isfinite(shift)) /* all -inf, an inf or a NaN: no shift */   \
                shift = 0.0;                                                  \
        }                                                                     \
        const double acc = NAME##_fold(op, rank, shape, strides, x + base,    \
                                       initial(op), shift);                   \
        y[k] = (T)finish(op, acc, count, shift);                              \
        step(kept_rank, kept_shape, kept_strides, index, &base);              \
    }                                                                         \
}

CCN_REDUCE(ccn_reduce_float32, float)
CCN_REDUCE(ccn_reduce_float64, double)

#define CCN_NEVER(v) 0

/* NAN tells a NaN element, which beats everything but an earlier NaN. */
#define CCN_ARG_EXTREME(NAME, T, NAN)                                         \
void NAME(int largest, int last, long outer, long len, long inner,            \
          const T *x, int64_t *y)                                             \
{                                                                             \
    for (long o = 0; o < outer; o++)                                          \
        for (long j = 0; j < inner; j++) {                                    \
            const T *in = x + o * len * inner + j;                            \
            T best = in[0];                                                   \
            long found = 0;                                                   \
            for (long i = 1; i < len && !(NAN(best) && !last); i++) {         \
                const T v = in[i * inner];                                    \
                if (NAN(best) ? NAN(v)                                        \
                    : NAN(v) || (largest ? v > best : v < best)               \
                      || (last && v == best)) {                               \
                    best = v;                                                 \
                    found = i;                                                \
                }                                                             \
            }                                                                 \
            y[o * inner + j] = found;                                         \
        }                                                                     \
}

CCN_ARG_EXTREME(ccn_arg_extreme_float32, float, isnan)
CCN_ARG_EXTREME(ccn_arg_extreme_float64, double, isnan)
CCN_ARG_EXTREME(ccn_arg_extreme_int64, int64_t, CCN_NEVER)
CCN_ARG_EXTREME(ccn_arg_extreme_int32, int32_t, CCN_NEVER)
