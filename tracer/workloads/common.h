/*
 * common.h - shared helpers for the native vcpulab workloads (the .c files of tracer/workloads).
 *
 * Every program in this directory is a small pthreads program that reproduces one of the
 * pathologies of TPDS §2, §6 and DIS ch.2 (docs/references.md) on a real machine.  They share:
 *
 *   - option parsing: `--name value` or `--name=value`, `--help`; an unknown option or a bad
 *     value prints ONE line `PROG: --opt: expected ... (got '...')` on stderr and exits 2;
 *   - a deterministic unit of work, `work(iters)`: a fixed number of iterations of a
 *     dependent xorshift chain the compiler cannot remove.  Because the amount of work is fixed
 *     (never "spin until a deadline"), preemption stretches wall time exactly the way it
 *     stretches real computation;
 *   - a one-time calibration (about 20 ms on the main thread) that converts `--work-us` into
 *     iterations; `--work-iters` bypasses it so that two runs compared with each other do
 *     exactly the same work;
 *   - timing, resource usage (getrusage) and the single JSON summary line printed on stdout.
 *
 * Header-only: every function is `static inline`, so a program that does not use one gets no
 * unused-function warning.
 */
#ifndef VCPULAB_WORKLOADS_COMMON_H
#define VCPULAB_WORKLOADS_COMMON_H

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Name used in messages and in the JSON line; set by opts_parse(). */
static const char *g_prog = "workload";

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* A runtime failure (not a usage error): one line on stderr, exit 1. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", g_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* pthread_* return an error number instead of setting errno. */
static inline void check_pthread(int rc, const char *what)
{
    if (rc != 0)
        die("%s: %s", what, strerror(rc));
}

/* ------------------------------------------------------------------------------------------ */
/* CPU relax hint for busy-wait loops                                                          */
/* ------------------------------------------------------------------------------------------ */

/* PAUSE on x86 (what kernel spinlocks use and what pause-loop exiting watches, TPDS §2),
 * YIELD on aarch64, nothing elsewhere.  It never gives up the CPU: the thread keeps spinning. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Time                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static inline double ts_seconds(const struct timespec *t)
{
    return (double)t->tv_sec + (double)t->tv_nsec * 1e-9;
}

static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_seconds(&t);
}

/* CPU time consumed so far by the calling thread. */
static inline double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return ts_seconds(&t);
}

/* CPUs this process may run on (its affinity mask, e.g. as restricted by taskset). */
static inline int online_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Deterministic work                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* `iters` steps of a 64-bit xorshift: each step depends on the previous one (no vectorisation,
 * no closed form), and the empty asm statement makes the result "used" without a shared store,
 * so the loop cannot be removed and threads do not bounce a sink cache line.  About 2 ns per
 * iteration on a current x86 core; the real rate is measured by calibrate_iters_per_us(). */
static inline uint64_t work(uint64_t iters)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ iters;
    for (uint64_t i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    __asm__ volatile("" : : "r"(x));
    return x;
}

/* Iterations of work() per microsecond on one thread of this machine: the best of four windows
 * of 5 ms of this thread's CPU time. CPU time, not wall time: on a busy machine a window of wall
 * time includes the time other processes held the thread off its CPU, which would lower the
 * rate and so the work a run does (its CPU time would then depend on the machine's load). The
 * best of four, so that a window disturbed by a cache-cold start or an interrupt does not. */
static inline double calibrate_iters_per_us(void)
{
    work(200000); /* warm up: frequency ramp, page in the code */
    double best = 0.0;
    for (int w = 0; w < 4; w++) {
        uint64_t done = 0;
        double t0 = thread_cpu_s(), el;
        do {
            work(20000);
            done += 20000;
            el = thread_cpu_s() - t0;
        } while (el < 0.005);
        double rate = (double)done / (el * 1e6);
        if (rate > best)
            best = rate;
    }
    return best > 0.0 ? best : 1.0;
}

/* Iterations of work() standing for `us` microseconds, unless the user gave the iteration count
 * directly (`iters_given`), in which case no calibration runs and *ipu is set to 0. */
static inline uint64_t resolve_work_iters(long long us, long long iters, int iters_given, double *ipu)
{
    if (iters_given) {
        *ipu = 0.0;
        return (uint64_t)iters;
    }
    *ipu = calibrate_iters_per_us();
    return (uint64_t)((double)us * *ipu + 0.5);
}

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const char *name;    /* without the leading "--" */
    const char *metavar; /* shown in --help, e.g. "N" */
    const char *help;    /* one line */
    long long *ival;     /* integer option: destination ... */
    long long min, max;  /* ... and inclusive range */
    const char **sval;   /* choice option: destination */
    const char *choices; /* "a|b|c" */
    int *given;          /* optional: set to 1 when the option appears */
} opt_t;

#define OPT_INT(n, mv, h, p, lo, hi) {(n), (mv), (h), (p), (lo), (hi), NULL, NULL, NULL}
#define OPT_INT_G(n, mv, h, p, lo, hi, g) {(n), (mv), (h), (p), (lo), (hi), NULL, NULL, (g)}
#define OPT_CHOICE(n, h, p, ch) {(n), (ch), (h), NULL, 0, 0, (p), (ch), NULL}

__attribute__((noreturn)) static inline void opt_fail(const char *opt, const char *expected, const char *got)
{
    fprintf(stderr, "%s: %s: expected %s (got '%s')\n", g_prog, opt, expected, got);
    exit(2);
}

