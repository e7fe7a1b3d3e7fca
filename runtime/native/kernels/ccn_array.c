/* Array family: data movement, whatever the element type. */
#include <string.h>

#include "ccn_array.h"

void ccn_copy(size_t nbytes, const void *x, void *y)
{
    if (x != y)
        memcpy(y, x, nbytes);
}

/* The most axes of an index space here: lower.py's MAX_RANK bounds every
 * value's rank. */
#define CCN_ARRAY_MAX_RANK 8

/* Rows [begin, end) of shape (every axis but the last) in C order, with
 * each operand's element offset under its strides: divisions at the first
 * row only, then an odometer.  row_offset's division per axis and row
 * took most of a Transpose of short rows (MobileViT's runs of 2 floats: 5
 * ns an element). */
typedef struct {
    int rank, operands;
    const long *shape;
    const long *const *strides;
    long index[CCN_ARRAY_MAX_RANK], offset[3];
} row_walk;

static void walk_start(row_walk *w, long row)
{
    for (int j = 0; j < w->operands; ++j)
        w->offset[j] = 0;
    for (int k = w->rank - 2; k >= 0; --k) {
        w->index[k] = row % w->shape[k];
        row /= w->shape[k];
        for (int j = 0; j < w->operands; ++j)
            w->offset[j] += w->index[k] * w->strides[j][k];
    }
}

/* To the next row: the innermost outer axis steps, carrying outwards. */
static inline void walk_next(row_walk *w)
{
    for (int k = w->rank - 2; k >= 0; --k) {
        const int carry = ++w->index[k] == w->shape[k];
        const long steps = carry ? 1 - w->shape[k] : 1;
        for (int j = 0; j < w->operands; ++j)
            w->offset[j] += steps * w->strides[j][k];
        if (!carry)
            return;
        w->index[k] = 0;
    }
}

/* Number of rows: every axis but the last. */
static long row_count(int rank, const long *shape)
{
    long rows = 1;
    for (int k = 0; k < rank - 1; ++k)
        rows *= shape[k];
    return rows;
}

/* A block of l planes of m rows of n elements of elem bytes from x
 * (strides in bytes: xb[0] a plane, xb[1] a row, xb[2] an element) to y
 * (yb).  A constant size in each memcpy lets the compiler turn it into one
 * load and one store; contiguous runs of 8 or 16 bytes (MobileViT's
 * patches: 2 floats) go as single elements of that size, and only long
 * runs call memcpy. */
#define CCN_COPY_BLOCK(SIZE)                                                  \
    for (long p = 0; p < l; ++p)                                              \
        for (long j = 0; j < m; ++j)                                          \
            for (long i = 0; i < n; ++i)                                      \
                memcpy(y + p * yb[0] + j * yb[1] + i * yb[2],                 \
                       x + p * xb[0] + j * xb[1] + i * xb[2], (SIZE));
static void copy_block(size_t elem, long l, long m, long n, const unsigned char *x,
                       const long *xb, unsigned char *y, const long *yb)
{
    const long run = n * (long)elem;
    if (n > 1 && xb[2] == (long)elem && yb[2] == (long)elem) {
        if (run == 8 || run == 16) {
            copy_block((size_t)run, l, m, 1, x, xb, y, yb);
            return;
        }
        if (run >= 64) {
            for (long p = 0; p < l; ++p)
                for (long j = 0; j < m; ++j)
                    memcpy(y + p * yb[0] + j * yb[1], x + p * xb[0] + j * xb[1], (size_t)run);
            return;
        }
    }
    switch (elem) {
    case 1: CCN_COPY_BLOCK(1) break;
    case 4: CCN_COPY_BLOCK(4) break;
    case 8: CCN_COPY_BLOCK(8) break;
    case 16: CCN_COPY_BLOCK(16) break;
    default: CCN_COPY_BLOCK(elem)
    }
}
#undef CCN_COPY_BLOCK

