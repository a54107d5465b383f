/* spinblock: pthread spinlocks that spin a bounded time, then block.
 *
 *   LD_PRELOAD=libspinblock.so SPINBLOCK_SPINS=2000 ./app
 *
 * A mitigation for lock-holder preemption: a waiter whose lock holder was descheduled (or
 * whose vCPU was) stops burning its time slice after SPINBLOCK_SPINS PAUSE iterations and
 * sleeps in the kernel until the holder releases the lock.
 *
 * It keeps the pthread_spinlock_t ABI (one int) and replaces all five functions consistently:
 *   0 = free, 1 = held, 2 = held and a waiter may sleep in futex_wait on the int.
 * This is the three-state futex lock of Drepper's "Futexes Are Tricky" (mutex2). The futex
 * operations are the shared (non-private) ones, so locks initialised PTHREAD_PROCESS_SHARED
 * work too. Used with libvtrace.so, list vtrace first: LD_PRELOAD="libvtrace.so libspinblock.so". */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static unsigned g_spins = 2000; /* ~ a few µs of PAUSE on current x86 cores */

__attribute__((constructor)) static void spinblock_init(void) {
    const char *s = getenv("SPINBLOCK_SPINS");
    if (s && *s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (*end == 0 && v <= UINT_MAX) g_spins = (unsigned)v;
    }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline _Atomic int *word(pthread_spinlock_t *l) { return (_Atomic int *)(void *)l; }

static void futex_wait(_Atomic int *w, int val) { syscall(SYS_futex, w, FUTEX_WAIT, val, NULL, NULL, 0); }
static void futex_wake(_Atomic int *w) { syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0); }

EXPORT int pthread_spin_init(pthread_spinlock_t *l, int pshared) {
    (void)pshared; /* the futex calls are the shared ones: both kinds work */
    atomic_store(word(l), 0);
    return 0;
}

EXPORT int pthread_spin_destroy(pthread_spinlock_t *l) {
    (void)l;
    return 0;
}

EXPORT int pthread_spin_trylock(pthread_spinlock_t *l) {
    int free_ = 0;
    return atomic_compare_exchange_strong_explicit(word(l), &free_, 1, memory_order_acquire, memory_order_relaxed) ? 0 : EBUSY;
}

EXPORT int pthread_spin_lock(pthread_spinlock_t *l) {
    _Atomic int *w = word(l);
    int c = 0;
    if (atomic_compare_exchange_strong_explicit(w, &c, 1, memory_order_acquire, memory_order_relaxed)) return 0;
    /* spin: read-only while held (no cache-line ping-pong), then try again */
    for (unsigned i = 0; i < g_spins; i++) {
        cpu_relax();
        c = atomic_load_explicit(w, memory_order_relaxed);
        if (c == 0) {
            if (atomic_compare_exchange_weak_explicit(w, &c, 1, memory_order_acquire, memory_order_relaxed)) return 0;
        }
    }
    /* block: announce a sleeper (state 2); whoever finds the lock free while setting 2 owns it */
    while (atomic_exchange_explicit(w, 2, memory_order_acquire) != 0) futex_wait(w, 2);
    return 0;
}

EXPORT int pthread_spin_unlock(pthread_spinlock_t *l) {
    _Atomic int *w = word(l);
    if (atomic_exchange_explicit(w, 0, memory_order_release) == 2) futex_wake(w);
    return 0;
}
