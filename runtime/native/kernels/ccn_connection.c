/* Connection family: Conv and its filter gradient, as im2col plus the
 * GEMM of ccn_gemm.c. */
#include <assert.h>
#include <string.h>

#include "ccn_connection.h"

static long min_long(long a, long b)
{
    return a < b ? a : b;
}

/* col[(c, kh, kw), (oh, ow)] = x[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw],
 * zero outside the input; col rows have ldc columns. */
static void im2col(long C, long H, long W, long KH, long KW, long OH, long OW,
                   long sh, long sw, long dh, long dw, long pt, long pl,
                   const float *x, float *col, long ldc)
{
    /* Stride 1 keeping the width: a row's output rows [oh0, oh1) that read
     * the input are one shifted block of it, copied at once (the columns
     * it wraps into are padding, zeroed after). */
    const int block = sh == 1 && sw == 1 && OW == W;
    for (long c = 0; c < C; c++)
        for (long kh = 0; kh < KH; kh++)
            for (long kw = 0; kw < KW; kw++) {
                float *row = col + ((c * KH + kh) * KW + kw) * ldc;
                /* Columns [lo, hi) of every output row read the input, the
                 * rest is padding: the same for each oh. */
                const long first = kw * dw - pl;  /* iw of ow = 0 */
                const long lo = first >= 0 ? 0 : min_long(OW, (-first + sw - 1) / sw);
                const long hi = W - first <= 0 ? lo : min_long(OW, (W - first + sw - 1) / sw);
                if (block) {
                    const long oh0 = min_long(OH, pt - kh * dh > 0 ? pt - kh * dh : 0);
                    const long oh1 = min_long(OH, H + pt - kh * dh);
                    const long start = (oh0 - pt + kh * dh) * W + first;  /* in channel c */
                    const long n = oh1 > oh0 ? (oh1 - oh0) * W : 0;
                    const long j0 = min_long(n, start < 0 ? -start : 0);
                    const long j1 = n < H * W - start ? n : H * W - start;
                    float *out = row + oh0 * OW;
                    for (long j = 0; j < oh0 * OW + j0; j++)
                        row[j] = 0.0f;
                    if (j1 > j0)
                        memcpy(out + j0, x + c * H * W + start + j0,
                               (size_t)(j1 - j0) * sizeof(float));
                    for (long j = (j1 > j0 ? j1 : j0) + oh0 * OW; j < OH * OW; j++)
                        row[j] = 0.0f;
                    for (long oh = oh0; oh < oh1; oh++) {
                        for (long ow = 0; ow < lo; ow++)
                            row[oh * OW + ow] = 0.0f;
                        for (long ow = hi; ow < OW; ow++)
                            row[oh * OW + ow] = 0.0f;
                    }
                    continue;
                }
                for (long oh = 0; oh < OH; oh++) {
                    const long ih = oh * sh - pt + kh * dh;
                    float *restrict out = row + oh * OW;
                    if (ih < 0 || ih >= H) {
                        for (long ow = 0; ow < OW; ow++)
                            out[ow] = 0.0f;
                        continue;
                    }
                    const float *restrict in = x + (c * H + ih) * W;
                    for (long ow = 0; ow < lo; ow++)
                        out[ow] = 0.0f;
                    if (sw == 1)
                        for (long ow = lo; ow < hi; ow++)
                            out[ow] = in[ow + first];
                    else
                        for (long ow = lo; ow < hi; ow++)
                            out[ow] = in[ow * sw + first];
                    for (long ow = hi; ow < OW; ow++)
                        out[ow] = 0.0f;
                }
            }
}

/* im2col_images' channels [begin, end), for ccn_parallel_for. */
typedef struct {
    long nb, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
    const float *x;
    long x_image;
    float *col;
    long ld;
} im2col_part;