/* ccn_strided_copy: its rows [begin, end). */
typedef struct {
    size_t elem;
    int rank;
    const long *shape;
    const void *x;
    const long *x_strides;
    void *y;
    const long *y_strides;
} strided_copy_call;

static void strided_copy_range(void *context, long begin, long end)
{
    const strided_copy_call *a = context;
    size_t elem = a->elem;
    int rank = a->rank;
    const long *shape = a->shape;
    const void *x = a->x;
    const long *x_strides = a->x_strides;
    void *y = a->y;
    const long *y_strides = a->y_strides;
    const long n = shape[rank - 1];
    const long e = (long)elem;
    if (n == 0)
        return;
    /* The last three axes' strides in bytes (a lower rank's missing ones
     * unused). */
    const long xb[] = {rank >= 3 ? x_strides[rank - 3] * e : 0,
                       rank >= 2 ? x_strides[rank - 2] * e : 0, x_strides[rank - 1] * e};
    const long yb[] = {rank >= 3 ? y_strides[rank - 3] * e : 0,
                       rank >= 2 ? y_strides[rank - 2] * e : 0, y_strides[rank - 1] * e};
    if (rank == 1) {
        copy_block(elem, 1, 1, n, x, xb, y, yb);
        return;
    }
    const long *strides[] = {x_strides, y_strides};
    row_walk w = {.rank = rank, .operands = 2, .shape = shape, .strides = strides};
    walk_start(&w, begin);
    /* Rows by blocks: the rest of the current plane (axis k, the last
     * outer axis), or whole planes along axis k - 1 when the range holds
     * them, so that short rows do not each pay the walk. */
    const int k = rank - 2;
    for (long r = begin; r < end;) {
        long planes = 1, rows = shape[k] - w.index[k];
        if (k >= 1 && w.index[k] == 0 && end - r >= shape[k]) {
            const long whole = (end - r) / shape[k], more = shape[k - 1] - w.index[k - 1];
            planes = whole < more ? whole : more;
        } else if (end - r < rows) {
            rows = end - r;
        }
        copy_block(elem, planes, rows, n, (const unsigned char *)x + w.offset[0] * e, xb,
                   (unsigned char *)y + w.offset[1] * e, yb);
        r += planes * rows;
        /* To the block's last row, then one step with the carry. */
        w.index[k] += rows - 1;
        if (k >= 1)
            w.index[k - 1] += planes - 1;
        for (int j = 0; j < 2; ++j)
            w.offset[j] += (rows - 1) * strides[j][k] + (planes - 1) * (k >= 1 ? strides[j][k - 1] : 0);
        walk_next(&w);
    }
}

void ccn_strided_copy(size_t elem, int rank, const long *shape,
                      const void *x, const long *x_strides,
                      void *y, const long *y_strides)
{
    strided_copy_call a = {elem, rank, shape, x, x_strides, y, y_strides};
    const long rows = row_count(rank, shape);
    ccn_parallel_for(rows, rows * shape[rank - 1], strided_copy_range, &a);
}

/* ccn_table_copy: its rows [begin, end). */
typedef struct {
    size_t elem;
    int rank;
    const long *shape;
    const long *tables;
    const void *x;
    const long *x_strides;
    const void *fill;
    void *y;
} table_copy_call;

