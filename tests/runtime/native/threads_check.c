/* Checks of the kernels' thread pool (runtime/native/kernels/ccn_threads.c),
 * built and run by test_threads.py, also under ThreadSanitizer and
 * AddressSanitizer.  Prints one line per failed check and exits 1 if any;
 * prints "ok" otherwise. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccn_threads.h"

static int failures;

static void check(int ok, const char *what, long a, long b)
{
    if (!ok) {
        printf("FAILED: %s (%ld, %ld)\n", what, a, b);
        failures++;
    }
}

/* Every index of [begin, end) counted once more. */
static void count_indices(void *context, long begin, long end)
{
    int *hits = context;
    for (long i = begin; i < end; i++)
        hits[i]++;
}

/* y[i] = 3 i + 1 for i in [begin, end). */
static void affine(void *context, long begin, long end)
{
    long *y = context;
    for (long i = begin; i < end; i++)
        y[i] = 3 * i + 1;
}

/* Each index counted once more, the ranges counted and the shortest kept. */
typedef struct {
    int *hits;
    long ranges;   /* atomic */
    long shortest; /* atomic */
} ranges;

static void note_ranges(void *context, long begin, long end)
{
    ranges *r = context;
    count_indices(r->hits, begin, end);
    __atomic_add_fetch(&r->ranges, 1, __ATOMIC_RELAXED);
    long shortest = __atomic_load_n(&r->shortest, __ATOMIC_RELAXED);
    while (end - begin < shortest &&
           !__atomic_compare_exchange_n(&r->shortest, &shortest, end - begin, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* A task that runs a parallel loop itself: runs on its own thread. */
static void nested(void *context, long begin, long end)
{
    long *y = context;
    for (long i = begin; i < end; i++)
        ccn_parallel_for(64, CCN_PARALLEL_WORK, affine, y + i * 64);
}

/* Counts the chunks run by threads other than the first caller. */
typedef struct {
    pthread_t caller;
    int others;
} helpers;

static void note_thread(void *context, long begin, long end)
{
    helpers *h = context;
    (void)begin;
    (void)end;
    if (!pthread_equal(pthread_self(), h->caller))
        __atomic_add_fetch(&h->others, 1, __ATOMIC_RELAXED);
    /* Long enough chunks for the workers to wake and take some. */
    const struct timespec pause = {0, 200000};
    nanosleep(&pause, NULL);
}

/* Chunks that take 20 ms on threads other than the caller, as if the OS
 * had descheduled the worker holding them. */
static void slow_elsewhere(void *context, long begin, long end)
{
    helpers *h = context;
    (void)begin;
    (void)end;
    if (!pthread_equal(pthread_self(), h->caller)) {
        __atomic_add_fetch(&h->others, 1, __ATOMIC_RELAXED);
        const struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
}

/* A worker parked in a signal handler until `unpark` (2 s at most): awake
 * as far as the pool knows, but running nothing, as a worker that another
 * process keeps from its CPU.  (Parked inside the pool's condition wait,
 * it holds up the caller's broadcast until it returns.) */
static int parked, unpark; /* atomic */

static void park(int signal)
{
    (void)signal;
    __atomic_store_n(&parked, 1, __ATOMIC_SEQ_CST);
    const struct timespec pause = {0, 100000};
    for (int k = 0; k < 20000 && !__atomic_load_n(&unpark, __ATOMIC_SEQ_CST); k++)
        nanosleep(&pause, NULL);
}

/* Notes a thread other than the caller that runs a piece. */
typedef struct {
    pthread_t caller, other;
    int found; /* atomic */
} finder;

static void find_worker(void *context, long begin, long end)
{
    finder *f = context;
    (void)begin;
    (void)end;
    int no = 0;
    if (!pthread_equal(pthread_self(), f->caller) &&
        __atomic_compare_exchange_n(&f->found, &no, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        f->other = pthread_self();
    const struct timespec pause = {0, 200000};
    nanosleep(&pause, NULL);
}

/* Counts a loop's calls of its task. */
static void count_calls(void *context, long begin, long end)
{
    (void)begin;
    (void)end;
    __atomic_add_fetch((long *)context, 1, __ATOMIC_RELAXED);
}

/* Spins until *stop: keeps a CPU wanted by another thread. */
static void *spin_until(void *stop)
{
    while (!__atomic_load_n((int *)stop, __ATOMIC_RELAXED))
        ;
    return NULL;
}

/* The calling thread's CPU time in ms. */
static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* A loop whose first piece on a worker stalls, as if the OS had
 * descheduled the worker, until the other threads have run the rest. */
typedef struct {
    pthread_t caller;
    long count;
    int *hits;
    long ran;    /* atomic: indices run */
    int stalled; /* atomic: a worker has stalled */
    long held;   /* the stalled range's length; -1: the rest not run in 10 s */
} stall;

static void stall_once(void *context, long begin, long end)
{
    stall *s = context;
    const struct timespec moment = {0, 100000};
    int no = 0;
    if (pthread_equal(pthread_self(), s->caller)) {
        nanosleep(&moment, NULL); /* time for the worker to wake and claim a chunk */
    } else if (__atomic_compare_exchange_n(&s->stalled, &no, 1, 0, __ATOMIC_RELAXED,
                                           __ATOMIC_RELAXED)) {
        const long rest = s->count - (end - begin);
        for (int polls = 0; __atomic_load_n(&s->ran, __ATOMIC_ACQUIRE) < rest && polls < 100000;
             polls++)
            nanosleep(&moment, NULL);
        s->held = __atomic_load_n(&s->ran, __ATOMIC_ACQUIRE) == rest ? end - begin : -1;
    }
    for (long i = begin; i < end; i++)
        s->hits[i]++;
    __atomic_add_fetch(&s->ran, end - begin, __ATOMIC_RELEASE);
}

/* A second caller running loops while the main thread does. */
static void *other_caller(void *arg)
{
    long *y = arg;
    for (int round = 0; round < 200; round++)
        ccn_parallel_for(4096, CCN_PARALLEL_WORK, affine, y);
    return NULL;
}

/* The threads that ran a loop's pieces, one entry per piece. */
typedef struct {
    pthread_t ids[64];
    int pieces; /* atomic */
} thread_log;

static void log_thread(void *context, long begin, long end)
{
    thread_log *log = context;
    (void)begin;
    (void)end;
    const int k = __atomic_fetch_add(&log->pieces, 1, __ATOMIC_RELAXED);
    if (k < 64)
        log->ids[k] = pthread_self();
}

/* log_thread, in pieces long enough for the workers to take part. */
static void log_thread_slowly(void *context, long begin, long end)
{
    log_thread(context, begin, end);
    const struct timespec pause = {0, 200000};
    nanosleep(&pause, NULL);
}

static int distinct_threads(const thread_log *log)
{
    int distinct = 0;
    for (int k = 0; k < log->pieces && k < 64; k++) {
        int seen = 0;
        for (int j = 0; j < k && !seen; j++)
            seen = pthread_equal(log->ids[j], log->ids[k]);
        distinct += !seen;
    }
    return distinct;
}

/* A run of a function that `tuner` measures: a loop of 16 pieces (each
 * of 0.2 ms when `slowly`: long enough to run on the threads however the
 * pool backs off, but slower on a loaded machine), then 1 ms, or 11 ms
 * when it runs on a count `slow` marks (bit k: count k): the tuner's
 * unmeasured first 20 ms end within 20 runs.  Returns its count;
 * *threads_seen: the threads that ran its loop. */
static int timed_run(ccn_run_tuner *tuner, unsigned slow, int slowly, int *threads_seen)
{
    const ccn_run run = ccn_run_start(tuner);
    const int threads = ccn_get_threads();
    thread_log log;
    log.pieces = 0;
    ccn_parallel_for(16, CCN_BACKOFF_WORK, slowly ? log_thread_slowly : log_thread, &log);
    *threads_seen = distinct_threads(&log);
    const long spin_ns = slow >> threads & 1 ? 11000000L : 1000000L;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do
        clock_gettime(CLOCK_MONOTONIC, &now);
    while ((now.tv_sec - start.tv_sec) * 1000000000L + now.tv_nsec - start.tv_nsec < spin_ns);
    ccn_run_finish(run, 0);
    return threads;
}

/* ccn_set_most_threads: each function's runs end up on the count they are
 * fastest on, of most, most / 2, ... 1, and a run's loops use at most its
 * count; ccn_set_threads fixes the count. */
static void check_tuned_counts(void)
{
    static const struct {
        int most;
        unsigned slow; /* bit k: runs on k threads are slow */
        int fast;
    } cases[] = {{2, 1u << 2, 1}, {2, 1u << 1, 2}, {4, 1u << 4 | 1u << 1, 2}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        ccn_set_most_threads(cases[c].most);
        ccn_run_tuner tuner;
        memset(&tuner, 0, sizeof tuner);
        int on_fast = 0, widest = 0;
        for (int k = 0; k < 220; k++) {
            int seen;
            const int threads = timed_run(&tuner, cases[c].slow, k >= 200, &seen);
            on_fast += k >= 50 && k < 200 && threads == cases[c].fast;
            if (seen > threads)
                widest = seen > widest ? seen : widest;
        }
        /* Each other count is tried once in several hundred runs here. */
        check(on_fast >= 140, "the runs take the count they are fastest on", c, on_fast);
        check(widest == 0, "a run's loops use at most its count", c, widest);
        check(ccn_get_threads() == cases[c].most, "outside a run, the most", c, ccn_get_threads());
    }
    /* A fixed count stays, however slow; a run inside another keeps its. */
    ccn_set_threads(2);
    ccn_run_tuner tuner;
    memset(&tuner, 0, sizeof tuner);
    int off = 0;
    for (int k = 0; k < 50; k++) {
        int seen;
        off += timed_run(&tuner, 1u << 2, 0, &seen) != 2;
    }
    check(off == 0, "a fixed count is every run's", off, 0);
    ccn_set_most_threads(2);
    memset(&tuner, 0, sizeof tuner);
    for (int k = 0; k < 20; k++) {
        int seen;
        timed_run(&tuner, 1u << 2, 0, &seen);
    }
    ccn_run_tuner inner;
    memset(&inner, 0, sizeof inner);
    const ccn_run outer_run = ccn_run_start(&tuner);
    const int outer = ccn_get_threads();
    const ccn_run inner_run = ccn_run_start(&inner);
    check(ccn_get_threads() == outer, "a run inside another keeps its count", outer,
          ccn_get_threads());
    ccn_run_finish(inner_run, 0);
    check(ccn_get_threads() == outer, "its end keeps the outer's", outer, ccn_get_threads());
    ccn_run_finish(outer_run, 0);
}

int main(void)
{
    check(ccn_set_threads(0) == -1 && ccn_set_threads(CCN_MAX_THREADS + 1) == -1,
          "out-of-range counts refused", 0, CCN_MAX_THREADS + 1);
    const long counts[] = {0, 1, 2, 7, 63, 64, 1000, 100003};
    const long most = 100003;
    int *hits = malloc(most * sizeof *hits);
    long *y = malloc(most * sizeof *y);
    for (int threads = 1; threads <= 8; threads++) {
        check(ccn_set_threads(threads) == 0, "ccn_set_threads", threads, 0);
        const int expected = ccn_get_threads() == 1 ? 1 : threads; /* 1: a serial build */
        check(ccn_get_threads() == expected, "ccn_get_threads", ccn_get_threads(), threads);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            const long n = counts[c];
            /* More chunks than threads for the larger counts: each index once. */
            memset(hits, 0, most * sizeof *hits);
            ccn_parallel_for(n, CCN_PARALLEL_WORK, count_indices, hits);
            for (long i = 0; i < most; i++)
                if (hits[i] != (i < n)) {
                    check(0, "each index exactly once", n, i);
                    break;
                }
            memset(y, 0, most * sizeof *y);
            ccn_parallel_for(n, CCN_PARALLEL_WORK, affine, y);
            for (long i = 0; i < n; i++)
                if (y[i] != 3 * i + 1) {
                    check(0, "the loop's results", n, i);
                    break;
                }
        }
        /* A grain: no range shorter (but a loop's only one), at most
         * count / grain of them, each index once. */
        const long grains[] = {1, 3, 100, 40000};
        for (size_t g = 0; g < sizeof grains / sizeof *grains; g++)
            for (size_t c = 1; c < sizeof counts / sizeof *counts; c++) {
                const long n = counts[c], grain = grains[g];
                ranges r = {hits, 0, n};
                memset(hits, 0, most * sizeof *hits);
                ccn_parallel_for_grain(n, CCN_PARALLEL_WORK, grain, note_ranges, &r);
                check(r.shortest >= (grain < n ? grain : n), "ranges of at least the grain",
                      n * 100000 + grain, r.shortest);
                check(r.ranges <= (n / grain > 1 ? n / grain : 1), "at most count / grain ranges",
                      n * 100000 + grain, r.ranges);
                for (long i = 0; i < most; i++)
                    if (hits[i] != (i < n)) {
                        check(0, "each index exactly once with a grain", n * 100000 + grain, i);
                        break;
                    }
            }
        /* At most work / CCN_PIECE_WORK ranges: a piece is worth handing
         * to another thread (the pool before this cut the loop into up to
         * 32 pieces per thread whatever its work). */
        for (long work = CCN_PARALLEL_WORK; work <= 4 * CCN_PARALLEL_WORK; work *= 2) {
            ranges r = {hits, 0, most};
            memset(hits, 0, most * sizeof *hits);
            ccn_parallel_for(most, work, note_ranges, &r);
            check(r.ranges <= work / CCN_PIECE_WORK, "at most work / CCN_PIECE_WORK ranges",
                  work, r.ranges);
            for (long i = 0; i < most; i++)
                if (hits[i] != 1) {
                    check(0, "each index exactly once by work", work, i);
                    break;
                }
        }
        /* Many short loops in a row: each one's ticket follows the last. */
        for (int round = 0; round < 2000; round++) {
            memset(hits, 0, 100 * sizeof *hits);
            ccn_parallel_for(100, CCN_PARALLEL_WORK, count_indices, hits);
            for (long i = 0; i < 100; i++)
                if (hits[i] != 1) {
                    check(0, "short loops", round, i);
                    round = 2000;
                    break;
                }
        }
        /* Small work runs on the caller alone. */
        helpers alone = {pthread_self(), 0};
        ccn_parallel_for(4, CCN_PARALLEL_WORK - 1, note_thread, &alone);
        check(alone.others == 0, "small work on the caller", alone.others, threads);
        memset(y, 0, most * sizeof *y);
        ccn_parallel_for(100, CCN_PARALLEL_WORK, nested, y);
        for (long i = 0; i < 6400; i++)
            if (y[i] != 3 * (i % 64) + 1) {
                check(0, "nested loops", threads, i);
                break;
            }
    }
    if (ccn_get_threads() > 1) {
        /* The workers take part (the calling thread does not do it all). */
        ccn_set_threads(4);
        helpers h = {pthread_self(), 0};
        const struct timespec moment = {0, 1000000};
        /* Up to several seconds: on a loaded machine, a loop whose worker
         * the OS delayed makes the next ones serial (up to 1 s). */
        for (int round = 0; round < 5000 && h.others == 0; round++) {
            nanosleep(&moment, NULL);
            ccn_parallel_for(64, CCN_WAKE_WORK, note_thread, &h);
        }
        check(h.others > 0, "workers run chunks", h.others, 0);
        /* With a thread spinning on every CPU, a worker's yields come back
         * late and it sleeps; then a loop too small to wake it runs on the
         * caller alone (the pool before this woke the workers for every
         * loop, and they took part in its 3 ms).  A worker still spinning
         * would take part: one of three tries is enough. */
        enum { MOST_SPINNERS = 64 };
        pthread_t spinners[MOST_SPINNERS];
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int stop = 0, spinning = 0;
        while (spinning < (cpus < MOST_SPINNERS ? cpus : MOST_SPINNERS) &&
               pthread_create(&spinners[spinning], NULL, spin_until, &stop) == 0)
            spinning++;
        int alone_tries = 0, alone_others = -1;
        for (; alone_tries < 3 && alone_others != 0; alone_tries++) {
            helpers large = {pthread_self(), 0}, small = {pthread_self(), 0};
            ccn_parallel_for(64, CCN_WAKE_WORK, note_thread, &large);
            const struct timespec asleep = {0, 100000000};
            nanosleep(&asleep, NULL);
            ccn_parallel_for(64, CCN_WAKE_WORK - 1, note_thread, &small);
            alone_others = small.others;
        }
        __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
        for (int k = 0; k < spinning; k++)
            pthread_join(spinners[k], NULL);
        check(alone_others == 0, "no sleeping worker woken for a small loop on wanted CPUs",
              alone_tries, alone_others);
        /* Two callers at once: one runs on the pool, the other alone. */
        long *z = malloc(4096 * sizeof *z);
        pthread_t thread;
        pthread_create(&thread, NULL, other_caller, z);
        for (int round = 0; round < 200; round++)
            ccn_parallel_for(4096, CCN_PARALLEL_WORK, affine, y);
        pthread_join(thread, NULL);
        for (long i = 0; i < 4096; i++)
            if (y[i] != 3 * i + 1 || z[i] != 3 * i + 1) {
                check(0, "two callers", i, 0);
                break;
            }
        free(z);
        /* A stalled worker holds up one piece of the loop, not its chunk:
         * the caller takes the chunk's pieces that the worker has not
         * started.  With 2 threads a piece is 1/64 of the loop (a chunk
         * 1/16). */
        ccn_set_threads(2);
        stall s = {pthread_self(), 6400, hits, 0, 0, 0};
        for (int round = 0; round < 5000 && !s.stalled; round++) {
            nanosleep(&moment, NULL);
            memset(hits, 0, s.count * sizeof *hits);
            s.ran = 0;
            ccn_parallel_for(s.count, 64 * CCN_PIECE_WORK, stall_once, &s);
        }
        check(s.stalled && s.held > 0 && s.held <= s.count / 64,
              "a stalled worker holds one piece", s.stalled, s.held);
        for (long i = 0; i < s.count; i++)
            if (hits[i] != 1) {
                check(0, "each index once beside a stalled worker", i, hits[i]);
                break;
            }
        ccn_set_threads(4);
        /* A caller that waited for the others longer than it worked runs
         * the next loops alone, for at least a millisecond.  The loop right
         * after a stalled one has chunks of 0.2 ms that the workers, still
         * spinning from the stalled loop, would take part in; it must run
         * on the caller alone.  Whether it starts within that millisecond
         * is the OS's choice on a loaded machine (or under a sanitizer), so
         * the check asks that one of several tries does. */
        int serial = 0, stalls = 0, others = -1;
        double waited_cpu_ms = 0;
        for (int attempt = 0; attempt < 20 && !serial; attempt++) {
            helpers slow = {pthread_self(), 0}, after = {pthread_self(), 0};
            for (int round = 0; round < 5000 && slow.others == 0; round++) {
                nanosleep(&moment, NULL);
                const double cpu = thread_cpu_ms();
                ccn_parallel_for(64, CCN_WAKE_WORK, slow_elsewhere, &slow);
                waited_cpu_ms = thread_cpu_ms() - cpu;
            }
            if (slow.others == 0)
                continue;
            stalls++;
            ccn_parallel_for(64, CCN_WAKE_WORK, note_thread, &after);
            others = after.others;
            serial = others == 0;
        }
        check(serial, "serial after a long wait", stalls, others);
        /* But a loop of CCN_BACKOFF_WORK right after a stall runs on the
         * threads: the workers, spinning again, take part (one of several
         * tries, as above). */
        int shared = 0;
        for (int attempt = 0; attempt < 20 && !shared; attempt++) {
            helpers slow = {pthread_self(), 0}, big = {pthread_self(), 0};
            for (int round = 0; round < 5000 && slow.others == 0; round++) {
                nanosleep(&moment, NULL);
                ccn_parallel_for(64, CCN_WAKE_WORK, slow_elsewhere, &slow);
            }
            ccn_parallel_for(64, CCN_BACKOFF_WORK, note_thread, &big);
            shared = big.others > 0;
        }
        check(shared, "a long loop shares after a stall", shared, 1);
        /* A worker awake but given no CPU leaves every piece to the
         * caller, which then paid a claim and a call per piece of every
         * loop; after a few such loops in a row, the loops run on the
         * caller alone, in one call (the pool before this kept cutting
         * them: two threads slower than one beside a busy process). */
        ccn_set_threads(2);
        struct sigaction parking;
        memset(&parking, 0, sizeof parking);
        parking.sa_handler = park;
        sigemptyset(&parking.sa_mask);
        const int can_park = sigaction(SIGUSR1, &parking, NULL) == 0;
        long first_calls = -1, serial_at = -1;
        /* One of several tries: the worker must be spinning, not asleep,
         * when it is parked. */
        for (int attempt = 0; can_park && attempt < 5 && serial_at < 0; attempt++) {
            finder f = {pthread_self(), pthread_self(), 0};
            for (int round = 0; round < 5000 && !__atomic_load_n(&f.found, __ATOMIC_SEQ_CST);
                 round++) {
                nanosleep(&moment, NULL); /* past the back-off of the stalls above */
                ccn_parallel_for(64, CCN_WAKE_WORK, find_worker, &f);
            }
            __atomic_store_n(&parked, 0, __ATOMIC_SEQ_CST);
            __atomic_store_n(&unpark, 0, __ATOMIC_SEQ_CST);
            if (!f.found || pthread_kill(f.other, SIGUSR1) != 0)
                continue;
            while (!__atomic_load_n(&parked, __ATOMIC_SEQ_CST))
                nanosleep(&moment, NULL);
            /* The first loop cut into pieces (the pool may still be
             * backing off from a stall above), then those right after it
             * until one runs in one call. */
            first_calls = 0;
            for (int round = 0; round < 1000 && first_calls != 4; round++) {
                nanosleep(&moment, NULL);
                first_calls = 0;
                ccn_parallel_for(4, CCN_WAKE_WORK, count_calls, &first_calls);
            }
            for (long loop = 1; loop < 64 && first_calls == 4 && serial_at < 0; loop++) {
                long calls = 0;
                ccn_parallel_for(4, CCN_WAKE_WORK, count_calls, &calls);
                if (calls == 1)
                    serial_at = loop;
            }
            __atomic_store_n(&unpark, 1, __ATOMIC_SEQ_CST);
        }
        check(!can_park || serial_at > 0,
              "loops the caller runs alone while a worker gets no CPU run in one call",
              first_calls, serial_at);
        /* Meanwhile the caller slept: it waited 20 ms or more for the
         * worker's piece (the pool before this spun through it, yielding). */
        check(waited_cpu_ms < 5, "the caller sleeps while it waits", (long)waited_cpu_ms, 5);
        check_tuned_counts();
    }
    free(hits);
    free(y);
    if (!failures)
        printf("ok\n");
    return failures ? 1 : 0;
}
