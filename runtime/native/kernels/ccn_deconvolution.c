/* Deconvolution family: ConvTranspose as the adjoint of im2col + GEMM: one
 * GEMM per batch of images and group into columns, then col2im adds them
 * up. */
#include "ccn_deconvolution.h"
#include "ccn_gemm.h"

/* col2im: its (image, channel) pairs [begin, end). */
typedef struct {
    long nb, M, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
    const float *col;
    long ldc;
    const float *bias;
    float *y;
    long y_stride;
} col2im_call;

static void col2im_range(void *context, long begin, long end)
{
    const col2im_call *a = context;
    long M = a->M;
    long H = a->H;
    long W = a->W;
    long KH = a->KH;
    long KW = a->KW;
    long OH = a->OH;
    long OW = a->OW;
    long sh = a->sh;
    long sw = a->sw;
    long dh = a->dh;
    long dw = a->dw;
    long pt = a->pt;
    long pl = a->pl;
    const float *col = a->col;
    long ldc = a->ldc;
    const float *bias = a->bias;
    float *y = a->y;
    long y_stride = a->y_stride;
    for (long im = begin; im < end; im++) {
        const long i = im / M, m = im % M;
        float *out = y + i * y_stride + m * OH * OW;
        const float b = bias ? bias[m] : 0.0f;
        for (long s = 0; s < OH * OW; s++)
            out[s] = b;
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++) {
                const float *row = col + ((m * KH + kh) * KW + kw) * ldc + i * H * W;
                /* Input columns [lo, hi) land inside the output, the same
                 * for every row: the inner loop has no test (and, at stride
                 * 1, vectorises). */
                const long first = kw * dw - pl;  /* ow of w = 0 */
                const long lo = first >= 0 ? 0 : (-first + sw - 1) / sw;
                long hi = OW - first <= 0 ? 0 : (OW - first + sw - 1) / sw;
                hi = hi < W ? hi : W;
                for (long h = 0; h < H; h++) {
                    const long oh = h * sh - pt + kh * dh;
                    if (oh < 0 || oh >= OH)
                        continue;
                    float *restrict o = out + oh * OW;
                    const float *restrict r = row + h * W;
                    if (sw == 1)
                        for (long w = lo; w < hi; w++)
                            o[w + first] += r[w];
                    else
                        for (long w = lo; w < hi; w++)
                            o[w * sw + first] += r[w];
                }
            }
    }
}

/* For each of nb images i and output channel m:
 * y_i[m, oh, ow] = bias[m] + the sum of col[(m, kh, kw), i*S + (h, w)] over
 * the taps (h*sh - pt + kh*dh, w*sw - pl + kw*dw) = (oh, ow); col's rows
 * are ldc floats apart, image i's columns start at i*S (S = H*W), and
 * image i's M channels start at y + i*y_stride.  One parallel loop over
 * every (image, channel) pair: late layers have few pixels per image and
 * would stay on one thread image by image. */
static void col2im(long nb, long M, long H, long W, long KH, long KW, long OH, long OW,
                   long sh, long sw, long dh, long dw, long pt, long pl, const float *col,
                   long ldc, const float *bias, float *y, long y_stride)
{
    col2im_call a = {nb, M, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, col, ldc, bias, y,
                     y_stride};
    ccn_parallel_for(nb * M, nb * M * KH * KW * OH * OW, col2im_range, &a);
}

