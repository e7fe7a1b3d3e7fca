/* ccn_array.h: Array family: data movement. */
#ifndef CCN_ARRAY_H
#define CCN_ARRAY_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The bytes behind Reshape, Flatten, Identity and Dropout when their result
 * cannot share its input's memory, and program outputs computed elsewhere. */
void ccn_copy(size_t nbytes, const void *x, void *y);

CCN_END_DECLS
#endif /* CCN_ARRAY_H */
