/*
 * spinlock - contention on a user-level spinlock (TPDS §6; dedup's pthread
 * spinlocks, the user-space analogue of the kernel spinning of 2.4).
 *
 * pthread_spin_lock waiters busy-wait.  When the lock holder is preempted (more runnable threads
 * than (v)CPUs, or its vCPU is descheduled by the host) every waiter spins until the holder runs
 * again: user-level lock-holder preemption, which pause-loop exiting cannot see in a guest
 * (CPL 3).  --lock mutex uses a default pthread mutex instead (waiters sleep on a futex: the
 * blocking fix, whose cost in a VM is TPDS §2, §6).
 *
 * Each of --threads threads does --iters times: --work-iters iterations of work outside the
 * lock, then takes the lock, does --cs-iters iterations inside it and increments a shared
 * counter, then releases it.  The counter must end at threads x iters.  Work is given in loop
 * iterations (about 2 ns each; the calibrated rate is reported for reference).
 */
#include "common.h"

static long long o_threads = 4, o_iters = 200000, o_cs = 50, o_work = 500;
static const char *o_lock = "spin";

static int use_spin;
static struct {
    _Alignas(64) pthread_spinlock_t spin;
    pthread_mutex_t mutex;
    long long counter; /* protected by the lock in use */
} L;

static void *worker(void *arg)
{
    (void)arg;
    for (long long i = 0; i < o_iters; i++) {
        work((uint64_t)o_work);
        if (use_spin)
            pthread_spin_lock(&L.spin);
        else
            pthread_mutex_lock(&L.mutex);
        work((uint64_t)o_cs);
        L.counter++;
        if (use_spin)
            pthread_spin_unlock(&L.spin);
        else
            pthread_mutex_unlock(&L.mutex);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("threads", "N", "worker threads", &o_threads, 1, 4096),
        OPT_INT("iters", "I", "lock acquisitions per thread", &o_iters, 0, 1000000000000LL),
        OPT_INT("cs-iters", "C", "work iterations inside the critical section", &o_cs, 0, 1000000000LL),
        OPT_INT("work-iters", "W", "work iterations outside the critical section", &o_work, 0, 1000000000LL),
        OPT_CHOICE("lock", "lock type: pthread_spinlock_t or default pthread mutex", &o_lock, "spin|mutex"),
    };
    opts_parse(argc, argv, "spinlock",
               "pthread_spin_lock contention (TPDS §6): N threads alternate work outside a lock and\n"
               "work inside it; 'spin' waiters busy-wait, 'mutex' waiters sleep.",
               opts, (int)(sizeof opts / sizeof opts[0]));

    use_spin = strcmp(o_lock, "spin") == 0;
    check_pthread(pthread_spin_init(&L.spin, PTHREAD_PROCESS_PRIVATE), "pthread_spin_init");
    check_pthread(pthread_mutex_init(&L.mutex, NULL), "pthread_mutex_init");
    double ipu = calibrate_iters_per_us(); /* only reported: the work is given in iterations */

    int n = (int)o_threads;
    pthread_t *tids = xcalloc((size_t)n, sizeof *tids);
    measure_t m;
    measure_start(&m);
    for (int i = 0; i < n; i++)
        start_thread(&tids[i], worker, NULL);
    for (int i = 0; i < n; i++)
        join_thread(tids[i]);
    double wall = now_s() - m.t0;

    long long expected = o_threads * o_iters;
    json_t j;
    json_begin(&j, n);
    json_str(&j, "lock", o_lock);
    json_int(&j, "iters", o_iters);
    json_int(&j, "cs_iters", o_cs);
    json_int(&j, "work_iters", o_work);
    json_num(&j, "iters_per_us", ipu);
    json_int(&j, "acquisitions", L.counter);
    json_int(&j, "acquisitions_expected", expected);
    json_end(&j, &m, wall);
    free(tids);
    if (L.counter != expected)
        die("lock check failed: counter %lld, expected %lld", L.counter, expected);
    return 0;
}
