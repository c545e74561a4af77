/* getpid_loop N: makes N getpid system calls (never cached by libc). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    long acc = 0;
    for (long i = 0; i < n; i++)
        acc += syscall(SYS_getpid);
    printf("getpid_loop: %ld calls, sum %s\n", n, acc >= 0 ? "ok" : "negative");
    return 0;
}
