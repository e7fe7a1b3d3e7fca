/* ccn_common.h: what every kernel of chainer-compiler's native (C) backend
 * shares.
 *
 * Kernels work on row-major (C order) arrays and take their shapes as
 * arguments: the generated model code calls them with literal constants,
 * one call per Program instruction.  No kernel allocates memory; scratch
 * space (im2col columns, transposed operands) comes from the model's arena,
 * whose layout is planned when the C code is emitted.  Each family of ops
 * has one ccn_<family>.c and its ccn_<family>.h.  C99, libc and libm only.
 */
#ifndef CCN_COMMON_H
#define CCN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CCN_BEGIN_DECLS extern "C" {
#define CCN_END_DECLS }
#else
#define CCN_BEGIN_DECLS
#define CCN_END_DECLS
#endif

/* CCN_PARALLEL_FOR(work, loop): the `for` statement `loop` (the rest of
 * the arguments: commas in it are fine) split between OpenMP threads when
 * it does `work` elements in all from CCN_PARALLEL_WORK on, else run on the
 * calling thread without entering OpenMP.  Below the threshold, waking the
 * other threads costs more than it saves, and on a loaded machine a
 * descheduled thread stalls the whole loop; and even a parallel region
 * whose `if` clause is false costs about 0.3 us (libgomp builds a team of
 * one), which a small model's step pays a dozen times.  OpenMP is
 * optional: without -fopenmp the pragma disappears instead of triggering
 * -Wunknown-pragmas. */
#define CCN_PARALLEL_WORK (1L << 18)
#ifdef _OPENMP
#define CCN_OMP(text) _Pragma(#text)
#define CCN_PARALLEL_FOR(work, ...)                    \
    do {                                               \
        if ((work) >= CCN_PARALLEL_WORK) {             \
            CCN_OMP(omp parallel for schedule(static)) \
            __VA_ARGS__                                \
        } else {                                       \
            __VA_ARGS__                                \
        }                                              \
    } while (0)
#else
#define CCN_OMP(text)
#define CCN_PARALLEL_FOR(work, ...) \
    do {                            \
        __VA_ARGS__                 \
    } while (0)
#endif

/* Largest rank the broadcasting and strided kernels handle. */
#define CCN_MAX_RANK 8

#endif /* CCN_COMMON_H */
