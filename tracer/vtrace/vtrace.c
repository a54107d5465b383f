/* vtrace: an LD_PRELOAD tracer of threads, synchronisation and memory calls.
 *
 *   VTRACE_OUT=app.vtrace LD_PRELOAD=libvtrace.so ./app args
 *
 * Every thread appends fixed-layout records to its own buffer (thread-local, mmap'd, no lock on
 * the hot path); a full buffer is written as one checksummed block with one write() to a file
 * opened with O_APPEND, so blocks of many threads and processes never interleave. The format is
 * in docs/trace-format.md and vtrace_format.h.
 *
 * Interposer pattern (docs/architecture.md rule 12): the real functions are found lazily with
 * dlsym(RTLD_NEXT) (the allocator through glibc's __libc_* entry points, so dlsym's own calloc
 * cannot recurse), a per-thread re-entrancy guard makes every call made from inside the tracer
 * (or from inside a traced call: pthread_create's stack mmap, cond_wait's mutex) untraced, and
 * nothing the tracer needs is allocated through a traced function. Any error of the tracer
 * disables tracing and is written to VTRACE_LOG; the application never sees it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <gnu/libc-version.h>
#include <time.h>
#include <unistd.h>

#include "vtrace_format.h"

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---------------------------------------------------------------- real functions (generated) */

/* X(return type, name, parameter list): one pointer per interposed function, resolved lazily. */
#define VT_REAL_FUNCTIONS(X)                                                                           \
    X(int, pthread_create, (pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))           \
    X(int, pthread_join, (pthread_t, void **))                                                         \
    X(int, pthread_detach, (pthread_t))                                                                \
    X(int, pthread_mutex_lock, (pthread_mutex_t *))                                                    \
    X(int, pthread_mutex_trylock, (pthread_mutex_t *))                                                 \
    X(int, pthread_mutex_timedlock, (pthread_mutex_t *, const struct timespec *))                      \
    X(int, pthread_mutex_unlock, (pthread_mutex_t *))                                                  \
    X(int, pthread_spin_lock, (pthread_spinlock_t *))                                                  \
    X(int, pthread_spin_trylock, (pthread_spinlock_t *))                                               \
    X(int, pthread_spin_unlock, (pthread_spinlock_t *))                                                \
    X(int, pthread_rwlock_rdlock, (pthread_rwlock_t *))                                                \
    X(int, pthread_rwlock_wrlock, (pthread_rwlock_t *))                                                \
    X(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t *))                                             \
    X(int, pthread_rwlock_trywrlock, (pthread_rwlock_t *))                                             \
    X(int, pthread_rwlock_timedrdlock, (pthread_rwlock_t *, const struct timespec *))                  \
    X(int, pthread_rwlock_timedwrlock, (pthread_rwlock_t *, const struct timespec *))                  \
    X(int, pthread_rwlock_unlock, (pthread_rwlock_t *))                                                \
    X(int, pthread_barrier_init, (pthread_barrier_t *, const pthread_barrierattr_t *, unsigned))       \
    X(int, pthread_barrier_wait, (pthread_barrier_t *))                                                \
    X(int, pthread_cond_wait, (pthread_cond_t *, pthread_mutex_t *))                                   \
    X(int, pthread_cond_timedwait, (pthread_cond_t *, pthread_mutex_t *, const struct timespec *))     \
    X(int, pthread_cond_signal, (pthread_cond_t *))                                                    \
    X(int, pthread_cond_broadcast, (pthread_cond_t *))                                                 \
    X(long, syscall, (long, ...))                                                                      \
    X(void *, mmap, (void *, size_t, int, int, int, off_t))                                            \
    X(int, munmap, (void *, size_t))                                                                   \
    X(int, madvise, (void *, size_t, int))                                                             \
    X(int, mprotect, (void *, size_t, int))                                                            \
    X(int, execve, (const char *, char *const[], char *const[]))                                       \
    X(int, execvpe, (const char *, char *const[], char *const[]))                                      \
    X(int, fexecve, (int, char *const[], char *const[]))                                               \
    X(void, _exit, (int))

#define X(ret, name, params) static ret(*real_##name) params;
VT_REAL_FUNCTIONS(X)
#undef X

/* Resolves real_NAME on first use. dlsym may allocate: the allocator wrappers then go straight
 * to __libc_malloc and friends, so there is no recursion. */
#define REAL(name)                                                                                     \
    (LIKELY(real_##name != NULL) ? real_##name                                                         \
                                 : (real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)))

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* ---------------------------------------------------------------- state */

enum { BUF_FREE = 0, BUF_IDLE = 1, BUF_BUSY = 2, BUF_CLOSED = 3 };

/* One thread's buffer: the block header (filled at flush time) followed by the payload. */
struct vt_buf {
    _Atomic int state; /* BUF_*: the owner appends in BUSY; a flusher claims IDLE buffers */
    uint32_t tid;
    uint32_t seq; /* block sequence number of this thread */
    uint32_t nrec;
    uint32_t pos; /* payload bytes */
    _Atomic int exited; /* its thread has recorded its exit (no THREAD_STATS from others then) */
    unsigned char block[VT_BLOCK_MAX];
};

#define MAX_BUFS 4096
static struct vt_buf *_Atomic g_bufs[MAX_BUFS]; /* every buffer ever mapped (reused when FREE) */
static _Atomic unsigned g_nbufs;

static _Atomic int g_enabled;
static int g_fd = -1;
/* VTRACE_MAX_BYTES: no block is written that would make the file larger (0 = no limit). */
static uint64_t g_max_bytes = 0;
/* Bytes this process has committed to the file (including what other processes had written when
 * it opened it): threads reserve their block here first, so they cannot overshoot together. */
static _Atomic uint64_t g_reserved;
static dev_t g_dev; /* the trace file's identity: the application may close our descriptor */
static ino_t g_ino;
static char g_logpath[4096];
static uint64_t g_base;      /* CLOCK_MONOTONIC ns at this process image's start */
static uint32_t g_pid;
static _Atomic uint32_t g_seq; /* thread creation sequence: main thread 0 */
static pthread_key_t g_key;
static uint32_t g_crc_table[8][256];

static TLS int t_guard;          /* > 0: inside the tracer or a traced call */
static TLS int t_dead;           /* the thread's exit has been recorded */
static TLS struct vt_buf *t_buf; /* NULL until the thread's first record */

/* Locks held by the thread (for hold times): address and acquisition time. */
#define MAX_HELD 32
static TLS struct { const void *addr; uint64_t t; } t_held[MAX_HELD];
static TLS int t_nheld;

static inline int on(void) {
    return LIKELY(t_guard == 0) && atomic_load_explicit(&g_enabled, memory_order_relaxed) && !t_dead;
}

/* ---------------------------------------------------------------- small helpers */

