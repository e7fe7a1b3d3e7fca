/* CUDA kernels of the CuPy backend's hot paths (runtime/ops/cupy_kernels.py
 * compiles them with NVRTC through cupy.RawModule).
 *
 * Why raw kernels: on a GPU, the CuPy backend's training step was host-bound.
 * Each CuPy reduction or element-wise call costs tens of microseconds of
 * Python and dispatch before the GPU sees it; a BatchNormalization written
 * against xp made about twenty such calls.  A raw kernel launch costs a few
 * microseconds, so each operator below is two or three launches.
 *
 * Layout: X is float32, C-contiguous, seen as (N, C, S) with S the product
 * of the spatial sizes; per-channel values are float32 arrays of C.  Sums are
 * accumulated in double (the GPU is waiting on memory anyway), one block per
 * channel, so results do not depend on a launch's timing.  Indices are
 * 32-bit (cupy_kernels.py sends only arrays of fewer than 2^31 elements):
 * 64-bit division costs several times more on a GPU. */

#define CCN_BLOCK 512

/* Block-wide sum of each thread's ``v`` in double; the result is valid in
 * thread 0.  ``shared`` holds CCN_BLOCK doubles. */
__device__ double ccn_block_sum(double v, double *shared)
{
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    return shared[0];
}

/* mean[c] = the mean of X[:, c, :]; one block per channel. */
extern "C" __global__ void ccn_bn_mean(const float *x, float *mean, int n, int c,
                                       int s)
{
    __shared__ double shared[CCN_BLOCK];
    const int channel = blockIdx.x, count = n * s;
    double sum = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        const int b = i / s;
        sum += x[(b * c + channel) * s + (i - b * s)];
    }
    sum = ccn_block_sum(sum, shared);
    if (threadIdx.x == 0)
        mean[channel] = (float)(sum / (double)count);
}

/* Per channel, from the centred sum of squares: the batch variance, the
 * normalisation's multiplier scale / sqrt(var + eps) and the running
 * averages momentum * old + (1 - momentum) * batch. */
extern "C" __global__ void ccn_bn_statistics(const float *x, const float *mean,
                                             const float *scale, const float *running_mean,
                                             const float *running_var, float eps,
                                             float momentum, int n, int c,
                                             int s, float *var, float *a,
                                             float *new_running_mean, float *new_running_var)
{
    __shared__ double shared[CCN_BLOCK];
    const int channel = blockIdx.x, count = n * s;
    const float centre = mean[channel];
    double squares = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        const int b = i / s;
        const float d = x[(b * c + channel) * s + (i - b * s)] - centre;
        squares += (double)d * d;
    }
    squares = ccn_block_sum(squares, shared);
    if (threadIdx.x == 0) {
        const float v = (float)(squares / (double)count);
        var[channel] = v;
        a[channel] = scale[channel] / sqrtf(v + eps);
        new_running_mean[channel] = running_mean[channel] * momentum + centre * (1 - momentum);
        new_running_var[channel] = running_var[channel] * momentum + v * (1 - momentum);
    }
}

/* Y = (X - mean) * a + b, per channel. */
extern "C" __global__ void ccn_bn_normalize(const float *x, const float *mean, const float *a,
                                            const float *b, float *y, int total,
                                            int c, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x) {
        const int channel = (i / s) % c;
        y[i] = (x[i] - mean[channel]) * a[channel] + b[channel];
    }
}

/* BatchNormalization's gradient, first pass, per channel: gB = sum(gY),
 * gscale = sum(gY * xhat) with xhat = (X - mean) * inv, inv = 1 / sqrt(var
 * + eps); and the coefficients the second pass needs: a = scale * inv,
 * gB / m and gscale / m. */
extern "C" __global__ void ccn_bn_grad_sums(const float *gy, const float *x, const float *mean,
                                            const float *var, const float *scale, float eps,
                                            int n, int c, int s, float *g_b,
                                            float *g_scale, float *inv, float *a,
                                            float *g_b_mean, float *g_scale_mean)
{
    __shared__ double shared[CCN_BLOCK];
    const int channel = blockIdx.x, count = n * s;
    const float centre = mean[channel], inverse = 1 / sqrtf(var[channel] + eps);
    double sum_gy = 0, sum_gy_xhat = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        const int b = i / s, at = (b * c + channel) * s + (i - b * s);
        sum_gy += gy[at];
        sum_gy_xhat += (double)gy[at] * ((x[at] - centre) * inverse);
    }
    sum_gy = ccn_block_sum(sum_gy, shared);
    __syncthreads();  /* every thread has read shared[0] before it is reused */
    sum_gy_xhat = ccn_block_sum(sum_gy_xhat, shared);
    if (threadIdx.x == 0) {
        g_b[channel] = (float)sum_gy;
        g_scale[channel] = (float)sum_gy_xhat;
        inv[channel] = inverse;
        a[channel] = scale[channel] * inverse;
        g_b_mean[channel] = (float)(sum_gy / (double)count);
        g_scale_mean[channel] = (float)(sum_gy_xhat / (double)count);
    }
}

