/* The kernels' thread pool (ccn_threads.h).
 *
 * One loop runs at a time.  It is cut into pieces (at most count / grain,
 * so none is smaller than its caller asked, and at most work /
 * CCN_PIECE_WORK, so each is worth handing to another thread),
 * CCN_PIECES_PER_CHUNK consecutive pieces to a chunk.  Its caller writes
 * the loop's task, context and size into the pool, a word per chunk
 * (`parts`: the loop's generation, the chunk's end and its next piece),
 * then publishes the loop in `ticket` (generation, number of chunks).  Of
 * the loop's T threads, thread k (the caller 0) owns chunks k chunks / T
 * to (k + 1) chunks / T.  A thread claims a piece by a compare-and-swap on
 * its chunk's whole word, so a thread still looking at an earlier loop
 * claims nothing of this one; once it holds a piece, the loop cannot end
 * (its caller waits for every piece to be `done`), so the task and context
 * it reads stay valid.
 *
 * A thread runs the pieces of its own chunks one by one; then it takes the
 * pieces other threads have not started.  So
 * a worker that the OS deschedules (milliseconds, when another process
 * wants the CPU) leaves the rest of its share to the others, and the caller
 * waits only for the one piece it is in; it spins for that piece briefly,
 * then sleeps until the worker is done (beside a busy process, its spinning
 * kept the CPU from the late worker).  When the caller still waited for
 * the others longer than it worked itself, the next loops run on the
 * caller alone for a while (`backoff`: doubled each time it recurs, an
 * eighth shorter after each loop that runs well), then the threads are
 * tried again; so they do for CCN_IDLE_SERIAL_NS after CCN_IDLE_LOOPS
 * loops in a row whose every piece the caller ran while their workers
 * were awake (awake but given no CPU).  A loop of CCN_BACKOFF_WORK or
 * more runs on the threads meanwhile.  When the last worker to sleep did
 * so because the OS ran other threads on its CPU, a loop of less than
 * CCN_WAKE_WORK wakes no sleeping worker: it runs on the workers still
 * spinning, or on the caller alone.
 *
 * Those adapt loop by loop, within a run; the counts adapt run by run.
 * Unless a count was fixed (ccn_set_threads), each run function
 * (ccn_run_start, ccn_run_finish) times its runs per unit of their loops'
 * work on each count of the most, its half, ... and 1, and runs on the
 * fastest, trying a neighbour now and then: beside a busy process, or when
 * the host runs the CPUs far apart (a cache line then takes 4x longer to
 * move between them), a model's runs can be faster on fewer threads. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "ccn_threads.h"

#ifndef CCN_THREADS
#if defined(__GNUC__) && (defined(__unix__) || defined(__APPLE__))
#define CCN_THREADS 1
#else
#define CCN_THREADS 0
#endif
#endif

#if CCN_THREADS
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Chunks per thread: a thread that runs late leaves small pieces that the
 * others finish, at the cost of one compare-and-swap each. */
#define CCN_CHUNKS_PER_THREAD 8
/* Pieces per chunk: the most of a loop that a descheduled worker holds is
 * one piece, and a chunk's pieces run on one thread unless it falls behind
 * (the kernels' ranges stay long). */
#define CCN_PIECES_PER_CHUNK 4
#define CCN_MAX_CHUNKS (CCN_MAX_THREADS * CCN_CHUNKS_PER_THREAD)
/* How many times an idle worker polls for the next loop (about 20 to 200
 * us) before it sleeps: a model's loops follow each other within
 * microseconds, and waking a sleeping thread costs about as much. */
#define CCN_SPIN 4000
/* Polls between two sched_yield calls of a spinning thread: on a CPU that
 * other processes want, a spinning worker would take time from them and
 * from the caller's serial code; with nothing else to run, a yield returns
 * at once. */
#define CCN_YIELD_EVERY 32
/* How long a caller waiting for the pieces other threads are in spins
 * (as long as its yields come back at once) before it sleeps until they
 * are done: a piece runs for tens of microseconds, a descheduled worker's
 * for milliseconds. */
