/* ccn_loss.h: Loss family: SoftmaxCrossEntropyLoss and its gradient (the
 * org.chainer_compiler SoftmaxCrossEntropyLossGrad).
 *
 * Scores are an (N, C, D) array: N samples, C classes along axis 1, and D
 * the product of any further axes; labels are (N, D), of int32 or int64.
 * A sample's weight is weights[label] (weights NULL: 1), and 0 where the
 * label is ignore_index (when has_ignore).  reduction is CCN_LOSS_NONE
 * (one loss per sample: (N, D)), CCN_LOSS_SUM, or CCN_LOSS_MEAN (the sum
 * divided by the total weight of the samples).  A label outside [0, C) that
 * is not ignored makes the kernels return 1 with their outputs unfinished;
 * they return 0 otherwise. */
#ifndef CCN_LOSS_H
#define CCN_LOSS_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

enum ccn_loss_reduction { CCN_LOSS_NONE, CCN_LOSS_SUM, CCN_LOSS_MEAN };

/* log_prob = LogSoftmax(x) along the classes; loss = the weighted negative
 * log-likelihood of the labels, reduced. */
int ccn_softmax_cross_entropy_int32(long N, long C, long D, const float *x,
                                    const int32_t *labels, const float *weights,
                                    int has_ignore, long ignore_index,
                                    enum ccn_loss_reduction reduction, float *loss,
                                    float *log_prob);
int ccn_softmax_cross_entropy_int64(long N, long C, long D, const float *x,
                                    const int64_t *labels, const float *weights,
                                    int has_ignore, long ignore_index,
                                    enum ccn_loss_reduction reduction, float *loss,
                                    float *log_prob);

/* gx = (exp(log_prob) - one_hot(labels)) * coefficient per sample: its
 * weight times the loss gradient gy (one per sample with CCN_LOSS_NONE,
 * else a scalar), divided by the total weight with CCN_LOSS_MEAN. */
int ccn_softmax_cross_entropy_grad_int32(long N, long C, long D, const float *gy,
                                         const float *log_prob, const int32_t *labels,
                                         const float *weights, int has_ignore,
                                         long ignore_index,
                                         enum ccn_loss_reduction reduction, float *gx);
int ccn_softmax_cross_entropy_grad_int64(long N, long C, long D, const float *gy,
                                         const float *log_prob, const int64_t *labels,
                                         const float *weights, int has_ignore,
                                         long ignore_index,
                                         enum ccn_loss_reduction reduction, float *gx);

CCN_END_DECLS
#endif /* CCN_LOSS_H */
