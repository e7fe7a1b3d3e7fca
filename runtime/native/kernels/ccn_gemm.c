/* GEMM: the matrix products every other family multiplies with (Gemm,
 * MatMul, convolutions and their gradients, the recurrent cells).
 *
 * The GEMM follows the usual cache-blocked scheme: a KC-deep slice of an
 * MR-row block of A and of an NR-column strip of B are packed into small
 * contiguous buffers on the stack, and a register-blocked MR x NR
 * micro-kernel written in plain C (which gcc -O3 vectorises) multiplies
 * them.  A constant A (a convolution's weights) or B (a Gemm's or MatMul's)
 * can come packed at emit time (panels and strips, ccn_gemm.h),
 * which spares the packing on every call and reads the weights in one
 * sequential stream.  Large products are split between
 * the pool's threads (ccn_threads.h) by columns (or rows when there are few
 * columns); an
 * optional CBLAS takes them instead when built with -DCCN_CBLAS. */
/* ISO C mode (-std=c99) turns GCC's contraction of a * b + c into fused
 * multiply-adds off; the micro-kernel wants them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast", "no-trapping-math")
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef CCN_CBLAS
#include <cblas.h>
#endif

#include "ccn_gemm.h"

/* Micro-kernel tile: MR rows of C by NR columns, two vector registers wide
 * per row, so 2*MR accumulators fit the register file of each ISA (32
 * registers with AVX-512, 16 before). */
#if defined(__AVX512F__)
#define CCN_MR 8
#define CCN_NR 32
#define CCN_TALL_MR 24
#define CCN_DOT_ROWS 4
#elif defined(__AVX__)
#define CCN_MR 6
#define CCN_NR 16
#define CCN_TALL_MR 12
#define CCN_DOT_ROWS 2
#else
#define CCN_MR 6
#define CCN_NR 8
#define CCN_TALL_MR 12
#define CCN_DOT_ROWS 2
#endif
/* ccn_gemm_bt's dot products (CCN_DOT_ROWS rows of A by four of Bt) and
 * gemm_shallow's updates (CCN_DOT_ROWS rows of C by four vectors) keep
 * 4 * CCN_DOT_ROWS sums and up to CCN_DOT_ROWS + 1 operands in vector
 * registers. */
/* The tall tile, CCN_TALL_MR rows by one vector (NR/2 columns), serves
 * narrow products (a late convolution layer of one image, 4x4 outputs)
 * that would leave half of the wide tile's columns empty; it reads A from
 * emit-time panels only. */
/* Depth of a packed slice: an MR x KC block of A plus a KC x NR strip of B
 * stay in L1 while the micro-kernel runs.  Also the depth of the emit-time
 * panels (PANEL_DEPTH in lowerings/connection.py). */
#define CCN_KC 256
#if CCN_PANEL_ROWS % CCN_MR || CCN_PANEL_ROWS % CCN_TALL_MR || CCN_STRIP_COLS % CCN_NR
#error "the micro-kernels' rows must divide CCN_PANEL_ROWS"
#endif
/* Rows of B that the micro-kernel fetches ahead of its loads. */
#define CCN_PREFETCH_K 24
/* Rows of A whose packed KC slices (MC x KC floats, 96 KiB) are reused
 * from L2 across every NR strip of B. */
#define CCN_MC 96
/* The same for A in panels, which costs no packing: so many rows (their
 * slices at most 768 KiB, in L2) run along each block of B's strips,
 * packed once for them, where CCN_MC rows packed it M / CCN_MC times
 * (a ninth of 384 x 64 by 196, a 1x1 convolution at 14x14). */
#define CCN_PANEL_MC (8 * CCN_MC)
/* Rows of a block from which a strip of B is packed (else read in place). */
#define CCN_PACK_B_ROWS (2 * CCN_MR)
/* A slice at most this deep reads its strips in place whatever the rows
 * (reads_in_place), unless B's rows lie a multiple of CCN_ALIAS_FLOATS
 * apart. */
#define CCN_SHALLOW_IN_PLACE 32
#define CCN_ALIAS_FLOATS 512
/* Fewer rows than this: no packing, one pass over B does every row. */
#define CCN_SMALL_M 4
/* Depth up to which, and columns from which, a product streams C once
 * instead of packing (measured: a 100 x 784 update of depth 8 1.3x faster,
 * 100 x 100 1.5x slower). */
#define CCN_SHALLOW_K 16
#define CCN_SHALLOW_MIN_N (4 * CCN_NR)

/* Keeps a loaded vector in a register: gcc otherwise folds each use of it
 * into a multiply-add as a memory operand, one load per multiply-add, and
 * the dot products of ccn_gemm_bt and the updates of gemm_shallow become
 * bound by loads (ccn_gemm_bt: 1.9x slower measured). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CCN_IN_REGISTER(x) __asm__("" : "+v"(x))
#elif defined(__GNUC__) && defined(__aarch64__)
#define CCN_IN_REGISTER(x) __asm__("" : "+w"(x))
#else
#define CCN_IN_REGISTER(x) ((void)0)
#endif
/* CCN_ALWAYS_INLINE (ccn_common.h): a constant argument (a count of rows
 * or vectors) then unrolls the loops it bounds and their sums live in
 * registers.  A loop over a tile's rows is also unrolled whole
 * (CCN_UNROLL): GCC left the tall batched tile's 24 rows, and store_tile's
 * 8 once its body grew, loops over accumulators copied to memory
 * (store_tile so: 64 x 27 by 1024, a 3-channel stem's im2col product,
 * 1.12x-1.2x the time). */

/* Multiply-adds from which a CBLAS build hands the product over. */
#define CCN_CBLAS_MACS (1L << 16)

static long min_long(long a, long b)
{
    return a < b ? a : b;
}

/* The A operand of a product: alpha * A read through strides, or (panels
 * not NULL) the panel layout of ccn_gemm.h with panel_rows rows (M
 * rounded up to CCN_PANEL_ROWS). */
typedef struct {
    const float *a;
    long rs, cs;
    float alpha;
    const float *panels;
    long panel_rows;
} a_operand;

void ccn_gemm_init(long M, long N, float *C, const float *bias, long bias_rs, long bias_cs,
                   float beta)
{
    for (long m = 0; m < M; m++) {
        float *restrict c = C + m * N;
        if (bias == NULL || beta == 0.0f) {
            for (long n = 0; n < N; n++)
                c[n] = 0.0f;
        } else {
            const float *b = bias + m * bias_rs;
            for (long n = 0; n < N; n++)
                c[n] = beta * b[n * bias_cs];
        }
    }
}

/* The epilogue: activation act applied to the n floats of c, the switch
 * outside the loops so that each of them vectorises. */
static void activate_row(long n, float *restrict c, int act, float act_alpha)
{
    if (ccn_activate_simple(n, c, act, act_alpha))
        return;
    switch (act) {
    case CCN_ACT_SIGMOID:
        for (long j = 0; j < n; j++)
            c[j] = 1.0f / (1.0f + expf(-c[j]));
        break;
    case CCN_ACT_TANH:
        for (long j = 0; j < n; j++)
            c[j] = tanhf(c[j]);
        break;
    case CCN_ACT_SWISH:  /* SiLU after EfficientNet's and MobileViT's convolutions */
        for (long j = 0; j < n; j++)
            c[j] = ccn_swish_poly(c[j], act_alpha);
        break;
    case CCN_ACT_GELU:  /* the MLP of BERT, ViT and GPT-2 (tanh), ConvNeXt's blocks */
        if (act_alpha == 0.0f)
            for (long j = 0; j < n; j++)
                c[j] = ccn_gelu_poly(c[j]);
        else
            for (long j = 0; j < n; j++)
                c[j] = ccn_gelu_tanh_poly(c[j]);
        break;
    default:
        break;
    }
}

/* activate_row on rows [0, M) x columns [0, N) of C (stride ldc). */
static void activate_block(long M, long N, float *C, long ldc, int act, float act_alpha)
{
    for (long m = 0; act != CCN_ACT_NONE && m < M; m++)
        activate_row(N, C + m * ldc, act, act_alpha);
}

/* ap[k * MR + i] = alpha * A[i, k] for an mr x kc block (rows past mr are
 * zero), so the micro-kernel reads A contiguously whatever its strides. */
static void pack_a(long mr, long kc, const float *A, long a_rs, long a_cs, float alpha,
                   float *restrict ap)
{
    if (a_rs == 1 && mr == CCN_MR) {
        /* A transposed (column-major): each k reads MR neighbours, so the
         * panel touches each of A's columns (a page apart in a large A)
         * once rather than once per row. */
        for (long k = 0; k < kc; k++)
            for (long i = 0; i < CCN_MR; i++)
                ap[k * CCN_MR + i] = alpha * A[k * a_cs + i];
        return;
    }
    if (a_cs == 1 && mr == CCN_MR) {
        /* Row-major A by MR x 8 tiles through a local array, whose rows
         * are stored as whole vectors: stored element by element, the
         * panel of a deep, narrow product (a weight gradient's im2col
         * columns times 64 channels) took a third of its time. */
        long k = 0;
        for (; k + 8 <= kc; k += 8) {
            float tile[8][CCN_MR];
            for (long i = 0; i < CCN_MR; i++)
                for (long j = 0; j < 8; j++)
                    tile[j][i] = alpha * A[i * a_rs + k + j];
            memcpy(ap + k * CCN_MR, tile, sizeof tile);
        }
        for (; k < kc; k++)
            for (long i = 0; i < CCN_MR; i++)
                ap[k * CCN_MR + i] = alpha * A[i * a_rs + k];
        return;
    }
    /* Row by row: a row-major A is read in order. */
    for (long i = 0; i < mr; i++) {
        const float *a = A + i * a_rs;
        for (long k = 0; k < kc; k++)
            ap[k * CCN_MR + i] = alpha * a[k * a_cs];
    }
    for (long i = mr; i < CCN_MR; i++)
        for (long k = 0; k < kc; k++)
            ap[k * CCN_MR + i] = 0.0f;
}

/* bp[k * NR + j] = B[k, j] for a kc x nr strip of a row-major B with ldb
 * columns (columns past nr are zero); ahead: B is cold (b_operand), so the
 * strip two after this one is fetched meanwhile. */
static void pack_b(long kc, long nr, const float *B, long ldb, float *restrict bp, int ahead)
{
    /* A whole strip's rows are copied with a constant size, which the
     * compiler inlines: a library call per row of NR floats cost more than
     * the copy (7% of a ResNet training step). */
    if (nr == CCN_NR) {
        /* Each row's three lines, as micro_tile's in-place B: rows an image
         * apart are more streams than the hardware follows (32 rows of 256
         * deep over 27x27 at batch 8: 0.89x-0.93x the time).  Only a cold
         * B: one in L2 took 1.05x. */
        for (long k = 0; ahead && k < kc; k++) {
            CCN_PREFETCH_AT(B, k * ldb + 2 * CCN_NR);
            CCN_PREFETCH_AT(B, k * ldb + 2 * CCN_NR + CCN_NR / 2);
            CCN_PREFETCH_AT(B, k * ldb + 3 * CCN_NR - 1);
            memcpy(bp + k * CCN_NR, B + k * ldb, CCN_NR * sizeof(float));
        }
        for (long k = 0; !ahead && k < kc; k++)
            memcpy(bp + k * CCN_NR, B + k * ldb, CCN_NR * sizeof(float));
        return;
    }
    /* A part strip element by element (masked vector loads where the ISA
     * has them): a copy of nr floats became `rep movsq`, whose start-up
     * took a sixth of a 512 x 49 by 4608 product. */
    for (long k = 0; k < kc; k++)
        for (long j = 0; j < CCN_NR; j++)
            bp[k * CCN_NR + j] = j < nr ? B[k * ldb + j] : 0.0f;
}