static void table_copy_range(void *context, long begin, long end)
{
    const table_copy_call *a = context;
    size_t elem = a->elem;
    int rank = a->rank;
    const long *shape = a->shape;
    const long *tables = a->tables;
    const void *x = a->x;
    const long *x_strides = a->x_strides;
    const void *fill = a->fill;
    void *y = a->y;
    const long n = shape[rank - 1];
    const long e = (long)elem;
    /* The last axis's table follows the tables of the others. */
    long last = 0;
    for (int k = 0; k < rank - 1; ++k)
        last += shape[k];
    for (long r = begin; r < end; r++) {
        unsigned char *yr = (unsigned char *)y + r * n * e;
        /* Source offset of the row, or -1 when an outer axis is padding. */
        long offset = 0, rest = r, table = last;
        for (int k = rank - 2; k >= 0 && offset >= 0; --k) {
            table -= shape[k];
            const long source = tables[table + rest % shape[k]];
            offset = source < 0 ? -1 : offset + source * x_strides[k];
            rest /= shape[k];
        }
        for (long i = 0; i < n; ++i) {
            const long source = tables[last + i];
            const void *from = offset < 0 || source < 0 ? fill
                : (const unsigned char *)x + (offset + source * x_strides[rank - 1]) * e;
            memcpy(yr + i * e, from, elem);
        }
    }
}

void ccn_table_copy(size_t elem, int rank, const long *shape, const long *tables,
                    const void *x, const long *x_strides, const void *fill, void *y)
{
    table_copy_call a = {elem, rank, shape, tables, x, x_strides, fill, y};
    const long rows = row_count(rank, shape);
    ccn_parallel_for(rows, rows * shape[rank - 1], table_copy_range, &a);
}

/* The index entry i, read as int32 or int64. */
static long index_at(const void *indices, int index_bytes, long i)
{
    if (index_bytes == 4)
        return (long)((const int32_t *)indices)[i];
    return (long)((const int64_t *)indices)[i];
}

/* ccn_gather's and ccn_gather_nd's copies: a run of `run` bytes per index
 * (per tuple of `depth` indices into dims, blocks of `block` elements per
 * batch entry, for GatherND). */
typedef struct {
    long dim, n;
    int index_bytes, depth;
    const long *dims;
    long block;
    size_t elem, run;
    const void *x, *indices;
    void *y;
} gather_call;

/* ccn_gather's outer slices [begin, end). */
static void gather_range(void *context, long begin, long end)
{
    const gather_call *g = context;
    for (long o = begin; o < end; ++o) {
        for (long j = 0; j < g->n; ++j) {
            long i = index_at(g->indices, g->index_bytes, j);
            i = i < 0 ? i + g->dim : i;
            memcpy((unsigned char *)g->y + (size_t)(o * g->n + j) * g->run,
                   (const unsigned char *)g->x + (size_t)(o * g->dim + i) * g->run, g->run);
        }
    }
}

int ccn_gather(size_t elem, long outer, long dim, long inner, const void *x,
               long n, const void *indices, int index_bytes, void *y)
{
    /* Every index is checked before anything is written. */
    for (long j = 0; j < n; ++j) {
        const long i = index_at(indices, index_bytes, j);
        if (i < -dim || i >= dim)
            return 1;
    }
    gather_call g = {dim, n, index_bytes, 0, NULL, 0, elem, (size_t)inner * elem, x, indices, y};
    ccn_parallel_for(outer, outer * n * inner, gather_range, &g);
    return 0;
}

/* ccn_gather_nd's index tuples [begin, end). */
static void gather_nd_range(void *context, long begin, long end)
{
    const gather_call *g = context;
    for (long j = begin; j < end; ++j) {
        long offset = 0; /* in runs of ``inner`` elements */
        for (int k = 0; k < g->depth; ++k) {
            const long i = index_at(g->indices, g->index_bytes, j * g->depth + k);
            offset = offset * g->dims[k] + (i < 0 ? i + g->dims[k] : i);
        }
        memcpy((unsigned char *)g->y + (size_t)j * g->run,
               (const unsigned char *)g->x + (size_t)(j / g->n * g->block) * g->elem +
                   offset * g->run,
               g->run);
    }
}