static void im2col_channels(void *context, long begin, long end)
{
    const im2col_part *p = context;
    for (long c = begin; c < end; c++)
        for (long i = 0; i < p->nb; i++)
            im2col(1, p->H, p->W, p->KH, p->KW, p->OH, p->OW, p->sh, p->sw, p->dh, p->dw, p->pt,
                   p->pl, p->x + i * p->x_image + c * p->H * p->W,
                   p->col + c * p->KH * p->KW * p->ld + i * p->OH * p->OW, p->ld);
}

/* The im2col columns of the nb images at x (x_image floats apart), image
 * by image (S = OH*OW columns each) in rows ld apart: channels split
 * between threads for a large one, as the product after it is. */
static void im2col_images(long nb, long C, long H, long W, long KH, long KW, long OH, long OW,
                          long sh, long sw, long dh, long dw, long pt, long pl,
                          const float *x, long x_image, float *col, long ld)
{
    im2col_part part = {nb, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, x, x_image, col, ld};
    ccn_parallel_for(C, nb * C * KH * KW * OH * OW, im2col_channels, &part);
}

/* fill_start's rows [begin, end). */
typedef struct {
    long nb, S;
    const float *bias, *residual;
    long r_row, r_image;
    float *y;
    long ldy;
} start_part;

static void fill_start_rows(void *context, long begin, long end)
{
    const start_part *p = context;
    for (long m = begin; m < end; m++) {
        const float b = p->bias ? p->bias[m] : 0.0f;
        float *restrict y = p->y + m * p->ldy;
        if (p->residual == NULL) {
            for (long s = 0; s < p->nb * p->S; s++)
                y[s] = b;
            continue;
        }
        for (long i = 0; i < p->nb; i++) {
            const float *restrict r = p->residual + i * p->r_image + m * p->r_row;
            for (long s = 0; s < p->S; s++)
                y[i * p->S + s] = b + r[s];
        }
    }
}

/* What the product adds to, for an M x (nb*S) block of y with rows ldy
 * apart: y[m, i*S + s] = bias[m] (bias NULL: 0) plus, with a residual
 * (the fused Add's other operand), residual[i*r_image + m*r_row + s]. */
static void fill_start(long M, long nb, long S, const float *bias, const float *residual,
                       long r_row, long r_image, float *y, long ldy)
{
    start_part part = {nb, S, bias, residual, r_row, r_image, y, ldy};
    ccn_parallel_for(M, M * nb * S, fill_start_rows, &part);
}

/* Floats of im2col columns written at a time for one image: a large
 * image's columns (ResNet's first layer, 147 rows of 12544) are made and
 * multiplied a block of output rows at a time, so that the product packs
 * them from L2 rather than from memory. */
#define CCN_CONV_CHUNK_FLOATS (1L << 18)

/* One group of one image of ccn_conv2d by im2col, block of output rows by
 * block: x, w (the group's weights, as the plan says), bias and residual
 * (or NULL) and y at the group's first channel. */
static void conv_rows(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan,
                      const float *x, const float *w, const float *bias,
                      const float *residual, float *y, float *col)
{
    CCN_CONV_LOCALS(geometry);
    const long Cg = C / group, Mg = M / group, K = Cg * KH * KW, S = OH * OW;
    /* Whole rows, at least 256 columns (a product narrower than that
     * leaves the tiles part empty). */
    long rows = CCN_CONV_CHUNK_FLOATS / (K * OW);
    if (rows * OW < 256)
        rows = (256 + OW - 1) / OW;
    (void)N;
    for (long oh0 = 0; oh0 < OH; oh0 += rows) {
        const long r = min_long(rows, OH - oh0), ld = r * OW;
        float *out = y + oh0 * OW;
        /* Output row oh0 + i reads the input as row i of an input whose
         * padding before is pad_top - oh0 * stride_h. */
        im2col_images(1, Cg, H, W, KH, KW, r, OW, stride_h, stride_w, dil_h, dil_w,
                      pad_top - oh0 * stride_h, pad_left, x, C * H * W, col, ld);
        if (plan->w_panels) {
            ccn_gemm_panels_start(Mg, ld, K, w, col, ld, bias,
                                  residual ? residual + oh0 * OW : NULL, S, out, S, plan->act,
                                  plan->act_alpha);
            continue;
        }
        /* The product adds to the bias and residual, or without them sets
         * the output. */
        const int set = bias == NULL && residual == NULL;
        if (!set)
            fill_start(Mg, 1, ld, bias, residual ? residual + oh0 * OW : NULL, S, 0, out, S);
        (set ? ccn_gemm_set : ccn_gemm_ex)(
            &(const ccn_gemm_geometry){.M = Mg, .N = ld, .K = K, .a_rs = K, .a_cs = 1,
                                       .ldb = ld, .ldc = S, .act = plan->act,
                                       .act_alpha = plan->act_alpha},
            w, col, 1.0f, out);
    }
}