static inline uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t now(void) { return clock_ns(CLOCK_MONOTONIC); }
static inline uint64_t cpu_now(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }
static inline uint32_t gettid_(void) { return (uint32_t)syscall(SYS_gettid); }

static inline void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        g_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) g_crc_table[t][i] = (g_crc_table[t - 1][i] >> 8) ^ g_crc_table[0][g_crc_table[t - 1][i] & 0xFF];
}
/* CRC-32 (IEEE 802.3, reflected, as zlib and crc32fast): crc_update(0xFFFFFFFF, ...) ^ 0xFFFFFFFF.
 * Slicing-by-8: eight bytes per step. */
static uint32_t crc_update(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = g_crc_table[7][lo & 0xFF] ^ g_crc_table[6][(lo >> 8) & 0xFF] ^ g_crc_table[5][(lo >> 16) & 0xFF] ^
            g_crc_table[4][lo >> 24] ^ g_crc_table[3][hi & 0xFF] ^ g_crc_table[2][(hi >> 8) & 0xFF] ^
            g_crc_table[1][(hi >> 16) & 0xFF] ^ g_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = g_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

/* Async-signal-safe log line: "vtrace[pid]: msg (errno N)\n". */
static void vt_log(const char *msg, int err) {
    /* opened for each line: errors are rare, and a descriptor kept open could be closed (and its
     * number reused) by the application */
    int fd = g_logpath[0] ? open(g_logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (fd < 0) return;
    char line[512];
    size_t n = 0;
    const char *pre = "vtrace[";
    while (*pre && n < sizeof line) line[n++] = *pre++;
    char num[24];
    int k = 0;
    for (uint32_t v = (uint32_t)getpid(); k == 0 || v; v /= 10) num[k++] = (char)('0' + v % 10);
    while (k && n < sizeof line) line[n++] = num[--k];
    const char *mid = "]: ";
    while (*mid && n < sizeof line) line[n++] = *mid++;
    while (*msg && n < sizeof line - 40) line[n++] = *msg++;
    if (err) {
        const char *e = " (errno ";
        while (*e) line[n++] = *e++;
        for (uint32_t v = (uint32_t)err; k == 0 || v; v /= 10) num[k++] = (char)('0' + v % 10);
        while (k) line[n++] = num[--k];
        line[n++] = ')';
    }
    line[n++] = '\n';
    ssize_t w = write(fd, line, n);
    (void)w;
    close(fd);
}

/* Any tracer error: stop tracing (the application goes on untouched). */
static void vt_fail(const char *msg, int err) {
    if (atomic_exchange(&g_enabled, 0)) {
        vt_log(msg, err);
        vt_log("tracing disabled", 0);
    }
}

/* ---------------------------------------------------------------- blocks */

static int write_all(const unsigned char *p, size_t n) {
    /* One write(): with O_APPEND the block lands whole at the end of the file. A short write
     * (disk full) cannot be completed without risking interleaving, so it is an error. */
    for (;;) {
        ssize_t w = write(g_fd, p, n);
        if (w == (ssize_t)n) return 0;
        if (w < 0 && errno == EINTR) continue;
        return w < 0 ? errno : EIO;
    }
}

/* Writes the buffer's pending records as one block (the caller owns the buffer). */
static void flush_buf(struct vt_buf *b) {
    if (b->nrec == 0 || g_fd < 0) return;
    unsigned char *h = b->block;
    memcpy(h, VT_BLOCK_MAGIC, 4);
    put32(h + 4, b->pos);
    put32(h + 8, g_pid);
    put32(h + 12, b->tid);
    put64(h + 16, g_base);
    put32(h + 24, b->seq);
    put32(h + 28, b->nrec);
    put32(h + 32, 0);
    uint32_t c = crc_update(0xFFFFFFFFu, h, 36);
    c = crc_update(c, h + VT_BLOCK_HEADER_LEN, b->pos) ^ 0xFFFFFFFFu;
    put32(h + 36, c);
    int saved = errno;
    struct stat st;
    if (fstat(g_fd, &st) != 0 || st.st_dev != g_dev || st.st_ino != g_ino) {
        /* closed, or its number reused by the application: never write into someone else's file */
        errno = saved;
        vt_fail("the VTRACE_OUT descriptor was closed or replaced by the application", 0);
        g_fd = -1;
        b->pos = 0;
        b->nrec = 0;
        return;
    }
    uint64_t len = VT_BLOCK_HEADER_LEN + (uint64_t)b->pos;
    uint64_t end = g_max_bytes ? atomic_fetch_add(&g_reserved, len) + len : 0;
    if (g_max_bytes && (end > g_max_bytes || (uint64_t)st.st_size + len > g_max_bytes)) {
        /* The trace stays readable (whole blocks only); the rest of the run is not traced. */
        errno = saved;
        vt_fail("the trace reached VTRACE_MAX_BYTES", 0);
        b->pos = 0;
        b->nrec = 0;
        return;
    }
    int err = write_all(h, VT_BLOCK_HEADER_LEN + (size_t)b->pos);
    errno = saved;
    if (err) vt_fail("cannot write a block to VTRACE_OUT", err);
    b->seq++;
    b->pos = 0;
    b->nrec = 0;
}

/* Flushes every thread's pending records. close: mark them CLOSED (the process is ending; later
 * records of those threads are dropped). A buffer whose owner is appending at this instant is
 * skipped (its pending records are lost). Async-signal-safe. */
static void flush_all(int close) {
    unsigned n = atomic_load(&g_nbufs);
    if (n > MAX_BUFS) n = MAX_BUFS;
    for (unsigned i = 0; i < n; i++) {
        struct vt_buf *b = atomic_load(&g_bufs[i]);
        int idle = BUF_IDLE;
        if (!b || !atomic_compare_exchange_strong(&b->state, &idle, BUF_BUSY)) continue;
        flush_buf(b);
        atomic_store(&b->state, close ? BUF_CLOSED : BUF_IDLE);
    }
}

static struct vt_buf *buf_get(void) {
    unsigned n = atomic_load(&g_nbufs);
    for (unsigned i = 0; i < n && i < MAX_BUFS; i++) {
        struct vt_buf *b = atomic_load(&g_bufs[i]);
        int free_ = BUF_FREE;
        if (b && atomic_compare_exchange_strong(&b->state, &free_, BUF_BUSY)) return b;
    }
    void *m = mmap(NULL, sizeof(struct vt_buf), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    struct vt_buf *b = m;
    atomic_store(&b->state, BUF_BUSY);
    unsigned i = atomic_fetch_add(&g_nbufs, 1);
    if (i < MAX_BUFS) atomic_store(&g_bufs[i], b);
    /* else: not flushed by others at exit; its owner still flushes it when full and at exit */
    return b;
}

static void emit_thread_start(uint32_t parent, uint32_t seq);

/* Gives the calling thread a buffer (state IDLE) and, with_start, records its start. */
static struct vt_buf *attach(uint32_t parent, uint32_t seq, int with_start) {
    struct vt_buf *b = buf_get();
    if (!b) {
        vt_fail("cannot map a thread buffer", errno);
        return NULL;
    }
    b->tid = gettid_();
    b->seq = 0;
    b->nrec = 0;
    b->pos = 0;
    atomic_store(&b->exited, 0);
    atomic_store(&b->state, BUF_IDLE);
    t_buf = b;
    if (b->tid != g_pid) pthread_setspecific(g_key, b); /* thread_exit runs at the thread's end */
    if (with_start) emit_thread_start(parent, seq);
    return b;
}

/* Appends one record (rec[0..n], its length field already set) to buffer b, which the caller
 * holds BUSY; a full buffer is written first. */
static void append(struct vt_buf *b, const unsigned char *rec, size_t n) {
    if (b->pos + n > VT_PAYLOAD_MAX) flush_buf(b);
    memcpy(b->block + VT_BLOCK_HEADER_LEN + b->pos, rec, n);
    b->pos += (uint32_t)n;
    b->nrec++;
}

/* Appends one record (rec[0..n], its length field already set) to the calling thread's buffer. */
static void emit(const unsigned char *rec, size_t n) {
    struct vt_buf *b = t_buf;
    if (UNLIKELY(!b)) {
        b = attach(0, VT_SEQ_UNKNOWN, 1); /* a thread the tracer did not see start */
        if (!b) return;
    }
    int idle = BUF_IDLE;
    if (UNLIKELY(!atomic_compare_exchange_strong_explicit(&b->state, &idle, BUF_BUSY, memory_order_acquire,
                                                          memory_order_relaxed)))
        return; /* CLOSED at exit */
    append(b, rec, n);
    atomic_store_explicit(&b->state, BUF_IDLE, memory_order_release);
}

/* ---------------------------------------------------------------- records */

struct rec {
    unsigned char b[64 + VT_CMDLINE_MAX + VT_RELEASE_LEN + VT_LIBC_LEN];
    size_t n;
};

static inline void r_begin(struct rec *r, int kind, int flags, uint64_t t) {
    r->b[0] = (unsigned char)kind;
    r->b[1] = (unsigned char)flags;
    put64(r->b + 4, t - g_base);
    r->n = VT_REC_HEADER_LEN;
}
static inline void r_u32(struct rec *r, uint32_t v) { put32(r->b + r->n, v); r->n += 4; }
static inline void r_u64(struct rec *r, uint64_t v) { put64(r->b + r->n, v); r->n += 8; }
static inline void r_ptr(struct rec *r, const void *p) { r_u64(r, (uint64_t)(uintptr_t)p); }
static inline void r_emit(struct rec *r) {
    put16(r->b + 2, (uint16_t)r->n);
    emit(r->b, r->n);
}
/* Header plus the thread's CPU time (every kind except the allocator's). */
/* The CPU time is a system call (no vDSO for CPU-time clocks, ~0.2-0.6 µs), so it is measured
 * only when VTRACE_CPU_GAP_NS (default 10 µs) of wall time passed since the thread's last
 * measurement, or the call itself waited that long; otherwise it is extrapolated as if the thread
 * computed all along, and the record has VT_F_CPU_EST. VTRACE_CPU_GAP_NS=0 measures always. */
static uint64_t g_cpu_gap = 10000;
static TLS uint64_t t_cpu_wall, t_cpu_val;

static inline void r_begin_cw(struct rec *r, int kind, int flags, uint64_t t, uint64_t waited) {
    uint64_t c;
    if (t - t_cpu_wall >= g_cpu_gap || waited >= g_cpu_gap || t_cpu_wall == 0) {
        c = cpu_now();
        t_cpu_wall = t;
        t_cpu_val = c;
    } else {
        c = t_cpu_val + (t - t_cpu_wall);
        flags |= VT_F_CPU_EST;
    }
    r_begin(r, kind, flags, t);
    r_u64(r, c);
}
static inline void r_begin_c(struct rec *r, int kind, int flags, uint64_t t) { r_begin_cw(r, kind, flags, t, 0); }

static void emit_thread_start(uint32_t parent, uint32_t seq) {
    struct rec r;
    r_begin_cw(&r, VT_THREAD_START, 0, now(), UINT64_MAX);
    r_u32(&r, t_buf->tid);
    r_u32(&r, parent);
    r_u32(&r, seq);
    r_u32(&r, 0);
    r_u64(&r, (uint64_t)pthread_self());
    r_emit(&r);
}

static void emit_process_start(int origin) {
    struct rec r;
    r_begin_cw(&r, VT_PROCESS_START, 0, g_base, UINT64_MAX);
    r_u32(&r, g_pid);
    r_u32(&r, (uint32_t)getppid());
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    r_u32(&r, ncpu > 0 ? (uint32_t)ncpu : 0);
    put16(r.b + r.n, (uint16_t)origin);
    size_t lenpos = r.n + 2;
    r.n += 4;
    r_u64(&r, g_base);
    r_u64(&r, clock_ns(CLOCK_REALTIME));
    size_t len = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, r.b + r.n, VT_CMDLINE_MAX);
        len = k > 0 ? (size_t)k : 0;
        close(fd);
    }
    put16(r.b + lenpos, (uint16_t)len);
    r.n += len;
    /* The kernel it runs on: the replay of the traced machine follows that kernel's rules. */
    struct utsname u;
    memset(r.b + r.n, 0, VT_RELEASE_LEN);
    if (uname(&u) == 0)
        memcpy(r.b + r.n, u.release, strnlen(u.release, VT_RELEASE_LEN - 1));
    r.n += VT_RELEASE_LEN;
    /* And its C library, whose malloc the replay models (arena trimming, the tcache). */
    const char *libc = gnu_get_libc_version();
    memset(r.b + r.n, 0, VT_LIBC_LEN);
    memcpy(r.b + r.n, libc, strnlen(libc, VT_LIBC_LEN - 1));
    r.n += VT_LIBC_LEN;
    r_emit(&r);
}

static void emit_simple(int kind) {
    struct rec r;
    r_begin_cw(&r, kind, 0, now(), UINT64_MAX);
    r_emit(&r);
}

/* A thread's CPU time and time waiting for a CPU (run_delay), from a schedstat file
 * (/proc/thread-self/schedstat or /proc/self/task/TID/schedstat; kernel CONFIG_SCHED_INFO):
 * 1 when both were read. Raw calls only: no allocation, nothing traced. */
static int read_schedstat(const char *path, uint64_t *cpu, uint64_t *delay) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[128];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    char *end = NULL, *end2 = NULL;
    *cpu = strtoull(text, &end, 10);
    if (!end || end == text || *end != ' ') return 0;
    *delay = strtoull(end + 1, &end2, 10);
    return end2 != end + 1;
}