#define CCN_WAIT_SPIN_NS 100000LL
/* A yield that returns later than this ran another thread: the CPU is
 * wanted, and an idle worker sleeps instead of spinning on (its spin took
 * time from the caller's serial code: ResNet-18 beside a busy process,
 * 2 threads 1.00x one thread's time spinning on, 0.95x with this). */
#define CCN_WANTED_NS 50000LL

/* The shortest and the longest time the loops run serially after a loop
 * whose caller waited longer than it worked, and more than CCN_STALL_NS
 * (a thread that runs late by less is not one the OS descheduled). */
#define CCN_STALL_NS 100000LL
#define CCN_BACKOFF_MIN_NS 1000000LL
#define CCN_BACKOFF_MAX_NS 1000000000LL
/* The loops in a row whose every piece the caller ran, their workers
 * awake, that make the loops of the next CCN_IDLE_SERIAL_NS serial: the
 * workers get no CPU (another process has it), and a loop's pieces cost
 * the caller their claims and calls for nothing (beside a busy process,
 * 95% of DeepLabV3's parallel loops; two threads 1.02x-1.06x one thread's
 * time, 1.00x-1.02x with this).  A fixed time, not the doubling back-off:
 * grown to its second, it held the loops serial long after the CPUs were
 * free again. */
#define CCN_IDLE_LOOPS 8
#define CCN_IDLE_SERIAL_NS 8000000LL

/* A run function tries another thread count than its fastest once its
 * runs on the fastest have taken CCN_TRY_SHARE times what the try is
 * expected to cost more, plus CCN_TRY_SHARE / CCN_TRY_FLOOR of their own
 * time: the tries cost at most about 1/CCN_TRY_SHARE of the time, and come
 * every CCN_TRY_SHARE / CCN_TRY_FLOOR runs when the counts run about as
 * fast (when the CPUs turn busy or quiet, the fastest count's time changes
 * first), or when a count has been measured too few times to tell. */
#define CCN_TRY_SHARE 128
#define CCN_TRY_FLOOR 16
/* The runs that measure a count before its time is a moving average: the
 * fastest of them (the first runs on a count may start a worker or touch
 * memory first). */
#define CCN_FIRST_SAMPLES 3
/* How long a function's first runs take unmeasured: the workers start, and
 * the pool's back-off from their late start ends (the first ten runs of
 * MobileNetV3-Small on two threads ran at one thread's speed, and one
 * thread then looked the faster for 245 runs). */
#define CCN_WARM_NS 20000000LL

/* A claim word: a loop's generation, the end of what it hands out and
 * the next index to hand out (both below 2^16). */
#define GEN(t) ((t) >> 32)
#define END(t) ((long)(((t) >> 16) & 0xffff))
#define NEXT(t) ((long)((t) & 0xffff))
#define CLAIMS(generation, end, next) \
    ((generation) << 32 | (unsigned long long)(end) << 16 | (unsigned long long)(next))

/* A cache line: the words that threads write while others read or write
 * their neighbours each get one of their own.  Shared, every claim of a
 * piece moved the line between the CPUs (about 100 ns, 400 in the host's
 * spells), and the pieces' claims of two threads took turns on it. */
#define CCN_LINE 64

/* A claim word alone on its line. */
typedef struct {
    unsigned long long word;
} __attribute__((aligned(CCN_LINE))) line_word;

