/* membarrier, ioprio_get/ioprio_set, sched_getattr/sched_setattr, vhangup, pidfd_getfd, kcmp,
 * mseal, cachestat, vmsplice and remap_file_pages through raw syscall(): their main behaviours
 * and errors, printed the same natively and in torpor (no capability-dependent case: those run
 * in a child that dropped to nobody). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *err(long r) {
    if (r >= 0)
        return "ok";
    switch (errno) {
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EBADF: return "EBADF";
    case ESRCH: return "ESRCH";
    case EFAULT: return "EFAULT";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case E2BIG: return "E2BIG";
    case ENOSYS: return "ENOSYS";
    default: return strerror(errno);
    }
}

#define SHOW(label, expr)                                                                     \
    do {                                                                                      \
        long r_ = (long)(expr);                                                               \
        printf("%s: %ld %s\n", label, r_ < 0 ? -1L : r_, err(r_));                            \
    } while (0)

static void in_child(void (*f)(void)) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        f();
        fflush(stdout);
        _exit(0);
    }
    waitpid(p, NULL, 0);
}

static void membarrier_child(void) {
    long q = syscall(324, 0, 0, 0);
    printf("membarrier query: global %d private %d sync_core %d\n", (int)(q & 1) != 0,
           (int)(q & 8) != 0, (int)(q & 32) != 0);
    SHOW("membarrier bad cmd", syscall(324, -1, 0, 0));
    SHOW("membarrier query flags 1", syscall(324, 0, 1, 0));
    SHOW("membarrier private unregistered", syscall(324, 8, 0, 0));
    SHOW("membarrier register private", syscall(324, 16, 0, 0));
    SHOW("membarrier private", syscall(324, 8, 0, 0));
    SHOW("membarrier sync_core unregistered", syscall(324, 32, 0, 0));
    SHOW("membarrier global expedited", syscall(324, 2, 0, 0));
    SHOW("membarrier register global expedited", syscall(324, 4, 0, 0));
    SHOW("membarrier registrations", syscall(324, 512, 0, 0));
    SHOW("membarrier global", syscall(324, 1, 0, 0));
}

static void ioprio_child(void) {
    SHOW("ioprio_get self", syscall(252, 1, 0));
    SHOW("ioprio_set BE 3", syscall(251, 1, 0, (2 << 13) | 3));
    SHOW("ioprio_get after", syscall(252, 1, 0));
    SHOW("ioprio_get by pid", syscall(252, 1, getpid()));
    SHOW("ioprio_get pgrp", syscall(252, 2, 0));
    SHOW("ioprio_set IDLE", syscall(251, 1, 0, (3 << 13)));
    SHOW("ioprio_get idle", syscall(252, 1, 0));
    SHOW("ioprio_set NONE 4", syscall(251, 1, 0, 4));
    SHOW("ioprio_set class 5", syscall(251, 1, 0, (5 << 13)));
    SHOW("ioprio_set which 9", syscall(251, 9, 0, 0));
    SHOW("ioprio_get no such pid", syscall(252, 1, 999999));
    SHOW("ioprio_set NONE", syscall(251, 1, 0, 0));
    SHOW("ioprio_get none", syscall(252, 1, 0));
}

struct attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
    uint32_t umin, umax;
};

static void sched_child(void) {
    struct attr a;
    memset(&a, 0, sizeof a);
    SHOW("sched_getattr", syscall(315, 0, &a, sizeof a, 0));
    printf("  size %u policy %u nice %d prio %u\n", a.size, a.policy, a.nice, a.prio);
    SHOW("sched_getattr small", syscall(315, 0, &a, 47, 0));
    SHOW("sched_getattr flags", syscall(315, 0, &a, sizeof a, 1));
    SHOW("sched_getattr null", syscall(315, 0, NULL, sizeof a, 0));
    SHOW("sched_getattr no such pid", syscall(315, 999999, &a, sizeof a, 0));
    memset(&a, 0, sizeof a);
    a.size = 48;
    a.nice = 5;
    SHOW("sched_setattr nice 5", syscall(314, 0, &a, 0));
    SHOW("getpriority raw", syscall(SYS_getpriority, 0, 0));
    memset(&a, 0, sizeof a);
    syscall(315, 0, &a, sizeof a, 0);
    printf("  nice now %d\n", a.nice);
    a.size = 48;
    a.policy = 0;
    a.prio = 3;
    SHOW("sched_setattr OTHER prio 3", syscall(314, 0, &a, 0));
    a.prio = 0;
    a.policy = 77;
    SHOW("sched_setattr policy 77", syscall(314, 0, &a, 0));
    a.policy = 0;
    SHOW("sched_setattr flags", syscall(314, 0, &a, 1));
    SHOW("sched_setattr no such pid", syscall(314, 999999, &a, 0));
    a.size = 20;
    SHOW("sched_setattr size 20", syscall(314, 0, &a, 0));
    printf("  size written back %u\n", a.size);
    /* Unprivileged: real-time is refused. */
    if (getuid() == 0 && setuid(65534) != 0)
        return;
    memset(&a, 0, sizeof a);
    a.size = 48;
    a.policy = 1;
    a.prio = 10;
    SHOW("sched_setattr FIFO as nobody", syscall(314, 0, &a, 0));
    SHOW("vhangup as nobody", syscall(153));
}

