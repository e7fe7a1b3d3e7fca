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

/* Work (elements touched) from which a loop runs on the thread pool
 * (ccn_parallel_for in ccn_threads.h): below it, waking the other threads
 * costs more than it saves. */
#define CCN_PARALLEL_WORK (1L << 18)
/* Multiply-adds of a matrix product that count as one element of work
 * (vectorised and from cache, they cost much less than an element of a
 * memory-bound loop). */
#define CCN_MACS_PER_WORK 16

/* CCN_PARALLEL_FOR(work, loop): the `for` statement `loop` (the rest of
 * the arguments: commas in it are fine) on the calling thread.  C has no
 * closures, so a loop runs on the pool only as a function of a context:
 * ccn_parallel_for(count, work, task, &context), which every parallel
 * loop of the kernels uses; this macro keeps loops written for the OpenMP
 * version compiling, serially. */
#define CCN_PARALLEL_FOR(work, ...) \
    do {                            \
        (void)(work);               \
        __VA_ARGS__                 \
    } while (0)

/* Largest rank the broadcasting and strided kernels handle. */
#define CCN_MAX_RANK 8

#endif /* CCN_COMMON_H */

/* After the guard's end: ccn_threads.h includes this file for the macros
 * above. */
#include "ccn_threads.h"
