/* Four children each touch 200 MiB and hold it for a second: in a sandbox limited to 512 MiB
 * in all, at most two can, so at least two must be killed (SIGKILL, as by Linux's OOM killer)
 * while the others finish. Prints how many of each; the parent itself allocates nothing. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 4
#define MIB (1024 * 1024)

int main(int argc, char **argv) {
    int each = argc > 1 ? atoi(argv[1]) : 200;
    for (int i = 0; i < CHILDREN; i++) {
        if (fork() == 0) {
            char *p = mmap(NULL, (size_t)each * MIB, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                _exit(2);
            for (size_t off = 0; off < (size_t)each * MIB; off += 4096) {
                p[off] = (char)off;
                if (off % (8 * MIB) == 0)
                    usleep(1000);
            }
            sleep(1);
            _exit(0);
        }
    }
    int killed = 0, finished = 0, other = 0, st;
    while (wait(&st) > 0) {
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
            killed++;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            finished++;
        else
            other++;
    }
    printf("killed=%d finished=%d other=%d\n", killed, finished, other);
    return 0;
}
