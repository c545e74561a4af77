/* fork_cost MIB ROUNDS [writes]: the cost of fork + _exit + waitpid from a process holding
 * MIB MiB of private memory it has written (issue 35's figure). Writes one byte in every
 * page of an anonymous private mapping of MIB MiB, then ROUNDS times: fork, the child
 * _exit(0)s at once, the parent waits for it; prints each round's time in ms on a line of
 * its own. With "writes", each round times instead the parent's writes to every page once
 * its child is gone (what a big process pays after running a subprocess: copy-on-write
 * left them write-protected; copying, nothing). Ends by checking that every page of the
 * parent holds what it wrote last (exit 1 and a message otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static char mark(size_t i, int round) { return (char)((i >> 12) * 31 + 7 + round * 2) | 1; }

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "writes") == 0)) {
        fprintf(stderr, "usage: fork_cost MIB ROUNDS [writes]\n");
        return 2;
    }
    int writes = argc == 4;
    size_t len = (size_t)atol(argv[1]) << 20;
    int rounds = atoi(argv[2]);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < len; i += 4096)
        p[i] = mark(i, 0);
    int last = 0;
    for (int r = 0; r < rounds; r++) {
        double t = now_ms();
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            return 1;
        }
        if (c == 0)
            _exit(0);
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "the child did not exit with 0\n");
            return 1;
        }
        if (writes) {
            t = now_ms();
            last = r + 1;
            for (size_t i = 0; i < len; i += 4096)
                p[i] = mark(i, last);
        }
        printf("%.3f\n", now_ms() - t);
        fflush(stdout);
    }
    for (size_t i = 0; i < len; i += 4096)
        if (p[i] != mark(i, last)) {
            fprintf(stderr, "the parent's page at %zu changed\n", i);
            return 1;
        }
    return 0;
}