static struct {
    pthread_mutex_t lock; /* with `wake`: sleeping workers; `started` */
    pthread_cond_t wake;
    pthread_cond_t finished; /* with `lock`: the caller waiting for `done` */
    int threads;  /* atomic: the most threads per loop, the caller included; 0 until set */
    int adaptive; /* atomic: the run functions choose their counts (ccn_set_most_threads) */
    int started;  /* atomic: workers created (written under `lock`) */
    int sleepers; /* atomic: workers waiting on `wake` */
    int wanted;   /* atomic: the last worker to sleep found its CPU wanted */
    int busy;     /* atomic: a loop is running */
    /* Contention, read and written by the caller holding `busy`: loops
     * start serially before serial_until (CLOCK_MONOTONIC ns). */
    long long backoff, serial_until;
    long idle_loops; /* loops in a row that the caller ran alone */
    /* The running loop, written by its caller before it publishes the
     * ticket (the caller holds `busy`), then only read. */
    struct {
        ccn_task task;
        void *context;
        long count, pieces;
        int threads; /* atomic: the threads that take part, the caller included */
        unsigned long long generation;
    } __attribute__((aligned(CCN_LINE))) loop;
    line_word ticket; /* atomic: generation, chunks (next unused) */
    /* atomic: chunk c's generation, end and next piece */
    line_word parts[CCN_MAX_CHUNKS];
    struct {
        long done;   /* atomic: pieces the workers finished */
        int waiting; /* atomic: the caller sleeps on `finished` */
    } __attribute__((aligned(CCN_LINE))) finish;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER,
          .adaptive = 1};

/* The calling thread's run (ccn_run_start): the count its loops run on (0:
 * the pool's), and the work of its loops so far. */
static __thread int run_threads;
static __thread double run_work;

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* One poll's wait: a pause, and a yield every CCN_YIELD_EVERY polls.
 * Returns 0 when the yield took longer than CCN_WANTED_NS: the OS ran
 * another thread on this CPU meanwhile, so spinning takes time from it. */
static int pause_briefly(long poll)
{
    if (poll % CCN_YIELD_EVERY == CCN_YIELD_EVERY - 1) {
        const long long start = now_ns();
        sched_yield();
        return now_ns() - start < CCN_WANTED_NS;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return 1;
}

/* Claims the next index that `word` hands out for loop `generation`;
 * -1 when none is left. */
static long claim(unsigned long long *word, unsigned long long generation)
{
    unsigned long long t = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    while (GEN(t) == generation && NEXT(t) < END(t))
        if (__atomic_compare_exchange_n(word, &t, t + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return NEXT(t);
    return -1; /* t is the word now */
}

/* Runs the pieces of chunk c that no thread has claimed; returns how many. */
static long run_pieces(unsigned long long generation, long c)
{
    long ran = 0;
    for (long k; (k = claim(&pool.parts[c].word, generation)) >= 0; ran++) {
        /* Piece k of `pieces` equal parts of [0, count), without overflow. */
        const long size = pool.loop.count / pool.loop.pieces;
        const long extra = pool.loop.count % pool.loop.pieces;
        const long begin = k * size + (k < extra ? k : extra);
        pool.loop.task(pool.loop.context, begin, begin + size + (k < extra));
    }
    return ran;
}

/* Runs pieces of loop `generation` until none is left, as thread `index`
 * (the caller 0) of the loop's: first those of its own share of the
 * chunks, then those that other threads have not started, each share from
 * its end (its thread works from the start; one the OS descheduled leaves
 * the rest of its share); returns how many.  A thread's share is the same
 * part of every loop: when two loops cut the same tensor alike, it reads
 * what it wrote, in its own CPU's caches. */
static long run_chunks(unsigned long long generation, int index)
{
    const unsigned long long t = __atomic_load_n(&pool.ticket.word, __ATOMIC_ACQUIRE);
    const int threads = __atomic_load_n(&pool.loop.threads, __ATOMIC_ACQUIRE);
    if (GEN(t) != generation || threads < 1)
        return 0;
    const long chunks = END(t);
    long ran = 0;
    for (int k = 0; k < threads; k++) {
        const int owner = (index + k) % threads;
        const long first = chunks * owner / threads, end = chunks * (owner + 1) / threads;
        if (k == 0 && index < threads)
            for (long c = first; c < end; c++)
                ran += run_pieces(generation, c);
        else
            for (long c = end - 1; c >= first; c--)
                ran += run_pieces(generation, c);
    }
    return ran;
}

static void *worker(void *arg)
{
    const int index = (int)(intptr_t)arg; /* 1, 2, ...: the caller is 0 */
    unsigned long long seen = 0;
    for (;;) {
        unsigned long long t = __atomic_load_n(&pool.ticket.word, __ATOMIC_ACQUIRE);
        int unwanted = 1;
        for (long spin = 0; unwanted && spin < CCN_SPIN && GEN(t) == seen; spin++) {
            unwanted = pause_briefly(spin);
            t = __atomic_load_n(&pool.ticket.word, __ATOMIC_ACQUIRE);
        }
        if (GEN(t) == seen || index >= __atomic_load_n(&pool.loop.threads, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&pool.wanted, !unwanted, __ATOMIC_RELAXED);
            /* Sleep until a loop after `seen` starts.  A caller publishes
             * its ticket, then reads `sleepers`; this thread counts itself
             * in `sleepers`, then reads the ticket (both sequentially
             * consistent), so one of them sees the other. */
            pthread_mutex_lock(&pool.lock);
            __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
            for (;;) {
                const unsigned long long g =
                    GEN(__atomic_load_n(&pool.ticket.word, __ATOMIC_SEQ_CST));
                if (g != seen && index < __atomic_load_n(&pool.loop.threads, __ATOMIC_ACQUIRE))
                    break;
                seen = g; /* a loop this worker sits out (beyond its count) */
                pthread_cond_wait(&pool.wake, &pool.lock);
            }
            __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool.lock);
            t = __atomic_load_n(&pool.ticket.word, __ATOMIC_ACQUIRE);
        }
        seen = GEN(t);
        const long ran = run_chunks(seen, index);
        /* The caller sets `waiting`, then reads `done` (both sequentially
         * consistent): it sees these pieces, or this thread sees it wait.
         * (A wake meant for an earlier loop's caller is a spurious one.) */
        if (ran) {
            __atomic_add_fetch(&pool.finish.done, ran, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&pool.finish.waiting, __ATOMIC_SEQ_CST)) {
                pthread_mutex_lock(&pool.lock);
                pthread_cond_broadcast(&pool.finished);
                pthread_mutex_unlock(&pool.lock);
            }
        }
    }
    return NULL;
}

/* A forked child has none of the workers, and a worker may have held the
 * lock at the fork: the child starts a pool of its own. */
static void reset_in_child(void)
{
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.started = 0;
    pool.finish.waiting = 0;
    pool.wanted = 0;
    pool.sleepers = 0;
    pool.busy = 0;
}

static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;

static void install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, reset_in_child);
}