void ccn_conv2d(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan, const float *x,
                const float *w, const float *bias, const float *residual, float *y, float *col)
{
    CCN_CONV_LOCALS(geometry);
    const long images = plan->images;
    const int direct = plan->direct, w_panels = plan->w_panels, act = plan->act;
    const float act_alpha = plan->act_alpha;
    const long Cg = C / group, Mg = M / group, K = Cg * KH * KW, S = OH * OW;
    /* The emitter decided (and sized col for) the direct path, which reads
     * the input as the columns: only a 1x1 convolution without stride or
     * padding, one image per product, can take it. */
    assert(!direct || (images == 1 && KH == 1 && KW == 1 && stride_h == 1 && stride_w == 1 &&
                       pad_top == 0 && pad_left == 0 && OH == H && OW == W));
    assert(direct || col != NULL);
    if (direct && w_panels) {
        /* Image by image, each read and written where it lies. */
        for (long g = 0; g < group; g++)
            ccn_gemm_panels_images(Mg, S, K, w + g * ccn_panel_rows(Mg) * K, N,
                                   x + g * Cg * S, C * S, bias ? bias + g * Mg : NULL,
                                   residual ? residual + g * Mg * S : NULL, M * S,
                                   y + g * Mg * S, M * S, act, act_alpha);
        return;
    }
    for (long n0 = 0; n0 < N; n0 += images) {
        const long nb = min_long(images, N - n0), ld = nb * S;
        /* Several images share one product (columns image by image), so
         * the weights are read once for all of them; its Mg x ld result
         * then goes to each image's slice of y. */
        float *prod = col + K * images * S;
        for (long g = 0; g < group; g++) {
            const float *bg = bias ? bias + g * Mg : NULL;
            const float *rg = residual ? residual + (n0 * M + g * Mg) * S : NULL;
            const float *cols = direct ? x + (n0 * C + g * Cg) * H * W : col;
            if (nb == 1 && !direct) {
                conv_rows(geometry, plan, x + (n0 * C + g * Cg) * H * W,
                          w + g * (w_panels ? ccn_panel_rows(Mg) : Mg) * K, bg, rg,
                          y + (n0 * M + g * Mg) * S, col);
                continue;
            }
            if (!direct)
                im2col_images(nb, Cg, H, W, KH, KW, OH, OW, stride_h, stride_w, dil_h, dil_w,
                              pad_top, pad_left, x + (n0 * C + g * Cg) * H * W, C * H * W,
                              col, ld);
            float *out = nb == 1 ? y + (n0 * M + g * Mg) * S : prod;
            /* The product adds to the bias and residual (image by image),
             * or without them sets the output. */
            const int set = bg == NULL && rg == NULL;
            if (!set)
                fill_start(Mg, nb, S, bg, rg, S, M * S, out, ld);
            if (w_panels)
                ccn_gemm_panels(Mg, ld, K, w + g * ccn_panel_rows(Mg) * K, cols, ld, out, ld,
                                set, act, act_alpha);
            else
                (set ? ccn_gemm_set : ccn_gemm_ex)(
                    &(const ccn_gemm_geometry){.M = Mg, .N = ld, .K = K, .a_rs = K, .a_cs = 1,
                                               .ldb = ld, .ldc = ld, .act = act,
                                               .act_alpha = act_alpha},
                    w + g * Mg * K, cols, 1.0f, out);
            if (nb > 1)
                ccn_copy_image_rows(Mg, nb, S, prod, ld, S, y + (n0 * M + g * Mg) * S, S,
                                    M * S);
        }
    }
}

