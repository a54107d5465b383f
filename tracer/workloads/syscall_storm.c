/*
 * syscall_storm - hackbench-like storm of small blocking I/O syscalls (TPDS §2, §6).
 *
 * hackbench spends almost all its time in the kernel: socket/pipe buffer locks, the wait queues
 * of the sockets, the scheduler's run-queue locks and wake-ups.  Those are kernel spinlocks:
 * inside a VM, a vCPU preempted while holding one makes the other vCPUs spin on it (lock-holder
 * and lock-waiter preemption, PLE exits, TPDS §2), and every blocked reader/writer that is
 * woken costs the blocking-synchronisation exits of TPDS §2, §6 (RESCHEDULE IPIs).
 *
 * --groups G groups of --fds F sender threads and F receiver threads (threads, like
 * `hackbench -T`).  Each receiver owns one channel (an AF_UNIX SOCK_STREAM socketpair, or a pipe
 * with --mode pipe); each sender writes --loops L messages of --msg-size B bytes to every
 * receiver of its group, round-robin; each receiver reads until it has all F*L messages.  All
 * threads start together (a barrier) and the clock runs from the start to the last join.
 */
#include "common.h"

#include <stdatomic.h>
#include <sys/socket.h>

static long long o_groups = 4, o_fds = 5, o_loops = 200, o_msg = 100;
static const char *o_mode = "socket";

typedef struct {
    pthread_t tid;
    int group, index;
    int *wfds;   /* sender: the write ends of its group's receivers (F of them) */
    int rfd;     /* receiver: its read end */
    long long bytes, calls;
} worker_t;

static pthread_barrier_t start_barrier;

static void wait_start(void)
{
    int rc = pthread_barrier_wait(&start_barrier);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
        die("pthread_barrier_wait: %s", strerror(rc));
}

static void *sender(void *arg)
{
    worker_t *w = arg;
    char *msg = xcalloc(1, (size_t)o_msg);
    memset(msg, 'a' + w->index % 26, (size_t)o_msg);
    wait_start();
    for (long long l = 0; l < o_loops; l++) {
        for (int r = 0; r < (int)o_fds; r++) {
            size_t off = 0;
            while (off < (size_t)o_msg) { /* a stream write may be partial */
                ssize_t k = write(w->wfds[r], msg + off, (size_t)o_msg - off);
                w->calls++;
                if (k < 0) {
                    if (errno == EINTR)
                        continue;
                    die("write: %s", strerror(errno));
                }
                off += (size_t)k;
            }
            w->bytes += o_msg;
        }
    }
    free(msg);
    return NULL;
}

static void *receiver(void *arg)
{
    worker_t *w = arg;
    long long want = o_fds * o_loops * o_msg;
    char *buf = xcalloc(1, (size_t)o_msg);
    wait_start();
    while (w->bytes < want) {
        long long left = want - w->bytes;
        size_t ask = left < o_msg ? (size_t)left : (size_t)o_msg; /* one message per read, like hackbench */
        ssize_t k = read(w->rfd, buf, ask);
        w->calls++;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die("read: %s", strerror(errno));
        }
        if (k == 0)
            die("read: unexpected end of stream after %lld of %lld bytes", w->bytes, want);
        w->bytes += k;
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("groups", "G", "groups of senders and receivers", &o_groups, 1, 1024),
        OPT_INT("fds", "F", "senders and receivers per group", &o_fds, 1, 1024),
        OPT_INT("loops", "L", "messages each sender writes to each receiver of its group", &o_loops, 0,
                1000000000LL),
        OPT_INT("msg-size", "B", "bytes per message", &o_msg, 1, 65536),
        OPT_CHOICE("mode", "channel type: AF_UNIX stream socketpair or pipe", &o_mode, "socket|pipe"),
    };
    opts_parse(argc, argv, "syscall_storm",
               "hackbench-like storm (threads; TPDS §2, §6): G groups of F senders and F receivers;\n"
               "each sender writes L messages of B bytes to every receiver of its group.",
               opts, (int)(sizeof opts / sizeof opts[0]));

    int g = (int)o_groups, f = (int)o_fds, n = 2 * g * f;
    if (n > 8192) {
        char got[32];
        snprintf(got, sizeof got, "%lld", o_fds);
        opt_fail("--fds", "2 x groups x fds <= 8192 threads", got);
    }
    int use_pipe = strcmp(o_mode, "pipe") == 0;

    worker_t *ws = xcalloc((size_t)n, sizeof *ws); /* per group: F senders, then F receivers */
    int *wfds = xcalloc((size_t)(g * f), sizeof *wfds);
    for (int gi = 0; gi < g; gi++) {
        for (int r = 0; r < f; r++) {
            int fds[2];
            int rc = use_pipe ? pipe(fds) : socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
            if (rc != 0)
                die("%s: %s (%d channels needed; raise `ulimit -n`?)", use_pipe ? "pipe" : "socketpair",
                    strerror(errno), g * f);
            worker_t *rw = &ws[gi * 2 * f + f + r];
            rw->group = gi;
            rw->index = r;
            rw->rfd = fds[0];
            wfds[gi * f + r] = fds[1];
        }
        for (int s = 0; s < f; s++) {
            worker_t *sw = &ws[gi * 2 * f + s];
            sw->group = gi;
            sw->index = s;
            sw->wfds = &wfds[gi * f];
        }
    }

    check_pthread(pthread_barrier_init(&start_barrier, NULL, (unsigned)n + 1), "pthread_barrier_init");
    for (int gi = 0; gi < g; gi++)
        for (int k = 0; k < 2 * f; k++) {
            worker_t *w = &ws[gi * 2 * f + k];
            start_thread(&w->tid, k < f ? sender : receiver, w);
        }
    measure_t m;
    wait_start(); /* everybody is created: go */
    measure_start(&m);
    for (int i = 0; i < n; i++)
        join_thread(ws[i].tid);
    double wall = now_s() - m.t0;

    long long sent = 0, received = 0, writes = 0, reads = 0;
    for (int gi = 0; gi < g; gi++)
        for (int k = 0; k < 2 * f; k++) {
            worker_t *w = &ws[gi * 2 * f + k];
            if (k < f) {
                sent += w->bytes;
                writes += w->calls;
            } else {
                received += w->bytes;
                reads += w->calls;
            }
        }
    long long expected = (long long)g * f * f * o_loops * o_msg;
    if (sent != expected || received != expected)
        die("byte count mismatch: sent %lld, received %lld, expected %lld", sent, received, expected);

    json_t j;
    json_begin(&j, n);
    json_str(&j, "mode", o_mode);
    json_int(&j, "groups", g);
    json_int(&j, "fds", f);
    json_int(&j, "loops", o_loops);
    json_int(&j, "msg_size", o_msg);
    json_int(&j, "messages", received / o_msg);
    json_int(&j, "bytes", received);
    json_int(&j, "write_calls", writes);
    json_int(&j, "read_calls", reads);
    json_end(&j, &m, wall);
    for (int i = 0; i < g * f; i++)
        close(wfds[i]);
    for (int i = 0; i < n; i++)
        if (ws[i].wfds == NULL)
            close(ws[i].rfd);
    free(wfds);
    free(ws);
    return 0;
}
