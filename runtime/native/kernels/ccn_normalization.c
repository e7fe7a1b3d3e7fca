/* Normalization family: BatchNormalization (inference, training and its
 * gradient),
 * LayerNormalization (and its gradient) and InstanceNormalization (one row
 * standardization kernel) and LRN. */
#include <math.h>

#include "ccn_normalization.h"

typedef struct {
    long C, S;
    const float *x, *scale, *bias, *mean, *var;
    float epsilon;
    int act;
    float act_alpha;
    float *y;
} batchnorm_call;

/* Rows [begin, end) of (image, channel) of ccn_batchnorm. */
CCN_ALWAYS_INLINE void batchnorm_rows(void *context, long begin, long end)
{
    const batchnorm_call *a = context;
    const long S = a->S;
    for (long row = begin; row < end; row++) {
        const long c = row % a->C;
        /* y = (x - mean) / sqrt(var + eps) * scale + bias = x * k + d */
        const float k = a->scale[c] / sqrtf(a->var[c] + a->epsilon);
        const float d = a->bias[c] - a->mean[c] * k;
        const float *in = a->x + row * S;
        float *out = a->y + row * S;
        if (a->act == CCN_ACT_RELU) { /* pre-activation's: one pass, not two */
            for (long s = 0; s < S; s++) {
                const float v = in[s] * k + d;
                out[s] = v < 0.0f ? 0.0f : v;
            }
            continue;
        }
        for (long s = 0; s < S; s++)
            out[s] = in[s] * k + d;
        ccn_activate_simple(S, out, a->act, a->act_alpha); /* on the row still in cache */
    }
}

/* Built for the CPU's level (CCN_LEVELS, ccn_common.h), as are
 * standardize_range's rows. */
CCN_LEVELS(static, batchnorm_range, batchnorm_rows, (void *context, long begin, long end),
           (context, begin, end))

void ccn_batchnorm(long N, long C, long S, float epsilon, const float *x, const float *scale,
                   const float *bias, const float *mean, const float *var, int act,
                   float act_alpha, float *y)
{
    batchnorm_call a = {C, S, x, scale, bias, mean, var, epsilon, act, act_alpha, y};
    /* On every thread: it ran on the caller alone (DenseNet-121 at batch
     * 32, two threads: its BatchNormalizations 0.87x-1.11x one thread's
     * speed). */
    ccn_parallel_for(N * C, N * C * S, batchnorm_range, &a);
}

/* The sum of the S values EXPR(in[i]) (a double expression of v) in 8
 * running double sums, which vectorise where one sum's chain of dependent
 * additions would not. */
#define ROW_SUM(RESULT, S, in, EXPR)                                          \
    do {                                                                      \
        double sums_[8] = {0.0}, sum_ = 0.0;                                  \
        long i_ = 0;                                                          \
        for (; i_ + 8 <= (S); i_ += 8)                                        \
            for (int k_ = 0; k_ < 8; k_++) {                                  \
                const float v = (in)[i_ + k_];                                \
                sums_[k_] += (EXPR);                                          \
            }                                                                 \
        for (; i_ < (S); i_++) {                                              \
            const float v = (in)[i_];                                         \
            sum_ += (EXPR);                                                   \
        }                                                                     \
        for (int k_ = 0; k_ < 8; k_++)                                        \
            sum_ += sums_[k_];                                                \
        (RESULT) = sum_;                                                      \
    } while (0)

/* The mean and 1 / sqrt(var + epsilon) of the S values at in (population
 * variance; 0 for no values).  Two passes with double sums: the centred
 * variance does not lose digits to cancellation when the mean is large. */
CCN_ALWAYS_INLINE void row_moments(long S, const float *in, float epsilon, float *mean, float *inv_std)
{
    double sum, squares;
    ROW_SUM(sum, S, in, (double)v);
    const float m = S ? (float)(sum / (double)S) : 0.0f;
    ROW_SUM(squares, S, in, (double)(v - m) * (double)(v - m));
    *mean = m;
    *inv_std = 1.0f / sqrtf((S ? (float)(squares / (double)S) : 0.0f) + epsilon);
}