/* The outputs [*first, *last) along one axis (out of them) whose tap
 * at offset k * dil - pad reads one of the input's n pixels. */
static void tap_outputs(long n, long out, long stride, long offset, long *first, long *last)
{
    *first = offset >= 0 ? 0 : min_long(out, (-offset + stride - 1) / stride);
    *last = n - 1 - offset < 0 ? *first : min_long(out, (n - 1 - offset) / stride + 1);
    if (*last < *first)
        *last = *first;
}

void ccn_conv2d_taps(const ccn_conv_geometry *geometry, int act, float act_alpha,
                     const float *x, const float *w_taps, const float *bias, float *y,
                     float *scratch)
{
    CCN_CONV_LOCALS(geometry);
    assert(group == 1);
    const long S = OH * OW, panel_m = ccn_panel_rows(M);
    float *cols = scratch, *prod = scratch + C * S;
    for (long n = 0; n < N; n++) {
        float *yn = y + n * M * S;
        const float *xn = x + n * C * H * W;
        ccn_gemm_init(M, S, yn, bias, 1, 0, 1.0f);
        for (long kh = 0; kh < KH; kh++) {
            const long dy = kh * dil_h - pad_top;
            long oh0, oh1;
            tap_outputs(H, OH, stride_h, dy, &oh0, &oh1);
            for (long kw = 0; kw < KW; kw++) {
                const long dx = kw * dil_w - pad_left;
                long ow0, ow1;
                tap_outputs(W, OW, stride_w, dx, &ow0, &ow1);
                const long rows = oh1 - oh0, width = ow1 - ow0, R = rows * width;
                if (R == 0)
                    continue;
                /* The pixels the tap reads, channel by channel. */
                for (long c = 0; c < C; c++)
                    for (long r = 0; r < rows; r++) {
                        const float *in = xn + (c * H + (oh0 + r) * stride_h + dy) * W + dx;
                        float *out = cols + c * R + r * width;
                        for (long j = 0; j < width; j++)
                            out[j] = in[(ow0 + j) * stride_w];
                    }
                ccn_gemm_panels(M, R, C, w_taps + (kh * KW + kw) * panel_m * C, cols, R, prod,
                                R, 1, CCN_ACT_NONE, 0.0f);
                for (long m = 0; m < M; m++)
                    for (long r = 0; r < rows; r++) {
                        float *out = yn + m * S + (oh0 + r) * OW + ow0;
                        const float *p = prod + m * R + r * width;
                        for (long j = 0; j < width; j++)
                            out[j] += p[j];
                    }
            }
        }
        ccn_activate(M * S, yn, act, act_alpha);
    }
}

/* dst[c * ld + r] = src[r * cols + c] (add: +=) for an R x cols src, by
 * 8 x 8 tiles: rows of gw transposed into columns of gw. */
static void store_transposed(long R, long cols, const float *src, float *dst, long ld, int add)
{
    for (long r0 = 0; r0 < R; r0 += 8)
        for (long c0 = 0; c0 < cols; c0 += 8) {
            if (r0 + 8 <= R && c0 + 8 <= cols) {
                /* Whole tiles through a local one: vector shuffles. */
                float tile[8][8];
                for (int i = 0; i < 8; i++)
                    for (int j = 0; j < 8; j++)
                        tile[j][i] = src[(r0 + i) * cols + c0 + j];
                for (int j = 0; j < 8; j++)
                    for (int i = 0; i < 8; i++)
                        dst[(c0 + j) * ld + r0 + i] =
                            (add ? dst[(c0 + j) * ld + r0 + i] : 0.0f) + tile[j][i];
                continue;
            }
            for (long c = c0; c < cols && c < c0 + 8; c++)
                for (long r = r0; r < R && r < r0 + 8; r++)
                    dst[c * ld + r] = (add ? dst[c * ld + r] : 0.0f) + src[r * cols + c];
        }
}

