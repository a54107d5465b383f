/* Fills more than one trace block, then dies of SIGSEGV. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static void *work(void *a) {
    for (int i = 0; i < 5000; i++) { void *volatile p_ = malloc(24); free(p_); };
    return a;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, NULL);
    for (int i = 0; i < 5000; i++) { void *volatile p_ = malloc(24); free(p_); };
    printf("about to crash\n");
    fflush(stdout);
    volatile int *p = (volatile int *)(long)atoi("0");
    *p = 1;
    return 0;
}