/* The B operand of a product: row-major with rows ldb apart, or (panels
 * not NULL) the strip layout of ccn_gemm.h with panel_cols columns
 * (N rounded up to CCN_STRIP_COLS).  cold: B is one image of a batch,
 * read from memory rather than from the cache its producer left it in
 * (wide_fits). */
typedef struct {
    const float *b;
    long ldb;
    const float *panels;
    long panel_cols;
    int cold;
} b_operand;

/* What the first store of a set product adds to its sums, so that no pass
 * writes it into C beforehand (each NULL: none): a bias per column (a
 * Gemm's or MatMul's row of N), a bias per row (a convolution's output
 * channels) and a matrix (rows ldr apart: a fused residual Add's other
 * operand, which may be C itself).  Indexed by the whole product's rows
 * and columns; the sum is as if row bias + residual + column bias had
 * been stored in C first. */
typedef struct {
    const float *col_bias, *row_bias, *res;
    long ldr;
} c_start;

static const c_start NO_START = {NULL, NULL, NULL, 0};

/* s for the block of a product whose first element is at row m, column n. */
static c_start start_at(const c_start *s, long m, long n)
{
    return (c_start){s->col_bias ? s->col_bias + n : NULL, s->row_bias ? s->row_bias + m : NULL,
                     s->res ? s->res + m * s->ldr + n : NULL, s->ldr};
}

/* What start s adds at row i, column j of its block. */
static float start_value(const c_start *s, long i, long j)
{
    float v = s->row_bias ? s->row_bias[i] : 0.0f;
    if (s->res)
        v += s->res[i * s->ldr + j];
    return s->col_bias ? v + s->col_bias[j] : v;
}

/* Whether s adds anything. */
static int starts(const c_start *s)
{
    return s->col_bias || s->row_bias || s->res;
}

/* The MR x kc block of rows [m, m + mr) and depth [k0, k0 + kc) of A:
 * its place in the panels, in A itself, or else packed into buf; *lda and
 * *ars get the distances between its k steps and its rows. */
static const float *a_block(const a_operand *A, long m, long mr, long k0, long kc,
                            float *buf, long *lda, long *ars)
{
    *ars = 1;
    if (A->panels == NULL && A->cs == 1 && A->alpha == 1.0f && mr == CCN_MR) {
        /* Whole row-major rows are read in place, as onnxruntime's MLAS
         * reads A: packing them took 30% of a 3136 x 96 by 384 product. */
        *lda = 1;
        *ars = A->rs;
        return A->a + m * A->rs + k0;
    }
    if (A->panels == NULL) {
        pack_a(mr, kc, A->a + m * A->rs + k0 * A->cs, A->rs, A->cs, A->alpha, buf);
        *lda = CCN_MR;
        return buf;
    }
    *lda = CCN_PANEL_ROWS;
    return A->panels + k0 * A->panel_rows + m / CCN_PANEL_ROWS * CCN_PANEL_ROWS * kc +
           m % CCN_PANEL_ROWS;
}

/* C[0:mr, 0:nr] += acc (rows NR floats apart), or = acc + the start s
 * (the tile's) when first, then the activation when last. */
static void add_tile(const float *acc, const c_start *s, float *C, long ldc, long mr,
                     long nr, int first, int last, int act, float act_alpha)
{
    for (long i = 0; i < mr; i++) {
        float *c = C + i * ldc;
        if (first && starts(s))
            for (long j = 0; j < nr; j++)
                c[j] = acc[i * CCN_NR + j] + start_value(s, i, j);
        else if (first)
            for (long j = 0; j < nr; j++)
                c[j] = acc[i * CCN_NR + j];
        else
            for (long j = 0; j < nr; j++)
                c[j] += acc[i * CCN_NR + j];
        if (last && act != CCN_ACT_NONE)
            activate_row(nr, c, act, act_alpha);
    }
}

#if defined(__GNUC__)
/* GCC/clang vector extensions: a tile is a few vectors per row, each in a
 * register whatever the vector width (scalar * vector broadcasts). */
typedef float vec __attribute__((vector_size(CCN_NR / 2 * sizeof(float))));
#endif

/* ReLU and ReLU6 of a whole tile on x86 (CCN_VEC_ACT) apply to its
 * vectors in registers, before their one store: stored, read back and
 * blended, they took a tenth of 96 x 16 by 12544 (a 1x1 convolution at
 * 112x112) and a twentieth at 14x14.  MAXPS and MINPS return their second
 * operand when either is NaN or both are zero, so micro_tile's operand
 * orders give ccn_activate_simple's bits (NaN 0 after ReLU, kept by ReLU6;
 * -0 likewise). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__)
#include <immintrin.h>
#define CCN_VEC_ACT 1
#if defined(__AVX512F__)
typedef __m512 x86_vec;
#define CCN_MAX_PS _mm512_max_ps
#define CCN_MIN_PS _mm512_min_ps
#define CCN_SET1_PS _mm512_set1_ps
#define CCN_ZERO_PS _mm512_setzero_ps
#elif defined(__AVX__)
typedef __m256 x86_vec;
#define CCN_MAX_PS _mm256_max_ps
#define CCN_MIN_PS _mm256_min_ps
#define CCN_SET1_PS _mm256_set1_ps
#define CCN_ZERO_PS _mm256_setzero_ps
#else
typedef __m128 x86_vec;
#define CCN_MAX_PS _mm_max_ps
#define CCN_MIN_PS _mm_min_ps
#define CCN_SET1_PS _mm_set1_ps
#define CCN_ZERO_PS _mm_setzero_ps
#endif
#endif

/* A whole tile's sums v (micro_tile's) to C: = v plus the start s when
 * first, else += v, then the activation when last; in_registers (ReLU or
 * ReLU6 on x86, CCN_VEC_ACT, a constant): applied to the vectors before
 * their one store. */
#if defined(__GNUC__)
CCN_ALWAYS_INLINE void store_tile(vec v[CCN_MR][2], const c_start *s, float *C, long ldc,
                                  int first, int last, int act, float act_alpha,
                                  int in_registers)
{
    const int simple = ccn_activate_simple(0, NULL, act, act_alpha);
    CCN_UNROLL(24)
    for (int i = 0; i < CCN_MR; i++) {
        float *c = C + i * ldc;
        for (int h = 0; h < 2; h++) {
            const long j = h * (CCN_NR / 2);
            vec sum = v[i][h], old;
            /* C's old value, or the start: the sum as if the start had
             * been stored in C first. */
            if (!first) {
                memcpy(&old, c + j, sizeof old);
                sum += old;
            } else if (starts(s)) {
                old = (vec){0} + (s->row_bias ? s->row_bias[i] : 0.0f);
                if (s->res) {
                    vec r;
                    memcpy(&r, s->res + i * s->ldr + j, sizeof r);
                    old += r;
                }
                if (s->col_bias) {
                    vec b;
                    memcpy(&b, s->col_bias + j, sizeof b);
                    old += b;
                }
                sum += old;
            }
#ifdef CCN_VEC_ACT
            if (in_registers && act == CCN_ACT_RELU)
                sum = (vec)CCN_MAX_PS(CCN_ZERO_PS(), (x86_vec)sum);  /* NaN: the second */
            else if (in_registers)
                sum = (vec)CCN_MIN_PS(CCN_SET1_PS(act_alpha),
                                      CCN_MAX_PS(CCN_ZERO_PS(), (x86_vec)sum));
#endif
            memcpy(c + j, &sum, sizeof sum);
        }
    }
    /* On the stored rows: a call between the stores would keep v in memory. */
    for (int i = 0; i < CCN_MR && last && !in_registers; i++) {
        if (simple)
            ccn_activate_simple(CCN_NR, C + i * ldc, act, act_alpha);
        else
            activate_row(CCN_NR, C + i * ldc, act, act_alpha);
    }
}
#endif

/* C[0:mr, 0:nr] += ap * bp over kc (ap[k * lda + i * ars]: packed, ars 1;
 * A's own rows, lda 1; bp's rows ldbp apart), or = when first (plus the
 * tile's start s), then the activation when last: an MR x NR tile, 2*MR
 * vector registers.  Inlined with a constant stride, so that each layout's
 * loads have constant offsets.  (C is not restrict: s's residual may be
 * C itself, each element read just before it is written.) */
CCN_ALWAYS_INLINE void micro_tile(long kc, const float *restrict ap, long lda, long ars,
                                  const float *restrict bp, long ldbp, const c_start *s,
                                  float *C, long ldc, long mr, long nr, int first, int last,
                                  int act, float act_alpha)
{
    float acc[CCN_MR][CCN_NR];
#if defined(__GNUC__)
    /* C's tile (or the residual's), read after the loop, is fetched during
     * it: from an init pass over a C larger than L2, its loads stalled for
     * a sixth of the kernel's time (3136 x 384 by 96).  So is the next
     * strip's, which a shallow product's next tile reads (a residual over
     * 256 x 3136 at depth 64: 0.93x to 0.97x the time). */
    const float *prior = !first ? C : s->res;
    const long ldp = !first ? ldc : s->ldr;
    for (long i = 0; prior != NULL && i < mr; i++) {
        __builtin_prefetch(prior + i * ldp);
        __builtin_prefetch(prior + i * ldp + nr - 1);
        CCN_PREFETCH_AT(prior + i * ldp, CCN_NR);
        CCN_PREFETCH_AT(prior + i * ldp, CCN_NR + CCN_NR / 2);
    }
    vec v[CCN_MR][2];
    for (int i = 0; i < CCN_MR; i++)
        v[i][0] = v[i][1] = (vec){0};
    /* B's rows CCN_PREFETCH_K ahead: a constant B larger than L2 (a
     * transformer's 768 x 3072 weights) stalled its loads for 40% of the
     * product.  A shallow slice, whose rows are over before that, fetches
     * the next strip's instead, which the next tile reads: B read in place
     * (a 1x1 convolution of 16 channels out, its input the B) is as many
     * streams as rows, more than the hardware follows (32 -> 16 channels
     * at 112x112 0.62x-0.72x the time).  B read in place (its rows an
     * image apart) fetches, at any depth, the strip two after this one,
     * each row's middle line too: unaligned, NR floats span three lines,
     * and the middle one, never fetched, stalled every load of it (16 rows
     * of 64 and 128 deep over 55x55, SqueezeNet's squeezes: 0.36x-0.56x
     * the time). */
    const int in_place = ldbp != CCN_NR && ldbp != CCN_STRIP_COLS;
    const long ahead = in_place                    ? 2 * CCN_NR
                       : kc > 2 * CCN_PREFETCH_K ? CCN_PREFETCH_K * ldbp
                                                 : CCN_NR;
    for (long k = 0; k < kc; k++) {
        vec b0, b1;
        CCN_PREFETCH_AT(bp, k * ldbp + ahead);
        CCN_PREFETCH_AT(bp, k * ldbp + ahead + CCN_NR - 1);
        if (in_place)
            CCN_PREFETCH_AT(bp, k * ldbp + ahead + CCN_NR / 2);
        memcpy(&b0, bp + k * ldbp, sizeof b0);
        memcpy(&b1, bp + k * ldbp + CCN_NR / 2, sizeof b1);
        for (int i = 0; i < CCN_MR; i++) {
            v[i][0] += ap[k * lda + i * ars] * b0;
            v[i][1] += ap[k * lda + i * ars] * b1;
        }
    }
    if (mr == CCN_MR && nr == CCN_NR) {
        /* A whole tile goes from the registers to C, not through acc (a
         * copy the compiler makes a library call); ReLU and ReLU6 each
         * their own copy, so that the others' code stays as it was (in
         * one copy, the tiles without an epilogue took 1.02x-1.05x). */
#ifdef CCN_VEC_ACT
        if (last && act == CCN_ACT_RELU)
            store_tile(v, s, C, ldc, first, 1, CCN_ACT_RELU, act_alpha, 1);
        else if (last && act == CCN_ACT_CLIP)
            store_tile(v, s, C, ldc, first, 1, CCN_ACT_CLIP, act_alpha, 1);
        else
#endif
            store_tile(v, s, C, ldc, first, last, act, act_alpha, 0);
        return;
    }
    memcpy(acc, v, sizeof acc);
#else
    for (int i = 0; i < CCN_MR; i++)
        for (int j = 0; j < CCN_NR; j++)
            acc[i][j] = 0.0f;
    for (long k = 0; k < kc; k++)
        for (int i = 0; i < CCN_MR; i++)
            for (int j = 0; j < CCN_NR; j++)
                acc[i][j] += ap[k * lda + i * ars] * bp[k * ldbp + j];
#endif
    add_tile(&acc[0][0], s, C, ldc, mr, nr, first, last, act, act_alpha);
}