/* Starts workers until `workers` run; fewer when the system refuses more
 * (the loops then run on fewer threads).  Returns how many run. */
static int start_workers(int workers)
{
    const int started = __atomic_load_n(&pool.started, __ATOMIC_ACQUIRE);
    if (started >= workers)
        return started;
    pthread_once(&fork_handler, install_fork_handler);
    pthread_mutex_lock(&pool.lock);
    while (pool.started < workers) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        /* The kernels keep packed blocks and rows on the stack. */
        pthread_attr_setstacksize(&attr, (size_t)8 << 20);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&thread, &attr, worker,
                                          (void *)(intptr_t)(pool.started + 1));
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        __atomic_store_n(&pool.started, pool.started + 1, __ATOMIC_RELEASE);
    }
    const int now = pool.started;
    pthread_mutex_unlock(&pool.lock);
    return now;
}

#ifdef __linux__
#ifndef CCN_CGROUP_CPU_MAX /* a test names another file */
#define CCN_CGROUP_CPU_MAX "/sys/fs/cgroup/cpu.max"
#endif

/* The CPUs that this process's cgroup (v2) quota gives it, rounded up; 0
 * when it sets none (library.py's machine_threads reads it alike): a
 * container on a large host may use few CPUs' time. */
static long quota_cpus(void)
{
    FILE *file = fopen(CCN_CGROUP_CPU_MAX, "r");
    if (!file)
        return 0;
    char quota[24];
    long period = 0;
    const int fields = fscanf(file, "%23s %ld", quota, &period);
    fclose(file);
    char *end;
    const long long microseconds = strtoll(quota, &end, 10);
    if (fields != 2 || *end || microseconds <= 0 || period <= 0)
        return 0; /* "max", or not a quota */
    const long long cpus = (microseconds + period - 1) / period;
    return cpus < CCN_MAX_THREADS ? (long)cpus : CCN_MAX_THREADS;
}
#endif

