/* Overhead micro-benchmark: ns per malloc+free pair and per mutex lock+unlock pair (one thread).
 * Usage: bench [iterations] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    void *volatile sink;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        sink = malloc(64);
        free(sink);
    }
    double t1 = now();
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    double t2 = now();
    printf("malloc_free_ns %.1f\nmutex_ns %.1f\n", (t1 - t0) / n, (t2 - t1) / n);
    return 0;
}