void ccn_deconv2d(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan, const float *x,
                  const float *w, const float *bias, float *y, float *col)
{
    CCN_CONV_LOCALS(geometry);
    const long images = plan->images;
    const long Cg = C / group, Mg = M / group, K = Mg * KH * KW, S = H * W;
    /* Several images share one product (their pixels side by side in the
     * columns), so the weights are read once for all of them. */
    float *x_cols = col + ccn_grad_columns(Mg, KH * KW, images * S);
    for (long n0 = 0; n0 < N; n0 += images) {
        const long nb = images < N - n0 ? images : N - n0, ld = nb * S;
        const long block = ccn_grad_block(KH * KW, ld);
        for (long g = 0; g < group; g++) {
            const float *xg = x + (n0 * C + g * Cg) * S;
            if (nb > 1) {
                ccn_copy_image_rows(Cg, nb, S, xg, S, C * S, x_cols, ld, S);
                xg = x_cols;
            }
            /* col (K x nb*S) = w_g^T x_g, by blocks of output channels
             * whose rows col2im adds up while they are in cache
             * (CCN_GRAD_BLOCK_FLOATS): w_g is row-major Cg x K, read
             * transposed through the strides. */
            for (long m0 = 0; m0 < Mg; m0 += block) {
                const long mb = block < Mg - m0 ? block : Mg - m0, k0 = m0 * KH * KW;
                ccn_gemm_set(&(const ccn_gemm_geometry){.M = mb * KH * KW, .N = ld, .K = Cg,
                                                        .a_rs = 1, .a_cs = K, .ldb = ld,
                                                        .ldc = ld, .act = CCN_ACT_NONE},
                             w + g * Cg * K + k0, xg, 1.0f, col);
                col2im(nb, mb, H, W, KH, KW, OH, OW, stride_h, stride_w, dil_h, dil_w,
                       pad_top, pad_left, col, ld, bias ? bias + g * Mg + m0 : NULL,
                       y + (n0 * M + g * Mg + m0) * OH * OW, M * OH * OW);
            }
        }
    }
}

/* y[m] += every row (m, kd, kh, kw) of col, each input position's value
 * added at the output position its tap lands on (dropped outside). */
static void col2im3d(const ccn_conv3d_geometry *g, long channels, const float *col, float *y)
{
    const long *in = g->in, *out = g->out, *K = g->kernel;
    const long V = in[0] * in[1] * in[2], taps = K[0] * K[1] * K[2];
    for (long row = 0; row < channels * taps; ++row) {
        const long tap[3] = {row / (K[1] * K[2]) % K[0], row / K[2] % K[1], row % K[2]};
        float *ym = y + row / taps * out[0] * out[1] * out[2];
        for (long v = 0; v < V; ++v) {
            const long at[3] = {v / (in[1] * in[2]), v / in[2] % in[1], v % in[2]};
            long offset = 0, inside = 1;
            for (int a = 0; a < 3; ++a) {
                const long o = at[a] * g->stride[a] - g->pad_begin[a] + tap[a] * g->dil[a];
                inside &= o >= 0 && o < out[a];
                offset = offset * out[a] + o;
            }
            if (inside)
                ym[offset] += col[row * V + v];
        }
    }
}

void ccn_deconv3d(const ccn_conv3d_geometry *g, const float *x, const float *w,
                  const float *bias, float *y, float *col)
{
    const long Cg = g->in_channels / g->group, Mg = g->out_channels / g->group;
    const long taps = g->kernel[0] * g->kernel[1] * g->kernel[2];
    const long V = g->in[0] * g->in[1] * g->in[2], S = g->out[0] * g->out[1] * g->out[2];
    /* col = W_g^T x_g: W_g is (Cg, Mg * taps), read transposed by strides. */
    const ccn_gemm_geometry product = {.M = Mg * taps, .N = V, .K = Cg, .a_rs = 1,
                                       .a_cs = Mg * taps, .ldb = V, .ldc = V,
                                       .act = CCN_ACT_NONE, .act_alpha = 0.0f};
    for (long n = 0; n < g->batch; ++n)
        for (long grp = 0; grp < g->group; ++grp) {
            float *yg = y + (n * g->out_channels + grp * Mg) * S;
            ccn_gemm_init(Mg, S, yg, bias ? bias + grp * Mg : NULL, 1, 0, 1.0f);
            ccn_gemm_set(&product, w + grp * Cg * Mg * taps,
                         x + (n * g->in_channels + grp * Cg) * V, 1.0f, col);
            col2im3d(g, Mg, col, yg);
        }
}
