#define _GNU_SOURCE
/* Spinlock correctness: threads increment a counter under pthread_spin_lock, with some
 * trylocks and a holder that sleeps while holding (forces waiters to block under spinblock). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
        if (id == 0 && i % 50000 == 0) usleep(2000);
        pthread_spin_unlock(&l);
    }
    return NULL;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_spin_init(&l, PTHREAD_PROCESS_PRIVATE);
    pthread_t t[64];
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_spin_destroy(&l);
    printf("counter=%ld expected=%ld\n", counter, (long)n * iters);
    return counter == (long)n * iters ? 0 : 1;
}
