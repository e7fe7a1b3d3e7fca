/* ccn_threads.h: the kernels' thread pool.
 *
 * ccn_parallel_for(count, work, task, context) runs task(context, begin,
 * end) over ranges that together cover [0, count) exactly once.  The
 * calling thread works too; the ranges (pieces, grouped in chunks) are
 * claimed one at a time by whichever thread is running, and a thread out of
 * chunks takes the pieces others have not started, so a worker the OS
 * deschedules never holds the rest up: the caller waits only for the one
 * piece that worker is in.  Idle workers spin briefly, then sleep (at
 * once when the OS runs other threads on their CPU).  Work (elements
 * touched, as the caller counts it) below CCN_PARALLEL_WORK runs on the
 * caller alone without waking anyone; so does a call made while the pool
 * is busy (from inside a task, or from another thread: the pool runs one
 * loop at a time).  A loop gets at most work / CCN_PIECE_WORK pieces; on
 * CPUs that other threads want, one of less than CCN_WAKE_WORK runs on the
 * workers still spinning from the last loop, if any, without waking those
 * asleep.
 *
 * Run functions (the emitted NAME_run_arena...) call ccn_run_start and
 * ccn_run_finish around their instructions: their loops then run on the
 * thread count their runs have been fastest on (ccn_set_most_threads).
 *
 * The workers start at the first parallel loop.  POSIX threads where the
 * compiler has GCC's atomic builtins; elsewhere, or built with
 * -DCCN_THREADS=0, everything runs on the calling thread. */
#ifndef CCN_THREADS_H
#define CCN_THREADS_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* A loop body: iterations [begin, end) of the loop `context` describes. */
typedef void (*ccn_task)(void *context, long begin, long end);

/* Most threads the pool runs, the caller included. */
#define CCN_MAX_THREADS 256

/* The least work (as CCN_PARALLEL_WORK counts it) of a piece of a loop:
 * about 10 to 20 us, what handing a piece to another thread may cost
 * (claiming it on a cache line the threads share, its task's setup). */
#define CCN_PIECE_WORK (1L << 15)
/* The least work of a loop that wakes a worker which went to sleep
 * because the OS ran other threads on its CPU: the woken thread then runs
 * only once the OS finds it a CPU, often when the loop is long done. */
#define CCN_WAKE_WORK (1L << 19)
/* The least work of a loop that runs on the threads even while the pool
 * backs off after a stall: tens of milliseconds, against the few a
 * descheduled worker holds it up, where the caller alone would take twice
 * its time (DenseNet-121 at batch 32, its long loops serial after a stall:
 * 1.26x onnxruntime's time, 0.95x-0.97x with this). */
#define CCN_BACKOFF_WORK (1L << 25)

void ccn_parallel_for(long count, long work, ccn_task task, void *context);

/* ccn_parallel_for with ranges of at least `grain` indices each (a loop of
 * fewer than 2 * grain runs on the caller alone): for tasks that pay a
 * cost per call, such as a product's rows that pack B again at each call,
 * so that the pieces stay large enough to amortise it. */
void ccn_parallel_for_grain(long count, long work, long grain, ccn_task task, void *context);

/* Sets how many threads (the caller included, 1 to CCN_MAX_THREADS) run
 * parallel loops from the next one on, in every run; returns 0, or -1
 * leaving the count as it was when `threads` is out of range. */
int ccn_set_threads(int threads);

/* Like ccn_set_threads, but `threads` is the most: each run function
 * (ccn_run_start) runs on threads, threads / 2, ... or 1, whichever its
 * runs have been fastest on lately (beside a busy process, or when the
 * host runs the CPUs far apart, fewer threads can be faster).  This is the
 * default, with one thread per CPU this process may run on
 * (sched_getaffinity where available, at most the cgroup's CPU quota). */
int ccn_set_most_threads(int threads);

/* How many threads run the calling thread's parallel loops (those of the
 * run it is in, if any; 1 without thread support). */
int ccn_get_threads(void);

/* The thread counts of one run function: how fast its runs were on each
 * (zero-initialised, static in the function's file). */
#define CCN_TUNED_COUNTS 9 /* CCN_MAX_THREADS, halved down to 1 */
typedef struct {
    int lock;          /* atomic: a run reading or updating the rest */
    int most;          /* the most threads when these were measured */
    int best;          /* the count's index (threads >> best) runs use */
    int next_try;      /* -1 or 1: which neighbour of `best` the next try takes */
    long long warm;    /* ns its first runs took, not measured */
    long long since;   /* ns the runs on `best` took since the last try */
    double work;       /* the last run's work */
    double cost[CCN_TUNED_COUNTS]; /* ns per work of each count */
    int samples[CCN_TUNED_COUNTS]; /* the runs that measured each count */
} ccn_run_tuner;

/* One run of a function, between ccn_run_start and ccn_run_finish. */
typedef struct {
    ccn_run_tuner *tuner; /* NULL: on the count set, not measured */
    int most;             /* the most threads when it started */
    int index;            /* of the count it runs on: most >> index */
    int measured;         /* its time counts (not one of a function's first runs) */
    long long start;      /* CLOCK_MONOTONIC ns */
} ccn_run;

/* Starts a run of the function `tuner` measures, on the thread count it
 * chooses: the most at first, then the fastest measured, trying a
 * neighbour now and then (ccn_threads.c's CCN_TRY_SHARE says how often). */
ccn_run ccn_run_start(ccn_run_tuner *tuner);

/* Ends `run`; its time per work (the work of its parallel loops) counts
 * towards its thread count's when `status` is 0. */
void ccn_run_finish(ccn_run run, int status);

CCN_END_DECLS

#endif /* CCN_THREADS_H */