void ccn_conv2d_grad_filter(const ccn_conv_geometry *geometry, const ccn_conv_plan *plan,
                            const float *x, const float *gy, float *gw, float *col)
{
    CCN_CONV_LOCALS(geometry);
    const long images = plan->images;
    const long Cg = C / group, Mg = M / group, K = Cg * KH * KW, S = OH * OW;
    /* One product per batch of images, as deep as the batch's pixels: a
     * product per image would read and write all of gw for only S
     * multiply-adds per element (16 in a ResNet's last stage).  Either
     * gw_g^T (K x Mg) += columns (K x nb*S) times gy^T (nb*S x Mg), with gy
     * and gw the operands transposed, the small ones; or, when few output
     * channels would leave most of a tile's columns empty (LeNet's 6),
     * gw_g (Mg x K) += gy (Mg x nb*S) times the columns transposed.  With
     * the tiles as full either way, the one that transposes less: gw_t
     * (K x Mg) against the columns (K x N*S).  512 channels of 4x4 at
     * batch 8 took 16.7 ms by columns, 9.0 the other way (one thread), the
     * transposes of gw_t twice the product's time. */
    const double fill_rows = ccn_gemm_tile_fill(Mg, K), fill_columns = ccn_gemm_tile_fill(K, Mg);
    const int by_columns = fill_rows < fill_columns || (fill_rows == fill_columns && Mg <= N * S);
    const long taps = KH * KW, columns = ccn_grad_columns(Cg, taps, images * S);
    /* By columns, gw_t holds at most max(columns, Mg) floats of gw^T: all
     * of it if it fits, summed over the batches by the products and
     * transposed once; else each product makes `chunk` of its rows and
     * stores them into gw at once (gw^T whole was the largest scratch of
     * a training step: 8 MiB for ResNet-50's 2048 x 1024 shortcut). */
    const long room = columns > Mg ? columns : Mg, chunk = room / Mg;
    const int whole = K * Mg <= room;
    float *gy_t = col + columns;
    float *gw_t = gy_t + (by_columns ? images * S * Mg : columns);
    for (long g = 0; g < group; g++) {
        float *gw_g = gw + g * Mg * K;
        if (N == 0)
            memset(gw_g, 0, (size_t)(K * Mg) * sizeof(float));
        for (long n0 = 0; n0 < N; n0 += images) {
            const long nb = min_long(images, N - n0), ld = nb * S;
            const float *gy_n = gy + (n0 * M + g * Mg) * S;
            /* The first batch's products set gw, the others add to it. */
            void (*product)(const ccn_gemm_geometry *, const float *, const float *, float,
                            float *) = n0 == 0 ? ccn_gemm_set : ccn_gemm_ex;
            /* The columns by blocks of channels, each multiplied while it
             * is in cache (CCN_GRAD_BLOCK_FLOATS). */
            const long block = ccn_grad_block(taps, ld);
            if (by_columns)
                ccn_transpose_batch(nb, Mg, S, gy_n, M * S, gy_t, S * Mg);
            else if (nb > 1)
                /* gw_t holds the images' gy side by side. */
                ccn_copy_image_rows(Mg, nb, S, gy_n, S, M * S, gw_t, ld, S);
            for (long c0 = 0; c0 < Cg; c0 += block) {
                const long cb = min_long(block, Cg - c0), k0 = c0 * taps, kb = cb * taps;
                im2col_images(nb, cb, H, W, KH, KW, OH, OW, stride_h, stride_w, dil_h, dil_w,
                              pad_top, pad_left, x + (n0 * C + g * Cg + c0) * H * W, C * H * W,
                              col, ld);
                if (by_columns) {
                    for (long r0 = 0; r0 < kb; r0 += chunk) {
                        const long rows = min_long(chunk, kb - r0);
                        (whole ? product : ccn_gemm_set)(
                            &(const ccn_gemm_geometry){.M = rows, .N = Mg, .K = ld, .a_rs = ld,
                                                       .a_cs = 1, .ldb = Mg, .ldc = Mg,
                                                       .act = CCN_ACT_NONE},
                            col + r0 * ld, gy_t, 1.0f, whole ? gw_t + (k0 + r0) * Mg : gw_t);
                        if (!whole)
                            store_transposed(rows, Mg, gw_t, gw_g + k0 + r0, K, n0 > 0);
                    }
                    continue;
                }
                /* gy_t holds the block's columns transposed. */
                ccn_transpose(kb, ld, col, gy_t);
                product(&(const ccn_gemm_geometry){.M = Mg, .N = kb, .K = ld, .a_rs = ld,
                                                   .a_cs = 1, .ldb = kb, .ldc = K,
                                                   .act = CCN_ACT_NONE},
                        nb > 1 ? gw_t : gy_n, gy_t, 1.0f, gw_g + k0);
            }
        }
        if (by_columns && whole && N > 0)
            ccn_transpose(K, Mg, gw_t, gw_g);
    }
}

