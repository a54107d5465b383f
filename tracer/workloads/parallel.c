/*
 * parallel - embarrassingly parallel, strong-scaled kernel: the control case.
 *
 * No locks, no barriers, no shared writes, no heap churn: none of the causes of TPDS §2 and §6
 * applies, so its virtualization overhead should be negligible (the "negligible"
 * category of TPDS §6; blackscholes/swaptions/sysbench-cpu-like).  What remains visible is
 * scheduling: with more threads than CPUs the wall time is set by the slowest thread
 * (load imbalance from time slicing), which the per-thread CPU times make visible.
 *
 * --work-ms of total CPU work (calibrated once) is split evenly over --threads threads; the only
 * synchronisation is the final join.  Reports each thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
 * and its own wall time from start to finish.
 */
#include "common.h"

static long long o_threads = 4, o_work_ms = 400, o_work_iters = 0;
static int work_iters_given;

typedef struct {
    pthread_t tid;
    uint64_t iters;
    double t_start; /* main's start time, shared */
    double cpu_s, end_s;
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    double c0 = thread_cpu_s();
    /* in chunks, so that nothing in the loop depends on the total size */
    for (uint64_t left = w->iters; left > 0;) {
        uint64_t chunk = left < 1000000 ? left : 1000000;
        work(chunk);
        left -= chunk;
    }
    w->cpu_s = thread_cpu_s() - c0;
    w->end_s = now_s() - w->t_start;
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("threads", "N", "worker threads", &o_threads, 1, 4096),
        OPT_INT("work-ms", "M", "total CPU work, milliseconds, split evenly across threads", &o_work_ms, 0,
                100000000LL),
        OPT_INT_G("work-iters", "I", "total work in loop iterations (skips calibration; overrides --work-ms)",
                  &o_work_iters, 0, 1000000000000000LL, &work_iters_given),
    };
    opts_parse(argc, argv, "parallel",
               "Embarrassingly parallel kernel (control case, no synchronisation): a fixed total amount of\n"
               "work split evenly over N threads; reports per-thread CPU time.",
               opts, (int)(sizeof opts / sizeof opts[0]));

    double ipu;
    uint64_t total = resolve_work_iters(o_work_ms * 1000, o_work_iters, work_iters_given, &ipu);
    int n = (int)o_threads;
    worker_t *ws = xcalloc((size_t)n, sizeof *ws);
    for (int i = 0; i < n; i++) /* even split; the first (total mod n) threads get one more */
        ws[i].iters = total / (uint64_t)n + ((uint64_t)i < total % (uint64_t)n ? 1 : 0);

    measure_t m;
    measure_start(&m);
    for (int i = 0; i < n; i++) {
        ws[i].t_start = m.t0;
        start_thread(&ws[i].tid, worker, &ws[i]);
    }
    for (int i = 0; i < n; i++)
        join_thread(ws[i].tid);
    double wall = now_s() - m.t0;

    double cpu_sum = 0, cpu_max = 0, end_min = 0, end_max = 0;
    for (int i = 0; i < n; i++) {
        cpu_sum += ws[i].cpu_s;
        if (ws[i].cpu_s > cpu_max)
            cpu_max = ws[i].cpu_s;
        if (i == 0 || ws[i].end_s < end_min)
            end_min = ws[i].end_s;
        if (ws[i].end_s > end_max)
            end_max = ws[i].end_s;
    }

    json_t j;
    json_begin(&j, n);
    json_int(&j, "work_ms", work_iters_given ? -1 : o_work_ms);
    json_int(&j, "work_iters", (long long)total);
    json_num(&j, "iters_per_us", ipu);
    json_key(&j, "thread_cpu_s");
    for (int i = 0; i < n; i++)
        printf("%s%.6f", i ? ", " : "[", ws[i].cpu_s);
    printf("]"); /* n >= 1 */
    json_key(&j, "thread_end_s");
    for (int i = 0; i < n; i++)
        printf("%s%.6f", i ? ", " : "[", ws[i].end_s);
    printf("]"); /* n >= 1 */
    json_num(&j, "cpu_sum_s", cpu_sum);
    json_num(&j, "cpu_max_s", cpu_max);
    json_num(&j, "first_end_s", end_min);
    json_num(&j, "last_end_s", end_max);
    json_end(&j, &m, wall);
    free(ws);
    return 0;
}
