#define _GNU_SOURCE
/* Spinlock correctness: threads increment a counter under pthread_spin_lock, with some
 * trylocks and a holder that sleeps while holding (forces waiters to block under spinblock). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static pthread_spinlock_t l;
static long counter;
static int iters = 200000;
static void *work(void *a) {
    long id = (long)a;
    for (int i = 0; i < iters; i++) {
        if (i % 7 == 0) {
            while (pthread_spin_trylock(&l) == EBUSY) {}
        } else {
            pthread_spin_lock(&l);
        }
        counter++;
        if (id == 0 && i % 50000 == 1) usleep(2000);
        pthread_spin_unlock(&l);
    }
    return NULL;
}
/* "hold" mode: the main thread holds the lock 200 ms while two threads wait for it; prints
 * the CPU time the process used (spinning waiters burn it, blocked ones do not). */
static void *wait_once(void *a) {
    pthread_spin_lock(&l);
    counter++;
    pthread_spin_unlock(&l);
    return a;
}
static int hold_mode(void) {
    pthread_spin_init(&l, PTHREAD_PROCESS_PRIVATE);
    pthread_spin_lock(&l);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, wait_once, NULL);
    usleep(200000);
    pthread_spin_unlock(&l);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
    printf("counter=%ld cpu_ms=%ld\n", counter, cpu_ms);
    return counter == 2 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "hold") == 0) return hold_mode();
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) iters = atoi(argv[2]);
    pthread_spin_init(&l, PTHREAD_PROCESS_PRIVATE);
    pthread_t t[64];
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_spin_destroy(&l);
    printf("counter=%ld expected=%ld\n", counter, (long)n * iters);
    return counter == (long)n * iters ? 0 : 1;
}
