/* Training family: Chainer's optimizer updates, in place (see
 * ccn_training.h).  The order of the float operations is Chainer's own
 * (update_core_cpu in chainer/optimizers), so a step matches Chainer on
 * NumPy to the last bits or nearly (Adam: but for subnormal values, below). */
#include <math.h>

#include "ccn_training.h"

#if defined(__SSE__)
#include <xmmintrin.h>
/* MXCSR's flush-to-zero and denormals-are-zero bits. */
#define FLUSH_SUBNORMALS 0x8040u
#endif

/* ccn_sgd_update: its elements [begin, end). */
typedef struct {
    long n;
    double lr;
    float *param;
    const float *grad;
} sgd_update_call;

static void sgd_update_range(void *context, long begin, long end)
{
    const sgd_update_call *a = context;
    double lr = a->lr;
    float *param = a->param;
    const float *grad = a->grad;
    const float rate = (float)lr;
    for (long i = begin; i < end; i++)
        param[i] -= rate * grad[i];
}

void ccn_sgd_update(long n, double lr, float *param, const float *grad)
{
    sgd_update_call a = {n, lr, param, grad};
    ccn_parallel_for(n, n, sgd_update_range, &a);
}

/* ccn_momentum_sgd_update: its elements [begin, end). */
typedef struct {
    long n;
    double lr;
    double momentum;
    float *param;
    const float *grad;
    float *v;
} momentum_sgd_update_call;

static void momentum_sgd_update_range(void *context, long begin, long end)
{
    const momentum_sgd_update_call *a = context;
    double lr = a->lr;
    double momentum = a->momentum;
    float *param = a->param;
    const float *grad = a->grad;
    float *v = a->v;
    const float rate = (float)lr, mu = (float)momentum;
    for (long i = begin; i < end; i++) {
        v[i] *= mu;
        v[i] -= rate * grad[i];
        param[i] += v[i];
    }
}

void ccn_momentum_sgd_update(long n, double lr, double momentum, float *param,
                             const float *grad, float *v)
{
    momentum_sgd_update_call a = {n, lr, momentum, param, grad, v};
    ccn_parallel_for(n, n, momentum_sgd_update_range, &a);
}

/* ccn_adam_update: its elements [begin, end). */
typedef struct {
    long n;
    double alpha_t;
    double beta1;
    double beta2;
    double eps;
    double eta;
    double weight_decay_rate;
    float *param;
    const float *grad;
    float *m;
    float *v;
} adam_update_call;

static void adam_update_range(void *context, long begin, long end)
{
    const adam_update_call *a = context;
    double alpha_t = a->alpha_t;
    double beta1 = a->beta1;
    double beta2 = a->beta2;
    double eps = a->eps;
    double eta = a->eta;
    double weight_decay_rate = a->weight_decay_rate;
    float *param = a->param;
    const float *grad = a->grad;
    float *m = a->m;
    float *v = a->v;
    /* Python computes 1 - beta1 and friends in double; NumPy rounds each
     * scalar to float32 when it meets a float32 array. */
    const float b1 = (float)(1.0 - beta1), b2 = (float)(1.0 - beta2);
    const float alpha = (float)alpha_t, epsilon = (float)eps, minus_eta = (float)-eta;
    const double keep = 1.0 - eta * weight_decay_rate;
    const float decay = (float)keep;
    const int decays = keep != 1.0; /* Chainer skips the product when it is 1 */
#ifdef FLUSH_SUBNORMALS
    /* The moments of a dead unit (gradient 0) decay through the subnormal
     * floats, where every vector instruction touching one takes a microcode
     * assist: the update took 10-15x its time (benchmarks/NOTES.md).  Here a
     * result that would be subnormal is 0 and a subnormal input reads as 0,
     * so such a moment stops decaying below 2^-126 / (1 - beta1).  It moves
     * a parameter by less than eta * alpha_t / eps * 2^-126 / (1 - beta1)
     * (1e-32 with Chainer's defaults), so the parameters keep their bits in
     * practice (3000 steps of the benchmark's MLP: all equal to NumPy's). */
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | FLUSH_SUBNORMALS);
#endif
    for (long i = begin; i < end; i++) {
        const float g = grad[i];
        m[i] += b1 * (g - m[i]);
        v[i] += b2 * (g * g - v[i]);
        const float step = alpha / (sqrtf(v[i]) + epsilon);
        const float delta = minus_eta * (step * m[i]);
        param[i] = decays ? decay * param[i] + delta : param[i] + delta;
    }
#ifdef FLUSH_SUBNORMALS
    _mm_setcsr(csr);
#endif
}

void ccn_adam_update(long n, double alpha_t, double beta1, double beta2, double eps,
                     double eta, double weight_decay_rate, float *param, const float *grad,
                     float *m, float *v)
{
    adam_update_call a = {n, alpha_t, beta1, beta2, eps, eta, weight_decay_rate, param, grad, m, v};
    ccn_parallel_for(n, n, adam_update_range, &a);
}
