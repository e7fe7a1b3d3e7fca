/* Kernels of chainer-compiler's native (C) backend.
 *
 * Every kernel works on float32 arrays in row-major (C) order and takes its
 * shapes as arguments: the generated model code calls them with literal
 * constants, one call per Program instruction.  No kernel allocates memory;
 * scratch space (im2col columns, transposed operands) comes from the model's
 * arena, whose layout is planned when the C code is emitted.
 *
 * Files follow the runtime's op families: ccn_connection.c (Gemm, Conv),
 * ccn_pooling.c, ccn_activation.c, ccn_math.c (broadcasting arithmetic),
 * ccn_normalization.c, ccn_array.c.  C99, libc and libm only.
 */
#ifndef CCN_KERNELS_H
#define CCN_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* OpenMP is optional: without -fopenmp the pragma disappears instead of
 * triggering -Wunknown-pragmas. */
#ifdef _OPENMP
#define CCN_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define CCN_OMP_FOR
#endif

/* Largest rank the broadcasting kernels handle. */
#define CCN_MAX_RANK 8

/* ---- ccn_connection.c ---- */
/* C[m, n] = beta * bias[m * bias_rs + n * bias_cs] for an M x N C; bias NULL
 * gives zeros.  A broadcast axis of the bias has stride 0. */
void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta);
/* C[M, N] += alpha * A[M, K] * B[K, N]; A is read through strides (so a
 * transposed A costs nothing), B must be row-major K x N. */
void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C);
/* dst[c, r] = src[r, c] for an R x C src. */
void ccn_transpose(long R, long C, const float *src, float *dst);
/* 2-D convolution, NCHW input, (M, C/group, KH, KW) weights, bias may be
 * NULL; col is scratch of (C/group)*KH*KW*OH*OW floats. */
void ccn_conv2d(long N, long C, long H, long W, long M, long KH, long KW, long OH, long OW,
                long group, long stride_h, long stride_w, long dil_h, long dil_w,
                long pad_top, long pad_left, const float *x, const float *w,
                const float *bias, float *y, float *col);

/* ---- ccn_pooling.c ---- */
/* NC planes of H x W into OH x OW; taps in the padding never count. */
void ccn_maxpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long dil_h, long dil_w,
                   long pad_top, long pad_left, const float *x, float *y);
/* Averages over the taps inside the input, or, with count_include_pad,
 * inside the input plus its explicit padding (pad_bottom, pad_right). */
void ccn_avgpool2d(long NC, long H, long W, long OH, long OW, long KH, long KW,
                   long stride_h, long stride_w, long pad_top, long pad_left,
                   long pad_bottom, long pad_right, int count_include_pad,
                   const float *x, float *y);
/* y[p] = mean of the S values of plane p, for NC planes. */
void ccn_global_avgpool(long NC, long S, const float *x, float *y);

/* ---- ccn_activation.c ---- (x and y may be the same array) */
void ccn_relu(long n, const float *x, float *y);
void ccn_leaky_relu(long n, float alpha, const float *x, float *y);
void ccn_sigmoid(long n, const float *x, float *y);
void ccn_tanh(long n, const float *x, float *y);
/* Softmax (or its log) over axis of length len of an (outer, len, inner)
 * array. */
void ccn_softmax(long outer, long len, long inner, int log_softmax, const float *x, float *y);

/* ---- ccn_math.c ---- */
enum ccn_binary_op { CCN_ADD, CCN_SUB, CCN_MUL, CCN_DIV };
/* y = a op b with NumPy broadcasting: shape is y's shape (rank <= 8), the
 * strides (in elements) of a and b are 0 along broadcast axes. */
void ccn_binary(enum ccn_binary_op op, int rank, const long *shape,
                const float *a, const long *a_strides, const float *b, const long *b_strides,
                float *y);

/* ---- ccn_normalization.c ---- */
/* Inference BatchNormalization over axis 1 of an (N, C, S) array. */
void ccn_batchnorm(long N, long C, long S, float epsilon, const float *x, const float *scale,
                   const float *bias, const float *mean, const float *var, float *y);

/* ---- ccn_array.c ---- */
void ccn_copy(long n, const float *x, float *y);

#ifdef __cplusplus
}
#endif
#endif /* CCN_KERNELS_H */