int ccn_gather_nd(size_t elem, long batch, int depth, const long *dims, long inner,
                  const void *x, long n, const void *indices, int index_bytes, void *y)
{
    long block = inner; /* elements of x per batch entry */
    for (int k = 0; k < depth; ++k) {
        block *= dims[k];
        for (long j = 0; j < batch * n; ++j) {
            const long i = index_at(indices, index_bytes, j * depth + k);
            if (i < -dims[k] || i >= dims[k])
                return 1;
        }
    }
    gather_call g = {0, n, index_bytes, depth, dims, block, elem, (size_t)inner * elem, x,
                     indices, y};
    ccn_parallel_for(batch * n, batch * n * inner, gather_nd_range, &g);
    return 0;
}

/* One axis of one Resize slice: y[j, :] (inner floats) = the sum over
 * t < taps of weight[j * taps + t] * x[index[j * taps + t], :], for
 * j < out_len.  With inner 1 (the last axis) each output gathers its taps;
 * else each tap is a whole row of inner floats, and the loop over the
 * row vectorises. */
static void resize_pass(long out_len, long inner, int taps, const int32_t *index,
                        const float *weight, const float *x, float *restrict y)
{
    if (inner == 1) {
        /* Linear's two taps constant: the gathers vectorise. */
        if (taps == 2) {
            for (long j = 0; j < out_len; ++j)
                y[j] = weight[2 * j] * x[index[2 * j]] + weight[2 * j + 1] * x[index[2 * j + 1]];
            return;
        }
        for (long j = 0; j < out_len; ++j) {
            float s = weight[j * taps] * x[index[j * taps]];
            for (int t = 1; t < taps; ++t)
                s += weight[j * taps + t] * x[index[j * taps + t]];
            y[j] = s;
        }
        return;
    }
    for (long j = 0; j < out_len; ++j) {
        float *yj = y + j * inner;
        const int32_t *at = index + j * taps;
        const float *w = weight + j * taps;
        for (long i = 0; i < inner; ++i)
            yj[i] = w[0] * x[at[0] * inner + i];
        for (int t = 1; t < taps; ++t)
            for (long i = 0; i < inner; ++i)
                yj[i] += w[t] * x[at[t] * inner + i];
    }
}

/* ccn_resize_axis: its outer slices [begin, end). */
typedef struct {
    long in_len, out_len, inner;
    int taps;
    const int32_t *index;
    const float *weight;
    const uint8_t *outside;
    float fill;
    const float *x;
    float *y;
} resize_axis_call;

static void resize_axis_range(void *context, long begin, long end)
{
    const resize_axis_call *a = context;
    const long inner = a->inner;
    for (long o = begin; o < end; o++) {
        float *yo = a->y + o * a->out_len * inner;
        resize_pass(a->out_len, inner, a->taps, a->index, a->weight,
                    a->x + o * a->in_len * inner, yo);
        for (long j = 0; a->outside && j < a->out_len; ++j)
            if (a->outside[j])
                for (long i = 0; i < inner; ++i)
                    yo[j * inner + i] = a->fill;
    }
}

void ccn_resize_axis(long outer, long in_len, long out_len, long inner, int taps,
                     const int32_t *index, const float *weight, const uint8_t *outside,
                     float fill, const float *x, float *y)
{
    resize_axis_call a = {in_len, out_len, inner, taps, index, weight, outside, fill, x, y};
    ccn_parallel_for(outer, outer * out_len * inner * taps, resize_axis_range, &a);
}

/* ccn_resize_2d: its planes [begin, end). */
typedef struct {
    const ccn_resize_2d_geometry *g;
    const int32_t *index_h, *index_w;
    const float *weight_h, *weight_w, *x;
    float *y, *mid;
} resize_2d_call;