/* micro_tile for packed A (ars 1) or A's own rows (lda 1). */
static void micro_kernel(long kc, const float *restrict ap, long lda, long ars,
                         const float *restrict bp, long ldbp, const c_start *s, float *C,
                         long ldc, long mr, long nr, int first, int last, int act,
                         float act_alpha)
{
    if (ars == 1)
        micro_tile(kc, ap, lda, 1, bp, ldbp, s, C, ldc, mr, nr, first, last, act, act_alpha);
    else
        micro_tile(kc, ap, 1, ars, bp, ldbp, s, C, ldc, mr, nr, first, last, act, act_alpha);
}

/* micro_kernel's tall tile: TALL_MR rows by NR/2 columns (nr <= NR/2),
 * one vector register per row. */
static void micro_kernel_tall(long kc, const float *restrict ap, long lda,
                              const float *restrict bp, long ldbp, const c_start *s, float *C,
                              long ldc, long mr, long nr, int first, int last, int act,
                              float act_alpha)
{
    float acc[CCN_TALL_MR][CCN_NR];
#if defined(__GNUC__)
    vec v[CCN_TALL_MR];
    for (int i = 0; i < CCN_TALL_MR; i++)
        v[i] = (vec){0};
    for (long k = 0; k < kc; k++) {
        vec b;
        memcpy(&b, bp + k * ldbp, sizeof b);
        for (int i = 0; i < CCN_TALL_MR; i++)
            v[i] += ap[k * lda + i] * b;
    }
    for (int i = 0; i < CCN_TALL_MR; i++)
        memcpy(acc[i], &v[i], sizeof v[i]);
#else
    for (int i = 0; i < CCN_TALL_MR; i++)
        for (int j = 0; j < CCN_NR / 2; j++)
            acc[i][j] = 0.0f;
    for (long k = 0; k < kc; k++)
        for (int i = 0; i < CCN_TALL_MR; i++)
            for (int j = 0; j < CCN_NR / 2; j++)
                acc[i][j] += ap[k * lda + i] * bp[k * ldbp + j];
#endif
    add_tile(&acc[0][0], s, C, ldc, mr, nr, first, last, act, act_alpha);
}

#if defined(__GNUC__)
/* gemv's block: c[0:nv vectors] (+)= alpha * sum_k A[k * a_cs] B[k, :], the
 * sums in nv vector registers for the whole depth. */
CCN_ALWAYS_INLINE void gemv_block(int nv, long K, const float *A, long a_cs, const float *B,
                                  long ldb, float alpha, float *c, int set)
{
    vec acc[8], b;
    for (int j = 0; j < nv; j++)
        acc[j] = (vec){0};
    for (long k = 0; k < K; k++) {
        const float a = A[k * a_cs];
        for (int j = 0; j < nv; j++) {
            memcpy(&b, B + k * ldb + j * (CCN_NR / 2), sizeof b);
            acc[j] += a * b;
        }
    }
    for (int j = 0; j < nv; j++) {
        acc[j] *= alpha;
        if (!set) {
            memcpy(&b, c + j * (CCN_NR / 2), sizeof b);
            acc[j] += b;
        }
        memcpy(c + j * (CCN_NR / 2), &acc[j], sizeof b);
    }
}
#endif

/* Vectors across a strip of B. */
#define STRIP_VECTORS (CCN_STRIP_COLS / (CCN_NR / 2))

/* sums[r * CCN_STRIP_COLS + j] = sum over k < kc of a[r * a_rs + k * a_cs]
 * strip[k * CCN_STRIP_COLS + j], for r < rows: even and odd depths summed
 * apart, so that the adds' latency does not bound a strip in L2. */
CCN_ALWAYS_INLINE void strip_rows(int rows, long kc, const float *a, long a_rs, long a_cs,
                                  const float *strip, float *sums)
{
    vec even[CCN_SMALL_M - 1][STRIP_VECTORS], odd[CCN_SMALL_M - 1][STRIP_VECTORS], b;
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < STRIP_VECTORS; v++)
            even[r][v] = odd[r][v] = (vec){0};
    long k = 0;
    for (; k + 2 <= kc; k += 2)
        for (int v = 0; v < STRIP_VECTORS; v++) {
            memcpy(&b, strip + k * CCN_STRIP_COLS + v * (CCN_NR / 2), sizeof b);
            for (int r = 0; r < rows; r++)
                even[r][v] += a[r * a_rs + k * a_cs] * b;
            memcpy(&b, strip + (k + 1) * CCN_STRIP_COLS + v * (CCN_NR / 2), sizeof b);
            for (int r = 0; r < rows; r++)
                odd[r][v] += a[r * a_rs + (k + 1) * a_cs] * b;
        }
    for (; k < kc; k++)
        for (int v = 0; v < STRIP_VECTORS; v++) {
            memcpy(&b, strip + k * CCN_STRIP_COLS + v * (CCN_NR / 2), sizeof b);
            for (int r = 0; r < rows; r++)
                even[r][v] += a[r * a_rs + k * a_cs] * b;
        }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < STRIP_VECTORS; v++) {
            b = even[r][v] + odd[r][v];
            memcpy(sums + r * CCN_STRIP_COLS + v * (CCN_NR / 2), &b, sizeof b);
        }
}

/* Fewer than CCN_SMALL_M rows of A (a classifier at batch 1) by B in its
 * emit-time strips, which lie one after the other slice by slice: B
 * streams past once, in one sequential read, where the dot products'
 * rows of a row-major Bt were four streams restarting every few KiB
 * (MNASNet's 1280 -> 1000 Gemm: 0.172 -> 0.104 ms in the model, where
 * onnxruntime takes 0.121).  Columns
 * [col0, col0 + N) of the whole product start at a strip. */
static void gemm_strips_few_rows(long M, long N, long K, const a_operand *A, long row0,
                                 const b_operand *B, long col0, const c_start *s, float *C,
                                 long ldc, int set, int act, float act_alpha)
{
    const float *a = A->a + row0 * A->rs;
    for (long k0 = 0; k0 < K; k0 += CCN_KC) {
        const long kc = min_long(CCN_KC, K - k0);
        const float *strip = B->panels + k0 * B->panel_cols + col0 * kc;
        for (long n0 = 0; n0 < N; n0 += CCN_STRIP_COLS, strip += CCN_STRIP_COLS * kc) {
            float sums[(CCN_SMALL_M - 1) * CCN_STRIP_COLS];
            /* A constant row count per call, for the registers. */
            switch (M) {
            case 3: strip_rows(3, kc, a + k0 * A->cs, A->rs, A->cs, strip, sums); break;
            case 2: strip_rows(2, kc, a + k0 * A->cs, A->rs, A->cs, strip, sums); break;
            default: strip_rows(1, kc, a + k0 * A->cs, A->rs, A->cs, strip, sums); break;
            }
            const long nr = min_long(CCN_STRIP_COLS, N - n0);
            for (long m = 0; m < M; m++)
                for (long j = 0; j < nr; j++) {
                    float *c = C + m * ldc + n0 + j;
                    const float v = A->alpha * sums[m * CCN_STRIP_COLS + j];
                    *c = set && k0 == 0 ? start_value(s, m, n0 + j) + v : *c + v;
                }
        }
    }
    activate_block(M, N, C, ldc, act, act_alpha);
}

/* One row of A (a recurrent cell's step, a layer at batch 1 whose B is
 * not transposed at emit time): a GEMV that keeps the sums of eight
 * vectors of C in registers while B's rows stream past, where
 * gemm_small_m loads and stores C at every k (1.7x faster measured on
 * 1 x 128 by 128 x 512, the LSTM step of issue 31).  Depth slices of CCN_KC
 * rows keep the pages a column block's pass touches few (1.4x faster on
 * 4096 x 1000).  set: C = the product rather than C += it. */
static void gemv(long N, long K, const float *A, long a_cs, const float *B, long ldb,
                 float alpha, float *C, int set, int act, float act_alpha)
{
    for (long n = 0; set && K == 0 && n < N; n++)
        C[n] = 0.0f;
    for (long k0 = 0; k0 < K; k0 += CCN_KC) {
        const long kc = min_long(CCN_KC, K - k0);
        const int first = set && k0 == 0;
        const float *a = A + k0 * a_cs, *b = B + k0 * ldb;
        long n = 0;
#if defined(__GNUC__)
        for (; n + 4 * CCN_NR <= N; n += 4 * CCN_NR)
            gemv_block(8, kc, a, a_cs, b + n, ldb, alpha, C + n, first);
        for (; n + CCN_NR / 2 <= N; n += CCN_NR / 2)
            gemv_block(1, kc, a, a_cs, b + n, ldb, alpha, C + n, first);
#endif
        /* The last columns, fewer than a vector: depth outermost, so
         * that the inner loop runs along rows of B. */
        for (; n < N; n += CCN_NR / 2) {
            const long w = min_long(CCN_NR / 2, N - n);
            float t[CCN_NR / 2] = {0.0f};
            for (long k = 0; k < kc; k++)
                for (long j = 0; j < w; j++)
                    t[j] += a[k * a_cs] * b[k * ldb + n + j];
            for (long j = 0; j < w; j++)
                C[n + j] = first ? alpha * t[j] : C[n + j] + alpha * t[j];
        }
    }
    activate_row(N, C, act, act_alpha);
}

/* Few rows (a batch-1 layer): every row of A against one pass over each
 * row of B, a 256-column block of C staying in L1.  Memory bound on B.
 * set: C = the product rather than C += it. */
static void gemm_small_m(long M, long N, long K, const float *A, long a_rs, long a_cs,
                         const float *B, long ldb, float alpha, float *C, long ldc, int set,
                         int act, float act_alpha)
{
    for (long n0 = 0; n0 < N; n0 += 256) {
        const long nb = min_long(256, N - n0);
        for (long m = 0; set && m < M; m++)
            memset(C + m * ldc + n0, 0, (size_t)nb * sizeof(float));
        for (long k = 0; k < K; k++) {
            const float *restrict b = B + k * ldb + n0;
            for (long m = 0; m < M; m++) {
                const float a = alpha * A[m * a_rs + k * a_cs];
                float *restrict c = C + m * ldc + n0;
                for (long n = 0; n < nb; n++)
                    c[n] += a * b[n];
            }
        }
        activate_block(M, nb, C + n0, ldc, act, act_alpha);
    }
}

#if defined(__GNUC__)
/* gemm_shallow's block: c[r] += the K products of a[r] by B, for the
 * CCN_DOT_ROWS rows c[r] of C over nv vectors of columns.  The products are
 * summed from zero and then added to C, as in the blocked path. */
CCN_ALWAYS_INLINE void shallow_block(
    int nv, long K, float (*a)[CCN_SHALLOW_K], const float *B, long ldb, float **c, int set)
{
    vec acc[CCN_DOT_ROWS][4], b;
    for (int r = 0; r < CCN_DOT_ROWS; r++)
        for (int j = 0; j < nv; j++)
            acc[r][j] = (vec){0};
    for (long k = 0; k < K; k++)
        for (int j = 0; j < nv; j++) {
            memcpy(&b, B + k * ldb + j * (CCN_NR / 2), sizeof b);
            CCN_IN_REGISTER(b);
            for (int r = 0; r < CCN_DOT_ROWS; r++)
                acc[r][j] += a[r][k] * b;
        }
    for (int r = 0; r < CCN_DOT_ROWS; r++)
        for (int j = 0; j < nv; j++) {
            if (!set) {
                memcpy(&b, c[r] + j * (CCN_NR / 2), sizeof b);
                acc[r][j] += b;
            }
            memcpy(c[r] + j * (CCN_NR / 2), &acc[r][j], sizeof b);
        }
}
#endif