/* ccn_standardize: its rows [begin, end). */
typedef struct {
    long R;
    long S;
    float epsilon;
    const float *x;
    const float *scale;
    const float *bias;
    ccn_param_layout layout;
    float *y;
    float *mean;
    float *inv_std;
} standardize_call;

CCN_ALWAYS_INLINE void standardize_rows(void *context, long begin, long end)
{
    const standardize_call *a = context;
    long S = a->S;
    float epsilon = a->epsilon;
    const float *x = a->x;
    const float *scale = a->scale;
    const float *bias = a->bias;
    ccn_param_layout layout = a->layout;
    float *y = a->y;
    float *mean = a->mean;
    float *inv_std = a->inv_std;
    for (long r = begin; r < end; r++) {
        const float *in = x + r * S;
        float *out = y + r * S;
        float m, inv;
        row_moments(S, in, epsilon, &m, &inv);
        if (mean)
            mean[r] = m;
        if (inv_std)
            inv_std[r] = inv;
        const long p = (r % layout.period) * layout.row_stride, is = layout.inner_stride;
        const float *sc = scale + p;
        if (bias && is == 1) { /* LayerNormalization's: a loop that vectorises */
            const float *b = bias + p;
            for (long i = 0; i < S; i++)
                out[i] = (in[i] - m) * inv * sc[i] + b[i];
        } else if (bias) {
            const float *b = bias + p;
            for (long i = 0; i < S; i++)
                out[i] = (in[i] - m) * inv * sc[i * is] + b[i * is];
        } else {
            for (long i = 0; i < S; i++)
                out[i] = (in[i] - m) * inv * sc[i * is];
        }
    }
}

CCN_LEVELS(static, standardize_range, standardize_rows, (void *context, long begin, long end),
           (context, begin, end))

void ccn_standardize(long R, long S, float epsilon, const float *x, const float *scale,
                     const float *bias, ccn_param_layout layout, float *y, float *mean,
                     float *inv_std)
{
    standardize_call a = {R, S, epsilon, x, scale, bias, layout, y, mean, inv_std};
    ccn_parallel_for(R, R * S, standardize_range, &a);
}

/* Pixels per block of ccn_scale_add_nhwc: 16 rows of C channels read by
 * 8x8 tiles. */
#define CHANNELS_LAST_PIXELS 16

/* ccn_scale_add_nhwc: its blocks [begin, end) of CHANNELS_LAST_PIXELS
 * pixels of one image. */
typedef struct {
    long C;
    long S;
    const float *x;
    const float *scale;
    const float *residual;
    float *y;
} scale_add_call;

/* t[i][j] = src[j * ld + i] for i, j < 8: an 8x8 tile transposed in
 * registers (constant counts: GCC makes the loads whole-row shuffles). */
CCN_ALWAYS_INLINE void tile_in(const float *src, long ld, float t[8][8])
{
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 8; i++)
            t[i][j] = src[j * ld + i];
}

CCN_ALWAYS_INLINE void scale_add_nhwc_blocks(void *context, long begin, long end)
{
    const scale_add_call *a = context;
    long C = a->C, S = a->S, blocks = (S + CHANNELS_LAST_PIXELS - 1) / CHANNELS_LAST_PIXELS;
    for (long b = begin; b < end; b++) {
        long n = b / blocks, p0 = b % blocks * CHANNELS_LAST_PIXELS;
        long P = S - p0 < CHANNELS_LAST_PIXELS ? S - p0 : CHANNELS_LAST_PIXELS;
        const float *in = a->x + (n * S + p0) * C;
        const float *r = a->residual + n * C * S + p0;
        float *out = a->y + n * C * S + p0;
        /* The Mul, then the Add, as the nodes; each residual element read
         * before its output is written (y may be residual). */
        long c0 = 0;
        for (; c0 + 8 <= C && P == CHANNELS_LAST_PIXELS; c0 += 8)
            for (long q = 0; q < P; q += 8) {
                float t[8][8];
                tile_in(in + q * C + c0, C, t);
                for (int j = 0; j < 8; j++) {
                    float g = a->scale[c0 + j];
                    for (int i = 0; i < 8; i++) {
                        float v = g * t[j][i];
                        out[(c0 + j) * S + q + i] = v + r[(c0 + j) * S + q + i];
                    }
                }
            }
        for (long c = c0; c < C; c++) {
            float g = a->scale[c];
            for (long p = 0; p < P; p++) {
                float v = g * in[p * C + c];
                out[c * S + p] = v + r[c * S + p];
            }
        }
    }
}

