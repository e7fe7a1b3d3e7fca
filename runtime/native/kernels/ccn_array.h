/* ccn_array.h: Array family: data movement.
 *
 * The movement kernels work on bytes: ``elem`` is the element size (1, 4 or
 * 8), so one kernel serves every dtype.  Shapes, strides and offsets count
 * elements; strides may be 0 (broadcast) or negative (a reversed slice).
 * Every array argument holds ``rank`` entries, 1 <= rank <= CCN_MAX_RANK. */
#ifndef CCN_ARRAY_H
#define CCN_ARRAY_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The bytes behind Reshape, Flatten, Identity and Dropout when their result
 * cannot share its input's memory, and program outputs computed elsewhere. */
void ccn_copy(size_t nbytes, const void *x, void *y);

/* y[i] = x[i] over the index space ``shape``, each side addressed by its
 * own strides: Transpose, Slice, Split, Concat and Expand. */
void ccn_strided_copy(size_t elem, int rank, const long *shape,
                      const void *x, const long *x_strides,
                      void *y, const long *y_strides);

/* y (C order, ``shape``) gathered through one index table per axis:
 * ``tables`` holds shape[0] entries for axis 0, then shape[1] for axis 1...;
 * an entry is the source index along that axis, or -1 where y takes the
 * element ``*fill``.  Pad (every mode) and Tile. */
void ccn_table_copy(size_t elem, int rank, const long *shape, const long *tables,
                    const void *x, const long *x_strides, const void *fill, void *y);

/* Gather: x is [outer, dim, inner], y is [outer, n, inner]; ``indices``
 * holds n int32 (index_bytes 4) or int64 (8) entries, negative ones counted
 * from the end.  Returns 0, or 1 without writing y when an index is outside
 * [-dim, dim) (the NumPy VM raises an IndexError there). */
int ccn_gather(size_t elem, long outer, long dim, long inner, const void *x,
               long n, const void *indices, int index_bytes, void *y);

/* GatherND: x is [batch, dims[0], ..., dims[depth - 1], inner], ``indices``
 * [batch, n, depth] (int32 or int64 as in ccn_gather, negative entries
 * counted from the end of their axis), y [batch, n, inner].  Returns 0, or
 * 1 without writing y when an index is outside [-dims[k], dims[k]). */
int ccn_gather_nd(size_t elem, long batch, int depth, const long *dims, long inner,
                  const void *x, long n, const void *indices, int index_bytes, void *y);

/* One axis of Resize (float32): x is [outer, in_len, inner], y [outer,
 * out_len, inner]; y[o, j, :] = sum over t < taps of weight[j * taps + t] *
 * x[o, index[j * taps + t], :] (nearest: one tap of weight 1), or ``fill``
 * where outside[j] (tf_crop_and_resize's extrapolation; NULL: nowhere).
 * The tables are made at emit time from the NumPy VM's own. */
void ccn_resize_axis(long outer, long in_len, long out_len, long inner, int taps,
                     const int32_t *index, const float *weight, const uint8_t *outside,
                     float fill, const float *x, float *y);

/* Resize of the last two axes (float32) at once, plane by plane: x is
 * [outer, in_h, in_w], y [outer, out_h, out_w], each axis by its tables
 * as in ccn_resize_axis (taps_h and taps_w per output), through ``mid``
 * (scratch of outer * in_h * out_w floats when columns_first, else outer
 * * out_h * in_w): the rows' pass first (each tap a whole row, vectorised
 * along it) then the columns', or the other way round when that is less
 * work (enlarging: the columns' gathers on the in_h input rows only). */
typedef struct {
    long outer, in_h, in_w, out_h, out_w;
    int taps_h, taps_w, columns_first;
} ccn_resize_2d_geometry;
void ccn_resize_2d(const ccn_resize_2d_geometry *geometry, const int32_t *index_h,
                   const float *weight_h, const int32_t *index_w, const float *weight_w,
                   const float *x, float *y, float *mid);

/* Where: out[i] = cond[i] ? x[i] : y[i] over ``shape`` (C order), the
 * inputs read through broadcast strides. */
void ccn_where(size_t elem, int rank, const long *shape,
               const uint8_t *cond, const long *cond_strides,
               const void *x, const long *x_strides,
               const void *y, const long *y_strides, void *out);

/* Cast: ccn_cast_FROM_TO(n, x, y) for every pair of float32, float64,
 * int64, int32 and bool.  Floats become integers truncated toward zero;
 * NaN, infinities and values out of the integer type's range become its
 * minimum (INT32_MIN, INT64_MIN), which is what NumPy gives on x86, where
 * ONNX leaves it undefined and C makes it undefined behaviour; anything
 * becomes bool as x != 0 (NaN: 1). */
#define CCN_CAST_DTYPES(X, FROM, FROM_T) \
    X(FROM, FROM_T, float32, float)      \
    X(FROM, FROM_T, float64, double)     \
    X(FROM, FROM_T, int64, int64_t)      \
    X(FROM, FROM_T, int32, int32_t)      \
    X(FROM, FROM_T, bool, uint8_t)
#define CCN_CAST_ALL(X)                       \
    CCN_CAST_DTYPES(X, float32, float)        \
    CCN_CAST_DTYPES(X, float64, double)       \
    CCN_CAST_DTYPES(X, int64, int64_t)        \
    CCN_CAST_DTYPES(X, int32, int32_t)        \
    CCN_CAST_DTYPES(X, bool, uint8_t)
#define CCN_CAST_DECLARE(FROM, FROM_T, TO, TO_T) \
    void ccn_cast_##FROM##_##TO(long n, const FROM_T *x, TO_T *y);
CCN_CAST_ALL(CCN_CAST_DECLARE)
#undef CCN_CAST_DECLARE

CCN_END_DECLS
#endif /* CCN_ARRAY_H */