/* BatchNormalization's gradient wrt X, second pass: with the batch
 * statistics (training), gX = (gY - gB/m - xhat * gscale/m) * a; with fixed
 * statistics, gX = gY * a. */
extern "C" __global__ void ccn_bn_grad_x(const float *gy, const float *x, const float *mean,
                                         const float *inv, const float *a,
                                         const float *g_b_mean, const float *g_scale_mean,
                                         int training, float *gx, int total,
                                         int c, int s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x) {
        const int channel = (i / s) % c;
        if (training)
            gx[i] = (gy[i] - g_b_mean[channel]
                     - (x[i] - mean[channel]) * inv[channel] * g_scale_mean[channel])
                    * a[channel];
        else
            gx[i] = gy[i] * a[channel];
    }
}

/* col2im for 2-D windows: image[n, ch, h, w] = the sum of the columns
 * cols[n, ch, kh, kw, oh, ow] whose tap lands there (oh * sh + kh * dh - ph
 * == h, the same along w).  One thread per image element gathers its taps,
 * so no two threads write one element. */
extern "C" __global__ void ccn_col2im_2d(const float *cols, float *image, int total,
                                         int h, int w, int kh, int kw, int oh, int ow,
                                         int sh, int sw, int dh, int dw, int ph, int pw)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x) {
        const int x = i % w, y = (i / w) % h, plane = i / (h * w);
        const float *src = cols + plane * kh * kw * oh * ow;
        float sum = 0;
        for (int ky = 0; ky < kh; ky++) {
            const int ty = y + ph - ky * dh;
            if (ty < 0 || ty % sh)
                continue;
            const int oy = ty / sh;
            if (oy >= oh)
                continue;
            for (int kx = 0; kx < kw; kx++) {
                const int tx = x + pw - kx * dw;
                if (tx < 0 || tx % sw)
                    continue;
                const int ox = tx / sw;
                if (ox < ow)
                    sum += src[((ky * kw + kx) * oh + oy) * ow + ox];
            }
        }
        image[i] = sum;
    }
}

/* im2col for 2-D windows: every receptive field of X (N, C, H, W) copied
 * into columns, ``fill`` where a tap lands in the padding.  The columns are
 * (N, C, KH, KW, OH, OW), Conv's GEMM operand, or with ``batch_inner``
 * (C, KH, KW, N, OH, OW), ConvGradFilter's, which sums over the batch and
 * the window positions in one GEMM.  One block per row (one image, channel
 * and tap), its threads along the OH * OW window positions, so the row's
 * indices are worked out once per block. */
extern "C" __global__ void ccn_im2col_2d(const float *x, float *cols, int n, int c, int h,
                                         int w, int kh, int kw, int oh, int ow, int sh,
                                         int sw, int dh, int dw, int ph, int pw, float fill,
                                         int batch_inner)
{
    /* The row's (image, channel, tap): the image is the innermost of the
     * four with batch_inner, the outermost without. */
    const int row = blockIdx.x, inner = batch_inner ? n : 1, tap = row / inner;
    const int kx = tap % kw, ky = (tap / kw) % kh;
    const int ch = batch_inner ? tap / (kw * kh) : (tap / (kw * kh)) % c;
    const int b = batch_inner ? row % n : tap / (kw * kh * c);
    const float *image = x + (b * c + ch) * h * w;
    float *out = cols + row * oh * ow;
    for (int p = threadIdx.x; p < oh * ow; p += blockDim.x) {
        const int oy = p / ow, ox = p - oy * ow;
        const int y = oy * sh + ky * dh - ph, xx = ox * sw + kx * dw - pw;
        out[p] = (y < 0 || y >= h || xx < 0 || xx >= w) ? fill : image[y * w + xx];
    }
}

/* ReluGrad: gX = gY * (Y > 0), as the xp code computes it (a NaN in gY
 * stays NaN where Y <= 0). */
extern "C" __global__ void ccn_relu_grad(const float *y, const float *gy, float *gx,
                                         int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x)
        gx[i] = gy[i] * (y[i] > 0 ? 1.0f : 0.0f);
}

/* SGDUpdate in place: param -= lr * grad, the product rounded before the
 * subtraction as the xp code rounds it (no fused multiply-add). */
extern "C" __global__ void ccn_sgd_update(float *param, const float *grad, float lr,
                                          int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x)
        param[i] = __fsub_rn(param[i], __fmul_rn(lr, grad[i]));
}
