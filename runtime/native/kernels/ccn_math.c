/* Math family: element-wise binary operations with NumPy broadcasting for
 * every dtype, Not, IsNaN and IsInf. */
#include <math.h>
#include <string.h>
#include <tgmath.h> /* pow of floats is powf */

#include "ccn_math.h"

/* One row of one operation: y[i] = a[i * as] op b[i * bs] for i < n, with
 * void pointers so that one broadcasting loop serves every dtype. */
typedef void (*row_fn)(enum ccn_binary_op op, long n, const void *a, long as,
                       const void *b, long bs, void *y);

/* base ** e in wrapping integer arithmetic (squaring); a negative exponent
 * gives the truncated real result. */
static int64_t ipow(int64_t base, int64_t e)
{
    if (e < 0)
        return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t result = 1, b = (uint64_t)base;
    for (; e; e >>= 1) {
        if (e & 1)
            result *= b;
        b *= b;
    }
    return (int64_t)result;
}

/* One loop per operation; u and v are the operands, of type elem.  Unit
 * strides, and one operand the same along the row (stride 0: a scalar, a
 * bias or a per-channel scale), have loops of their own that vectorise
 * (GCC's versioning for unit strides does not cover a stride of 0). */
#define CCN_ROW_LOOP(R, EXPR, U, V)                                           \
    for (long i = 0; i < n; i++) {                                            \
        const elem u = (U), v = (V);                                          \
        out[i] = (R)(EXPR);                                                   \
    }

#define CCN_ROW(R, EXPR)                                                      \
    {                                                                         \
        R *out = y;                                                           \
        if (as == 1 && bs == 1) {                                             \
            CCN_ROW_LOOP(R, EXPR, a[i], b[i])                                 \
        } else if (as == 1 && bs == 0) {                                      \
            const elem b0 = b[0];                                             \
            CCN_ROW_LOOP(R, EXPR, a[i], b0)                                   \
        } else if (as == 0 && bs == 1) {                                      \
            const elem a0 = a[0];                                             \
            CCN_ROW_LOOP(R, EXPR, a0, b[i])                                   \
        } else {                                                              \
            CCN_ROW_LOOP(R, EXPR, a[i * as], b[i * bs])                       \
        }                                                                     \
    }                                                                         \
    break;

/* Arithmetic: W is the type + - * run in (unsigned for integers, which
 * wrap around like NumPy's instead of overflowing); NAN tells a NaN
 * operand, which max and min return. */
#define CCN_ARITH_CASES(W, DIV, POW, NAN)                                     \
    case CCN_ADD: CCN_ROW(elem, (W)u + (W)v)                                  \
    case CCN_SUB: CCN_ROW(elem, (W)u - (W)v)                                  \
    case CCN_MUL: CCN_ROW(elem, (W)u * (W)v)                                  \
    case CCN_DIV: CCN_ROW(elem, DIV)                                          \
    case CCN_POW: CCN_ROW(elem, POW)                                          \
    case CCN_MAX: CCN_ROW(elem, u > v || NAN(u) ? u : v)                      \
    case CCN_MIN: CCN_ROW(elem, u < v || NAN(u) ? u : v)                      \
    case CCN_PRELU: CCN_ROW(elem, u >= 0 ? u : (elem)((W)u * (W)v))

/* Comparisons as one loop: which of <, ==, > make each one true, as bits
 * (a NaN operand makes none true). */
static unsigned compare_mask(enum ccn_binary_op op)
{
    switch (op) {
    case CCN_EQUAL: return 2;
    case CCN_LESS: return 1;
    case CCN_GREATER: return 4;
    case CCN_LESS_EQUAL: return 3;
    case CCN_GREATER_EQUAL: return 6;
    default: return 0;
    }
}

#define CCN_COMPARE_CASES                                                     \
    case CCN_EQUAL: case CCN_LESS: case CCN_GREATER: case CCN_LESS_EQUAL:     \
    case CCN_GREATER_EQUAL: {                                                 \
        const unsigned mask = compare_mask(op);                               \
        CCN_ROW(uint8_t, ((mask & 1) && u < v) || ((mask & 2) && u == v)      \
                         || ((mask & 4) && u > v))                            \
    }

#define CCN_LOGIC_CASES                                                       \
    case CCN_AND: CCN_ROW(uint8_t, u && v)                                    \
    case CCN_OR: CCN_ROW(uint8_t, u || v)                                     \
    case CCN_XOR: CCN_ROW(uint8_t, !u != !v)