CCN_LEVELS(static, scale_add_nhwc_range, scale_add_nhwc_blocks,
           (void *context, long begin, long end), (context, begin, end))

void ccn_scale_add_nhwc(long N, long C, long S, const float *x, const float *scale,
                        const float *residual, float *y)
{
    scale_add_call a = {C, S, x, scale, residual, y};
    long blocks = N * ((S + CHANNELS_LAST_PIXELS - 1) / CHANNELS_LAST_PIXELS);
    ccn_parallel_for(blocks, N * C * S, scale_add_nhwc_range, &a);
}

void ccn_broadcast_copy(int rank, const long *shape, const float *src,
                        const long *src_strides, float *dst)
{
    long total = 1, index[CCN_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++)
        total *= shape[d];
    long offset = 0;
    for (long k = 0; k < total; k++) {
        dst[k] = src[offset];
        /* Odometer step over the destination's (row-major) index. */
        for (int d = rank - 1; d >= 0; d--) {
            offset += src_strides[d];
            if (++index[d] < shape[d])
                break;
            offset -= src_strides[d] * shape[d];
            index[d] = 0;
        }
    }
}

/* ccn_lrn: its planes [begin, end). */
typedef struct {
    long N;
    long C;
    long S;
    long size;
    float alpha;
    float beta;
    float bias;
    const float *x;
    float *y;
} lrn_call;

static void lrn_range(void *context, long begin, long end)
{
    const lrn_call *a = context;
    long C = a->C;
    long S = a->S;
    long size = a->size;
    float alpha = a->alpha;
    float beta = a->beta;
    float bias = a->bias;
    const float *x = a->x;
    float *y = a->y;
    const long below = (size - 1) / 2, above = size - 1 - below;
    const float rate = alpha / (float)size;
    for (long nc = begin; nc < end; nc++) {
        const long n = nc / C, c = nc % C;
        const long lo = c - below < 0 ? 0 : c - below;
        const long hi = c + above >= C ? C - 1 : c + above;
        float *out = y + nc * S;
        /* out holds the window's sum of squares until the last loop. */
        for (long s = 0; s < S; s++)
            out[s] = 0.0f;
        for (long k = lo; k <= hi; k++) {
            const float *in = x + (n * C + k) * S;
            for (long s = 0; s < S; s++)
                out[s] += in[s] * in[s];
        }
        const float *in = x + nc * S;
        for (long s = 0; s < S; s++)
            out[s] = in[s] / powf(bias + rate * out[s], beta);
    }
}

void ccn_lrn(long N, long C, long S, long size, float alpha, float beta, float bias,
             const float *x, float *y)
{
    lrn_call a = {N, C, S, size, alpha, beta, bias, x, y};
    ccn_parallel_for(N * C, N * C * S * size, lrn_range, &a);
}

/* Partial sums kept side by side in the double sums below: a single running
 * sum is one chain of dependent additions (one per 4 cycles), lanes
 * vectorise.  The order of additions differs from one sum; the precision
 * (double) does not. */
#define SUM_LANES 8

/* Adds the sum of d = p[i] - shift over p[0..n), and of d^2, to *sum and
 * *squares, in double. */
