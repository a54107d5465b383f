/* Closes every descriptor above 2 (as daemons do), then puts its own file on descriptor 512
 * (where the tracer keeps its own): the tracer must notice and never write into that file.
 * Usage: closeall FILE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    for (int i = 0; i < 1000; i++) {
        void *volatile p = malloc(16);
        free(p);
    }
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 512) < 0) return 2;
    for (int i = 0; i < 100000; i++) {
        void *volatile p = malloc(16);
        free(p);
    }
    dprintf(512, "mine\n");
    printf("done\n");
    return 0;
}
