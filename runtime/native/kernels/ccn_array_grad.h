/* ccn_array_grad.h: the adjoints of the array family's selections,
 * SliceGrad and GatherGrad (custom domain): zeros of the input's shape
 * with the output's gradient put back where the selection read. */
#ifndef CCN_ARRAY_GRAD_H
#define CCN_ARRAY_GRAD_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* SliceGrad: y (``total`` elements of ``elem`` bytes) zeroed, then gy (C
 * order, ``shape``) written at y + offset through the element strides
 * y_strides, as ccn_strided_copy does. */
void ccn_slice_grad(size_t elem, long total, int rank, const long *shape, const void *gy,
                    const long *gy_strides, long offset, const long *y_strides, void *y);

/* GatherGrad of float32: y is [outer, dim, inner], gy [outer, n, inner];
 * y[o, indices[j], :] += gy[o, j, :] from zeros, negative indices counted
 * from the end, out-of-range ones (which Gather refuses) skipped.
 * index_bytes is 4 (int32) or 8 (int64). */
void ccn_gather_grad(long outer, long dim, long inner, long n, const float *gy,
                     const void *indices, int index_bytes, float *y);

CCN_END_DECLS
#endif /* CCN_ARRAY_GRAD_H */
