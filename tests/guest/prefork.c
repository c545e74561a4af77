/* prefork MIB WORKERS: a pre-fork server's memory, without the server. The parent writes
 * every page of MIB MiB of private anonymous memory (the application it loads before
 * forking), forks WORKERS workers, each of which writes one page in a hundred of it (what a
 * worker dirties of what it inherited) and waits; once all are ready the parent prints
 * "ready" and waits too. SIGTERM ends them all. The benchmark reads the memory of the whole
 * tree meanwhile: with copy-on-write fork, about MIB plus 1% a worker; copying, MIB a
 * worker more. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: prefork MIB WORKERS\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[1]) << 20;
    int workers = atoi(argv[2]);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < len; i += 4096)
        p[i] = (char)(i >> 12) | 1;
    int ready[2];
    if (pipe(ready)) {
        perror("pipe");
        return 1;
    }
    for (int w = 0; w < workers; w++) {
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            kill(0, SIGTERM);
            return 1;
        }
        if (c == 0) {
            for (size_t i = 0; i < len; i += 100 * 4096)
                p[i] = (char)w;
            if (write(ready[1], "r", 1) != 1)
                _exit(1);
            for (;;)
                pause();
        }
    }
    char b;
    for (int w = 0; w < workers; w++)
        if (read(ready[0], &b, 1) != 1) {
            perror("read");
            return 1;
        }
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