static inline void opts_usage(const char *summary, const opt_t *opts, int n)
{
    printf("usage: %s [options]\n\n%s\n\noptions (--name value or --name=value):\n", g_prog, summary);
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s %s", opts[i].name, opts[i].metavar);
        if (opts[i].ival)
            printf("  %-28s %s (default %lld)\n", left, opts[i].help, *opts[i].ival);
        else
            printf("  %-28s %s (default %s)\n", left, opts[i].help, *opts[i].sval);
    }
    printf("  %-28s %s\n", "--help", "print this help and exit");
    printf("\nPrints one JSON line on stdout. Exit status: 0 ok, 1 runtime failure, 2 bad usage.\n");
}

/* If `word` is one of the '|'-separated `choices`, a (heap, never freed) copy of it; else NULL. */
static inline const char *opt_match_choice(const char *choices, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = choices;;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == wl && strncmp(p, word, l) == 0) {
            char *s = malloc(l + 1);
            if (!s)
                die("out of memory");
            memcpy(s, p, l);
            s[l] = '\0';
            return s;
        }
        if (!e)
            return NULL;
        p = e + 1;
    }
}

static inline void opt_set(const opt_t *o, const char *optname, const char *val)
{
    char expected[320];
    if (o->ival) {
        snprintf(expected, sizeof expected, "an integer in [%lld, %lld]", o->min, o->max);
        char *end = NULL;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (*val == '\0' || errno != 0 || end == val || *end != '\0' || v < o->min || v > o->max)
            opt_fail(optname, expected, val);
        *o->ival = v;
    } else {
        snprintf(expected, sizeof expected, "one of %s", o->choices);
        const char *c = opt_match_choice(o->choices, val);
        if (!c)
            opt_fail(optname, expected, val);
        *o->sval = c;
    }
    if (o->given)
        *o->given = 1;
}

/* Parse argv against `opts`; `--help`/`-h` prints usage and exits 0. */
static inline void opts_parse(int argc, char **argv, const char *prog, const char *summary, const opt_t *opts, int n)
{
    g_prog = prog;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            opts_usage(summary, opts, n);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            opt_fail(arg, "an option of the form --name value (see --help)", arg);
        char optname[128];
        const char *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof optname)
            nl = sizeof optname - 1;
        memcpy(optname, arg, nl);
        optname[nl] = '\0';
        const opt_t *o = NULL;
        for (int k = 0; k < n; k++)
            if (strcmp(optname + 2, opts[k].name) == 0)
                o = &opts[k];
        if (!o)
            opt_fail(optname, "a known option (see --help)", arg);
        const char *val;
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            val = "";
        opt_set(o, optname, val);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Threads                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static inline void start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    check_pthread(pthread_create(t, NULL, fn, arg), "pthread_create");
}

static inline void join_thread(pthread_t t)
{
    check_pthread(pthread_join(t, NULL), "pthread_join");
}

static inline void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p)
        die("out of memory (%zu x %zu bytes)", n, sz);
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Measurement window and the JSON summary line                                                */
/* ------------------------------------------------------------------------------------------ */

/* Process-wide counters at the start of the measured section. */
typedef struct {
    double t0;
    struct rusage ru;
} measure_t;

static inline void measure_start(measure_t *m)
{
    getrusage(RUSAGE_SELF, &m->ru);
    m->t0 = now_s();
}

/* Sum of the "TLB shootdowns" row of /proc/interrupts over all CPUs (system-wide; x86 only),
 * or -1 when it cannot be read. */
static inline long long read_tlb_shootdowns(void)
{
    FILE *f = fopen("/proc/interrupts", "r");
    if (!f)
        return -1;
    char line[8192];
    long long total = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ')
            p++;
        if (strncmp(p, "TLB:", 4) != 0)
            continue;
        p += 4;
        total = 0;
        for (;;) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p)
                break;
            total += v;
            p = end;
        }
        break;
    }
    fclose(f);
    return total;
}

/* Writes `{"k": v, ...}` on stdout, one key at a time, in call order. */
typedef struct {
    int n;
} json_t;

static inline void json_key(json_t *j, const char *k)
{
    printf(j->n++ ? ", \"%s\": " : "{\"%s\": ", k);
}

static inline void json_int(json_t *j, const char *k, long long v)
{
    json_key(j, k);
    printf("%lld", v);
}

static inline void json_num(json_t *j, const char *k, double v)
{
    json_key(j, k);
    printf("%.6f", v);
}

static inline void json_str(json_t *j, const char *k, const char *s)
{
    json_key(j, k);
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* Opens the line with the fields every program reports. */
static inline void json_begin(json_t *j, long long threads)
{
    j->n = 0;
    json_str(j, "workload", g_prog);
    json_int(j, "threads", threads);
    json_int(j, "cpus", online_cpus());
}

/* Closes the line: process CPU time, context switches and page faults during the measured
 * section (RUSAGE_SELF covers all threads), then the wall time, always the last key. */
static inline void json_end(json_t *j, const measure_t *m, double wall_s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ut = (double)(ru.ru_utime.tv_sec - m->ru.ru_utime.tv_sec) +
                (double)(ru.ru_utime.tv_usec - m->ru.ru_utime.tv_usec) * 1e-6;
    double st = (double)(ru.ru_stime.tv_sec - m->ru.ru_stime.tv_sec) +
                (double)(ru.ru_stime.tv_usec - m->ru.ru_stime.tv_usec) * 1e-6;
    json_num(j, "user_s", ut);
    json_num(j, "sys_s", st);
    json_int(j, "vol_ctxsw", ru.ru_nvcsw - m->ru.ru_nvcsw);
    json_int(j, "invol_ctxsw", ru.ru_nivcsw - m->ru.ru_nivcsw);
    json_int(j, "minflt", ru.ru_minflt - m->ru.ru_minflt);
    json_num(j, "wall_s", wall_s);
    printf("}\n");
    fflush(stdout);
}

#endif /* VCPULAB_WORKLOADS_COMMON_H */
