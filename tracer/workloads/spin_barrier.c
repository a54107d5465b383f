/*
 * spin_barrier - user-level spinning at a barrier (TPDS §6).
 *
 * volrend ("decrement under lock; while (counter);") and streamcluster's barrier make a thread
 * that arrives early busy-wait in user space.  With at least as many cores as threads that is
 * cheap; with more runnable threads than (v)CPUs the waiters burn their whole time slice while
 * the thread they wait for sits preempted in the run queue (user-level lock-holder
 * preemption).  Pause-loop exiting cannot help in a VM (the loop runs at CPL 3), and natively
 * the kernel has no idea the spinner is waiting.
 *
 * Each of --threads threads runs --rounds rounds of: --work-us of deterministic work, then a
 * barrier.  --barrier selects the barrier:
 *   spin      sense-reversing centralised barrier on C11 atomics; waiters poll the sense flag
 *             with PAUSE, never yield, never sleep (the pathology);
 *   pthread   pthread_barrier_wait: waiters sleep on a futex (the blocking fix of 2.5, which
 *             in a VM becomes the HLT/IPI traffic of 2.1);
 *   spinlock  arrival counter under a pthread_spinlock_t, waiters poll the generation by
 *             repeatedly taking and releasing that same spinlock (so an LD_PRELOAD shim that
 *             replaces pthread_spin_* can change how the wait behaves).
 */
#include "common.h"

#include <stdatomic.h>

static long long o_threads = 4, o_rounds = 2000, o_work_us = 50, o_work_iters = 0;
static int work_iters_given;
static const char *o_barrier = "spin";

static int nthreads;
static uint64_t iters_per_round;

/* --barrier spin: sense-reversing centralised barrier.  count and sense on separate lines. */
static struct {
    _Alignas(64) atomic_int count;
    _Alignas(64) atomic_int sense;
} sb;

static long long spin_barrier_wait(int *local_sense)
{
    long long polls = 0;
    int s = !*local_sense;
    *local_sense = s;
    if (atomic_fetch_sub_explicit(&sb.count, 1, memory_order_acq_rel) == 1) {
        /* last to arrive: re-arm, then release everybody by flipping the sense */
        atomic_store_explicit(&sb.count, nthreads, memory_order_relaxed);
        atomic_store_explicit(&sb.sense, s, memory_order_release);
    } else {
        while (atomic_load_explicit(&sb.sense, memory_order_acquire) != s) {
            cpu_relax();
            polls++;
        }
    }
    return polls;
}

/* --barrier spinlock: everything under one pthread spinlock, waiting = lock/read/unlock. */
static struct {
    pthread_spinlock_t lock;
    int count;
    unsigned gen;
} slb;

static long long spinlock_barrier_wait(void)
{
    long long polls = 0;
    pthread_spin_lock(&slb.lock);
    unsigned g = slb.gen;
    if (++slb.count == nthreads) {
        slb.count = 0;
        slb.gen = g + 1;
        pthread_spin_unlock(&slb.lock);
        return 0;
    }
    pthread_spin_unlock(&slb.lock);
    for (;;) {
        pthread_spin_lock(&slb.lock);
        unsigned cur = slb.gen;
        pthread_spin_unlock(&slb.lock);
        if (cur != g)
            return polls;
        polls++;
    }
}

/* --barrier pthread */
static pthread_barrier_t pb;

enum { B_SPIN, B_PTHREAD, B_SPINLOCK };
static int mode;

/* Self-check: arrivals counted before each barrier; after barrier r every thread must see at
 * least N*(r+1) of them and fewer than N*(r+2). */
static _Alignas(64) atomic_llong arrivals;
static atomic_llong violations, total_polls;

static void *worker(void *arg)
{
    (void)arg;
    int local_sense = 0;
    long long polls = 0, bad = 0;
    for (long long r = 0; r < o_rounds; r++) {
        work(iters_per_round);
        atomic_fetch_add_explicit(&arrivals, 1, memory_order_relaxed);
        switch (mode) {
        case B_SPIN:
            polls += spin_barrier_wait(&local_sense);
            break;
        case B_SPINLOCK:
            polls += spinlock_barrier_wait();
            break;
        default: {
            int rc = pthread_barrier_wait(&pb);
            if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
                die("pthread_barrier_wait: %s", strerror(rc));
        }
        }
        long long a = atomic_load_explicit(&arrivals, memory_order_relaxed);
        if (a < nthreads * (r + 1) || a > nthreads * (r + 2) - 1)
            bad++;
    }
    atomic_fetch_add(&violations, bad);
    atomic_fetch_add(&total_polls, polls);
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("threads", "N", "worker threads", &o_threads, 1, 4096),
        OPT_INT("rounds", "R", "barrier rounds", &o_rounds, 0, 1000000000LL),
        OPT_INT("work-us", "W", "work per thread per round, microseconds", &o_work_us, 0, 100000000LL),
        OPT_INT_G("work-iters", "I", "work per thread per round in loop iterations (skips calibration; overrides --work-us)",
                  &o_work_iters, 0, 1000000000000LL, &work_iters_given),
        OPT_CHOICE("barrier", "barrier implementation", &o_barrier, "spin|pthread|spinlock"),
    };
    opts_parse(argc, argv, "spin_barrier",
               "User-level spin barrier (volrend/streamcluster style; TPDS §6): threads alternate\n"
               "deterministic work and a barrier; 'spin' busy-waits with PAUSE, 'pthread' sleeps.",
               opts, (int)(sizeof opts / sizeof opts[0]));

    nthreads = (int)o_threads;
    mode = strcmp(o_barrier, "spin") == 0 ? B_SPIN : strcmp(o_barrier, "pthread") == 0 ? B_PTHREAD : B_SPINLOCK;
    double ipu;
    iters_per_round = resolve_work_iters(o_work_us, o_work_iters, work_iters_given, &ipu);

    atomic_init(&sb.count, nthreads);
    atomic_init(&sb.sense, 0);
    check_pthread(pthread_spin_init(&slb.lock, PTHREAD_PROCESS_PRIVATE), "pthread_spin_init");
    check_pthread(pthread_barrier_init(&pb, NULL, (unsigned)nthreads), "pthread_barrier_init");

    pthread_t *tids = xcalloc((size_t)nthreads, sizeof *tids);
    measure_t m;
    measure_start(&m);
    for (int i = 0; i < nthreads; i++)
        start_thread(&tids[i], worker, NULL);
    for (int i = 0; i < nthreads; i++)
        join_thread(tids[i]);
    double wall = now_s() - m.t0;

    json_t j;
    json_begin(&j, nthreads);
    json_str(&j, "barrier", o_barrier);
    json_int(&j, "rounds", o_rounds);
    json_int(&j, "work_us", work_iters_given ? -1 : o_work_us);
    json_int(&j, "work_iters", (long long)iters_per_round);
    json_num(&j, "iters_per_us", ipu);
    json_int(&j, "barrier_waits", o_rounds * nthreads);
    json_int(&j, "spin_polls", atomic_load(&total_polls));
    json_int(&j, "barrier_violations", atomic_load(&violations));
    json_end(&j, &m, wall);
    free(tids);
    return atomic_load(&violations) == 0 ? 0 : 1;
}