static void resize_2d_range(void *context, long begin, long end)
{
    const resize_2d_call *a = context;
    const ccn_resize_2d_geometry *g = a->g;
    const long in_h = g->in_h, in_w = g->in_w, out_h = g->out_h, out_w = g->out_w;
    for (long o = begin; o < end; o++) {
        const float *x = a->x + o * in_h * in_w;
        float *y = a->y + o * out_h * out_w;
        if (g->columns_first) {
            float *mid = a->mid + o * in_h * out_w;
            for (long h = 0; h < in_h; h++)
                resize_pass(out_w, 1, g->taps_w, a->index_w, a->weight_w, x + h * in_w,
                            mid + h * out_w);
            resize_pass(out_h, out_w, g->taps_h, a->index_h, a->weight_h, mid, y);
        } else {
            float *mid = a->mid + o * out_h * in_w;
            resize_pass(out_h, in_w, g->taps_h, a->index_h, a->weight_h, x, mid);
            for (long h = 0; h < out_h; h++)
                resize_pass(out_w, 1, g->taps_w, a->index_w, a->weight_w, mid + h * in_w,
                            y + h * out_w);
        }
    }
}

void ccn_resize_2d(const ccn_resize_2d_geometry *geometry, const int32_t *index_h,
                   const float *weight_h, const int32_t *index_w, const float *weight_w,
                   const float *x, float *y, float *mid)
{
    const ccn_resize_2d_geometry *g = geometry;
    resize_2d_call a = {g, index_h, index_w, weight_h, weight_w, x, y, mid};
    ccn_parallel_for(g->outer, g->outer * g->out_h * g->out_w * (g->taps_h + g->taps_w),
                     resize_2d_range, &a);
}

/* A row of Where of SIZE-byte elements: both operands read, one kept, so
 * that the loop is branch-free and vectorises.  A memcpy per element took
 * 12 ns (GPT-2's Where of its probabilities' NaNs, 16K elements: 0.2 ms);
 * the contiguous row and the scalar operand of masks and NaN guards get
 * loops of their own. */
#define CCN_WHERE_RUN(SIZE, T)                                                \
    static inline void where_loop_##SIZE(long n, const uint8_t *c, long cs,   \
                                         const T *x, long xs, const T *y,     \
                                         long ys, T *out)                     \
    {                                                                         \
        for (long i = 0; i < n; ++i) {                                        \
            const T a = x[i * xs], b = y[i * ys];                             \
            out[i] = c[i * cs] ? a : b;                                       \
        }                                                                     \
    }                                                                         \
    static void where_run_##SIZE(long n, const uint8_t *c, long cs,           \
                                 const void *x, long xs, const void *y,       \
                                 long ys, void *out)                          \
    {                                                                         \
        if (cs == 1 && ys == 1 && xs == 1)                                    \
            where_loop_##SIZE(n, c, 1, x, 1, y, 1, out);                      \
        else if (cs == 1 && ys == 1 && xs == 0)                               \
            where_loop_##SIZE(n, c, 1, x, 0, y, 1, out);                      \
        else if (cs == 1 && ys == 0 && xs == 1)                               \
            where_loop_##SIZE(n, c, 1, x, 1, y, 0, out);                      \
        else                                                                  \
            where_loop_##SIZE(n, c, cs, x, xs, y, ys, out);                   \
    }
CCN_WHERE_RUN(1, uint8_t)
CCN_WHERE_RUN(4, uint32_t)
CCN_WHERE_RUN(8, uint64_t)
#undef CCN_WHERE_RUN

/* ccn_where: its rows [begin, end). */
typedef struct {
    size_t elem;
    int rank;
    const long *shape;
    const uint8_t *cond;
    const long *cond_strides;
    const void *x;
    const long *x_strides;
    const void *y;
    const long *y_strides;
    void *out;
} where_call;

