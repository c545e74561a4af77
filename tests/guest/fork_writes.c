/* fork_writes MIB ROUNDS: what the parent's writes cost after a fork whose child is gone
 * (a big process running a subprocess, then carrying on). Writes one byte in every page of
 * an anonymous private mapping of MIB MiB, then ROUNDS times: fork, the child _exit(0)s at
 * once, the parent waits for it, then writes every page again, timed; prints each round's
 * write time in ms on a line of its own. With copy-on-write the writes take the faults the
 * fork's write protection left; copying, none. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fork_writes MIB ROUNDS\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[1]) << 20;
    int rounds = atoi(argv[2]);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < len; i += 4096)
        p[i] = 1;
    for (int r = 0; r < rounds; r++) {
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
        double t = now_ms();
        for (size_t i = 0; i < len; i += 4096)
            p[i] = (char)(r + 2);
        printf("%.3f\n", now_ms() - t);
        fflush(stdout);
    }
    return 0;
}
