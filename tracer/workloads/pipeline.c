/*
 * pipeline - blocking synchronisation in a mutex/condvar pipeline (TPDS §2, §6).
 *
 * ferret and dedup are pipelines of thread pools joined by bounded queues.  Every time a queue
 * runs empty or full a thread sleeps in pthread_cond_wait (futex wait), and the thread that
 * changes the queue wakes it (futex wake).  With an idle CPU the sleeper's core goes idle: in a
 * VM that is a TSC_DEADLINE write + HLT exit, and the wake-up a RESCHEDULE IPI (ICR write exit)
 * + another TSC_DEADLINE write: up to four exits per blocking operation, plus halt polling.
 *
 * --stages K stages of --threads-per-stage T threads; K-1 bounded queues (capacity --queue-cap)
 * join them, each one pthread mutex and two condition variables (not_empty, not_full).  Stage 0
 * generates --items items (thread t of the stage takes items t, t+T, ...), every stage does
 * --work-us of deterministic work per item, the last stage counts them.  Shutdown: when the last
 * producer of a queue finishes it closes the queue; consumers drain it and exit, then close
 * their own output queue in turn.
 */
#include "common.h"

#include <stdatomic.h>
#include <stdbool.h>

static long long o_stages = 3, o_tps = 2, o_items = 20000, o_work_us = 20, o_work_iters = 0, o_cap = 16;
static int work_iters_given;
static uint64_t iters_per_item;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    long long *buf;
    int cap, head, len;
    int producers_left; /* the last producer to finish closes the queue */
    bool closed;
    long long full_waits, empty_waits; /* pthread_cond_wait calls (each is a sleep) */
} queue_t;

static void q_init(queue_t *q, int cap, int producers)
{
    memset(q, 0, sizeof *q);
    check_pthread(pthread_mutex_init(&q->mu, NULL), "pthread_mutex_init");
    check_pthread(pthread_cond_init(&q->not_empty, NULL), "pthread_cond_init");
    check_pthread(pthread_cond_init(&q->not_full, NULL), "pthread_cond_init");
    q->buf = xcalloc((size_t)cap, sizeof *q->buf);
    q->cap = cap;
    q->producers_left = producers;
}

static void q_push(queue_t *q, long long item)
{
    pthread_mutex_lock(&q->mu);
    while (q->len == q->cap) {
        q->full_waits++;
        pthread_cond_wait(&q->not_full, &q->mu);
    }
    q->buf[(q->head + q->len) % q->cap] = item;
    q->len++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

/* false when the queue is closed and drained */
static bool q_pop(queue_t *q, long long *item)
{
    pthread_mutex_lock(&q->mu);
    while (q->len == 0 && !q->closed) {
        q->empty_waits++;
        pthread_cond_wait(&q->not_empty, &q->mu);
    }
    if (q->len == 0) {
        pthread_mutex_unlock(&q->mu);
        return false;
    }
    *item = q->buf[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return true;
}

/* One producer is done; the last one closes the queue and wakes every consumer. */
static void q_producer_done(queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    if (--q->producers_left == 0) {
        q->closed = true;
        pthread_cond_broadcast(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
}

static queue_t *queues; /* queues[s] joins stage s and stage s+1 */

typedef struct {
    pthread_t tid;
    int stage, index;
    long long count, sum; /* last stage: items seen and sum of their ids */
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    int last = (int)o_stages - 1;
    if (w->stage == 0) {
        for (long long id = w->index; id < o_items; id += o_tps) {
            work(iters_per_item);
            q_push(&queues[0], id);
        }
        q_producer_done(&queues[0]);
        return NULL;
    }
    queue_t *in = &queues[w->stage - 1];
    long long id;
    while (q_pop(in, &id)) {
        work(iters_per_item);
        if (w->stage == last) {
            w->count++;
            w->sum += id;
        } else {
            q_push(&queues[w->stage], id);
        }
    }
    if (w->stage != last)
        q_producer_done(&queues[w->stage]);
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("stages", "K", "pipeline stages (first generates, last counts)", &o_stages, 2, 256),
        OPT_INT("threads-per-stage", "T", "threads in each stage", &o_tps, 1, 1024),
        OPT_INT("items", "N", "items pushed through the pipeline", &o_items, 0, 1000000000LL),
        OPT_INT("work-us", "W", "work per item per stage, microseconds", &o_work_us, 0, 100000000LL),
        OPT_INT_G("work-iters", "I", "work per item per stage in loop iterations (skips calibration; overrides --work-us)",
                  &o_work_iters, 0, 1000000000000LL, &work_iters_given),
        OPT_INT("queue-cap", "C", "capacity of each bounded queue", &o_cap, 1, 1000000),
    };
    opts_parse(argc, argv, "pipeline",
               "Mutex/condvar pipeline (ferret/dedup style; TPDS §2, §6): K stages of T threads joined by\n"
               "bounded queues; threads sleep on condition variables whenever a queue is empty or full.",
               opts, (int)(sizeof opts / sizeof opts[0]));

    int k = (int)o_stages, t = (int)o_tps, n = k * t;
    if (n > 4096) {
        char got[32];
        snprintf(got, sizeof got, "%lld", o_tps);
        opt_fail("--threads-per-stage", "stages x threads-per-stage <= 4096", got);
    }
    double ipu;
    iters_per_item = resolve_work_iters(o_work_us, o_work_iters, work_iters_given, &ipu);
    queues = xcalloc((size_t)(k - 1), sizeof *queues);
    for (int s = 0; s < k - 1; s++)
        q_init(&queues[s], (int)o_cap, t);
    worker_t *ws = xcalloc((size_t)n, sizeof *ws);

    measure_t m;
    measure_start(&m);
    for (int i = 0; i < n; i++) {
        ws[i].stage = i / t;
        ws[i].index = i % t;
        start_thread(&ws[i].tid, worker, &ws[i]);
    }
    for (int i = 0; i < n; i++)
        join_thread(ws[i].tid);
    double wall = now_s() - m.t0;

    long long count = 0, sum = 0, full_waits = 0, empty_waits = 0;
    for (int i = (k - 1) * t; i < n; i++) {
        count += ws[i].count;
        sum += ws[i].sum;
    }
    for (int s = 0; s < k - 1; s++) {
        full_waits += queues[s].full_waits;
        empty_waits += queues[s].empty_waits;
    }
    /* items are 0..N-1, each must arrive exactly once: check count and sum of ids */
    long long want_sum = o_items * (o_items - 1) / 2;
    bool ok = count == o_items && sum == want_sum;

    json_t j;
    json_begin(&j, n);
    json_int(&j, "stages", k);
    json_int(&j, "threads_per_stage", t);
    json_int(&j, "items", count);
    json_int(&j, "items_expected", o_items);
    json_int(&j, "queue_cap", o_cap);
    json_int(&j, "work_us", work_iters_given ? -1 : o_work_us);
    json_int(&j, "work_iters", (long long)iters_per_item);
    json_num(&j, "iters_per_us", ipu);
    json_int(&j, "queue_ops", 2 * (long long)(k - 1) * o_items);
    json_int(&j, "cond_waits_full", full_waits);
    json_int(&j, "cond_waits_empty", empty_waits);
    json_str(&j, "check", ok ? "ok" : "MISMATCH");
    json_end(&j, &m, wall);
    for (int s = 0; s < k - 1; s++)
        free(queues[s].buf);
    free(queues);
    free(ws);
    if (!ok)
        die("item check failed: counted %lld items (sum %lld), expected %lld (sum %lld)", count, sum, o_items, want_sum);
    return 0;
}
