/* ccn_attention.h: Attention family: the products of an attention around
 * its Softmax, by blocks of query rows (FusedAttention, the native
 * fusion of MatMul, Mul, Add, Softmax and MatMul). */
#ifndef CCN_ATTENTION_H
#define CCN_ATTENTION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* batch products, each of q (M x D), kt (D x N) and v (N x E), all
 * row-major one after the other; the mask (one value per key) of product
 * t and row m lies sum(t[d] * mask_strides[d]) + m * mask_rs floats in,
 * t's index t[d] over dims[0..rank) (a stride of 0 broadcasts). */
typedef struct {
    long batch, M, N, D, E;
    float scale;
    long rank, mask_rs;
    long dims[CCN_MAX_RANK], mask_strides[CCN_MAX_RANK];
} ccn_attention_geometry;

/* y[t] (M x E) = Softmax(scale * q[t] kt[t] + mask[t]) v[t] along each
 * row (mask NULL: none).  The scores of a block of rows live in a stack
 * buffer, never in memory whole; rows of at most CCN_ATTENTION_KEYS keys. */
#define CCN_ATTENTION_KEYS 4096
void ccn_attention(const ccn_attention_geometry *g, const float *q, const float *kt,
                   const float *v, const float *mask, float *y);

CCN_END_DECLS
#endif /* CCN_ATTENTION_H */