static void where_range(void *context, long begin, long end)
{
    const where_call *a = context;
    size_t elem = a->elem;
    int rank = a->rank;
    const long *shape = a->shape;
    const uint8_t *cond = a->cond;
    const long *cond_strides = a->cond_strides;
    const void *x = a->x;
    const long *x_strides = a->x_strides;
    const void *y = a->y;
    const long *y_strides = a->y_strides;
    void *out = a->out;
    const long n = shape[rank - 1];
    const long e = (long)elem;
    const long cs = cond_strides[rank - 1], xs = x_strides[rank - 1], ys = y_strides[rank - 1];
    const long *strides[] = {cond_strides, x_strides, y_strides};
    row_walk w = {.rank = rank, .operands = 3, .shape = shape, .strides = strides};
    walk_start(&w, begin);
    for (long r = begin; r < end; r++, walk_next(&w)) {
        const uint8_t *cr = cond + w.offset[0];
        const unsigned char *xr = (const unsigned char *)x + w.offset[1] * e;
        const unsigned char *yr = (const unsigned char *)y + w.offset[2] * e;
        unsigned char *outr = (unsigned char *)out + r * n * e;
        switch (elem) {
        case 1: where_run_1(n, cr, cs, xr, xs, yr, ys, outr); break;
        case 4: where_run_4(n, cr, cs, xr, xs, yr, ys, outr); break;
        case 8: where_run_8(n, cr, cs, xr, xs, yr, ys, outr); break;
        default:
            for (long i = 0; i < n; ++i)
                memcpy(outr + i * e, cr[i * cs] ? xr + i * xs * e : yr + i * ys * e, elem);
        }
    }
}

void ccn_where(size_t elem, int rank, const long *shape,
               const uint8_t *cond, const long *cond_strides,
               const void *x, const long *x_strides,
               const void *y, const long *y_strides, void *out)
{
    where_call a = {elem, rank, shape, cond, cond_strides, x, x_strides, y, y_strides, out};
    const long rows = row_count(rank, shape);
    ccn_parallel_for(rows, rows * shape[rank - 1], where_range, &a);
}

/* A cast's arrays, for ccn_parallel_for. */
typedef struct {
    const void *x;
    void *y;
} cast_call;

/* Numbers convert as C converts them, except that bool is x != 0 and that
 * a float whose truncation an integer type cannot hold (NaN, infinities,
 * out of range) becomes that type's minimum, as NumPy's casts give on x86:
 * C leaves that conversion undefined. */
#define CCN_CAST_DEFINE(FROM, FROM_T, TO, TO_T)                               \
    static void cast_##FROM##_##TO(void *context, long begin, long end)      \
    {                                                                         \
        const cast_call *c = context;                                         \
        const FROM_T *x = c->x;                                               \
        TO_T *y = c->y;                                                       \
        for (long i = begin; i < end; ++i)                                    \
            y[i] = CCN_CAST_##TO(TO_T, x[i], CCN_FLOAT_##FROM);               \
    }                                                                         \
    void ccn_cast_##FROM##_##TO(long n, const FROM_T *x, TO_T *y)             \
    {                                                                         \
        cast_call c = {x, y};                                                 \
        ccn_parallel_for(n, n, cast_##FROM##_##TO, &c);                       \
    }
#define CCN_FLOAT_float32 1
#define CCN_FLOAT_float64 1
#define CCN_FLOAT_int64 0
#define CCN_FLOAT_int32 0
#define CCN_FLOAT_bool 0
#define CCN_CAST_float32(TO_T, v, from_float) (TO_T)(v)
#define CCN_CAST_float64(TO_T, v, from_float) (TO_T)(v)
/* The bounds are exact doubles; NaN fails every comparison. */
#define CCN_CAST_int64(TO_T, v, from_float)                                               \
    (from_float && !((v) >= -9223372036854775808.0 && (v) < 9223372036854775808.0)       \
         ? INT64_MIN : (TO_T)(v))
#define CCN_CAST_int32(TO_T, v, from_float)                                 \
    (from_float && !((v) > -2147483649.0 && (v) < 2147483648.0) ? INT32_MIN \
                                                                 : (TO_T)(v))
#define CCN_CAST_bool(TO_T, v, from_float) (TO_T)((v) != 0)
CCN_CAST_ALL(CCN_CAST_DEFINE)
