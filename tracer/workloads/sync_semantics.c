/*
 * sync_semantics - the synchronisation patterns a trace replay must get right, one per
 * --pattern, each small enough to trace, run natively and replay in a test
 * (tests/e2e/test_replay_semantics.py, docs/bridge.md "Replay semantics").
 *
 *   join-under-lock     pigz's join_all (yarn.c): each worker, as it ends, marks itself done and
 *                       broadcasts under a lock; the main thread waits on the condition
 *                       variable, then joins every finished worker *holding* that lock.
 *                       Several workers often finish while the main thread waits once.
 *   signal-before-wait  a two-thread hand-off with a predicate: the signal often comes before
 *                       the other thread waits (it then finds the flag set and never waits);
 *                       a wake-up sent before a wait must not be lost, nor end a later wait.
 *   broadcast           a condition-variable barrier (PARSEC's PARMACS BARRIER): every round the
 *                       last of --threads arrivals broadcasts to the others under the mutex.
 *   barrier             pthread_barrier_wait, --rounds rounds of uneven work.
 *   futex               a work queue on a raw futex word, as runtimes that call futex(2) directly
 *                       do (GLib, Rust's std, libgomp): the main thread adds --batch items per
 *                       round and wakes that many workers (FUTEX_WAKE with a count); a worker
 *                       that finds no item sleeps in FUTEX_WAIT. No pthread call synchronises.
 *
 * Work is the deterministic work() of common.h, uneven across threads and rounds (a fixed
 * pseudo-random spread), so that waits happen in every order.
 */
#include "common.h"

#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>

static long long o_threads = 4, o_rounds = 50, o_work_us = 200, o_work_iters = 0, o_batch = 2;
static const char *o_pattern = "join-under-lock";
static int work_iters_given;
static uint64_t iters_per_unit; /* work() iterations per --work-us */
static long long waits;         /* condition or futex waits that slept (under each pattern's lock) */

/* Uneven work: between 0.5 and 1.5 units, a fixed function of (thread, round). */
static void uneven_work(long long thread, long long round)
{
    uint64_t h = (uint64_t)(thread * 7919 + round * 104729 + 1) * 0x9E3779B97F4A7C15ull;
    double f = 0.5 + (double)(h >> 11) / (double)(1ull << 53);
    work((uint64_t)((double)iters_per_unit * f));
}

/* ---- join-under-lock ------------------------------------------------------------------- */

static pthread_mutex_t jl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jl_cond = PTHREAD_COND_INITIALIZER;
static long long jl_finished; /* workers done and not yet joined */
typedef struct {
    pthread_t tid;
    long long index, round;
    bool done, joined;
} jl_worker_t;

static void *jl_worker(void *arg)
{
    jl_worker_t *w = arg;
    uneven_work(w->index, w->round);
    pthread_mutex_lock(&jl_lock);
    w->done = true;
    jl_finished++;
    pthread_cond_broadcast(&jl_cond);
    pthread_mutex_unlock(&jl_lock);
    return NULL;
}

static void join_under_lock(void)
{
    jl_worker_t *ws = xcalloc((size_t)o_threads, sizeof *ws);
    for (long long r = 0; r < o_rounds; r++) {
        for (long long i = 0; i < o_threads; i++) {
            ws[i] = (jl_worker_t){.index = i, .round = r};
            start_thread(&ws[i].tid, jl_worker, &ws[i]);
        }
        pthread_mutex_lock(&jl_lock);
        for (long long joined = 0; joined < o_threads;) {
            while (jl_finished == 0) {
                waits++;
                pthread_cond_wait(&jl_cond, &jl_lock);
            }
            for (long long i = 0; i < o_threads; i++)
                if (ws[i].done && !ws[i].joined) {
                    join_thread(ws[i].tid); /* holding jl_lock, as pigz does */
                    ws[i].joined = true;
                    jl_finished--;
                    joined++;
                }
        }
        pthread_mutex_unlock(&jl_lock);
    }
    free(ws);
}

/* ---- signal-before-wait ---------------------------------------------------------------- */

static pthread_mutex_t sw_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sw_cond = PTHREAD_COND_INITIALIZER;
static long long sw_turn; /* whose turn: round * 2 + side */

static void *sw_side(void *arg)
{
    long long side = (long long)(intptr_t)arg;
    for (long long r = 0; r < o_rounds; r++) {
        long long mine = r * 2 + side;
        pthread_mutex_lock(&sw_lock);
        while (sw_turn != mine) {
            waits++;
            pthread_cond_wait(&sw_cond, &sw_lock);
        }
        pthread_mutex_unlock(&sw_lock);
        uneven_work(side, r);
        pthread_mutex_lock(&sw_lock);
        sw_turn++;
        pthread_cond_signal(&sw_cond);
        pthread_mutex_unlock(&sw_lock);
        uneven_work(side + 2, r); /* work after the signal: the other side may not wait at all */
    }
    return NULL;
}

static void signal_before_wait(void)
{
    pthread_t other;
    start_thread(&other, sw_side, (void *)(intptr_t)1);
    sw_side((void *)(intptr_t)0);
    join_thread(other);
}

/* ---- broadcast ------------------------------------------------------------------------- */

static pthread_mutex_t bc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bc_cond = PTHREAD_COND_INITIALIZER;
static long long bc_arrived, bc_cycle;

