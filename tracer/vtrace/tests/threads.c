/* Exercises every traced call: threads, mutex, spinlock, rwlock, barrier, condvar, raw futex
 * calls, allocator, mappings. Prints a deterministic result. Usage: threads [nthreads] [iters] */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int nthreads = 4, iters = 1000;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_spinlock_t spin;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t bar;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long counter, spin_counter, rw_value;
static int turn;
static unsigned futex_word = 1;

static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
        pthread_spin_lock(&spin);
        spin_counter++;
        pthread_spin_unlock(&spin);
        if (i % 10 == 0) {
            pthread_rwlock_wrlock(&rw);
            rw_value++;
            pthread_rwlock_unlock(&rw);
        } else {
            pthread_rwlock_rdlock(&rw);
            volatile long v = rw_value;
            (void)v;
            pthread_rwlock_unlock(&rw);
        }
        char *p = malloc(16 + (size_t)i);
        memset(p, 1, 16);
        p = realloc(p, 64 + (size_t)i);
        free(p);
        void *volatile c = calloc(4, 8);
        free(c);
    }
    pthread_barrier_wait(&bar);
    /* a round of condition variable hand-offs: thread k waits for its turn */
    pthread_mutex_lock(&mu);
    while (turn != id) pthread_cond_wait(&cv, &mu);
    turn++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    /* a raw futex wait whose word no longer holds 0: returns EAGAIN at once, never sleeps */
    syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) nthreads = atoi(argv[1]);
    if (argc > 2) iters = atoi(argv[2]);
    pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    size_t len = 16 * 4096;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 7, len);
    madvise(m, len / 2, MADV_DONTNEED);
    mprotect(m, 4096, PROT_READ);
    munmap(m, len);
    pthread_t th[256];
    for (long i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    pthread_mutex_lock(&mu);
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); /* wakes nobody: 0 */
    printf("counter=%ld spin=%ld rw=%ld turn=%d\n", counter, spin_counter, rw_value, turn);
    return counter == (long)nthreads * iters && spin_counter == counter ? 0 : 1;
}