/* The lowering only asks for the operations ONNX defines on the dtype:
 * arithmetic for numbers, logic for bools. */
#define CCN_ROW_FN(DECL, NAME, T, CASES)                                      \
DECL void NAME(enum ccn_binary_op op, long n, const void *pa, long as,        \
               const void *pb, long bs, void *y)                              \
{                                                                             \
    typedef T elem;                                                           \
    const elem *a = pa, *b = pb;                                              \
    switch (op) {                                                             \
    CASES                                                                     \
    default:                                                                  \
        break;                                                                \
    }                                                                         \
}

#define CCN_NEVER(u) 0
/* C's integer division truncates toward zero as ONNX's does; a zero divisor
 * gives 0 (NumPy's result) and -1 negates, as the minimum / -1 would trap. */
#define CCN_INT_DIV (v == 0 ? (elem)0 : v == -1 ? (elem)(0 - (uint64_t)u) : u / v)

/* float32's rows built for the CPU's level (CCN_LEVELS, ccn_common.h),
 * chosen once per call: Add, Mul... in AVX2 or AVX-512 in the default
 * build (EfficientNet-B0's Add 2.13x slower in SSE2). */
CCN_ROW_FN(CCN_ALWAYS_INLINE, row_float32_body, float,
           CCN_ARITH_CASES(elem, u / v, pow(u, v), isnan) CCN_COMPARE_CASES)
CCN_LEVELS(static inline, row_float32, row_float32_body,
           (enum ccn_binary_op op, long n, const void *a, long as, const void *b, long bs,
            void *y),
           (op, n, a, as, b, bs, y))
CCN_ROW_FN(static, row_float64, double,
           CCN_ARITH_CASES(elem, u / v, pow(u, v), isnan) CCN_COMPARE_CASES)
CCN_ROW_FN(static, row_int64, int64_t,
           CCN_ARITH_CASES(uint64_t, CCN_INT_DIV, ipow(u, v), CCN_NEVER) CCN_COMPARE_CASES)
CCN_ROW_FN(static, row_int32, int32_t,
           CCN_ARITH_CASES(uint32_t, CCN_INT_DIV, ipow(u, v), CCN_NEVER) CCN_COMPARE_CASES)
CCN_ROW_FN(static, row_bool, uint8_t, CCN_COMPARE_CASES CCN_LOGIC_CASES)

/* Elements of y a thread takes at a time in broadcast. */
#define BROADCAST_PIECE 16384L

/* broadcast's pieces [begin, end), with what the pieces share. */
typedef struct {
    row_fn row;
    enum ccn_binary_op op;
    int rank;
    const long *shape, *a_strides, *b_strides;
    const char *a, *b;
    char *y;
    size_t size, y_size;
    long n, as, bs, rows, rows_per_piece, cols, pieces_per_row;
} broadcast_part;

static void broadcast_pieces(void *context, long begin, long end)
{
    const broadcast_part *c = context;
    const row_fn row = c->row;
    const enum ccn_binary_op op = c->op;
    const int rank = c->rank;
    const long *shape = c->shape, *a_strides = c->a_strides, *b_strides = c->b_strides;
    const char *a = c->a, *b = c->b;
    char *y = c->y;
    const size_t size = c->size, y_size = c->y_size;
    const long n = c->n, as = c->as, bs = c->bs, rows = c->rows;
    const long rows_per_piece = c->rows_per_piece, cols = c->cols;
    const long pieces_per_row = c->pieces_per_row;
    for (long p = begin; p < end; p++) {
        const long r0 = rows_per_piece > 1 ? p * rows_per_piece : p / pieces_per_row;
        const long r1 = rows_per_piece > 1 ? (r0 + rows_per_piece < rows ? r0 + rows_per_piece
                                                                        : rows) : r0 + 1;
        const long c0 = rows_per_piece > 1 ? 0 : p % pieces_per_row * cols;
        const long len = n - c0 < cols ? n - c0 : cols;
        long index[CCN_MAX_RANK] = {0};
        long ao = 0, bo = 0, rest = r0;
        for (int d = rank - 2; d >= 0; d--) {
            index[d] = rest % shape[d];
            rest /= shape[d];
            ao += index[d] * a_strides[d];
            bo += index[d] * b_strides[d];
        }
        for (long r = r0; r < r1; r++) {
            row(op, len, a + (ao + c0 * as) * size, as, b + (bo + c0 * bs) * size, bs,
                y + (r * n + c0) * y_size);
            for (int d = rank - 2; d >= 0; d--) {
                index[d]++;
                ao += a_strides[d];
                bo += b_strides[d];
                if (index[d] < shape[d])
                    break;
                ao -= index[d] * a_strides[d];
                bo -= index[d] * b_strides[d];
                index[d] = 0;
            }
        }
    }
}