static void shifted_sums(long n, const float *restrict p, double shift, double *sum,
                         double *squares)
{
    double lane_sum[SUM_LANES] = {0}, lane_sq[SUM_LANES] = {0};
    long i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int j = 0; j < SUM_LANES; j++) {
            const double d = (double)p[i + j] - shift;
            lane_sum[j] += d;
            lane_sq[j] += d * d;
        }
    for (; i < n; i++) {
        const double d = (double)p[i] - shift;
        lane_sum[0] += d;
        lane_sq[0] += d * d;
    }
    for (int j = 0; j < SUM_LANES; j++) {
        *sum += lane_sum[j];
        *squares += lane_sq[j];
    }
}

/* The mean and population variance of channel c of an (N, C, S) array in
 * one pass (two would read X twice), in double.  The sums are of the
 * distances d to one of the channel's values, so E[d^2] - E[d]^2 cancels
 * about 2 log10(k) of double's 16 digits when that value lies k standard
 * deviations from the mean, however large the mean: float32's 7 stay. */
static void channel_moments(long N, long C, long S, long c, const float *x, double *mean,
                            double *var)
{
    const long count = N * S;
    if (count == 0) {
        *mean = *var = 0.0;
        return;
    }
    const double shift = x[c * S];
    double sum = 0.0, squares = 0.0;
    for (long n = 0; n < N; n++)
        shifted_sums(S, x + (n * C + c) * S, shift, &sum, &squares);
    const double d = sum / (double)count, v = squares / (double)count - d * d;
    *mean = shift + d;
    *var = v > 0.0 ? v : 0.0;
}

/* The BatchNormalization kernels (and LayerNormalization's gradient) read X
 * two or three times per element: their parallel threshold counts that
 * work, not only X's size. */
#define BN_PASSES 3

/* ccn_batchnorm_training: its channels [begin, end). */
typedef struct {
    long N;
    long C;
    long S;
    float epsilon;
    float momentum;
    const float *x;
    const float *scale;
    const float *bias;
    const float *mean;
    const float *var;
    float *y;
    float *running_mean;
    float *running_var;
    float *batch_mean;
    float *batch_var;
} batchnorm_training_call;

static void batchnorm_training_range(void *context, long begin, long end)
{
    const batchnorm_training_call *a = context;
    long N = a->N;
    long C = a->C;
    long S = a->S;
    float epsilon = a->epsilon;
    float momentum = a->momentum;
    const float *x = a->x;
    const float *scale = a->scale;
    const float *bias = a->bias;
    const float *mean = a->mean;
    const float *var = a->var;
    float *y = a->y;
    float *running_mean = a->running_mean;
    float *running_var = a->running_var;
    float *batch_mean = a->batch_mean;
    float *batch_var = a->batch_var;
    for (long c = begin; c < end; c++) {
        double m, v;
        channel_moments(N, C, S, c, x, &m, &v);
        const float bm = (float)m, bv = (float)v;
        const float k = scale[c] / sqrtf(bv + epsilon);
        for (long n = 0; n < N; n++) {
            const float *in = x + (n * C + c) * S;
            float *out = y + (n * C + c) * S;
            for (long s = 0; s < S; s++)
                out[s] = (in[s] - bm) * k + bias[c];
        }
        /* As NumPy computes them in float32. */
        if (running_mean)
            running_mean[c] = mean[c] * momentum + bm * (1.0f - momentum);
        if (running_var)
            running_var[c] = var[c] * momentum + bv * (1.0f - momentum);
        if (batch_mean)
            batch_mean[c] = bm;
        if (batch_var)
            batch_var[c] = bv;
    }
}

void ccn_batchnorm_training(long N, long C, long S, float epsilon, float momentum,
                            const float *x, const float *scale, const float *bias,
                            const float *mean, const float *var, float *y, float *running_mean,
                            float *running_var, float *batch_mean, float *batch_var)
{
    batchnorm_training_call a = {N, C, S, epsilon, momentum, x, scale, bias, mean, var, y,
                                 running_mean, running_var, batch_mean, batch_var};
    ccn_parallel_for(C, BN_PASSES * N * C * S, batchnorm_training_range, &a);
}