/* A shallow product (K <= CCN_SHALLOW_K and N >= CCN_SHALLOW_MIN_N: the
 * weight gradient of a layer over a small batch): C streams through once,
 * CCN_DOT_ROWS rows at a time, each vector of C taking all K products while
 * in a register, and B's 256-column blocks stay in L1 for all the rows.  The
 * blocked path packs both operands for micro-kernel calls that are mostly
 * setup at this depth.  set: C = the product rather than C += it. */
static void gemm_shallow(long M, long N, long K, const float *A, long a_rs, long a_cs,
                         const float *B, long ldb, float alpha, float *C, long ldc, int set,
                         int act, float act_alpha)
{
    /* A block's rows past the last row of C write here (sums dropped). */
    float spare[256] = {0.0f};
    for (long n0 = 0; n0 < N; n0 += 256) {
        const long n1 = min_long(N, n0 + 256);
        for (long m = 0; m < M; m += CCN_DOT_ROWS) {
            const long rows = min_long(CCN_DOT_ROWS, M - m);
            float a[CCN_DOT_ROWS][CCN_SHALLOW_K];
            float *c[CCN_DOT_ROWS];
            for (long r = 0; r < CCN_DOT_ROWS; r++) {
                const long row = min_long(m + r, M - 1);
                c[r] = C + row * ldc;
                for (long k = 0; k < K; k++)
                    a[r][k] = alpha * A[row * a_rs + k * a_cs];
            }
            long n = n0;
#if defined(__GNUC__)
            /* Blocks of four vectors, then single vectors. */
            while (n + CCN_NR / 2 <= n1) {
                float *cn[CCN_DOT_ROWS];
                for (long r = 0; r < CCN_DOT_ROWS; r++)
                    cn[r] = r < rows ? c[r] + n : spare + (n - n0);
                const int wide = n + 2 * CCN_NR <= n1;
                if (wide)
                    shallow_block(4, K, a, B + n, ldb, cn, set);
                else
                    shallow_block(1, K, a, B + n, ldb, cn, set);
                n += wide ? 2 * CCN_NR : CCN_NR / 2;
            }
#endif
            /* The last columns, fewer than a vector: depth outermost, so
             * that the inner loop runs along rows of B. */
            const long tail = n1 - n;
            float t[CCN_DOT_ROWS][CCN_NR / 2] = {{0.0f}};
            for (long k = 0; k < K; k++)
                for (long r = 0; r < rows; r++)
                    for (long j = 0; j < tail; j++)
                        t[r][j] += a[r][k] * B[k * ldb + n + j];
            for (long r = 0; r < rows; r++)
                for (long j = 0; j < tail; j++)
                    c[r][n + j] = set ? t[r][j] : c[r][n + j] + t[r][j];
        }
    }
    activate_block(M, N, C, ldc, act, act_alpha);
}

/* (__builtin_shufflevector: GCC 12 and clang.) */
#if defined(__AVX512F__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12))
/* The wide tile (AVX-512): for a product whose A comes in panels and whose
 * few columns (a late layer of one image: 7x7 or 14x14 outputs) would leave
 * the NR-column tile part empty, the vectors run down A's columns instead,
 * as onnxruntime's NCHWc convolutions run down the output channels: the
 * rows of two panels (48, three vectors; one panel at the end, 24) by up
 * to CCN_WIDE_NR columns of B, each element of B broadcast.  The columns
 * are split into blocks of equal width, so that no tile is left part
 * empty (512 x 49 by 4608: two thirds of the NR-column tiles' time). */
#include <immintrin.h>
#define CCN_WIDE 1
#define CCN_WIDE_NR 8
/* Depth per pass over C: the tiles add their sums to C (transposed) once
 * per this many rows of B, CCN_KC-deep panel slices
 * whole; the two panels' slices (192 KiB) and B's rows stay in L2. */
#define CCN_WIDE_KC (4 * CCN_KC)
/* Widest product that takes it (measured against the NR-column tiles at
 * 256 rows by 2304 deep: 0.6x the time at 98 and 121 columns, 0.9x at 144),
 * and up to CCN_WIDE_DEEP_N columns from a depth of CCN_WIDE_DEEP_K to one
 * pass over C (14x14 and 13x13 outputs; with the transposes in registers,
 * 576 x 192 by 196 0.92x the time, 96 x 576 0.83x-0.92x, 192 x 960 0.82x,
 * 1000 x 512 by 169 0.86x; but 576 x 96 0.98x, 192 x 128 with a residual
 * 1.05x, and over several passes 256 x 2304 1.16x, 512 x 4608 1.24x). */
#define CCN_WIDE_MAX_N 160
/* Rows of B that the wide tiles fetch ahead of their loads. */
#define CCN_WIDE_PREFETCH_K 8
#define CCN_WIDE_DEEP_N 200
#define CCN_WIDE_DEEP_K 192
typedef float half_vec __attribute__((vector_size(CCN_NR / 4 * sizeof(float))));

/* t[j][i] = the sum over depth [k0, k1) (whole panel slices) of A[p0 + i,
 * k] B[k, j] for the panel at row p0 and, when pair, the next one (i < 48
 * or 24), and j < nr.  ahead: the two panels after them are fetched into
 * L2 meanwhile, at the same depths (gemm_wide). */
CCN_ALWAYS_INLINE void wide_tile(int pair, int nr, long K, long k0, long k1,
                                 const float *panels, long panel_rows, long p0,
                                 const float *B, long ldb, int ahead,
                                 float t[CCN_WIDE_NR][48])
{
    vec acc[CCN_WIDE_NR][3];
    half_vec half[CCN_WIDE_NR];
    for (int j = 0; j < nr; j++) {
        acc[j][0] = acc[j][1] = acc[j][2] = (vec){0};
        half[j] = (half_vec){0};
    }
    for (long ks = k0; ks < k1; ks += CCN_KC) {
        const long kc = min_long(CCN_KC, K - ks);
        const float *a0 = panels + ks * panel_rows + p0 * kc, *a1 = a0 + CCN_PANEL_ROWS * kc;
        const float *b = B + ks * ldb;
        const long next = 2 * CCN_PANEL_ROWS * kc;  /* the next pair's row k, from a0 */
        for (long k = 0; k < kc; k++, a0 += CCN_PANEL_ROWS, a1 += CCN_PANEL_ROWS, b += ldb) {
            vec v0, v1, v2;
            half_vec lo, hi;
            /* B's rows lie ldb floats apart, read a few at a time: fetched
             * CCN_WIDE_PREFETCH_K rows ahead, as the tiles miss L1 on them
             * when a pair's panels fill it (1000 x 512 by 169, SqueezeNet's
             * classifier: 0.95x-0.99x the time; 7x7 products 0.96x-1.0x). */
            CCN_PREFETCH_AT(b, CCN_WIDE_PREFETCH_K * ldb);
            CCN_PREFETCH_AT(b, CCN_WIDE_PREFETCH_K * ldb + nr - 1);
            if (ahead) {
                CCN_PREFETCH_L2_AT(a0, next);
                CCN_PREFETCH_L2_AT(a0, next + CCN_PANEL_ROWS - 1);
                CCN_PREFETCH_L2_AT(a1, next);
                CCN_PREFETCH_L2_AT(a1, next + CCN_PANEL_ROWS - 1);
            }
            memcpy(&v0, a0, sizeof v0);
            memcpy(&lo, a0 + CCN_NR / 2, sizeof lo);
            if (pair) {
                /* The middle vector straddles the two panels. */
                memcpy(&hi, a1, sizeof hi);
                v1 = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                             12, 13, 14, 15);
                memcpy(&v2, a1 + CCN_NR / 4, sizeof v2);
            }
            for (int j = 0; j < nr; j++) {
                const float bj = b[j];
                acc[j][0] += bj * v0;
                if (pair) {
                    acc[j][1] += bj * v1;
                    acc[j][2] += bj * v2;
                } else {
                    half[j] += bj * lo;
                }
            }
        }
    }
    for (int j = 0; j < nr; j++) {
        memcpy(t[j], &acc[j][0], sizeof acc[j][0]);
        if (pair) {
            memcpy(t[j] + CCN_NR / 2, &acc[j][1], sizeof acc[j][1]);
            memcpy(t[j] + CCN_NR, &acc[j][2], sizeof acc[j][2]);
        } else {
            memcpy(t[j] + CCN_NR / 2, &half[j], sizeof half[j]);
        }
    }
}

/* wide_tile for a run-time width nr (1 to CCN_WIDE_NR), each width its own
 * unrolled copy. */
static void wide_tile_any(int pair, int nr, long K, long k0, long k1, const float *panels,
                          long panel_rows, long p0, const float *B, long ldb, int ahead,
                          float t[CCN_WIDE_NR][48])
{
#define CCN_WIDE_CASE(n)                                                              \
    case n:                                                                           \
        if (pair)                                                                     \
            wide_tile(1, n, K, k0, k1, panels, panel_rows, p0, B, ldb, ahead, t);     \
        else                                                                          \
            wide_tile(0, n, K, k0, k1, panels, panel_rows, p0, B, ldb, ahead, t);     \
        break;
    switch (nr) {
    CCN_WIDE_CASE(1) CCN_WIDE_CASE(2) CCN_WIDE_CASE(3) CCN_WIDE_CASE(4)
    CCN_WIDE_CASE(5) CCN_WIDE_CASE(6) CCN_WIDE_CASE(7) CCN_WIDE_CASE(8)
    default: break;
    }
#undef CCN_WIDE_CASE
}

/* C[i, 0:nr] = t[0:nr][i] for rows i < rows of a tile's sums (rows
 * ldc floats apart, nr <= 8): 16 rows at a time transposed in registers
 * (unpacks within 128-bit lanes, then lane shuffles), each row one masked
 * store: element by element, a 7x7 layer took 1.03x-1.09x this time
 * (1152 x 192 by 49 with ReLU, one thread). */
static void wide_store(long rows, int nr, float t[CCN_WIDE_NR][48], float *C, long ldc)
{
    const __mmask16 mask = (__mmask16)((1u << nr) - 1u);
    for (long i0 = 0; i0 < rows; i0 += 16) {
        __m512 a[8], u[8];
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_loadu_ps(t[j] + i0);
        /* Lane L of u[2j] (u[2j + 1]): rows 4L and 4L + 1 (4L + 2 and
         * 4L + 3) of columns 2j and 2j + 1, interleaved. */
        for (int j = 0; j < 4; j++) {
            u[2 * j] = _mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]);
            u[2 * j + 1] = _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]);
        }
        /* Lane L of a[r] (a[r + 4]): row 4L + r, columns 0-3 (4-7). */
        for (int h = 0; h < 2; h++) {
            a[4 * h] = _mm512_shuffle_ps(u[4 * h], u[4 * h + 2], 0x44);
            a[4 * h + 1] = _mm512_shuffle_ps(u[4 * h], u[4 * h + 2], 0xEE);
            a[4 * h + 2] = _mm512_shuffle_ps(u[4 * h + 1], u[4 * h + 3], 0x44);
            a[4 * h + 3] = _mm512_shuffle_ps(u[4 * h + 1], u[4 * h + 3], 0xEE);
        }
        for (int r = 0; r < 4; r++) {
            /* Rows r, 4 + r, 8 + r and 12 + r, each in a vector's first 8. */
            const __m512 lo = _mm512_shuffle_f32x4(a[r], a[r + 4], _MM_SHUFFLE(1, 0, 1, 0));
            const __m512 hi = _mm512_shuffle_f32x4(a[r], a[r + 4], _MM_SHUFFLE(3, 2, 3, 2));
            const __m512 row[4] = {_mm512_shuffle_f32x4(lo, lo, _MM_SHUFFLE(3, 1, 2, 0)),
                                   _mm512_shuffle_f32x4(lo, lo, _MM_SHUFFLE(2, 0, 3, 1)),
                                   _mm512_shuffle_f32x4(hi, hi, _MM_SHUFFLE(3, 1, 2, 0)),
                                   _mm512_shuffle_f32x4(hi, hi, _MM_SHUFFLE(2, 0, 3, 1))};
            for (int q = 0; q < 4; q++)
                if (i0 + 4 * q + r < rows)
                    _mm512_mask_storeu_ps(C + (i0 + 4 * q + r) * ldc, mask, row[q]);
        }
    }
}

