/* cow_late MIB: the memory limit holds when copy-on-write copies come late. The parent
 * writes every page of MIB MiB, forks, and the child writes every page again (each write
 * copies a frame the parent still shares); the parent waits, prints how the child ended,
 * checks that none of its own pages changed and prints "parent ok". In a sandbox whose
 * memory holds the parent and less than a whole copy, the fork succeeds with copy-on-write
 * (not with a copying fork: ENOMEM, exit 1) and the copies meet the limit: the sandbox's OOM
 * killer ends the child with SIGKILL. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: cow_late MIB\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[1]) << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < len; i += 4096)
        p[i] = 1;
    pid_t c = fork();
    if (c < 0) {
        perror("fork");
        return 1;
    }
    if (c == 0) {
        for (size_t i = 0; i < len; i += 4096)
            p[i] = 2;
        _exit(0);
    }
    int st;
    if (waitpid(c, &st, 0) != c) {
        perror("waitpid");
        return 1;
    }
    if (WIFSIGNALED(st))
        printf("child: signal %d\n", WTERMSIG(st));
    else
        printf("child: exit %d\n", WEXITSTATUS(st));
    for (size_t i = 0; i < len; i += 4096)
        if (p[i] != 1) {
            printf("the parent's page at %zu changed\n", i);
            return 1;
        }
    printf("parent ok\n");
    return 0;
}