/* ccn_batchnorm_grad: its channels [begin, end). */
typedef struct {
    long N;
    long C;
    long S;
    float epsilon;
    int training;
    const float *x;
    const float *scale;
    const float *gy;
    const float *mean;
    const float *var;
    float *gx;
    float *gscale;
    float *gbias;
    float *gmean;
    float *gvar;
} batchnorm_grad_call;

static void batchnorm_grad_range(void *context, long begin, long end)
{
    const batchnorm_grad_call *a = context;
    long N = a->N;
    long C = a->C;
    long S = a->S;
    float epsilon = a->epsilon;
    int training = a->training;
    const float *x = a->x;
    const float *scale = a->scale;
    const float *gy = a->gy;
    const float *mean = a->mean;
    const float *var = a->var;
    float *gx = a->gx;
    float *gscale = a->gscale;
    float *gbias = a->gbias;
    float *gmean = a->gmean;
    float *gvar = a->gvar;
    for (long c = begin; c < end; c++) {
        double m, v;
        if (mean) {
            m = mean[c];
            v = var[c];
        } else {
            channel_moments(N, C, S, c, x, &m, &v);
        }
        const float mu = (float)m, inv = 1.0f / sqrtf((float)v + epsilon);
        double g_b = 0.0, g_scale = 0.0;
        for (long n = 0; n < N; n++) {
            const float *restrict g = gy + (n * C + c) * S, *restrict in = x + (n * C + c) * S;
            double lane_b[SUM_LANES] = {0}, lane_scale[SUM_LANES] = {0};
            long s = 0;
            for (; s + SUM_LANES <= S; s += SUM_LANES)
                for (int j = 0; j < SUM_LANES; j++) {
                    lane_b[j] += g[s + j];
                    lane_scale[j] += (double)g[s + j] * ((in[s + j] - mu) * inv);
                }
            for (; s < S; s++) {
                lane_b[0] += g[s];
                lane_scale[0] += (double)g[s] * ((in[s] - mu) * inv);
            }
            for (int j = 0; j < SUM_LANES; j++) {
                g_b += lane_b[j];
                g_scale += lane_scale[j];
            }
        }
        const float a = scale[c] * inv, count = (float)(N * S);
        const float gb = (float)g_b, gs = (float)g_scale;
        for (long n = 0; n < N; n++)
            for (long s = 0; s < S; s++) {
                const long i = (n * C + c) * S + s;
                const float xhat = (x[i] - mu) * inv;
                gx[i] = training ? (gy[i] - gb / count - xhat * (gs / count)) * a : gy[i] * a;
            }
        gscale[c] = gs;
        gbias[c] = gb;
        if (gmean)
            gmean[c] = -gb * a;
        if (gvar)
            gvar[c] = gs * a * inv * -0.5f;
    }
}

void ccn_batchnorm_grad(long N, long C, long S, float epsilon, int training, const float *x,
                        const float *scale, const float *gy, const float *mean,
                        const float *var, float *gx, float *gscale, float *gbias, float *gmean,
                        float *gvar)
{
    batchnorm_grad_call a = {N, C, S, epsilon, training, x, scale, gy, mean, var, gx, gscale,
                             gbias, gmean, gvar};
    ccn_parallel_for(C, BN_PASSES * N * C * S, batchnorm_grad_range, &a);
}

/* ccn_layernorm_grad: its rows [begin, end) (gx) or its blocks of
 * LN_GRAD_COLUMNS columns [begin, end) (gscale). */
typedef struct {
    long R;
    long S;
    long period;
    float epsilon;
    const float *x;
    const float *scale;
    const float *gy;
    const float *mean;
    const float *inv_std;
    float *gx;
    float *gscale;
    float *stats;
} layernorm_grad_call;