/* The calling thread's time waiting for a CPU, its context switches and its minor page faults
 * (getrusage RUSAGE_THREAD): what lets the reader split the thread's off-CPU time into time
 * held off a CPU and time blocked in calls the tracer does not see, and bound the page faults
 * the replay's heap model gives the thread by the faults the kernel counted. */
static void emit_thread_stats(void) {
    uint64_t cpu = 0, delay = 0;
    int known = read_schedstat("/proc/thread-self/schedstat", &cpu, &delay);
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    getrusage(RUSAGE_THREAD, &ru);
    struct rec r;
    r_begin_cw(&r, VT_THREAD_STATS, 0, now(), UINT64_MAX);
    r_u64(&r, known ? delay : VT_HOLD_UNKNOWN);
    r_u64(&r, (uint64_t)ru.ru_nvcsw);
    r_u64(&r, (uint64_t)ru.ru_nivcsw);
    r_u64(&r, (uint64_t)ru.ru_minflt);
    r_emit(&r);
}

/* At the process's exit, the threads that have not exited (worker pools such as libgomp's,
 * which the exit kills) would end their trace at their last traced call, losing the CPU time
 * they spent since. For each of them, a THREAD_STATS record with its CPU time and run_delay
 * read from /proc/self/task/TID/schedstat goes into its own buffer (claimed as the exit
 * flush claims it; a buffer its owner is appending to at this instant is skipped). */
