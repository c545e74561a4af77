/* memory_advice: madvise's marks and mincore's residency as LTP's memory tests found them
 * different in torpor, one line each; the test compares the output with a native run.
 *
 * MADV_WIPEONFORK (a child and a grandchild see zeros, MADV_KEEPONFORK undoes it, EINVAL on
 * a shared mapping), MADV_DONTFORK (the child has no mapping), /proc/self/coredump_filter
 * (default, written, inherited), mincore of a MAP_SHARED mapping (the pages touched, all of
 * them once mlock'd).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define SIZE (4 * PAGE)

static const char *err(long r) { return r == -1 ? strerrorname_np(errno) : "ok"; }

/* Whether every byte of `p` is `v`. */
static int all(const char *p, int v) {
    for (int i = 0; i < SIZE; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* What a child (and, with `grandchild`, its child) sees of `p`: "zero", "kept" or "other";
 * a child killed by a signal shows its name. */
static const char *in_child(const char *p, int grandchild) {
    pid_t pid = fork();
    if (pid == 0) {
        if (grandchild) {
            pid_t g = fork();
            if (g == 0)
                _exit(all(p, 0) ? 0 : all(p, 0x5a) ? 1 : 2);
            int st;
            waitpid(g, &st, 0);
            _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 3);
        }
        _exit(all(p, 0) ? 0 : all(p, 0x5a) ? 1 : 2);
    }
    int st;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st))
        return sigabbrev_np(WTERMSIG(st));
    switch (WEXITSTATUS(st)) {
    case 0: return "zero";
    case 1: return "kept";
    default: return "other";
    }
}

static char *filled(void) {
    char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 0x5a, SIZE);
    return p;
}

static void fork_advice(void) {
    char *p = filled();
    /* One call per statement: printf's arguments are evaluated in no set order. */
    printf("wipeonfork: %s\n", err(madvise(p, SIZE, MADV_WIPEONFORK)));
    const char *child = in_child(p, 0), *grandchild = in_child(p, 1);
    printf("wipeonfork child: %s, grandchild: %s, parent kept: %d\n", child, grandchild,
           all(p, 0x5a));
    const char *r = err(madvise(p, SIZE, MADV_KEEPONFORK));
    printf("keeponfork: %s, child: %s\n", r, in_child(p, 0));
    /* Half of it: the VMA splits, the child sees zeros in that half only. */
    madvise(p + SIZE / 2, SIZE / 2, MADV_WIPEONFORK);
    pid_t pid = fork();
    if (pid == 0)
        _exit((p[0] == 0x5a) | ((p[SIZE - 1] == 0) << 1));
    int st;
    waitpid(pid, &st, 0);
    printf("wipeonfork half: first kept %d, last zero %d\n", WEXITSTATUS(st) & 1,
           (WEXITSTATUS(st) >> 1) & 1);
    printf("wipeonfork zero length: %s\n", err(madvise(p, 0, MADV_WIPEONFORK)));
    munmap(p, SIZE);

    char *s = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("wipeonfork shared: %s\n", err(madvise(s, SIZE, MADV_WIPEONFORK)));
    munmap(s, SIZE);

    p = filled();
    r = err(madvise(p, SIZE, MADV_DONTFORK));
    printf("dontfork: %s, child: %s\n", r, in_child(p, 0));
    r = err(madvise(p, SIZE, MADV_DOFORK));
    printf("dofork: %s, child: %s\n", r, in_child(p, 0));
    r = err(madvise(p, SIZE, MADV_DONTDUMP));
    printf("dontdump: %s, dodump: %s\n", r, err(madvise(p, SIZE, MADV_DODUMP)));
    munmap(p, SIZE);
}

static void show_filter(const char *what) {
    char buf[32] = "";
    int fd = open("/proc/self/coredump_filter", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n > 0 && buf[n - 1] == '\n')
        buf[n - 1] = 0;
    printf("coredump_filter %s: %s\n", what, n > 0 ? buf : strerrorname_np(errno));
}

static void set_filter(const char *text) {
    int fd = open("/proc/self/coredump_filter", O_WRONLY);
    long r = fd < 0 ? -1 : write(fd, text, strlen(text));
    printf("coredump_filter write %s: %s\n", text, err(r));
    if (fd >= 0)
        close(fd);
}

static void coredump_filter(void) {
    show_filter("default");
    set_filter("0x13");
    show_filter("after 0x13");
    pid_t pid = fork();
    if (pid == 0) {
        show_filter("in the child");
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    set_filter("0x7fff");
    show_filter("after 0x7fff");
    set_filter("junk");
    set_filter("0x33");
}

static int resident(const char *p, int pages) {
    unsigned char vec[64];
    if (mincore((void *)p, pages * PAGE, vec) != 0)
        return -1;
    int n = 0;
    for (int i = 0; i < pages; i++)
        n += vec[i] & 1;
    return n;
}

static void shared_residency(void) {
    char *s = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("mincore shared, untouched: %d\n", resident(s, 8));
    s[0] = 1;
    printf("mincore shared, one page written: %d\n", resident(s, 8));
    pid_t pid = fork();
    if (pid == 0) {
        s[3 * PAGE] = 1;
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    printf("mincore shared, one more written by a child: %d\n", resident(s, 8));
    const char *r = err(mlock(s, 8 * PAGE));
    printf("mlock shared: %s, resident: %d\n", r, resident(s, 8));
    munlock(s, 8 * PAGE);
    munmap(s, 8 * PAGE);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The MADV_DONTFORK child dies of SIGSEGV: no core file. */
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    fork_advice();
    coredump_filter();
    shared_residency();
    return 0;
}
