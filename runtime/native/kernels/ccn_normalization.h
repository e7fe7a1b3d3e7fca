/* ccn_normalization.h: Normalization family: BatchNormalization (inference). */
#ifndef CCN_NORMALIZATION_H
#define CCN_NORMALIZATION_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* Inference BatchNormalization over axis 1 of an (N, C, S) array. */
void ccn_batchnorm(long N, long C, long S, float epsilon, const float *x, const float *scale,
                   const float *bias, const float *mean, const float *var, float *y);

CCN_END_DECLS
#endif /* CCN_NORMALIZATION_H */