/* r[j][i] = R[i, j] for rows i < rows and columns j < nr of a block of
 * R (rows ldr floats apart), zeros elsewhere: wide_store's transposes
 * reversed, for the residual or C's old values that a tile's sums add
 * (gathered element by element, 160 x 960 by 49 with a residual took
 * 1.01x-1.06x this time, 96 x 33 by 49 1.45x). */
static void wide_load(long rows, int nr, const float *R, long ldr, float r[CCN_WIDE_NR][48])
{
    const __mmask16 mask = (__mmask16)((1u << nr) - 1u);
    for (long i0 = 0; i0 < rows; i0 += 16) {
        __m512 a[8], u[8];
        for (int q = 0; q < 4; q++) {
            /* Rows q, 4 + q, 8 + q and 12 + q (none past the block). */
            __m512 row[4];
            for (int h = 0; h < 4; h++) {
                const long i = i0 + 4 * h + q;
                row[h] = _mm512_maskz_loadu_ps(i < rows ? mask : 0, R + (i < rows ? i : 0) * ldr);
            }
            const __m512 x = _mm512_shuffle_f32x4(row[0], row[1], _MM_SHUFFLE(1, 0, 1, 0));
            const __m512 y = _mm512_shuffle_f32x4(row[2], row[3], _MM_SHUFFLE(1, 0, 1, 0));
            /* Lane L: row 4L + q, columns 0-3 (u[q]) and 4-7 (u[q + 4]). */
            u[q] = _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0));
            u[q + 4] = _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1));
        }
        for (int h = 0; h < 2; h++) {
            a[4 * h] = _mm512_shuffle_ps(u[4 * h], u[4 * h + 1], 0x44);
            a[4 * h + 2] = _mm512_shuffle_ps(u[4 * h], u[4 * h + 1], 0xEE);
            a[4 * h + 1] = _mm512_shuffle_ps(u[4 * h + 2], u[4 * h + 3], 0x44);
            a[4 * h + 3] = _mm512_shuffle_ps(u[4 * h + 2], u[4 * h + 3], 0xEE);
        }
        for (int j = 0; j < 4; j++) {
            _mm512_storeu_ps(r[2 * j] + i0, _mm512_shuffle_ps(a[2 * j], a[2 * j + 1], 0x88));
            _mm512_storeu_ps(r[2 * j + 1] + i0, _mm512_shuffle_ps(a[2 * j], a[2 * j + 1], 0xDD));
        }
    }
}

/* gemm_serial's product by wide tiles: C[M, N] (stride ldc) += A[row0:row0
 * + M, K] B[K, N] (= the start s plus it when set), A in panels, row0 a
 * panel's first row; cold_a: A is read from memory or L3, not from L2 (a
 * batch's later images find it there). */
static void gemm_wide(long M, long N, long K, const a_operand *A, long row0, const float *B,
                      long ldb, const c_start *s, float *C, long ldc, int set, int act,
                      float act_alpha, int cold_a)
{
    /* Column blocks of equal width (within one). */
    const long blocks = (N + CCN_WIDE_NR - 1) / CCN_WIDE_NR, width = N / blocks,
               wider = N % blocks;
    /* (Zeros where no tile writes: the store reads whole 16-row groups of
     * all 8 columns.) */
    float t[CCN_WIDE_NR][48] = {{0.0f}}, r[CCN_WIDE_NR][48];
    for (long k0 = 0; k0 < K; k0 += CCN_WIDE_KC) {
        const long k1 = min_long(K, k0 + CCN_WIDE_KC);
        const int first = set && k0 == 0, last = k1 == K;
        for (long m = 0; m < M; m += 2 * CCN_PANEL_ROWS) {
            const int pair = m + CCN_PANEL_ROWS < M;
            const long rows = min_long(M - m, 2 * CCN_PANEL_ROWS);
            for (long blk = 0, n = 0; blk < blocks; blk++) {
                const int nr = (int)(width + (blk < wider));
                /* The first block reads a cold A's panels from L3 (a
                 * model's weights do not stay in L2 from one call to the
                 * next), the others from L1 or L2: the first also fetches
                 * the next pair's, so that its first block finds them in L2
                 * (7x7 outputs, weights in L3: 1152 x 192 by 49 0.90x-0.94x
                 * the time, 1280 x 160 0.93x; in L2 1.02x). */
                wide_tile_any(pair, nr, K, k0, k1, A->panels, A->panel_rows, row0 + m,
                              B + n, ldb, cold_a && blk == 0 && m + 2 * CCN_PANEL_ROWS < M, t);
                /* Each column's sums finished (start or C's old values added,
                 * the activation) along t's rows, which vectorises, then
                 * stored transposed: activate_row on C's rows of nr floats
                 * took 2 to 4 times the product (ReLU6 at 7x7). */
                const c_start st = start_at(s, m, n);
                if (!first || st.res)
                    wide_load(rows, nr, first ? st.res : C + m * ldc + n, first ? st.ldr : ldc,
                              r);
                for (int j = 0; j < nr; j++) {
                    float *tj = t[j];
                    if (!first)
                        for (long i = 0; i < rows; i++)
                            tj[i] += r[j][i];
                    else if (starts(&st))
                        /* start_value's sum, the residual read from r. */
                        for (long i = 0; i < rows; i++) {
                            float v = st.row_bias ? st.row_bias[i] : 0.0f;
                            if (st.res)
                                v += r[j][i];
                            tj[i] += st.col_bias ? v + st.col_bias[j] : v;
                        }
                    if (last)
                        activate_row(rows, tj, act, act_alpha);
                }
                wide_store(rows, nr, t, C + m * ldc + n, ldc);
                n += nr;
            }
        }
    }
}

/* Whether gemm_wide computes the whole M x N product of panels, K deep,
 * with fewer wasted lanes than the NR-column tiles (or the tall ones, for
 * few columns); gemm_serial also gives it a product's last few columns.
 * A cold B (an image of a batch) takes it only up to CCN_WIDE_MAX_N
 * columns: the tiles read each of B's K rows a few columns at a time, and
 * from memory those reads cost more than packing B's strips (96 x 576 by
 * 196 with a residual, batch 32: 1.8x the time of the NR-column tiles). */
static int wide_fits(long M, long N, long K, int cold)
{
    if (N > (!cold && K >= CCN_WIDE_DEEP_K && K <= CCN_WIDE_KC ? CCN_WIDE_DEEP_N
                                                                : CCN_WIDE_MAX_N))
        return 0;
    const long pairs = M / (2 * CCN_PANEL_ROWS), rest = M % (2 * CCN_PANEL_ROWS);
    const long lanes = pairs * 3 * (CCN_NR / 2) +
                       (rest == 0 ? 0 : rest > CCN_PANEL_ROWS ? 3 * (CCN_NR / 2) : 2 * (CCN_NR / 2));
    const long cols = N <= CCN_NR / 2 ? CCN_NR / 2 : (N + CCN_NR - 1) / CCN_NR * CCN_NR;
    return (double)M / (double)lanes > (double)N / (double)cols;
}
#endif

/* The kc x nr strip of B at depth k0 and column n (nr <= NR): its place in
 * B's strips, in B itself when read in place, or else packed into buf;
 * *ldbp gets the distance between its rows. */
static const float *b_strip(const b_operand *B, long k0, long kc, long n, long nr,
                            int in_place, float *buf, long *ldbp)
{
    if (B->panels != NULL) {
        *ldbp = CCN_STRIP_COLS;
        return B->panels + k0 * B->panel_cols + n / CCN_STRIP_COLS * CCN_STRIP_COLS * kc +
               n % CCN_STRIP_COLS;
    }
    if (in_place) {
        *ldbp = B->ldb;
        return B->b + k0 * B->ldb + n;
    }
    pack_b(kc, nr, B->b + k0 * B->ldb + n, B->ldb, buf, B->cold);
    *ldbp = CCN_NR;
    return buf;
}

/* Whether gemm_serial reads a strip (nr columns) of B's kc-deep
 * slice in place for mc rows, rather than packing it: when few row blocks
 * reuse it (packing would cost as much as the product), or when the slice
 * is shallow and its rows fall in different sets of L1 (rows 2 KiB apart
 * share them): the packing's copy then costs more than the in-place
 * strip's scattered rows, which the tiles prefetch (1x1 convolutions from
 * 16 to 32 channels over 28x28 to 112x112 0.92x-0.97x the time; with B
 * 4096 floats wide, 64 x 32 by 4096 took 1.16x). */
static int reads_in_place(const b_operand *B, long nr, long mc, long kc)
{
    return nr == CCN_NR &&
           (mc <= CCN_PACK_B_ROWS || (kc <= CCN_SHALLOW_IN_PLACE && B->ldb % CCN_ALIAS_FLOATS != 0));
}

/* One thread's share: C[M, N] (stride ldc) += A[row0:row0 + M, K] *
 * B[K, col0:col0 + N] (= the start s0 plus it when set; s0 indexed from
 * the whole product's first row and column), packed and blocked.  The
 * paths without panels (gemv, gemm_small_m, gemm_shallow) take no start. */
