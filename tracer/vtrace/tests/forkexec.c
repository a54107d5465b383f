/* fork + exec of itself ("child" mode), fork + _exit, a threaded child; the parent waits. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static void *work(void *a) {
    for (int i = 0; i < 2000; i++) { void *volatile p_ = malloc(40); free(p_); };
    return a;
}
static void busy(int threads) {
    pthread_t t[8];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
}
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        busy(2);
        printf("exec child done\n");
        return 0;
    }
    busy(2);
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(127);
    }
    pid_t b = fork();
    if (b == 0) {
        busy(3);
        _exit(0);
    }
    int s1, s2;
    waitpid(a, &s1, 0);
    waitpid(b, &s2, 0);
    busy(1);
    printf("parent done %d %d\n", WEXITSTATUS(s1), WEXITSTATUS(s2));
    return 0;
}
