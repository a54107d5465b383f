/* Allocates in two threads, says "ready", and waits to be killed with SIGTERM. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static pthread_barrier_t b;
static void *work(void *a) {
    for (int i = 0; i < 300; i++) { void *volatile p_ = malloc(48); free(p_); };
    pthread_barrier_wait(&b);
    for (;;) pause();
    return a;
}
int main(void) {
    pthread_t t;
    pthread_barrier_init(&b, NULL, 2);
    pthread_create(&t, NULL, work, NULL);
    for (int i = 0; i < 300; i++) { void *volatile p_ = malloc(48); free(p_); };
    pthread_barrier_wait(&b);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