static void gemm_serial(long M, long N, long K, const a_operand *A, long row0,
                        const b_operand *B, long col0, const c_start *s0, float *C, long ldc,
                        int set, int act, float act_alpha)
{
    const c_start s = start_at(s0, row0, col0);
    if (M < CCN_SMALL_M && K > 0 && A->panels == NULL && B->panels != NULL) {
        gemm_strips_few_rows(M, N, K, A, row0, B, col0, &s, C, ldc, set, act, act_alpha);
        return;
    }
    if (M == 1 && A->panels == NULL && B->panels == NULL) {
        gemv(N, K, A->a + row0 * A->rs, A->cs, B->b + col0, B->ldb, A->alpha, C, set, act,
             act_alpha);
        return;
    }
    if (M < CCN_SMALL_M && A->panels == NULL && B->panels == NULL) {
        gemm_small_m(M, N, K, A->a + row0 * A->rs, A->rs, A->cs, B->b + col0, B->ldb,
                     A->alpha, C, ldc, set, act, act_alpha);
        return;
    }
    if (K <= CCN_SHALLOW_K && N >= CCN_SHALLOW_MIN_N && A->panels == NULL &&
        B->panels == NULL) {
        gemm_shallow(M, N, K, A->a + row0 * A->rs, A->rs, A->cs, B->b + col0, B->ldb,
                     A->alpha, C, ldc, set, act, act_alpha);
        return;
    }
#ifdef CCN_WIDE
    if (A->panels != NULL && B->panels == NULL && K > 0 && wide_fits(M, N, K, B->cold)) {
        gemm_wide(M, N, K, A, row0, B->b + col0, B->ldb, &s, C, ldc, set, act, act_alpha,
                  !B->cold);
        return;
    }
    /* A last strip of at most CCN_WIDE_NR columns (196 columns: 6 strips
     * and 4) by the wide tiles, which compute 48 rows of those columns
     * where the NR-column tiles compute 8 rows of 32: 14x14 layers 0.82x-
     * 0.89x the time (576 x 96 by 196, 112 x 672 with a residual). */
    const long tail = N % CCN_NR;
    if (A->panels != NULL && B->panels == NULL && K > 0 && N > CCN_NR && tail > 0 &&
        tail <= CCN_WIDE_NR) {
        const c_start st = start_at(&s, 0, N - tail);
        gemm_wide(M, tail, K, A, row0, B->b + col0 + N - tail, B->ldb, &st, C + N - tail, ldc,
                  set, act, act_alpha, !B->cold);
        N -= tail;
    }
#endif
    float apack[CCN_MC * CCN_KC];
    float bpack[CCN_KC * CCN_NR];
    const float *ap[CCN_PANEL_MC / CCN_MR];
    long lda[CCN_PANEL_MC / CCN_MR], ars[CCN_PANEL_MC / CCN_MR];
    const long mc_max = A->panels != NULL ? CCN_PANEL_MC : CCN_MC;
    /* Row blocks of the tile (A's panels start at multiples of it). */
    const int tall = A->panels != NULL && N <= CCN_NR / 2;
    const long mr = tall ? CCN_TALL_MR : CCN_MR;
    if (K == 0) {
        for (long m = 0; set && m < M; m++)
            for (long n = 0; n < N; n++)
                C[m * ldc + n] = start_value(&s, m, n);
        activate_block(M, N, C, ldc, act, act_alpha);
    }
    for (long k0 = 0; k0 < K; k0 += CCN_KC) {
        const long kc = min_long(CCN_KC, K - k0);
        const int first = set && k0 == 0, last = k0 + kc == K;
        for (long m0 = 0; m0 < M; m0 += mc_max) {
            const long mc = min_long(mc_max, M - m0);
            for (long i = 0; i < mc; i += mr)
                ap[i / mr] = a_block(A, row0 + m0 + i, min_long(mr, mc - i), k0, kc,
                                     apack + i * kc, &lda[i / mr], &ars[i / mr]);
            /* Strips by blocks that fill bpack: one strip of a full depth
             * slice, several of a shallow one, each tile of rows then
             * running along the block's strips, so that it writes runs of
             * C's rows rather than NR floats of each row in turn (a depth
             * of 16 is bound by those writes).  A shallow slice whose strips
             * are read in place fills no buffer (bar a part last strip,
             * packed alone): its blocks are CCN_KC strips, runs of C's rows
             * 8192 floats long with AVX-512 (96 x 16 by 12544, a 1x1
             * convolution at 112x112: 0.91x-0.93x the time). */
            const int long_runs = kc <= CCN_SHALLOW_IN_PLACE && reads_in_place(B, CCN_NR, mc, kc);
            const long block = CCN_NR * (long_runs ? CCN_KC : CCN_KC / kc);
            for (long nb0 = 0; nb0 < N; nb0 += block) {
                const long strips = (min_long(block, N - nb0) + CCN_NR - 1) / CCN_NR;
                const float *b[CCN_KC];
                long ldbp[CCN_KC];
                for (long j = 0; j < strips; j++) {
                    const long n0 = nb0 + j * CCN_NR, nr = min_long(CCN_NR, N - n0);
                    b[j] = b_strip(B, k0, kc, col0 + n0, nr, reads_in_place(B, nr, mc, kc),
                                   bpack + j % (CCN_KC / kc) * kc * CCN_NR, &ldbp[j]);
                }
                for (long i = 0; i < mc; i += mr)
                    for (long j = 0; j < strips; j++) {
                        const long n0 = nb0 + j * CCN_NR, nr = min_long(CCN_NR, N - n0);
                        float *c = C + (m0 + i) * ldc + n0;
                        const c_start st = start_at(&s, m0 + i, n0);
                        if (tall)
                            micro_kernel_tall(kc, ap[i / mr], lda[i / mr], b[j], ldbp[j], &st, c,
                                              ldc, min_long(mr, mc - i), nr, first, last, act,
                                              act_alpha);
                        else
                            micro_kernel(kc, ap[i / mr], lda[i / mr], ars[i / mr], b[j], ldbp[j],
                                         &st, c, ldc, min_long(mr, mc - i), nr, first, last, act,
                                         act_alpha);
                    }
            }
        }
    }
}

/* Multi-versioning.  The default build of an emitted Makefile on x86-64
 * compiles this file twice more, with -march=x86-64-v3 and -v4 and every
 * function it exports renamed with a suffix (ccn_gemm_serial_core_v3...;
 * emit_c.gemm_variant), and this build, with CCN_GEMM_VARIANTS, runs the
 * products on the best of them this CPU has: the micro-kernels' tiles and
 * vectors are chosen for the instruction set at compile time. */
void ccn_gemm_serial_core(long M, long N, long K, const a_operand *A, long row0,
                          const b_operand *B, long col0, const c_start *s, float *C, long ldc,
                          int set, int act, float act_alpha)
{
    gemm_serial(M, N, K, A, row0, B, col0, s, C, ldc, set, act, act_alpha);
}

#ifdef CCN_GEMM_VARIANTS
typedef void serial_fn(long, long, long, const a_operand *, long, const b_operand *, long,
                       const c_start *, float *, long, int, int, float);
serial_fn ccn_gemm_serial_core_v3, ccn_gemm_serial_core_v4;
/* ccn_activate and ccn_add_activate (the epilogues of the depthwise and
 * direct convolutions, a residual Add) at that level too. */
typedef void activate_fn(long, float *, int, float);
typedef void add_activate_fn(long, float *, const float *, int, float);
activate_fn ccn_activate_v3, ccn_activate_v4;
add_activate_fn ccn_add_activate_v3, ccn_add_activate_v4;

/* 4, 3 or 0: the x86-64 level of the best build this CPU runs (asked once;
 * libgcc's answer includes the OS's support of the wider registers). */
static int best_level(void)
{
    static int level = -1;
    int known = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        const int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                       __builtin_cpu_supports("bmi2");
        known = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
                    ? 4 : v3 ? 3 : 0;
        __atomic_store_n(&level, known, __ATOMIC_RELAXED);
    }
    return known;
}

int ccn_gemm_level(void)
{
    return best_level();
}

#define GEMM_SERIAL (best_level() == 4 ? ccn_gemm_serial_core_v4 \
                     : best_level() == 3 ? ccn_gemm_serial_core_v3 : gemm_serial)
#else
#define GEMM_SERIAL gemm_serial
#endif

#ifdef CCN_CBLAS
/* The product through cblas_sgemm (C += alpha A B, = when set), then the
 * activation. */
static void gemm_cblas(long M, long N, long K, const float *A, long a_rs, long a_cs,
                       const float *B, long ldb, float alpha, float *C, long ldc, int set,
                       int act, float act_alpha)
{
    const int trans = a_rs == 1 && a_cs != 1;
    cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)(trans ? a_cs : a_rs), B, (int)ldb, set ? 0.0f : 1.0f,
                C, (int)ldc);
    activate_block(M, N, C, ldc, act, act_alpha);
}
#endif

/* One product's rows or columns, by ranges of micro-kernel tiles, for
 * ccn_parallel_for. */
typedef struct {
    long M, N, K, unit, len, ldc;
    const a_operand *A;
    const b_operand *B;
    const c_start *s;
    float *C;
    int by_rows, set, act;
    float act_alpha;
} gemm_part;

static void gemm_tiles(void *context, long begin, long end)
{
    const gemm_part *g = context;
    const long lo = min_long(g->len, begin * g->unit), hi = min_long(g->len, end * g->unit);
    if (g->by_rows)
        GEMM_SERIAL(hi - lo, g->N, g->K, g->A, lo, g->B, 0, g->s, g->C + lo * g->ldc, g->ldc,
                    g->set, g->act, g->act_alpha);
    else
        GEMM_SERIAL(g->M, hi - lo, g->K, g->A, 0, g->B, lo, g->s, g->C + lo, g->ldc, g->set,
                    g->act, g->act_alpha);
}

/* The fewest units (panels of rows, strips of columns) in a piece of a
 * product that ccn_parallel_for_grain hands one thread: each piece packs
 * B's strips again (split by rows) or reads all of A again (by columns),
 * and pieces of one unit spent on that what a second thread gained
 * (ResNet-18 at batch 1 beside a busy process: two threads 1.15x one
 * thread's time with pieces of one unit, 0.95x with two; NOTES.md). */
#define CCN_GEMM_GRAIN 2
/* C += A * B (= the start s plus it when set) then the activation, on
 * all threads for a large product. */
static void gemm_any(long M, long N, long K, const a_operand *A, const b_operand *B,
                     const c_start *s, float *C, long ldc, int set, int act, float act_alpha)
{
    /* Split the longer side, counted in micro-kernel tiles (columns when
     * M is small, as a few rows do not pack).  Disjoint parts of C: no
     * synchronisation. */
    const int by_rows = M >= CCN_SMALL_M && (M + CCN_MR - 1) / CCN_MR >
                                                (N + CCN_NR - 1) / CCN_NR;
    /* Units that are whole tiles of every build (CCN_GEMM_VARIANTS). */
    const long unit = by_rows ? CCN_PANEL_ROWS : CCN_STRIP_COLS, len = by_rows ? M : N;
    gemm_part part = {M, N, K, unit, len, ldc, A, B, s, C, by_rows, set, act, act_alpha};
    /* On one thread below 2^22 multiply-adds (CCN_MACS_PER_WORK): under
     * about 40 us of work the second thread gains little (LeNet-5's
     * training step took 2.3 or 3.7 ms from run to run with 2^18 on
     * OpenMP, 2.3 ms steadily with this). */
    ccn_parallel_for_grain((len + unit - 1) / unit, M * N * K / CCN_MACS_PER_WORK,
                           CCN_GEMM_GRAIN, gemm_tiles, &part);
}

/* ccn_gemm_ex (set 0) and ccn_gemm_set (set 1). */
static void gemm_strided(long M, long N, long K, const float *A, long a_rs, long a_cs,
                         const float *B, long ldb, float alpha, float *C, long ldc, int set,
                         int act, float act_alpha)
{
#ifdef CCN_CBLAS
    /* CBLAS needs one unit stride in A. */
    if (M * N * K >= CCN_CBLAS_MACS && (a_cs == 1 || a_rs == 1)) {
        gemm_cblas(M, N, K, A, a_rs, a_cs, B, ldb, alpha, C, ldc, set, act, act_alpha);
        return;
    }
#endif
    const a_operand a = {A, a_rs, a_cs, alpha, NULL, 0};
    const b_operand b = {B, ldb, NULL, 0, 0};
    gemm_any(M, N, K, &a, &b, &NO_START, C, ldc, set, act, act_alpha);
}

void ccn_gemm_ex(const ccn_gemm_geometry *g, const float *A, const float *B, float alpha,
                 float *C)
{
    gemm_strided(g->M, g->N, g->K, A, g->a_rs, g->a_cs, B, g->ldb, alpha, C, g->ldc, 0,
                 g->act, g->act_alpha);
}

void ccn_gemm_set(const ccn_gemm_geometry *g, const float *A, const float *B, float alpha,
                  float *C)
{
    gemm_strided(g->M, g->N, g->K, A, g->a_rs, g->a_cs, B, g->ldb, alpha, C, g->ldc, 1,
                 g->act, g->act_alpha);
}

void ccn_gemm_strips(const ccn_gemm_geometry *g, const float *A, const float *strips,
                     float alpha, float *C)
{
    const a_operand a = {A, g->a_rs, g->a_cs, alpha, NULL, 0};
    const b_operand b = {NULL, 0, strips, ccn_strip_cols(g->N), 0};
    gemm_any(g->M, g->N, g->K, &a, &b, &NO_START, C, g->ldc, 0, g->act, g->act_alpha);
}