static void layernorm_grad_rows(void *context, long begin, long end)
{
    const layernorm_grad_call *a = context;
    const long S = a->S;
    for (long r = begin; r < end; r++) {
        const float *restrict in = a->x + r * S, *restrict g = a->gy + r * S;
        const float *restrict sc = a->scale + (r % a->period) * S;
        float m, inv;
        if (a->mean) {
            m = a->mean[r];
            inv = a->inv_std[r];
        } else {
            row_moments(S, in, a->epsilon, &m, &inv);
            a->stats[r] = m;
            a->stats[a->R + r] = inv;
        }
        /* With gs = gy * scale, the gradient wrt xhat = (x - m) * inv:
         * gx = (gs - mean(gs) - xhat * mean(gs * xhat)) * inv. */
        double lane_g[SUM_LANES] = {0}, lane_gx[SUM_LANES] = {0};
        long i = 0;
        for (; i + SUM_LANES <= S; i += SUM_LANES)
            for (int j = 0; j < SUM_LANES; j++) {
                const float gs = g[i + j] * sc[i + j];
                lane_g[j] += gs;
                lane_gx[j] += (double)gs * ((in[i + j] - m) * inv);
            }
        for (; i < S; i++) {
            const float gs = g[i] * sc[i];
            lane_g[0] += gs;
            lane_gx[0] += (double)gs * ((in[i] - m) * inv);
        }
        double sum_g = 0.0, sum_gx = 0.0;
        for (int j = 0; j < SUM_LANES; j++) {
            sum_g += lane_g[j];
            sum_gx += lane_gx[j];
        }
        const float mean_g = S ? (float)(sum_g / (double)S) : 0.0f;
        const float mean_gx = S ? (float)(sum_gx / (double)S) : 0.0f;
        float *restrict out = a->gx + r * S;
        for (i = 0; i < S; i++)
            out[i] = (g[i] * sc[i] - mean_g - (in[i] - m) * inv * mean_gx) * inv;
    }
}

/* Columns one task of the gscale pass sums at once, a double each: every
 * row is read in runs of this many floats. */
#define LN_GRAD_COLUMNS 64

static void layernorm_gscale_blocks(void *context, long begin, long end)
{
    const layernorm_grad_call *a = context;
    const long R = a->R, S = a->S, period = a->period;
    for (long c = begin * LN_GRAD_COLUMNS; c < S && c < end * LN_GRAD_COLUMNS;
         c += LN_GRAD_COLUMNS) {
        const long n = S - c < LN_GRAD_COLUMNS ? S - c : LN_GRAD_COLUMNS;
        for (long p = 0; p < period; p++) {
            double sum[LN_GRAD_COLUMNS] = {0};
            for (long r = p; r < R; r += period) {
                const float *restrict in = a->x + r * S + c, *restrict g = a->gy + r * S + c;
                const float m = a->mean[r], inv = a->inv_std[r];
                for (long j = 0; j < n; j++)
                    sum[j] += (double)g[j] * ((in[j] - m) * inv);
            }
            for (long j = 0; j < n; j++)
                a->gscale[p * S + c + j] = (float)sum[j];
        }
    }
}

void ccn_layernorm_grad(long R, long S, long period, float epsilon, const float *x,
                        const float *scale, const float *gy, const float *mean,
                        const float *inv_std, float *gx, float *gscale, float *stats)
{
    layernorm_grad_call a = {R, S, period, epsilon, x, scale, gy, mean, inv_std, gx, gscale,
                             mean ? NULL : stats};
    ccn_parallel_for(R, BN_PASSES * R * S, layernorm_grad_rows, &a);
    if (!gscale)
        return;
    if (!mean && R > 0) { /* no rows: stats may be NULL */
        a.mean = stats;
        a.inv_std = stats + R;
    }
    ccn_parallel_for((S + LN_GRAD_COLUMNS - 1) / LN_GRAD_COLUMNS, R * S,
                     layernorm_gscale_blocks, &a);
}