static void stats_of_live_threads(uint32_t self) {
    unsigned n = atomic_load(&g_nbufs);
    if (n > MAX_BUFS) n = MAX_BUFS;
    for (unsigned i = 0; i < n; i++) {
        struct vt_buf *b = atomic_load(&g_bufs[i]);
        int idle = BUF_IDLE;
        if (!b || b->tid == self || atomic_load(&b->exited)) continue;
        if (!atomic_compare_exchange_strong(&b->state, &idle, BUF_BUSY)) continue;
        if (atomic_load(&b->exited)) { /* it recorded its exit meanwhile */
            atomic_store(&b->state, BUF_IDLE);
            continue;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%u/schedstat", (unsigned)b->tid);
        uint64_t cpu = 0, delay = 0;
        if (read_schedstat(path, &cpu, &delay)) {
            struct rec r;
            r_begin(&r, VT_THREAD_STATS, 0, now());
            r_u64(&r, cpu);
            r_u64(&r, delay);
            r_u64(&r, VT_HOLD_UNKNOWN); /* context switches and faults: not read for another thread */
            r_u64(&r, VT_HOLD_UNKNOWN);
            r_u64(&r, VT_HOLD_UNKNOWN);
            put16(r.b + 2, (uint16_t)r.n);
            append(b, r.b, r.n);
        }
        atomic_store(&b->state, BUF_IDLE);
    }
}

/* The thread's statistics and its exit record. */
static void emit_exit(void) {
    if (t_buf) atomic_store(&t_buf->exited, 1);
    emit_thread_stats();
    emit_simple(VT_THREAD_EXIT);
}

/* Records the thread's exit and hands its buffer back (key destructor for threads other than
 * the main one; also called by the exit paths). */
static void thread_exit(void *unused) {
    (void)unused;
    struct vt_buf *b = t_buf;
    if (!b || t_dead) return;
    t_guard++;
    if (atomic_load(&g_enabled)) emit_exit();
    int idle = BUF_IDLE;
    if (atomic_compare_exchange_strong(&b->state, &idle, BUF_BUSY)) {
        flush_buf(b);
        atomic_store(&b->state, BUF_FREE);
    }
    t_buf = NULL;
    t_dead = 1;
    t_guard--;
}

/* ---------------------------------------------------------------- held locks, join table */

static inline void held_push(const void *a, uint64_t t) {
    if (t_nheld < MAX_HELD) {
        t_held[t_nheld].addr = a;
        t_held[t_nheld].t = t;
        t_nheld++;
    }
}
/* Removes the most recent acquisition of a and returns the hold time (VT_HOLD_UNKNOWN if the
 * tracer did not see it). */
static inline uint64_t held_pop(const void *a, uint64_t t) {
    for (int i = t_nheld - 1; i >= 0; i--) {
        if (t_held[i].addr == a) {
            uint64_t h = t - t_held[i].t;
            t_held[i] = t_held[--t_nheld];
            return h;
        }
    }
    return VT_HOLD_UNKNOWN;
}

/* pthread_t -> tid of joinable threads, filled by the child at start, emptied by the join. */
#define JT_SIZE 4096
#define JT_TOMB ((uintptr_t)1)
static struct {
    _Atomic uintptr_t h;
    _Atomic uint32_t tid;
} g_jt[JT_SIZE];

static inline unsigned jt_hash(uintptr_t h) { return (unsigned)((h >> 12) ^ (h >> 4)) % JT_SIZE; }
static void jt_insert(uintptr_t h, uint32_t tid) {
    for (unsigned i = 0, k = jt_hash(h); i < JT_SIZE; i++, k = (k + 1) % JT_SIZE) {
        uintptr_t cur = atomic_load(&g_jt[k].h);
        if ((cur == 0 || cur == JT_TOMB) && atomic_compare_exchange_strong(&g_jt[k].h, &cur, JT_TOMB + 1)) {
            atomic_store(&g_jt[k].tid, tid);
            atomic_store(&g_jt[k].h, h);
            return;
        }
    }
}
static uint32_t jt_take(uintptr_t h) {
    for (unsigned i = 0, k = jt_hash(h); i < JT_SIZE; i++, k = (k + 1) % JT_SIZE) {
        uintptr_t cur = atomic_load(&g_jt[k].h);
        if (cur == 0) return 0;
        if (cur == h) {
            uint32_t tid = atomic_load(&g_jt[k].tid);
            atomic_store(&g_jt[k].h, JT_TOMB);
            return tid;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- process lifecycle */

/* 0: a valid header; -1: not (yet) complete; -2: not a vtrace file of this version. */
static int check_header(int fd) {
    unsigned char h[VT_HEADER_LEN];
    ssize_t k = pread(fd, h, sizeof h, 0);
    if (k < 0) return -1;
    if (memcmp(h, VT_MAGIC, k < 8 ? (size_t)k : 8) != 0) {
        vt_log("VTRACE_OUT exists and is not a vtrace file", 0);
        return -2;
    }
    if (k < (ssize_t)sizeof h) return -1;
    if (h[8] != VT_VERSION || h[9] != 0) {
        vt_log("VTRACE_OUT was written with another format version", 0);
        return -2;
    }
    return 0;
}

static void make_header(unsigned char *h) {
    memset(h, 0, VT_HEADER_LEN);
    memcpy(h, VT_MAGIC, 8);
    put16(h + 8, VT_VERSION);
    put16(h + 10, VT_HEADER_LEN);
    put32(h + 12, 0);
    put64(h + 16, clock_ns(CLOCK_REALTIME));
    put32(h + 24, (uint32_t)getpid());
    put32(h + 28, crc_update(0xFFFFFFFFu, h, 28) ^ 0xFFFFFFFFu);
}

/* Opens VTRACE_OUT for appending, creating it with its header if needed. The header is written
 * to a private temporary file created with O_EXCL and linked into place, so no process can ever
 * see (or append to) a file without its header; where link() is not supported the target is
 * created with O_EXCL and others wait for its header. */
static int open_out(const char *path) {
    for (int attempt = 0; attempt < 4; attempt++) {
        int fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
        if (fd >= 0) {
            for (int wait = 0; wait < 1000; wait++) {
                int c = check_header(fd);
                if (c == 0) return fd;
                if (c == -2) break;
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL); /* its creator is writing the header */
            }
            if (check_header(fd) != 0) vt_log("VTRACE_OUT has no valid vtrace header", 0);
            close(fd);
            return -1;
        }
        if (errno != ENOENT) {
            vt_log("cannot open VTRACE_OUT", errno);
            return -1;
        }
        unsigned char h[VT_HEADER_LEN];
        make_header(h);
        char tmp[4200];
        size_t pl = strlen(path);
        if (pl > 4000) return -1;
        memcpy(tmp, path, pl);
        const char *suffix = ".vtrace-tmp.";
        size_t sl = strlen(suffix);
        memcpy(tmp + pl, suffix, sl);
        size_t n = pl + sl;
        char num[24];
        int k = 0;
        for (uint32_t v = gettid_(); k == 0 || v; v /= 10) num[k++] = (char)('0' + v % 10);
        while (k) tmp[n++] = num[--k];
        tmp[n] = 0;
        int tfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (tfd < 0) {
            vt_log("cannot create VTRACE_OUT", errno);
            return -1;
        }
        int ok = write(tfd, h, sizeof h) == (ssize_t)sizeof h;
        close(tfd);
        if (ok && link(tmp, path) == 0) {
            unlink(tmp);
            continue; /* now open it like everyone else */
        }
        int lerr = errno;
        unlink(tmp);
        if (!ok) {
            vt_log("cannot write the VTRACE_OUT header", lerr);
            return -1;
        }
        if (lerr == EEXIST) continue;
        /* no hard links here: create in place */
        fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            vt_log("cannot create VTRACE_OUT", errno);
            return -1;
        }
        if (write(fd, h, sizeof h) != (ssize_t)sizeof h) {
            vt_log("cannot write the VTRACE_OUT header", errno);
            close(fd);
            return -1;
        }
        return fd;
    }
    vt_log("cannot open VTRACE_OUT (it keeps changing)", 0);
    return -1;
}

/* Fatal and termination signals: flush, restore the previous (default) disposition, re-raise. */
static const int g_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define NSIG_HANDLED (sizeof g_signals / sizeof g_signals[0])
static struct sigaction g_old[NSIG_HANDLED];

static void on_signal(int sig) {
    int saved = errno;
    t_guard++;
    flush_all(1);
    for (unsigned i = 0; i < NSIG_HANDLED; i++)
        if (g_signals[i] == sig) sigaction(sig, &g_old[i], NULL);
    raise(sig); /* blocked until the handler returns; then the default action runs */
    t_guard--;
    errno = saved;
}

static void install_signals(void) {
    for (unsigned i = 0; i < NSIG_HANDLED; i++) {
        struct sigaction cur;
        if (sigaction(g_signals[i], NULL, &cur) != 0) continue;
        /* only where the application relies on the default action: never change a handler or
         * an ignored signal */
        if (cur.sa_handler != SIG_DFL || (cur.sa_flags & SA_SIGINFO)) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART | SA_ONSTACK;
        g_old[i] = cur;
        sigaction(g_signals[i], &sa, NULL);
    }
}

static void at_fork_child(void) {
    if (!atomic_load(&g_enabled)) return;
    t_guard++;
    uint32_t parent_tid = t_buf ? t_buf->tid : 0;
    g_pid = (uint32_t)getpid();
    g_base = now();
    t_cpu_wall = 0; /* the child's thread CPU clock starts again */
    atomic_store(&g_seq, 1);
    memset((void *)g_jt, 0, sizeof g_jt);
    /* the other threads do not exist here, and their pending records are the parent's */
    unsigned n = atomic_load(&g_nbufs);
    for (unsigned i = 0; i < n && i < MAX_BUFS; i++) {
        struct vt_buf *b = atomic_load(&g_bufs[i]);
        if (b && b != t_buf) {
            b->pos = b->nrec = 0;
            atomic_store(&b->state, BUF_FREE);
        }
    }
    if (t_buf) {
        struct vt_buf *b = t_buf;
        b->tid = g_pid;
        b->seq = b->nrec = b->pos = 0;
        atomic_store(&b->exited, 0);
        atomic_store(&b->state, BUF_IDLE);
        emit_process_start(1);
        emit_thread_start(parent_tid, 0);
    } else if (attach(parent_tid, 0, 0)) {
        emit_process_start(1);
        emit_thread_start(parent_tid, 0);
    }
    t_guard--;
}

__attribute__((constructor(101))) static void vt_init(void) {
#define X(ret, name, params) REAL(name);
    VT_REAL_FUNCTIONS(X) /* resolved here, single-threaded, so later lazy look-ups never race */
#undef X
    const char *out = getenv("VTRACE_OUT");
    if (!out || !*out) return;
    t_guard++;
    const char *log = getenv("VTRACE_LOG");
    size_t ol = strlen(out);
    if (log && *log && strlen(log) < sizeof g_logpath) {
        memcpy(g_logpath, log, strlen(log) + 1);
    } else if (ol + 5 < sizeof g_logpath) {
        memcpy(g_logpath, out, ol);
        memcpy(g_logpath + ol, ".log", 5);
    }
    crc_init();
    const char *gap = getenv("VTRACE_CPU_GAP_NS");
    if (gap && *gap) g_cpu_gap = strtoull(gap, NULL, 10);
    const char *max = getenv("VTRACE_MAX_BYTES");
    if (max && *max) g_max_bytes = strtoull(max, NULL, 10);
    g_base = now();
    g_pid = (uint32_t)getpid();
    int fd = open_out(out);
    if (fd < 0) {
        t_guard--;
        return;
    }
    /* out of the way of the descriptors the application numbers itself (dup2 targets) */
    g_fd = fcntl(fd, F_DUPFD_CLOEXEC, 512);
    if (g_fd < 0) g_fd = fd;
    else close(fd);
    struct stat st;
    if (fstat(g_fd, &st) != 0) {
        vt_log("cannot stat VTRACE_OUT", errno);
        close(g_fd);
        g_fd = -1;
        t_guard--;
        return;
    }
    g_dev = st.st_dev;
    g_ino = st.st_ino;
    atomic_store(&g_reserved, (uint64_t)st.st_size);
    if (pthread_key_create(&g_key, thread_exit) != 0) {
        vt_log("pthread_key_create failed", 0);
        t_guard--;
        return;
    }
    pthread_atfork(NULL, NULL, at_fork_child);
    install_signals();
    atomic_store(&g_seq, 1);
    atomic_store(&g_enabled, 1);
    if (attach(0, 0, 0)) {
        emit_process_start(0);
        emit_thread_start(0, 0);
    }
    t_guard--;
}

/* Normal exit (exit(), return from main, last thread's exit): record the calling thread's exit
 * and write every pending buffer. Runs after the application's own destructors. */
__attribute__((destructor(101))) static void vt_fini(void) {
    if (!atomic_load(&g_enabled)) return;
    t_guard++;
    if (t_buf && !t_dead) emit_exit();
    stats_of_live_threads(gettid_());
    flush_all(1);
    t_guard--;
}

/* ---------------------------------------------------------------- threads */

struct start {
    void *(*fn)(void *);
    void *arg;
    uint32_t parent;
    uint32_t seq;
    int joinable;
};

static void *vt_start(void *p) {
    struct start s = *(struct start *)p;
    __libc_free(p);
    if (atomic_load(&g_enabled)) {
        t_guard++;
        if (attach(s.parent, s.seq, 1) && s.joinable) jt_insert((uintptr_t)pthread_self(), t_buf->tid);
        t_guard--;
    }
    return s.fn(s.arg);
}

EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    if (!REAL(pthread_create)) return EAGAIN;
    if (!on()) return real_pthread_create(th, attr, fn, arg);
    t_guard++;
    struct start *s = __libc_malloc(sizeof *s);
    if (!s) {
        t_guard--;
        return real_pthread_create(th, attr, fn, arg);
    }
    int detach = PTHREAD_CREATE_JOINABLE;
    if (attr) pthread_attr_getdetachstate(attr, &detach);
    s->fn = fn;
    s->arg = arg;
    s->parent = t_buf ? t_buf->tid : gettid_();
    uint32_t seq = atomic_fetch_add(&g_seq, 1);
    s->seq = seq;
    s->joinable = detach == PTHREAD_CREATE_JOINABLE;
    /* From here the child owns s (vt_start frees it, possibly before this call returns): the
     * record takes the local copy. Reading s->seq after the call read freed memory, and a
     * THREAD_CREATE with a wrong seq leaves its child unlinked (the replay then waits forever
     * for the child's start). */
    int r = real_pthread_create(th, attr, vt_start, s);
    int e = errno;
    if (r != 0) __libc_free(s);
    struct rec rr;
    r_begin_c(&rr, VT_THREAD_CREATE, 0, now());
    r_u32(&rr, seq);
    r_u32(&rr, (uint32_t)r);
    r_u64(&rr, r == 0 ? (uint64_t)*th : 0);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

EXPORT int pthread_join(pthread_t th, void **ret) {
    if (!REAL(pthread_join)) return ESRCH;
    if (!on()) return real_pthread_join(th, ret);
    t_guard++;
    uint64_t t0 = now();
    int r = real_pthread_join(th, ret);
    int e = errno;
    uint64_t t1 = now();
    struct rec rr;
    r_begin_cw(&rr, VT_THREAD_JOIN, 0, t1, t1 - t0);
    r_u32(&rr, r == 0 ? jt_take((uintptr_t)th) : 0);
    r_u32(&rr, (uint32_t)r);
    r_u64(&rr, (uint64_t)th);
    r_u64(&rr, t1 - t0);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

EXPORT int pthread_detach(pthread_t th) {
    if (!REAL(pthread_detach)) return ESRCH;
    int r = real_pthread_detach(th);
    if (r == 0 && atomic_load(&g_enabled)) jt_take((uintptr_t)th);
    return r;
}

/* ---------------------------------------------------------------- synchronisation (generated) */

/* An acquisition: wait = return - call; the record's time is the return. */
static inline int acquired(int kind, int flags, const void *a, uint64_t t0, int r) {
    int e = errno;
    uint64_t t1 = now();
    if (r == 0) held_push(a, t1);
    struct rec rr;
    r_begin_cw(&rr, kind, flags, t1, t1 - t0);
    r_ptr(&rr, a);
    r_u64(&rr, t1 - t0);
    r_u32(&rr, (uint32_t)r);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

/* A release: recorded at the call with the hold time. */
static inline void releasing(int kind, const void *a) {
    uint64_t t = now();
    struct rec rr;
    r_begin_c(&rr, kind, 0, t);
    r_ptr(&rr, a);
    r_u64(&rr, held_pop(a, t));
    r_emit(&rr);
}

#define ACQUIRE1(name, T, kind, flags, fail)                                                           \
    EXPORT int name(T *a) {                                                                            \
        if (!REAL(name)) return fail;                                                                  \
        if (!on()) return real_##name(a);                                                              \
        t_guard++;                                                                                     \
        uint64_t t0 = now();                                                                           \
        return acquired(kind, flags, (const void *)(uintptr_t)a, t0, real_##name(a));                  \
    }
#define ACQUIRE2(name, T, kind, flags, fail)                                                           \
    EXPORT int name(T *a, const struct timespec *ts) {                                                 \
        if (!REAL(name)) return fail;                                                                  \
        if (!on()) return real_##name(a, ts);                                                          \
        t_guard++;                                                                                     \
        uint64_t t0 = now();                                                                           \
        return acquired(kind, flags, (const void *)(uintptr_t)a, t0, real_##name(a, ts));              \
    }
#define RELEASE(name, T, kind, fail)                                                                   \
    EXPORT int name(T *a) {                                                                            \
        if (!REAL(name)) return fail;                                                                  \
        if (!on()) return real_##name(a);                                                              \
        t_guard++;                                                                                     \
        int e = errno;                                                                                 \
        releasing(kind, (const void *)(uintptr_t)a);                                                   \
        errno = e;                                                                                     \
        int r = real_##name(a);                                                                        \
        t_guard--;                                                                                     \
        return r;                                                                                      \
    }

ACQUIRE1(pthread_mutex_lock, pthread_mutex_t, VT_MUTEX_LOCK, 0, EINVAL)
ACQUIRE1(pthread_mutex_trylock, pthread_mutex_t, VT_MUTEX_LOCK, VT_F_TRY, EINVAL)
ACQUIRE2(pthread_mutex_timedlock, pthread_mutex_t, VT_MUTEX_LOCK, VT_F_TIMED, EINVAL)
RELEASE(pthread_mutex_unlock, pthread_mutex_t, VT_MUTEX_UNLOCK, EINVAL)
ACQUIRE1(pthread_spin_lock, pthread_spinlock_t, VT_SPIN_LOCK, 0, EINVAL)
ACQUIRE1(pthread_spin_trylock, pthread_spinlock_t, VT_SPIN_LOCK, VT_F_TRY, EINVAL)
RELEASE(pthread_spin_unlock, pthread_spinlock_t, VT_SPIN_UNLOCK, EINVAL)
ACQUIRE1(pthread_rwlock_rdlock, pthread_rwlock_t, VT_RW_RDLOCK, 0, EINVAL)
ACQUIRE1(pthread_rwlock_wrlock, pthread_rwlock_t, VT_RW_WRLOCK, 0, EINVAL)
ACQUIRE1(pthread_rwlock_tryrdlock, pthread_rwlock_t, VT_RW_RDLOCK, VT_F_TRY, EINVAL)
ACQUIRE1(pthread_rwlock_trywrlock, pthread_rwlock_t, VT_RW_WRLOCK, VT_F_TRY, EINVAL)
ACQUIRE2(pthread_rwlock_timedrdlock, pthread_rwlock_t, VT_RW_RDLOCK, VT_F_TIMED, EINVAL)
ACQUIRE2(pthread_rwlock_timedwrlock, pthread_rwlock_t, VT_RW_WRLOCK, VT_F_TIMED, EINVAL)
RELEASE(pthread_rwlock_unlock, pthread_rwlock_t, VT_RW_UNLOCK, EINVAL)
ACQUIRE1(pthread_barrier_wait, pthread_barrier_t, VT_BARRIER_WAIT, 0, EINVAL)

EXPORT int pthread_barrier_init(pthread_barrier_t *b, const pthread_barrierattr_t *attr, unsigned count) {
    if (!REAL(pthread_barrier_init)) return EINVAL;
    if (!on()) return real_pthread_barrier_init(b, attr, count);
    t_guard++;
    int r = real_pthread_barrier_init(b, attr, count);
    int e = errno;
    struct rec rr;
    r_begin_c(&rr, VT_BARRIER_INIT, 0, now());
    r_ptr(&rr, b);
    r_u32(&rr, count);
    r_u32(&rr, (uint32_t)r);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

/* A condition wait releases the mutex and holds it again on return: the mutex's hold restarts. */
static int cond_waited(pthread_cond_t *c, pthread_mutex_t *m, int flags, uint64_t t0, int r) {
    int e = errno;
    uint64_t t1 = now();
    held_pop(m, t1);
    held_push(m, t1);
    struct rec rr;
    r_begin_cw(&rr, VT_COND_WAIT, flags, t1, t1 - t0);
    r_ptr(&rr, c);
    r_ptr(&rr, m);
    r_u64(&rr, t1 - t0);
    r_u32(&rr, (uint32_t)r);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (!REAL(pthread_cond_wait)) return EINVAL;
    if (!on()) return real_pthread_cond_wait(c, m);
    t_guard++;
    uint64_t t0 = now();
    return cond_waited(c, m, 0, t0, real_pthread_cond_wait(c, m));
}

EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *ts) {
    if (!REAL(pthread_cond_timedwait)) return EINVAL;
    if (!on()) return real_pthread_cond_timedwait(c, m, ts);
    t_guard++;
    uint64_t t0 = now();
    return cond_waited(c, m, VT_F_TIMED, t0, real_pthread_cond_timedwait(c, m, ts));
}

#define SIGNAL(name, kind)                                                                             \
    EXPORT int name(pthread_cond_t *c) {                                                               \
        if (!REAL(name)) return EINVAL;                                                                \
        if (!on()) return real_##name(c);                                                              \
        t_guard++;                                                                                     \
        int r = real_##name(c);                                                                        \
        int e = errno;                                                                                 \
        struct rec rr;                                                                                 \
        r_begin_c(&rr, kind, 0, now());                                                                \
        r_ptr(&rr, c);                                                                                 \
        r_emit(&rr);                                                                                   \
        errno = e;                                                                                     \
        t_guard--;                                                                                     \
        return r;                                                                                      \
    }
SIGNAL(pthread_cond_signal, VT_COND_SIGNAL)
SIGNAL(pthread_cond_broadcast, VT_COND_BROADCAST)

/* ---------------------------------------------------------------- raw futex calls */

/* Threading libraries that do not build on pthreads call futex(2) through libc's syscall():
 * GLib (gthread-posix.c), Rust's std (sys/pal/unix/futex.rs), and others. Every futex call made
 * that way is one record, whatever its operation: the address, the operation and value as
 * passed, the time in the call and its result (0 or the number woken; -errno on failure).
 * glibc's own pthread functions make their futex calls inline, not through syscall(): they are
 * not recorded twice. A program that makes inline system calls of its own (libgomp on x86-64)
 * stays invisible here; docs/bridge.md says how that shows. */
EXPORT long syscall(long number, ...) {
    va_list ap;
    va_start(ap, number);
    /* As glibc's own syscall(): six argument registers, whatever the call uses. */
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    if (!REAL(syscall)) return errno = ENOSYS, -1;
    if (number != SYS_futex || !on()) return real_syscall(number, a1, a2, a3, a4, a5, a6);
    t_guard++;
    uint64_t t0 = now();
    long r = real_syscall(number, a1, a2, a3, a4, a5, a6);
    int e = errno;
    uint64_t t1 = now();
    /* FUTEX_WAIT, FUTEX_WAIT_BITSET with a timeout (the fourth argument) are timed. */
    int cmd = (int)a2 & 0x7f;
    int timed = (cmd == 0 || cmd == 9) && a4 != 0;
    struct rec rr;
    r_begin_cw(&rr, VT_FUTEX, timed ? VT_F_TIMED : 0, t1, t1 - t0);
    r_u64(&rr, (uint64_t)a1);
    r_u32(&rr, (uint32_t)a2);
    r_u32(&rr, (uint32_t)a3);
    r_u64(&rr, t1 - t0);
    r_u32(&rr, (uint32_t)(r >= 0 ? (int32_t)(r > INT32_MAX ? INT32_MAX : r) : -e));
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

/* ---------------------------------------------------------------- allocator (no CPU time) */

static inline void mem_rec(int kind, uint64_t a, uint64_t b, uint64_t c, int nfields) {
    int e = errno;
    struct rec rr;
    r_begin(&rr, kind, 0, now());
    r_u64(&rr, a);
    if (nfields > 1) r_u64(&rr, b);
    if (nfields > 2) r_u64(&rr, c);
    r_emit(&rr);
    errno = e;
}

EXPORT void *malloc(size_t n) {
    if (!on()) return __libc_malloc(n);
    t_guard++;
    void *p = __libc_malloc(n);
    mem_rec(VT_MALLOC, n, (uintptr_t)p, 0, 2);
    t_guard--;
    return p;
}

EXPORT void free(void *p) {
    if (!p || !on()) {
        __libc_free(p);
        return;
    }
    t_guard++;
    __libc_free(p);
    mem_rec(VT_FREE, (uintptr_t)p, 0, 0, 1);
    t_guard--;
}

EXPORT void *calloc(size_t k, size_t n) {
    if (!on()) return __libc_calloc(k, n);
    t_guard++;
    void *p = __libc_calloc(k, n);
    mem_rec(VT_CALLOC, k, n, (uintptr_t)p, 3);
    t_guard--;
    return p;
}

EXPORT void *realloc(void *old, size_t n) {
    if (!on()) return __libc_realloc(old, n);
    t_guard++;
    void *p = __libc_realloc(old, n);
    mem_rec(VT_REALLOC, (uintptr_t)old, n, (uintptr_t)p, 3);
    t_guard--;
    return p;
}

EXPORT void *memalign(size_t align, size_t n) {
    if (!on()) return __libc_memalign(align, n);
    t_guard++;
    void *p = __libc_memalign(align, n);
    mem_rec(VT_MEMALIGN, align, n, (uintptr_t)p, 3);
    t_guard--;
    return p;
}

EXPORT void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    int e = errno;
    void *p = memalign(align, n);
    if (!p) {
        errno = e;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

/* ---------------------------------------------------------------- memory mappings */

static void *mmap_common(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (!REAL(mmap)) {
        errno = ENOSYS;
        return MAP_FAILED;
    }
    if (!on()) return real_mmap(addr, len, prot, flags, fd, off);
    t_guard++;
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    int e = errno;
    struct rec rr;
    r_begin_c(&rr, VT_MMAP, 0, now());
    r_ptr(&rr, p);
    r_u64(&rr, len);
    r_u32(&rr, (uint32_t)prot);
    r_u32(&rr, (uint32_t)flags);
    r_u32(&rr, (uint32_t)fd);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return p;
}
EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap_common(addr, len, prot, flags, fd, off);
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap_common(addr, len, prot, flags, fd, off);
}

static int mm_done(int kind, void *a, size_t len, int arg, int has_arg, int r) {
    int e = errno;
    struct rec rr;
    r_begin_c(&rr, kind, 0, now());
    r_ptr(&rr, a);
    r_u64(&rr, len);
    if (has_arg) r_u32(&rr, (uint32_t)arg);
    r_u32(&rr, (uint32_t)r);
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

EXPORT int munmap(void *a, size_t len) {
    if (!REAL(munmap)) return errno = ENOSYS, -1;
    if (!on()) return real_munmap(a, len);
    t_guard++;
    return mm_done(VT_MUNMAP, a, len, 0, 0, real_munmap(a, len));
}
EXPORT int madvise(void *a, size_t len, int advice) {
    if (!REAL(madvise)) return errno = ENOSYS, -1;
    if (!on()) return real_madvise(a, len, advice);
    t_guard++;
    return mm_done(VT_MADVISE, a, len, advice, 1, real_madvise(a, len, advice));
}
EXPORT int mprotect(void *a, size_t len, int prot) {
    if (!REAL(mprotect)) return errno = ENOSYS, -1;
    if (!on()) return real_mprotect(a, len, prot);
    t_guard++;
    return mm_done(VT_MPROTECT, a, len, prot, 1, real_mprotect(a, len, prot));
}

/* ---------------------------------------------------------------- exec and _exit */

/* Before replacing the image: record it and write every pending buffer (they would be lost). */
/* A vfork child shares the parent's memory (and buffers): it records nothing. */
static inline int vforked(void) { return (uint32_t)getpid() != g_pid; }

static void before_exec(void) {
    if (!on() || vforked()) return;
    t_guard++;
    int e = errno;
    struct rec rr;
    r_begin_c(&rr, VT_EXEC, 0, now());
    r_u32(&rr, 0);
    r_emit(&rr);
    flush_all(0);
    errno = e;
    t_guard--;
}
static int after_exec(int r) {
    if (!on() || vforked()) return r;
    t_guard++;
    int e = errno;
    struct rec rr;
    r_begin_c(&rr, VT_EXEC, 0, now());
    r_u32(&rr, (uint32_t)(e ? e : -1));
    r_emit(&rr);
    errno = e;
    t_guard--;
    return r;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    if (!REAL(execve)) return errno = ENOSYS, -1;
    before_exec();
    return after_exec(real_execve(path, argv, envp));
}
EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (!REAL(execvpe)) return errno = ENOSYS, -1;
    before_exec();
    return after_exec(real_execvpe(file, argv, envp));
}
EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    if (!REAL(fexecve)) return errno = ENOSYS, -1;
    before_exec();
    return after_exec(real_fexecve(fd, argv, envp));
}
EXPORT int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }
EXPORT int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* execl, execlp, execle: collect the variadic arguments, then the vector forms above. */
#define MAX_EXECL_ARGS 4096
#define COLLECT_ARGS(arg0, ap, argv, n, ok)                                                           \
    char *argv[MAX_EXECL_ARGS];                                                                        \
    size_t n = 0;                                                                                      \
    int ok = 1;                                                                                        \
    argv[n++] = (char *)arg0;                                                                          \
    while (argv[n - 1] != NULL) {                                                                      \
        if (n == MAX_EXECL_ARGS) {                                                                     \
            ok = 0;                                                                                    \
            break;                                                                                     \
        }                                                                                              \
        argv[n++] = va_arg(ap, char *);                                                                \
    }

EXPORT int execl(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(arg0, ap, argv, n, ok)
    va_end(ap);
    (void)n;
    if (!ok) return errno = E2BIG, -1;
    return execve(path, argv, environ);
}
EXPORT int execlp(const char *file, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(arg0, ap, argv, n, ok)
    va_end(ap);
    (void)n;
    if (!ok) return errno = E2BIG, -1;
    return execvpe(file, argv, environ);
}
EXPORT int execle(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(arg0, ap, argv, n, ok)
    char *const *envp = ok ? va_arg(ap, char *const *) : NULL;
    va_end(ap);
    (void)n;
    if (!ok) return errno = E2BIG, -1;
    return execve(path, argv, envp);
}

/* _exit skips destructors (fork children use it): write what is pending first. */
static void before_exit(void) {
    if (!atomic_load(&g_enabled) || vforked()) return;
    t_guard++;
    if (t_buf && !t_dead) emit_exit();
    stats_of_live_threads(gettid_());
    flush_all(1);
    t_guard--;
}
EXPORT void _exit(int status) {
    before_exit();
    if (REAL(_exit)) real__exit(status);
    for (;;) syscall(SYS_exit_group, status);
}
EXPORT void _Exit(int status) { _exit(status); }