static void bc_barrier(void)
{
    pthread_mutex_lock(&bc_lock);
    long long cycle = bc_cycle;
    if (++bc_arrived == o_threads) {
        bc_arrived = 0;
        bc_cycle++;
        pthread_cond_broadcast(&bc_cond);
    } else {
        while (cycle == bc_cycle) {
            waits++;
            pthread_cond_wait(&bc_cond, &bc_lock);
        }
    }
    pthread_mutex_unlock(&bc_lock);
}

static pthread_barrier_t pb;

static void *round_worker(void *arg)
{
    long long i = (long long)(intptr_t)arg;
    bool posix = strcmp(o_pattern, "barrier") == 0;
    for (long long r = 0; r < o_rounds; r++) {
        uneven_work(i, r);
        if (posix)
            pthread_barrier_wait(&pb);
        else
            bc_barrier();
    }
    return NULL;
}

static void rounds(void)
{
    check_pthread(pthread_barrier_init(&pb, NULL, (unsigned)o_threads), "pthread_barrier_init");
    pthread_t *ts = xcalloc((size_t)o_threads, sizeof *ts);
    for (long long i = 1; i < o_threads; i++)
        start_thread(&ts[i], round_worker, (void *)(intptr_t)i);
    round_worker((void *)(intptr_t)0);
    for (long long i = 1; i < o_threads; i++)
        join_thread(ts[i]);
    free(ts);
    pthread_barrier_destroy(&pb);
}

/* ---- futex ----------------------------------------------------------------------------- */

static _Atomic uint32_t fx_items;   /* items queued: the futex word */
static _Atomic long long fx_left;   /* items still to be taken, over the run */
static _Atomic long long fx_waits;

static long futex(_Atomic uint32_t *word, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

static void *fx_worker(void *arg)
{
    long long i = (long long)(intptr_t)arg;
    for (long long n = 0;; n++) {
        uint32_t have = atomic_load(&fx_items);
        if (have == 0) {
            if (atomic_load(&fx_left) <= 0)
                break;
            atomic_fetch_add(&fx_waits, 1);
            futex(&fx_items, FUTEX_WAIT_PRIVATE, 0); /* sleeps unless an item came meanwhile */
            continue;
        }
        if (!atomic_compare_exchange_weak(&fx_items, &have, have - 1))
            continue;
        uneven_work(i, n);
        if (atomic_fetch_sub(&fx_left, 1) == 1) /* the last item: wake everyone to leave */
            futex(&fx_items, FUTEX_WAKE_PRIVATE, INT_MAX);
    }
    return NULL;
}

static void futex_queue(void)
{
    atomic_store(&fx_left, o_rounds * o_batch);
    pthread_t *ts = xcalloc((size_t)o_threads, sizeof *ts);
    for (long long i = 0; i < o_threads; i++)
        start_thread(&ts[i], fx_worker, (void *)(intptr_t)i);
    for (long long r = 0; r < o_rounds; r++) {
        uneven_work(o_threads, r); /* the producer's own work between batches */
        atomic_fetch_add(&fx_items, (uint32_t)o_batch);
        futex(&fx_items, FUTEX_WAKE_PRIVATE, (uint32_t)o_batch);
    }
    for (long long i = 0; i < o_threads; i++)
        join_thread(ts[i]);
    free(ts);
    waits = atomic_load(&fx_waits);
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_CHOICE("pattern", "the pattern (see the source's header)", &o_pattern,
                   "join-under-lock|signal-before-wait|broadcast|barrier|futex"),
        OPT_INT("threads", "N", "threads (signal-before-wait: always 2)", &o_threads, 1, 256),
        OPT_INT("rounds", "R", "rounds", &o_rounds, 1, 1000000),
        OPT_INT("work-us", "U", "mean work per thread and round, microseconds", &o_work_us, 0, 10000000),
        OPT_INT_G("work-iters", "I", "the same in loop iterations (skips calibration)", &o_work_iters, 0,
                  1000000000000LL, &work_iters_given),
        OPT_INT("batch", "B", "futex: items added (and workers woken) per round", &o_batch, 1, 1000000),
    };
    opts_parse(argc, argv, "sync_semantics",
               "Synchronisation patterns a trace replay must reproduce: pigz's join under a lock, a\n"
               "signal before the wait, a condition-variable barrier, a POSIX barrier, a raw futex queue.",
               opts, (int)(sizeof opts / sizeof opts[0]));
    double ipu;
    iters_per_unit = resolve_work_iters(o_work_us, o_work_iters, work_iters_given, &ipu);
    long long threads = strcmp(o_pattern, "signal-before-wait") == 0 ? 2 : o_threads;

    measure_t m;
    measure_start(&m);
    if (strcmp(o_pattern, "join-under-lock") == 0)
        join_under_lock();
    else if (strcmp(o_pattern, "signal-before-wait") == 0)
        signal_before_wait();
    else if (strcmp(o_pattern, "futex") == 0)
        futex_queue();
    else
        rounds();
    double wall = now_s() - m.t0;

    json_t j;
    json_begin(&j, threads);
    json_str(&j, "pattern", o_pattern);
    json_int(&j, "rounds", o_rounds);
    json_num(&j, "iters_per_us", ipu);
    json_int(&j, "waits", waits);
    json_end(&j, &m, wall);
    return 0;
}
