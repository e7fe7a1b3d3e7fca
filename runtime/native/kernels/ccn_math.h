/* ccn_math.h: Math family: element-wise arithmetic with NumPy broadcasting. */
#ifndef CCN_MATH_H
#define CCN_MATH_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

enum ccn_binary_op { CCN_ADD, CCN_SUB, CCN_MUL, CCN_DIV };
/* y = a op b with NumPy broadcasting: shape is y's shape (rank <= 8), the
 * strides (in elements) of a and b are 0 along broadcast axes. */
void ccn_binary(enum ccn_binary_op op, int rank, const long *shape,
                const float *a, const long *a_strides, const float *b, const long *b_strides,
                float *y);

CCN_END_DECLS
#endif /* CCN_MATH_H */
