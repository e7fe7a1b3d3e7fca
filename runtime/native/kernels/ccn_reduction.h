/* ccn_reduction.h: Reduction family: Reduce* over any set of axes, ArgMax
 * and ArgMin. */
#ifndef CCN_REDUCTION_H
#define CCN_REDUCTION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

enum ccn_reduce_op {
    CCN_REDUCE_SUM, CCN_REDUCE_MEAN, CCN_REDUCE_MAX, CCN_REDUCE_MIN, CCN_REDUCE_PROD,
    CCN_REDUCE_L1, CCN_REDUCE_L2, CCN_REDUCE_LOG_SUM, CCN_REDUCE_LOG_SUM_EXP,
    CCN_REDUCE_SUM_SQUARE
};

/* y[k] = op over the elements x[base(k) + sum_d i_d * strides[d]] for every
 * index i of shape (the reduced axes, rank of them), where base(k) is the
 * offset of the k-th (C order) index of kept_shape under kept_strides (the
 * kept axes).  Accumulates in double; an empty reduction gives the
 * identity (0, 1, -inf, +inf; log 0 = -inf; the mean NaN). */
#define CCN_REDUCE_DECL(NAME, T)                                              \
    void NAME(enum ccn_reduce_op op, int kept_rank, const long *kept_shape,   \
              const long *kept_strides, int rank, const long *shape,          \
              const long *strides, const T *x, T *y);
CCN_REDUCE_DECL(ccn_reduce_float32, float)
CCN_REDUCE_DECL(ccn_reduce_float64, double)
#undef CCN_REDUCE_DECL

/* y[o * inner + j] = index along the middle axis (length len > 0) of an
 * (outer, len, inner) array of the largest (or the smallest) element, the
 * first one (last: the last one); a NaN counts as the extreme. */
#define CCN_ARG_DECL(NAME, T)                                                 \
    void NAME(int largest, int last, long outer, long len, long inner,        \
              const T *x, int64_t *y);
CCN_ARG_DECL(ccn_arg_extreme_float32, float)
CCN_ARG_DECL(ccn_arg_extreme_float64, double)
CCN_ARG_DECL(ccn_arg_extreme_int64, int64_t)
CCN_ARG_DECL(ccn_arg_extreme_int32, int32_t)
#undef CCN_ARG_DECL

CCN_END_DECLS
#endif /* CCN_REDUCTION_H */