/* Row ((c * KD + kd) * KH + kh) * KW + kw of col holds, for every output
 * position, the input that tap reads of channel c (0 in the padding). */
static void im2col3d(const ccn_conv3d_geometry *g, long channels, const float *x, float *col)
{
    const long *in = g->in, *out = g->out, *K = g->kernel;
    const long S = out[0] * out[1] * out[2];
    for (long row = 0; row < channels * K[0] * K[1] * K[2]; ++row) {
        const long tap[3] = {row / (K[1] * K[2]) % K[0], row / K[2] % K[1], row % K[2]};
        const float *xc = x + row / (K[0] * K[1] * K[2]) * in[0] * in[1] * in[2];
        float *c = col + row * S;
        for (long o = 0; o < S; ++o) {
            const long at[3] = {o / (out[1] * out[2]), o / out[2] % out[1], o % out[2]};
            long offset = 0, inside = 1;
            for (int a = 0; a < 3; ++a) {
                const long i = at[a] * g->stride[a] - g->pad_begin[a] + tap[a] * g->dil[a];
                inside &= i >= 0 && i < in[a];
                offset = offset * in[a] + i;
            }
            c[o] = inside ? xc[offset] : 0.0f;
        }
    }
}

void ccn_conv3d(const ccn_conv3d_geometry *g, int act, float act_alpha, const float *x,
                const float *w, const float *bias, float *y, float *col)
{
    const long Cg = g->in_channels / g->group, Mg = g->out_channels / g->group;
    const long K = Cg * g->kernel[0] * g->kernel[1] * g->kernel[2];
    const long V = g->in[0] * g->in[1] * g->in[2], S = g->out[0] * g->out[1] * g->out[2];
    const ccn_gemm_geometry product = {.M = Mg, .N = S, .K = K, .a_rs = K, .a_cs = 1,
                                       .ldb = S, .ldc = S, .act = act, .act_alpha = act_alpha};
    for (long n = 0; n < g->batch; ++n)
        for (long grp = 0; grp < g->group; ++grp) {
            float *yg = y + (n * g->out_channels + grp * Mg) * S;
            im2col3d(g, Cg, x + (n * g->in_channels + grp * Cg) * V, col);
            ccn_gemm_init(Mg, S, yg, bias ? bias + grp * Mg : NULL, 1, 0, 1.0f);
            ccn_gemm_ex(&product, w + grp * Mg * K, col, 1.0f, yg);
        }
}