static void pidfd_calls(void) {
    int p[2];
    if (pipe(p) != 0)
        return;
    int pidfd = syscall(434, getpid(), 0);
    long nfd = syscall(438, pidfd, p[1], 0);
    printf("pidfd_getfd: %s, cloexec %d\n", err(nfd), nfd >= 0 && (fcntl(nfd, F_GETFD) & FD_CLOEXEC));
    if (nfd >= 0) {
        char b[8] = {0};
        write(nfd, "dup", 3);
        read(p[0], b, sizeof b);
        printf("  through the copy: %s\n", b);
        SHOW("kcmp same file", syscall(312, getpid(), getpid(), 0, p[1], nfd));
        SHOW("kcmp other file", syscall(312, getpid(), getpid(), 0, p[0], nfd) > 0 ? 1 : -1);
        close(nfd);
    }
    SHOW("pidfd_getfd flags 1", syscall(438, pidfd, p[1], 1));
    SHOW("pidfd_getfd bad target", syscall(438, pidfd, 9999, 0));
    SHOW("pidfd_getfd not a pidfd", syscall(438, p[0], 0, 0));
    close(pidfd);
    close(p[0]);
    close(p[1]);
}

static void mseal_child(void) {
    long pg = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SHOW("mseal flags", syscall(462, m, pg, 1));
    SHOW("mseal unaligned", syscall(462, m + 1, pg, 0));
    SHOW("mseal middle", syscall(462, m + pg, 2 * pg, 0));
    SHOW("munmap sealed", munmap(m, 4 * pg));
    SHOW("munmap unsealed page", munmap(m, pg));
    SHOW("mprotect sealed", mprotect(m + pg, pg, PROT_READ));
    SHOW("mremap sealed", (long)mremap(m + pg, pg, 2 * pg, MREMAP_MAYMOVE) == -1 ? -1 : 0);
    SHOW("mmap fixed over sealed",
         mmap(m + pg, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED ? -1 : 0);
    SHOW("madvise dontneed writable sealed", madvise(m + pg, pg, MADV_DONTNEED));
    m[pg] = 7;
    printf("  sealed memory still writable: %d\n", m[pg]);
    char *r = mmap(NULL, 2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    syscall(462, r, 2 * pg, 0);
    SHOW("madvise dontneed read-only sealed", madvise(r, pg, MADV_DONTNEED));
    char *h = mmap(NULL, 3 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(h + pg, pg);
    SHOW("mseal hole", syscall(462, h, 3 * pg, 0));
}

static void vmsplice_calls(void) {
    int p[2];
    if (pipe(p) != 0)
        return;
    char in[] = "vmspliced";
    struct iovec v = {in, sizeof in};
    SHOW("vmsplice into pipe", syscall(278, p[1], &v, 1, 0));
    char out[32] = {0};
    read(p[0], out, sizeof out);
    printf("  read back: %s\n", out);
    write(p[1], "backwards", 10);
    memset(out, 0, sizeof out);
    struct iovec o = {out, sizeof out};
    SHOW("vmsplice from pipe", syscall(278, p[0], &o, 1, 0));
    printf("  into memory: %s\n", out);
    SHOW("vmsplice flags", syscall(278, p[1], &v, 1, 0x100));
    SHOW("vmsplice bad fd", syscall(278, 9999, &v, 1, 0));
    SHOW("vmsplice too many", syscall(278, p[1], &v, 1025, 0));
    SHOW("vmsplice empty", syscall(278, p[1], &v, 0, 0));
    int f = open("/tmp/small_calls_file", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    SHOW("vmsplice regular file", syscall(278, f, &v, 1, 0));
    close(f);
    int sz = fcntl(p[1], F_GETPIPE_SZ);
    char *big = calloc(1, sz + 4096);
    struct iovec b = {big, sz + 4096};
    /* Linux fills the pipe's slots with page pieces (less than its size for a buffer not
     * page-aligned), torpor copies: some bytes, at most the pipe's size. */
    long n = syscall(278, p[1], &b, 1, 2);
    printf("vmsplice more than fits: some %d, at most the pipe %d\n", n > 0, n <= sz);
    SHOW("vmsplice full nonblock", syscall(278, p[1], &v, 1, 2));
    free(big);
    close(p[0]);
    close(p[1]);
}

static void cachestat_calls(void) {
    uint64_t range[2] = {0, 0}, cs[5];
    int f = open("/tmp/small_calls_file", O_RDWR | O_CREAT | O_TRUNC, 0600);
    write(f, "x", 1);
    SHOW("cachestat file", syscall(451, f, range, cs, 0));
    SHOW("cachestat flags", syscall(451, f, range, cs, 1));
    SHOW("cachestat bad fd", syscall(451, 9999, range, cs, 0));
    SHOW("cachestat null range", syscall(451, f, NULL, cs, 0));
    SHOW("cachestat null out", syscall(451, f, range, NULL, 0));
    close(f);
}

static void remap_calls(void) {
    long pg = sysconf(_SC_PAGESIZE);
    int f = open("/tmp/small_calls_file", O_RDWR | O_CREAT | O_TRUNC, 0600);
    char *page = malloc(pg);
    memset(page, 'A', pg);
    write(f, page, pg);
    memset(page, 'B', pg);
    write(f, page, pg);
    free(page);
    char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    printf("remap before: %c %c\n", m[0], m[pg]);
    SHOW("remap_file_pages page 0 -> 1", syscall(216, m, pg, 0, 1, 0));
    printf("  after: %c %c\n", m[0], m[pg]);
    SHOW("remap_file_pages prot", syscall(216, m, pg, PROT_READ, 0, 0));
    SHOW("remap_file_pages size 0", syscall(216, m, 0, 0, 0, 0));
    char *pm = mmap(NULL, pg, PROT_READ, MAP_PRIVATE, f, 0);
    SHOW("remap_file_pages private", syscall(216, pm, pg, 0, 0, 0));
    munmap(m, 2 * pg);
    munmap(pm, pg);
    close(f);
    unlink("/tmp/small_calls_file");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    in_child(membarrier_child);
    in_child(ioprio_child);
    in_child(sched_child);
    pidfd_calls();
    in_child(mseal_child);
    vmsplice_calls();
    cachestat_calls();
    remap_calls();
    return 0;
}