/* Runs row over every row along the last axis of y; size and y_size are
 * the element sizes of the inputs and of y.  Large outputs are cut into
 * pieces of whole rows (or of one long row) that the threads share; each
 * piece finds its first row's offsets by division, then steps the
 * multi-index over the leading axes like an odometer. */
static void broadcast(row_fn row, enum ccn_binary_op op, int rank, const long *shape,
                      const char *a, const long *a_strides, const char *b,
                      const long *b_strides, char *y, size_t size, size_t y_size)
{
    /* A 0-d y is one row of one element. */
    const long n = rank ? shape[rank - 1] : 1;
    const long as = rank ? a_strides[rank - 1] : 0, bs = rank ? b_strides[rank - 1] : 0;
    long rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= shape[d];
    if (n == 0 || rows == 0)
        return;
    /* A piece is rows_per_piece whole rows, or cols columns of one row. */
    const long rows_per_piece = n >= BROADCAST_PIECE ? 1 : BROADCAST_PIECE / n;
    const long cols = n >= BROADCAST_PIECE ? BROADCAST_PIECE : n;
    const long pieces_per_row = (n + cols - 1) / cols;
    const long pieces = rows_per_piece > 1 ? (rows + rows_per_piece - 1) / rows_per_piece
                                           : rows * pieces_per_row;
    broadcast_part part = {row, op, rank, shape, a_strides, b_strides, a, b, y, size, y_size,
                           n, as, bs, rows, rows_per_piece, cols, pieces_per_row};
    ccn_parallel_for(pieces, rows * n, broadcast_pieces, &part);
}

#define CCN_BINARY(NAME, ROW, T)                                              \
void NAME(enum ccn_binary_op op, int rank, const long *shape,                 \
          const T *a, const long *a_strides, const T *b,                      \
          const long *b_strides, void *y)                                     \
{                                                                             \
    broadcast(ROW, op, rank, shape, (const char *)a, a_strides,               \
              (const char *)b, b_strides, (char *)y, sizeof(T),               \
              op >= CCN_EQUAL ? sizeof(uint8_t) : sizeof(T));                 \
}

CCN_BINARY(ccn_binary_float32, row_float32_best(), float)
CCN_BINARY(ccn_binary_float64, row_float64, double)
CCN_BINARY(ccn_binary_int64, row_int64, int64_t)
CCN_BINARY(ccn_binary_int32, row_int32, int32_t)
CCN_BINARY(ccn_binary_bool, row_bool, uint8_t)

void ccn_not(long n, const uint8_t *x, uint8_t *y)
{
    for (long i = 0; i < n; i++)
        y[i] = !x[i];
}

/* The class bits (ccn_math.h) of each element: all exponent bits set is
 * an infinity when the fraction is 0 and NaN otherwise. */
#define CCN_CLASSIFY(NAME, T, U, EXPONENT, SIGN)                              \
void NAME(long n, int classes, const T *x, uint8_t *y)                        \
{                                                                             \
    for (long i = 0; i < n; i++) {                                            \
        U bits;                                                               \
        memcpy(&bits, &x[i], sizeof bits);                                    \
        const U magnitude = bits & ~(SIGN);                                   \
        const int cls = magnitude > (EXPONENT) ? CCN_IS_NAN                   \
            : magnitude < (EXPONENT) ? 0                                      \
            : bits & (SIGN) ? CCN_IS_NEG_INF : CCN_IS_POS_INF;                \
        y[i] = (cls & classes) != 0;                                          \
    }                                                                         \
}
CCN_CLASSIFY(ccn_classify_float32, float, uint32_t, 0x7f800000u, 0x80000000u)
CCN_CLASSIFY(ccn_classify_float64, double, uint64_t, UINT64_C(0x7ff0000000000000),
             UINT64_C(0x8000000000000000))
#undef CCN_CLASSIFY