static int machine_threads(void)
{
    long n = 0;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    const long quota = quota_cpus();
    if (quota > 0 && quota < n)
        n = quota;
#endif
    return n < 1 ? 1 : n > CCN_MAX_THREADS ? CCN_MAX_THREADS : (int)n;
}

/* The most threads per loop: the count set, else one per CPU. */
static int most_threads(void)
{
    int threads = __atomic_load_n(&pool.threads, __ATOMIC_RELAXED);
    if (threads == 0) {
        const int machine = machine_threads();
        /* A concurrent ccn_set_threads wins. */
        if (__atomic_compare_exchange_n(&pool.threads, &threads, machine, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            threads = machine;
    }
    return threads;
}

int ccn_get_threads(void)
{
    return run_threads ? run_threads : most_threads();
}

/* Sets the count, and whether the run functions choose theirs up to it. */
static int set_threads(int threads, int adaptive)
{
    if (threads < 1 || threads > CCN_MAX_THREADS)
        return -1;
    __atomic_store_n(&pool.threads, threads, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.adaptive, adaptive, __ATOMIC_RELAXED);
    /* Workers beyond the count sleep at their next look at the ticket. */
    return 0;
}

int ccn_set_threads(int threads)
{
    return set_threads(threads, 0);
}

int ccn_set_most_threads(int threads)
{
    return set_threads(threads, 1);
}

/* How many counts a function chooses from: most, most / 2, ..., 1. */
static int tuned_counts(int most)
{
    int counts = 1;
    while (counts < CCN_TUNED_COUNTS && most >> counts >= 1)
        counts++;
    return counts;
}

ccn_run ccn_run_start(ccn_run_tuner *tuner)
{
    ccn_run run = {NULL, 0, 0, 0, 0};
    const int most = most_threads();
    /* A run inside another (on its count), or one of a function that a
     * run on another thread is reading or updating, runs on the count set. */
    if (run_threads || most < 2 || !__atomic_load_n(&pool.adaptive, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&tuner->lock, 1, __ATOMIC_ACQUIRE))
        return run;
    if (tuner->most != most) { /* first run, or measured for another count */
        memset(tuner->cost, 0, sizeof tuner->cost);
        memset(tuner->samples, 0, sizeof tuner->samples);
        tuner->most = most;
        tuner->best = 0;
        tuner->next_try = 1;
        tuner->warm = 0;
        tuner->since = 0;
    }
    int index = tuner->best;
    if (tuner->samples[index] > 0) {
        /* A neighbour: there are at least two counts. */
        int other = index + tuner->next_try;
        if (other < 0 || other >= tuned_counts(most))
            other = index - tuner->next_try;
        /* A count with fewer than CCN_FIRST_SAMPLES samples is expected to
         * cost no more: tried every few runs, not at once (a model's first
         * runs at batch 32, a second each, ran on one thread in turn). */
        const double more = tuner->samples[other] < CCN_FIRST_SAMPLES
                                ? 0
                                : tuner->cost[other] - tuner->cost[index];
        if (tuner->since >= CCN_TRY_SHARE *
                                ((more > 0 ? more : 0) + tuner->cost[index] / CCN_TRY_FLOOR) *
                                tuner->work)
            index = other;
    }
    run.measured = tuner->warm >= CCN_WARM_NS;
    __atomic_store_n(&tuner->lock, 0, __ATOMIC_RELEASE);
    run.tuner = tuner;
    run.most = most;
    run.index = index;
    run_threads = most >> index;
    run_work = 0;
    run.start = now_ns();
    return run;
}

/* Counts `run`'s time, `elapsed` ns for `work`, towards its count's
 * cost (the caller holds the tuner's lock), and makes the fastest count
 * the best. */
static void record_run(ccn_run_tuner *tuner, const ccn_run *run, long long elapsed, double work)
{
    /* After the first samples' fastest, a moving average of times at most a
     * quarter over it (a run the OS preempted moves it little; a lasting
     * change, by a factor of 1.6 in about 8 runs); a try's time, rarer,
     * counts for more. */
    const double sample = (double)elapsed / work;
    double *const cost = &tuner->cost[run->index];
    const int samples = tuner->samples[run->index]++;
    if (samples == 0 || (samples < CCN_FIRST_SAMPLES && sample < *cost))
        *cost = sample;
    else if (samples >= CCN_FIRST_SAMPLES)
        *cost += ((sample < 1.25 * *cost ? sample : 1.25 * *cost) - *cost) /
                 (run->index == tuner->best ? 4 : 2);
    tuner->work = work;
    if (run->index == tuner->best) {
        tuner->since += elapsed;
    } else { /* a try: the next takes the other neighbour */
        tuner->since = 0;
        tuner->next_try = -tuner->next_try;
    }
    int best = tuner->best;
    const int counts = tuned_counts(run->most);
    for (int k = 0; k < counts; k++)
        if (tuner->samples[k] > 0 &&
            (tuner->samples[best] == 0 || tuner->cost[k] < tuner->cost[best]))
            best = k;
    if (best != tuner->best) {
        tuner->best = best;
        tuner->since = 0;
    }
}

void ccn_run_finish(ccn_run run, int status)
{
    if (!run.tuner)
        return;
    const long long elapsed = now_ns() - run.start;
    const double work = run_work;
    run_threads = 0;
    ccn_run_tuner *const tuner = run.tuner;
    if (status != 0 || work <= 0 || __atomic_exchange_n(&tuner->lock, 1, __ATOMIC_ACQUIRE))
        return;
    if (tuner->most == run.most) { /* else measured for another most since it started */
        if (run.measured)
            record_run(tuner, &run, elapsed, work);
        else
            tuner->warm += elapsed;
    }
    __atomic_store_n(&tuner->lock, 0, __ATOMIC_RELEASE);
}

/* Waits until the workers have finished `others` pieces of the running
 * loop: spinning while that is likely to be soon, then asleep. */
static void wait_for_workers(long others)
{
    const long long start = now_ns();
    for (long spin = 0; __atomic_load_n(&pool.finish.done, __ATOMIC_ACQUIRE) != others; spin++)
        if (!pause_briefly(spin) || now_ns() - start > CCN_WAIT_SPIN_NS) {
            pthread_mutex_lock(&pool.lock);
            __atomic_store_n(&pool.finish.waiting, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pool.finish.done, __ATOMIC_SEQ_CST) != others)
                pthread_cond_wait(&pool.finished, &pool.lock);
            __atomic_store_n(&pool.finish.waiting, 0, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&pool.lock);
        }
}

void ccn_parallel_for_grain(long count, long work, long grain, ccn_task task, void *context)
{
    run_work += (double)work; /* the run's measure (ccn_run_finish) */
    /* At most count / grain pieces, so each holds at least grain indices,
     * and at most work / CCN_PIECE_WORK. */
    long most_pieces = grain > 1 ? count / grain : count;
    if (most_pieces > work / CCN_PIECE_WORK)
        most_pieces = work / CCN_PIECE_WORK;
    const int threads = work >= CCN_PARALLEL_WORK && most_pieces > 1 ? ccn_get_threads() : 1;
    if (threads < 2 || __atomic_exchange_n(&pool.busy, 1, __ATOMIC_ACQUIRE)) {
        task(context, 0, count);
        return;
    }
    const long long start = now_ns();
    const int started = start_workers(threads - 1);
    const int workers = started < threads - 1 ? started : threads - 1;
    const long most = (long)(workers + 1) * CCN_CHUNKS_PER_THREAD * CCN_PIECES_PER_CHUNK;
    const long pieces = most_pieces < most ? most_pieces : most;
    const long chunks = (pieces + CCN_PIECES_PER_CHUNK - 1) / CCN_PIECES_PER_CHUNK;
    /* When the CPUs are wanted, a woken worker runs only once the OS finds
     * it one, often after the loop: a smaller loop runs on the workers
     * still awake, or on the caller alone when none is. */
    const int wake = work >= CCN_WAKE_WORK || !__atomic_load_n(&pool.wanted, __ATOMIC_RELAXED);
    if (workers == 0 || (start < pool.serial_until && work < CCN_BACKOFF_WORK) ||
        (!wake && __atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST) >= started)) {
        __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
        task(context, 0, count);
        return;
    }
    pool.loop.task = task;
    pool.loop.context = context;
    pool.loop.count = count;
    pool.loop.pieces = pieces;
    __atomic_store_n(&pool.loop.threads, workers + 1, __ATOMIC_RELAXED);
    pool.loop.generation = (pool.loop.generation + 1) & 0xffffffffULL;
    __atomic_store_n(&pool.finish.done, 0, __ATOMIC_RELAXED);
    for (long c = 0; c < chunks; c++) {
        const long first = c * CCN_PIECES_PER_CHUNK, end = first + CCN_PIECES_PER_CHUNK;
        __atomic_store_n(&pool.parts[c].word,
                         CLAIMS(pool.loop.generation, end < pieces ? end : pieces, first),
                         __ATOMIC_RELEASE);
    }
    __atomic_store_n(&pool.ticket.word, CLAIMS(pool.loop.generation, chunks, 0), __ATOMIC_SEQ_CST);
    const int sleepers = __atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST);
    /* Whether one of this loop's workers sleeps (those beyond the count
     * sleep too). */
    const int asleep = sleepers > started - workers;
    if (wake && sleepers > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    const long others = pieces - run_chunks(pool.loop.generation, 0);
    const long long worked = now_ns();
    wait_for_workers(others);
    const long long end = now_ns();
    if (end - worked > worked - start && end - worked > CCN_STALL_NS) {
        const long long doubled = 2 * pool.backoff;
        pool.backoff = doubled < CCN_BACKOFF_MIN_NS   ? CCN_BACKOFF_MIN_NS
                       : doubled > CCN_BACKOFF_MAX_NS ? CCN_BACKOFF_MAX_NS
                                                      : doubled;
        pool.serial_until = end + pool.backoff;
    } else {
        pool.backoff -= pool.backoff / 8;
    }
    /* A loop that found one of its workers asleep counts as none: a woken
     * worker may just be late (counted, the serial spells fed themselves:
     * their workers fell asleep, and the next loops woke them late). */
    pool.idle_loops = others == 0 && !asleep ? pool.idle_loops + 1 : 0;
    if (pool.idle_loops >= CCN_IDLE_LOOPS) {
        pool.idle_loops = 0;
        if (pool.serial_until < end + CCN_IDLE_SERIAL_NS)
            pool.serial_until = end + CCN_IDLE_SERIAL_NS;
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

#else /* no threads: every loop on the calling thread */

void ccn_parallel_for_grain(long count, long work, long grain, ccn_task task, void *context)
{
    (void)work;
    (void)grain;
    task(context, 0, count);
}

int ccn_set_threads(int threads)
{
    return threads < 1 || threads > CCN_MAX_THREADS ? -1 : 0;
}

int ccn_set_most_threads(int threads)
{
    return ccn_set_threads(threads);
}

int ccn_get_threads(void)
{
    return 1;
}

ccn_run ccn_run_start(ccn_run_tuner *tuner)
{
    const ccn_run run = {NULL, 0, 0, 0, 0};
    (void)tuner;
    return run;
}

void ccn_run_finish(ccn_run run, int status)
{
    (void)run;
    (void)status;
}

#endif

void ccn_parallel_for(long count, long work, ccn_task task, void *context)
{
    ccn_parallel_for_grain(count, work, 1, task, context);
}