void ccn_gemm_strips_set(const ccn_gemm_geometry *g, const float *A, const float *strips,
                         float alpha, const float *bias, float *C)
{
    const a_operand a = {A, g->a_rs, g->a_cs, alpha, NULL, 0};
    const b_operand b = {NULL, 0, strips, ccn_strip_cols(g->N), 0};
    const c_start s = {bias, NULL, NULL, 0};
    gemm_any(g->M, g->N, g->K, &a, &b, &s, C, g->ldc, 1, g->act, g->act_alpha);
}

void ccn_gemm_panels(long M, long N, long K, const float *panels, const float *B, long ldb,
                     float *C, long ldc, int set, int act, float act_alpha)
{
    const a_operand a = {NULL, 0, 0, 1.0f, panels, ccn_panel_rows(M)};
    const b_operand b = {B, ldb, NULL, 0, 0};
    gemm_any(M, N, K, &a, &b, &NO_START, C, ldc, set, act, act_alpha);
}

void ccn_gemm_panels_start(long M, long N, long K, const float *panels, const float *B,
                           long ldb, const float *bias, const float *residual, long ldr,
                           float *C, long ldc, int act, float act_alpha)
{
    const a_operand a = {NULL, 0, 0, 1.0f, panels, ccn_panel_rows(M)};
    const b_operand b = {B, ldb, NULL, 0, 0};
    const c_start s = {NULL, bias, residual, ldr};
    gemm_any(M, N, K, &a, &b, &s, C, ldc, 1, act, act_alpha);
}

/* Bytes of one image's B and residual up to which ccn_gemm_panels_images
 * prefetches the next image's during the current product: the late
 * layers' (7x7 to 28x28), whose B the tiles read by short rows that the
 * hardware prefetcher does not run ahead of (7x7 and 14x14 layers at
 * batch 32: 0.88x-0.97x the time); a larger image streams by itself. */
#define CCN_PREFETCH_IMAGE (512L << 10)

typedef struct {
    long M, S, K, nb;
    const a_operand *a;
    const float *B, *bias, *residual;
    long b_image, r_image, c_image;
    float *C;
    int act, prefetch;
    float act_alpha;
} images_call;

/* Images [begin, end) of ccn_gemm_panels_images, one product each. */
static void images_range(void *context, long begin, long end)
{
    const images_call *c = context;
    for (long i = begin; i < end; i++) {
        /* The next image's operands, a line (16 floats) at a time, into L2. */
        for (long j = 0; c->prefetch && i + 1 < end && j < c->K * c->S; j += 16)
            __builtin_prefetch(c->B + (i + 1) * c->b_image + j, 0, 1);
        for (long j = 0; c->prefetch && c->residual && i + 1 < end && j < c->M * c->S; j += 16)
            __builtin_prefetch(c->residual + (i + 1) * c->r_image + j, 0, 1);
        const b_operand b = {c->B + i * c->b_image, c->S, NULL, 0, c->nb > 1};
        const c_start s = {NULL, c->bias, c->residual ? c->residual + i * c->r_image : NULL,
                           c->S};
        gemm_any(c->M, c->S, c->K, c->a, &b, &s, c->C + i * c->c_image, c->S, 1, c->act,
                 c->act_alpha);
    }
}

void ccn_gemm_panels_images(long M, long S, long K, const float *panels, long nb,
                            const float *B, long b_image, const float *bias,
                            const float *residual, long r_image, float *C, long c_image,
                            int act, float act_alpha)
{
    const a_operand a = {NULL, 0, 0, 1.0f, panels, ccn_panel_rows(M)};
    const images_call call = {
        M, S, K, nb, &a, B, bias, residual, b_image, r_image, c_image, C, act,
        (K + (residual ? M : 0)) * S * (long)sizeof(float) <= CCN_PREFETCH_IMAGE, act_alpha};
    /* The images split between the threads when one image's product is
     * too small to (gemm_any's threshold: SqueezeNet's 1x1 layers at batch
     * 32 ran on one thread of two) or there are enough of them to share;
     * else each product splits, image after image. */
    if (nb > 1 && (M * S * K < CCN_PARALLEL_WORK * CCN_MACS_PER_WORK ||
                   nb >= 2 * ccn_get_threads()))
        ccn_parallel_for(nb, nb * (M * S * K / CCN_MACS_PER_WORK), images_range, (void *)&call);
    else
        images_range((void *)&call, 0, nb);
}

void ccn_gemm_one_thread(long M, long N, long K, const float *A, long lda, const float *B,
                         long ldb, float *C, long ldc, int set)
{
    const a_operand a = {A, lda, 1, 1.0f, NULL, 0};
    const b_operand b = {B, ldb, NULL, 0, 0};
    GEMM_SERIAL(M, N, K, &a, 0, &b, 0, &NO_START, C, ldc, set, CCN_ACT_NONE, 0.0f);
}

void ccn_activate(long n, float *x, int act, float act_alpha)
{
#ifdef CCN_GEMM_VARIANTS
    if (act != CCN_ACT_NONE && ccn_gemm_level() >= 3) {
        (ccn_gemm_level() == 4 ? ccn_activate_v4 : ccn_activate_v3)(n, x, act, act_alpha);
        return;
    }
#endif
    if (act != CCN_ACT_NONE)
        activate_row(n, x, act, act_alpha);
}

void ccn_add_activate(long n, float *x, const float *residual, int act, float act_alpha)
{
#ifdef CCN_GEMM_VARIANTS
    if (ccn_gemm_level() >= 3) {
        (ccn_gemm_level() == 4 ? ccn_add_activate_v4 : ccn_add_activate_v3)(n, x, residual,
                                                                            act, act_alpha);
        return;
    }
#endif
    for (long j = 0; j < n; j++)
        x[j] += residual[j];
    ccn_activate(n, x, act, act_alpha);
}

void ccn_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs,
              const float *B, float alpha, float *C)
{
    gemm_strided(M, N, K, A, a_rs, a_cs, B, N, alpha, C, N, 0, CCN_ACT_NONE, 0.0f);
}

/* out[4r + j] = the dot product of rows a[r] and b[j] (n floats each), for
 * r < rows (at most CCN_DOT_ROWS) and j < 4; vector partial sums, whose
 * order differs from a serial sum.  Each vector of b is loaded once for all
 * the rows. */
CCN_ALWAYS_INLINE void dot_rows_by_4(
    int rows, long n, const float *const *a, const float *const *b, float *out)
{
    long k = 0;
    float s[4 * CCN_DOT_ROWS] = {0.0f};
#if defined(__GNUC__)
    typedef float vec __attribute__((vector_size(CCN_NR / 2 * sizeof(float))));
    const long vw = CCN_NR / 2;
    vec v[4 * CCN_DOT_ROWS] = {{0}}, va[CCN_DOT_ROWS], vb;
    for (; k + vw <= n; k += vw) {
        for (int r = 0; r < rows; r++) {
            memcpy(&va[r], a[r] + k, sizeof vb);
            CCN_IN_REGISTER(va[r]);
        }
        for (int j = 0; j < 4; j++) {
            memcpy(&vb, b[j] + k, sizeof vb);
            CCN_IN_REGISTER(vb);
            for (int r = 0; r < rows; r++)
                v[4 * r + j] += va[r] * vb;
        }
    }
    for (int i = 0; i < 4 * rows; i++)
        for (long l = 0; l < vw; l++)
            s[i] += v[i][l];
#endif
    for (; k < n; k++)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < 4; j++)
                s[4 * r + j] += a[r][k] * b[j][k];
    memcpy(out, s, (size_t)(4 * rows) * sizeof(float));
}

/* gemm_bt on columns [n0, n1): rows of Bt stream past once per
 * CCN_DOT_ROWS rows of A. */
static void gemm_bt_range(long n0, long n1, long M, long K, const float *A, long a_rs,
                          const float *Bt, float alpha, float *C, long ldc, int act,
                          float act_alpha)
{
    for (long n = n0; n < n1; n += 4) {
        /* Past the last row, repeat it and drop the results. */
        const float *b[4];
        for (long j = 0; j < 4; j++)
            b[j] = Bt + min_long(n + j, n1 - 1) * K;
        for (long m = 0; m < M; m += CCN_DOT_ROWS) {
            const float *a[CCN_DOT_ROWS];
            for (long r = 0; r < CCN_DOT_ROWS; r++)
                a[r] = A + min_long(m + r, M - 1) * a_rs;
            float d[4 * CCN_DOT_ROWS] = {0.0f};
            /* A constant row count per call, for the registers. */
            switch (min_long(M - m, CCN_DOT_ROWS)) {
#if CCN_DOT_ROWS == 4
            case 4: dot_rows_by_4(4, K, a, b, d); break;
            case 3: dot_rows_by_4(3, K, a, b, d); break;
#endif
            case 2: dot_rows_by_4(2, K, a, b, d); break;
            default: dot_rows_by_4(1, K, a, b, d); break;
            }
            for (long r = 0; r < CCN_DOT_ROWS && m + r < M; r++)
                for (long j = 0; j < 4 && n + j < n1; j++)
                    C[(m + r) * ldc + n + j] += alpha * d[4 * r + j];
        }
    }
    activate_block(M, n1 - n0, C + n0, ldc, act, act_alpha);
}

/* gemm_bt_range, exported for the multi-versioned build (as
 * ccn_gemm_serial_core). */
void ccn_gemm_bt_core(long n0, long n1, long M, long K, const float *A, long a_rs,
                      const float *Bt, float alpha, float *C, long ldc, int act, float act_alpha)
{
    gemm_bt_range(n0, n1, M, K, A, a_rs, Bt, alpha, C, ldc, act, act_alpha);
}

#ifdef CCN_GEMM_VARIANTS
typedef void bt_fn(long, long, long, long, const float *, long, const float *, float, float *,
                   long, int, float);
bt_fn ccn_gemm_bt_core_v3, ccn_gemm_bt_core_v4;
#define GEMM_BT (best_level() == 4 ? ccn_gemm_bt_core_v4 \
                 : best_level() == 3 ? ccn_gemm_bt_core_v3 : gemm_bt_range)
#else
#define GEMM_BT gemm_bt_range
#endif

/* gemm_bt_range over groups of four columns, for ccn_parallel_for. */
typedef struct {
    long N, M, K;
    const float *A;
    long a_rs;
    const float *Bt;
    float alpha;
    float *C;
    long ldc;
    int act;
    float act_alpha;
} gemm_bt_part;

static void gemm_bt_quads(void *context, long begin, long end)
{
    const gemm_bt_part *g = context;
    GEMM_BT(min_long(g->N, begin * 4), min_long(g->N, end * 4), g->M, g->K, g->A, g->a_rs,
            g->Bt, g->alpha, g->C, g->ldc, g->act, g->act_alpha);
}

void ccn_gemm_bt(const ccn_gemm_geometry *g, const float *A, const float *Bt, float alpha,
                 float *C)
{
    const long M = g->M, N = g->N, K = g->K, a_rs = g->a_rs, ldc = g->ldc;
    const int act = g->act;
    const float act_alpha = g->act_alpha;
    /* Ranges of whole groups of four rows of Bt.  The work is the floats
     * of B: a few rows of A make the dot products bound by reading B, which
     * each core then streams a part of (2x faster on a 784 x 1000 layer at
     * batch 1 with two threads). */
    gemm_bt_part part = {N, M, K, A, a_rs, Bt, alpha, C, ldc, act, act_alpha};
    ccn_parallel_for((N + 3) / 4, N * K, gemm_bt_quads, &part);
}

/* The batched products' columns per block and rows per tile: two
 * vectors by CCN_MR rows, or one vector by CCN_TALL_MR (the tiles of
 * micro_kernel and micro_kernel_tall). */
#define CCN_VW (CCN_NR / 2)
#define CCN_WIDE_ROWS CCN_MR
/* Most floats of B a batched product packs on the stack (when N is not
 * whole vectors; 64 KiB, as gemm_serial's buffers): past it the product
 * takes gemm_serial. */
