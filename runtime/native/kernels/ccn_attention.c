/* ccn_attention.c: see ccn_attention.h. */
#include "ccn_attention.h"

#include "ccn_activation.h"
#include "ccn_gemm.h"
#include "ccn_threads.h"

/* Floats of scores a block holds (256 KiB, on the stack of the thread
 * running it: the L2 keeps it between the two products), at least 16 rows
 * of CCN_ATTENTION_KEYS: each block's products pack kt and v again, which
 * blocks of 16 rows of Whisper's 1500 keys paid for in 1.3x the time of
 * blocks of 40 to 64 (benchmarks/NOTES.md). */
#define CCN_ATTENTION_BLOCK 65536
#if CCN_ATTENTION_BLOCK < 16 * CCN_ATTENTION_KEYS
#error "a block must hold 16 rows of the most keys"
#endif
/* Outputs of this many columns per row (MobileViT's 16-deep heads) take
 * the product by v on the batched products' tiles (ccn_matmul_batched: a
 * whole vector per row, the scores and v read in place), where the
 * blocked GEMM's 32-column tile runs half empty: 0.85x to 0.89x the time
 * of a [16, 256, 256, 16] attention.  Other widths, and the scores'
 * product, were as fast or faster on the GEMM (benchmarks/NOTES.md). */
#define CCN_ATTENTION_TILED_E 16
/* Past this many keys ccn_matmul_batched leaves its tiles (CCN_BATCH_K in
 * ccn_gemm.c) for a GEMM that took 1.13x ccn_gemm_one_thread's time. */
#define CCN_ATTENTION_TILED_KEYS 2048

typedef struct {
    const ccn_attention_geometry *g;
    const float *q, *kt, *v, *mask;
    float *y;
    long blocks, rows; /* blocks of `rows` query rows per product */
} attention_part;

/* Blocks [begin, end) of every product's rows. */
static void attention_blocks(void *context, long begin, long end)
{
    const attention_part *p = context;
    const ccn_attention_geometry *g = p->g;
    const long M = g->M, N = g->N, D = g->D, E = g->E;
    float scores[CCN_ATTENTION_BLOCK];
    for (long b = begin; b < end; b++) {
        const long t = b / p->blocks, m0 = b % p->blocks * p->rows;
        const long rows = p->rows < M - m0 ? p->rows : M - m0;
        const float *mask = p->mask;
        if (mask) {
            long rest = t;
            for (long d = g->rank - 1; d >= 0; d--) {
                mask += rest % g->dims[d] * g->mask_strides[d];
                rest /= g->dims[d];
            }
            mask += m0 * g->mask_rs;
        }
        const float *q = p->q + (t * M + m0) * D, *kt = p->kt + t * D * N, *v = p->v + t * N * E;
        float *y = p->y + (t * M + m0) * E;
        ccn_gemm_one_thread(rows, N, D, q, D, kt, N, scores, N, 1);
        ccn_softmax_scores(rows, N, g->scale, mask, g->mask_rs, scores);
        if (E == CCN_ATTENTION_TILED_E && N <= CCN_ATTENTION_TILED_KEYS) {
            /* One product (a batch of rank 0), on this thread: its work,
             * a block of scores, is below CCN_PARALLEL_WORK. */
            static const ccn_matmul_batch one = {0};
            const ccn_gemm_geometry yg = {.M = rows, .N = E, .K = N, .a_rs = N, .a_cs = 1,
                                          .ldb = E, .ldc = E};
            ccn_matmul_batched(&one, &yg, scores, v, y);
        } else {
            ccn_gemm_one_thread(rows, E, N, scores, N, v, E, y, E, 1);
        }
    }
}

void ccn_attention(const ccn_attention_geometry *g, const float *q, const float *kt,
                   const float *v, const float *mask, float *y)
{
    /* Whole tiles of 8 rows where the keys leave room for them. */
    long rows = CCN_ATTENTION_BLOCK / g->N;
    rows = rows < g->M ? rows - rows % 8 : g->M;
    const long blocks = (g->M + rows - 1) / rows;
    attention_part part = {g, q, kt, v, mask, y, blocks, rows};
    ccn_parallel_for(g->batch * blocks, g->batch * g->M * g->N * (g->D + g->E) / CCN_MACS_PER_WORK,
                     attention_blocks, &part);
}
