/* ccn_math.h: Math family: element-wise binary operations with NumPy
 * broadcasting, for every dtype. */
#ifndef CCN_MATH_H
#define CCN_MATH_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The arithmetic operations (result of the inputs' type) come first, the
 * comparisons and logical operations (result uint8_t, 0 or 1) from
 * CCN_EQUAL on.  Integer division truncates toward zero (and gives 0 for a
 * zero divisor instead of trapping); CCN_PRELU is a >= 0 ? a : a * b;
 * CCN_MAX and CCN_MIN propagate NaN as NumPy does. */
enum ccn_binary_op {
    CCN_ADD, CCN_SUB, CCN_MUL, CCN_DIV, CCN_POW, CCN_MAX, CCN_MIN, CCN_PRELU,
    CCN_EQUAL, CCN_LESS, CCN_GREATER, CCN_LESS_EQUAL, CCN_GREATER_EQUAL,
    CCN_AND, CCN_OR, CCN_XOR
};

/* y = a op b with NumPy broadcasting: shape is y's shape (rank <= 8), the
 * strides (in elements) of a and b are 0 along broadcast axes.  y may be a
 * (or b) itself when that one is not broadcast.  One function per input
 * dtype; y has that type, or uint8_t from CCN_EQUAL on. */
#define CCN_BINARY_DECL(NAME, T)                                              \
    void NAME(enum ccn_binary_op op, int rank, const long *shape,             \
              const T *a, const long *a_strides, const T *b,                  \
              const long *b_strides, void *y);
CCN_BINARY_DECL(ccn_binary_float32, float)
CCN_BINARY_DECL(ccn_binary_float64, double)
CCN_BINARY_DECL(ccn_binary_int64, int64_t)
CCN_BINARY_DECL(ccn_binary_int32, int32_t)
CCN_BINARY_DECL(ccn_binary_bool, uint8_t)
#undef CCN_BINARY_DECL

/* y = !x for n bools. */
void ccn_not(long n, const uint8_t *x, uint8_t *y);

/* IsNaN and IsInf: y[i] = 1 where x[i] is of a class in ``classes`` (the
 * bits below), else 0.  The class is read from the bits, so that a build
 * with -ffinite-math-only still finds NaN and infinities. */
enum { CCN_IS_NAN = 1, CCN_IS_POS_INF = 2, CCN_IS_NEG_INF = 4 };
void ccn_classify_float32(long n, int classes, const float *x, uint8_t *y);
void ccn_classify_float64(long n, int classes, const double *x, uint8_t *y);

CCN_END_DECLS
#endif /* CCN_MATH_H */