#define CCN_BATCH_PACK 16384
/* The tiles read A again for each block of two vectors of columns and a
 * strip of B for each tile of rows: they take a product whose A stays in
 * L2 (256 KiB) or that has at most CCN_BATCH_NARROW columns, and whose
 * strips of B do (a depth up to 2048); the blocked GEMM the rest
 * (1024x1024 by 1024x1024 took 3x its time on the tiles). */
#define CCN_BATCH_A 65536
#define CCN_BATCH_NARROW 64
#define CCN_BATCH_K 2048

#if defined(__GNUC__)
/* C[r, 0:cols] = sum_k a[r][k] B[k, 0:cols] for the rows r < rows of a
 * tile of R (row pointers into A; those past the last row repeat it and
 * are dropped) and cols <= nv * CCN_VW columns of B (rows ldb apart, whole
 * vectors readable), then the activation.  A is read in place, one element
 * broadcast per row and step of k: a small product's A is not worth
 * packing. */
CCN_ALWAYS_INLINE void batch_tile(int R, int nv, long rows, long K, const float *const *a,
                                  const float *B, long ldb, float *C, long ldc, long cols,
                                  int act, float act_alpha)
{
    vec acc[CCN_TALL_MR][2], b[2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < nv; j++)
            acc[r][j] = (vec){0};
    for (long k = 0; k < K; k++) {
        for (int j = 0; j < nv; j++) {
            memcpy(&b[j], B + k * ldb + j * CCN_VW, sizeof b[j]);
            CCN_IN_REGISTER(b[j]);
        }
        CCN_UNROLL(24)
        for (int r = 0; r < R; r++)
            for (int j = 0; j < nv; j++)
                acc[r][j] += a[r][k] * b[j];
    }
    /* Rows by a constant bound, so that acc stays in registers. */
    for (int r = 0; r < R; r++) {
        float *c = C + r * ldc, tail[2 * CCN_VW];
        if (r == rows)
            break;
        if (cols == nv * CCN_VW) {
            for (int j = 0; j < nv; j++)
                memcpy(c + j * CCN_VW, &acc[r][j], sizeof(vec));
        } else {
            for (int j = 0; j < nv; j++)
                memcpy(tail + j * CCN_VW, &acc[r][j], sizeof(vec));
            for (long j = 0; j < cols; j++)
                c[j] = tail[j];
        }
        if (act != CCN_ACT_NONE)
            activate_row(cols, c, act, act_alpha);
    }
}

/* C (M x N, rows N apart) = A B for a row-major A (rows K apart) and B
 * (rows ldb apart, whole vectors readable): blocks of two vectors of
 * columns by CCN_MR rows, the last vector by CCN_TALL_MR. */
static void batch_product(long M, long N, long K, const float *A, const float *B, long ldb,
                          float *C, int act, float act_alpha)
{
    for (long n = 0; n < N; n += 2 * CCN_VW) {
        /* Two vectors, one, or one for few rows. */
        const int shape = N - n > CCN_VW ? 2 : M >= CCN_TALL_MR ? 1 : 0;
        const long R = shape == 2 ? CCN_WIDE_ROWS : shape ? CCN_TALL_MR : CCN_MR;
        const long cols = min_long(N - n, 2 * CCN_VW);
        for (long m = 0; m < M; m += R) {
            const float *a[CCN_TALL_MR];
            for (long r = 0; r < R; r++)
                a[r] = A + min_long(m + r, M - 1) * K;
            const long rows = min_long(R, M - m);
            float *c = C + m * N + n;
            if (shape == 2)
                batch_tile(CCN_WIDE_ROWS, 2, rows, K, a, B + n, ldb, c, N, cols, act, act_alpha);
            else if (shape)
                batch_tile(CCN_TALL_MR, 1, rows, K, a, B + n, ldb, c, N, cols, act, act_alpha);
            else
                batch_tile(CCN_MR, 1, rows, K, a, B + n, ldb, c, N, cols, act, act_alpha);
        }
    }
}
#endif

/* The offsets in A and B of product t of a batch (last dim fastest). */
static void batch_offsets(const ccn_matmul_batch *batch, long t, long *a_off, long *b_off)
{
    *a_off = *b_off = 0;
    for (long d = batch->rank - 1; d >= 0; d--) {
        const long i = t % batch->dims[d];
        t /= batch->dims[d];
        *a_off += i * batch->a_strides[d];
        *b_off += i * batch->b_strides[d];
    }
}

/* Products [t0, t1) of ccn_matmul_batched, on the calling thread. */
void ccn_matmul_batched_core(long t0, long t1, const ccn_matmul_batch *batch,
                             const ccn_gemm_geometry *g, const float *A, const float *B,
                             float *C)
{
    const long M = g->M, N = g->N, K = g->K;
    for (long t = t0; t < t1; t++) {
        long a_off, b_off;
        batch_offsets(batch, t, &a_off, &b_off);
        const float *a = A + a_off, *b = B + b_off;
        float *c = C + t * M * N;
#if defined(__GNUC__)
        /* The tiles above, B packed to whole vectors when its rows are not
         * (an attention's 20 or 24 columns per head; batch_tiles_fit left
         * room for that). */
        const long padded = (N + CCN_VW - 1) / CCN_VW * CCN_VW;
        float packed[CCN_BATCH_PACK];
        if (N != padded) {
            for (long k = 0; k < K; k++)
                for (long j = 0; j < padded; j++)
                    packed[k * padded + j] = j < N ? b[k * g->ldb + j] : 0.0f;
            b = packed;
        }
        batch_product(M, N, K, a, b, N == padded ? g->ldb : padded, c, g->act, g->act_alpha);
#else
        const a_operand ao = {a, g->a_rs, g->a_cs, 1.0f, NULL, 0};
        const b_operand bo = {b, g->ldb, NULL, 0, 0};
        gemm_serial(M, N, K, &ao, 0, &bo, 0, &NO_START, c, N, 1, g->act, g->act_alpha);
#endif
    }
}

/* Whether the products of g take ccn_matmul_batched_core's tiles in
 * every build (a vector is at most 16 floats wide). */
static int batch_tiles_fit(const ccn_gemm_geometry *g)
{
    const long M = g->M, N = g->N, K = g->K;
    return g->a_cs == 1 && g->a_rs == K && K <= CCN_BATCH_K &&
           (M * K <= CCN_BATCH_A || N <= CCN_BATCH_NARROW) &&
           (N % 16 == 0 || K * ((N + 15) / 16 * 16) <= CCN_BATCH_PACK);
}

#ifdef CCN_GEMM_VARIANTS
typedef void batched_fn(long, long, const ccn_matmul_batch *, const ccn_gemm_geometry *,
                        const float *, const float *, float *);
batched_fn ccn_matmul_batched_core_v3, ccn_matmul_batched_core_v4;
#define MATMUL_BATCHED (best_level() == 4 ? ccn_matmul_batched_core_v4 \
                        : best_level() == 3 ? ccn_matmul_batched_core_v3 \
                        : ccn_matmul_batched_core)
#else
#define MATMUL_BATCHED ccn_matmul_batched_core
#endif

/* ccn_matmul_batched's arguments, for ccn_parallel_for over the batch. */
typedef struct {
    const ccn_matmul_batch *batch;
    const ccn_gemm_geometry *g;
    const float *A, *B;
    float *C;
} batched_part;

static void batched_range(void *context, long begin, long end)
{
    const batched_part *p = context;
    MATMUL_BATCHED(begin, end, p->batch, p->g, p->A, p->B, p->C);
}

void ccn_matmul_batched(const ccn_matmul_batch *batch, const ccn_gemm_geometry *g,
                        const float *A, const float *B, float *C)
{
    long batches = 1;
    for (long d = 0; d < batch->rank; d++)
        batches *= batch->dims[d];
    if (batch_tiles_fit(g)) {
        /* Whole products per thread: each is small (an attention head's). */
        batched_part part = {batch, g, A, B, C};
        ccn_parallel_for(batches, batches * g->M * g->N * g->K / CCN_MACS_PER_WORK,
                         batched_range, &part);
        return;
    }
    /* Large products one after the other, each split between threads. */
    for (long t = 0; t < batches; t++) {
        long a_off, b_off;
        batch_offsets(batch, t, &a_off, &b_off);
        gemm_strided(g->M, g->N, g->K, A + a_off, g->a_rs, g->a_cs, B + b_off, g->ldb, 1.0f,
                     C + t * g->M * g->N, g->N, 1, g->act, g->act_alpha);
    }
}

/* ccn_transpose_batch's rows of 8x8 blocks [begin, end) of every matrix. */
typedef struct {
    long R, C, block_rows;
    const float *src;
    long src_stride;
    float *dst;
    long dst_stride;
} transpose_part;

static void transpose_blocks(void *context, long begin, long end)
{
    const transpose_part *t = context;
    const long R = t->R, C = t->C, block_rows = t->block_rows;
    for (long ib = begin; ib < end; ib++) {
        const long r0 = ib % block_rows * 8;
        const float *s = t->src + ib / block_rows * t->src_stride;
        float *d = t->dst + ib / block_rows * t->dst_stride;
        for (long c0 = 0; c0 < C; c0 += 8) {
            if (r0 + 8 <= R && c0 + 8 <= C) {
                float tile[8][8];
                for (int i = 0; i < 8; i++)
                    for (int j = 0; j < 8; j++)
                        tile[j][i] = s[(r0 + i) * C + c0 + j];
                for (int j = 0; j < 8; j++)
                    for (int i = 0; i < 8; i++)
                        d[(c0 + j) * R + r0 + i] = tile[j][i];
                continue;
            }
            for (long r = r0; r < R && r < r0 + 8; r++)
                for (long c = c0; c < C && c < c0 + 8; c++)
                    d[c * R + r] = s[r * C + c];
        }
    }
}

/* dst_i (C x R) = src_i (R x C) transposed for nb matrices, src_i at
 * src + i*src_stride and dst_i at dst + i*dst_stride: one parallel loop over
 * every matrix's rows of 8x8 blocks, as each is small in a late layer. */
void ccn_transpose_batch(long nb, long R, long C, const float *src, long src_stride,
                            float *dst, long dst_stride)
{
    /* 8 x 8 blocks through a local tile, which gcc turns into vector
     * shuffles; writing whole columns of a large block instead strides
     * through dst by R floats and, with R a power of two, thrashes the
     * cache (8x slower measured at 4608 x 512). */
    transpose_part part = {R, C, (R + 7) / 8, src, src_stride, dst, dst_stride};
    ccn_parallel_for(nb * part.block_rows, nb * R * C, transpose_blocks, &part);
}

void ccn_transpose(long R, long C, const float *src, float *dst)
{
    ccn_transpose_batch(1, R, C, src, 0, dst, 0);
}

/* ccn_copy_image_rows's rows [begin, end). */
typedef struct {
    long nb, S;
    const float *src;
    long src_row, src_image;
    float *dst;
    long dst_row, dst_image;
} copy_rows_part;

static void copy_rows(void *context, long begin, long end)
{
    const copy_rows_part *c = context;
    for (long m = begin; m < end; m++)
        for (long i = 0; i < c->nb; i++)
            memcpy(c->dst + m * c->dst_row + i * c->dst_image,
                   c->src + m * c->src_row + i * c->src_image, (size_t)c->S * sizeof(float));
}

void ccn_copy_image_rows(long rows, long nb, long S, const float *src, long src_row,
                         long src_image, float *dst, long dst_row, long dst_image)
{
    copy_rows_part part = {nb, S, src, src_row, src_image, dst, dst_row, dst_image};
    ccn_parallel_for(rows, rows * nb * S, copy_rows, &part);
}

/* The share of an m x n block that CCN_MR x CCN_NR micro-kernel tiles
 * covering it compute. */
double ccn_gemm_tile_fill(long m, long n)
{
    const long tiles_m = (m + CCN_MR - 1) / CCN_MR, tiles_n = (n + CCN_NR - 1) / CCN_NR;
    return (double)(m * n) / (double)(tiles_m * CCN_MR * tiles_n * CCN_NR);
}
