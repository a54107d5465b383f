/* Prints, allocates, and exits with status 3 (the traced status must be the same). */
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    for (int i = 0; i < 100; i++) { void *volatile p_ = malloc(32); free(p_); };
    printf("exit three\n");
    return 3;
}
