/* checkpoint_procs: two processes and the pipes between them across a checkpoint.
 *
 * The parent forks a child; each fills 8 MiB of its own memory with a pattern of its own.
 * The child waits in read() on a pipe from the parent; the parent says "ready" and waits in
 * pause() for SIGUSR1. Then the parent sends "ping" down the pipe, the child checks its
 * pattern and answers "pong N" (N: words that differ) up another pipe and exits 7; the
 * parent checks its own pattern, the answer and the child's exit status (wait4), prints one
 * line each and exits 0 if all hold, 1 otherwise. Run straight through, it passes natively.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }

#define WORDS (8u << 17)

static uint64_t *fill(uint64_t seed) {
    uint64_t *m = mmap(NULL, WORDS * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        exit(2);
    for (uint64_t i = 0; i < WORDS; i++)
        m[i] = (i * 0x9e3779b97f4a7c15ULL) ^ seed;
    return m;
}

static size_t differ(const uint64_t *m, uint64_t seed) {
    size_t bad = 0;
    for (uint64_t i = 0; i < WORDS; i++)
        bad += m[i] != ((i * 0x9e3779b97f4a7c15ULL) ^ seed);
    return bad;
}

int main(void) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        return 1;
    struct sigaction a = {0};
    a.sa_handler = on_usr1;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);
    pid_t child = fork();
    if (child == 0) {
        uint64_t *m = fill(0xc41d);
        char buf[16] = {0};
        if (read(down[0], buf, sizeof buf) != 4 || memcmp(buf, "ping", 4) != 0)
            _exit(3);
        char reply[32];
        int n = snprintf(reply, sizeof reply, "pong %zu", differ(m, 0xc41d));
        if (write(up[1], reply, (size_t)n) != n)
            _exit(4);
        _exit(7);
    }
    uint64_t *m = fill(0x9a7e);
    printf("ready\n");
    fflush(stdout);
    while (!go)
        pause();
    int ok = 1;
    if (write(down[1], "ping", 4) != 4)
        ok = 0;
    char buf[32] = {0};
    ssize_t n = read(up[0], buf, sizeof buf - 1);
    printf("child answered: %s\n", n > 0 ? buf : "nothing");
    ok &= n > 0 && strcmp(buf, "pong 0") == 0;
    int status = 0;
    pid_t w = waitpid(child, &status, 0);
    printf("child exit: %d\n", w == child && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    ok &= w == child && WIFEXITED(status) && WEXITSTATUS(status) == 7;
    size_t bad = differ(m, 0x9a7e);
    printf("parent pattern: %zu words differ\n", bad);
    ok &= bad == 0;
    printf("%s\n", ok ? "both processes kept their state" : "STATE LOST");
    fflush(stdout);
    return ok ? 0 : 1;
}
