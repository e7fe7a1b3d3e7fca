/* Adjoints of Slice and Gather: see ccn_array_grad.h. */
#include <string.h>

#include "ccn_array.h"
#include "ccn_array_grad.h"

void ccn_slice_grad(size_t elem, long total, int rank, const long *shape, const void *gy,
                    const long *gy_strides, long offset, const long *y_strides, void *y)
{
    memset(y, 0, (size_t)total * elem);
    for (int k = 0; k < rank; ++k)
        if (shape[k] == 0)
            return;  /* an empty slice */
    ccn_strided_copy(elem, rank, shape, gy, gy_strides, (unsigned char *)y + offset * (long)elem,
                     y_strides);
}

void ccn_gather_grad(long outer, long dim, long inner, long n, const float *gy,
                     const void *indices, int index_bytes, float *y)
{
    memset(y, 0, (size_t)(outer * dim * inner) * sizeof(float));
    /* Repeated indices add up: no parallel loop over j. */
    for (long o = 0; o < outer; ++o)
        for (long j = 0; j < n; ++j) {
            long i = index_bytes == 4 ? (long)((const int32_t *)indices)[j]
                                      : (long)((const int64_t *)indices)[j];
            i = i < 0 ? i + dim : i;
            if (i < 0 || i >= dim)
                continue;
            float *to = y + (o * dim + i) * inner;
            const float *from = gy + (o * n + j) * inner;
            for (long k = 0; k < inner; ++k)
                to[k] += from[k];
        }
}
