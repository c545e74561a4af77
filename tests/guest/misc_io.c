/* misc_io: pipes, the standard character devices, sysinfo and CPU affinity, splice/tee/
 * copy_file_range, nice values and scheduling policies, times(), epoll_wait with more than 1024
 * ready descriptors, msync, clocks, getrusage, /proc/self/fd/N opened again; prints facts that are the same natively and in a
 * sandbox.
 *
 *   misc_io        all of that
 *   misc_io pty    pseudo-terminals: openpty (posix_openpt, TIOCGPTN, TIOCSPTLCK, TIOCGPTPEER),
 *                  terminal ioctls on both ends, data both ways, EIO on the master once the
 *                  slave is closed, forkpty (login_tty: setsid, TIOCSCTTY) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <pthread.h>
#include <pty.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/stat.h>
#include <sys/personality.h>
#include <sys/utsname.h>
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/times.h>
#include <sys/uio.h>
#include <unistd.h>

/* "ok" or the errno's name of a call that returned r. */
static const char *res(long r) {
    static char b[32];
    if (r >= 0) {
        snprintf(b, sizeof b, "%ld", r);
        return b;
    }
    switch (errno) {
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    case ESRCH: return "ESRCH";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ESPIPE: return "ESPIPE";
    case EXDEV: return "EXDEV";
    case ENOMEM: return "ENOMEM";
    case ENOTDIR: return "ENOTDIR";
    case ENOTTY: return "ENOTTY";
    case EIO: return "EIO";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case ENOENT: return "ENOENT";
    case ENXIO: return "ENXIO";
    case ETXTBSY: return "ETXTBSY";
    default: snprintf(b, sizeof b, "errno %d", errno); return b;
    }
}

/* splice, tee and copy_file_range between a file and pipes, with and without offsets. */
static void splicing(void) {
    char name[] = "misc_io.splice.XXXXXX";
    int f = mkstemp(name);
    if (f < 0) { perror("mkstemp"); return; }
    unlink(name);
    write(f, "0123456789abcdef", 16);
    int p[2], q[2];
    pipe(p);
    pipe(q);
    loff_t off = 4;
    printf("splice file@4 -> pipe: %s", res(splice(f, &off, p[1], NULL, 6, 0)));
    printf(", offset now %lld, file offset %lld\n", (long long)off, (long long)lseek(f, 0, SEEK_CUR));
    printf("tee pipe -> pipe: %s\n", res(tee(p[0], q[1], 100, 0)));
    char b[32] = {0};
    ssize_t n = read(p[0], b, sizeof b - 1);
    printf("  first pipe: %zd %s\n", n, b);
    memset(b, 0, sizeof b);
    n = read(q[0], b, sizeof b - 1);
    printf("  second pipe: %zd %s\n", n, b);
    write(p[1], "XYZ", 3);
    off = 14;
    printf("splice pipe -> file@14: %s", res(splice(p[0], NULL, f, &off, 3, 0)));
    memset(b, 0, sizeof b);
    pread(f, b, sizeof b - 1, 0);
    printf(", offset now %lld, file %s\n", (long long)off, b);
    printf("splice file -> file: %s\n", res(splice(f, NULL, f, NULL, 3, 0)));
    printf("splice bad fd: %s\n", res(splice(-1, NULL, p[1], NULL, 3, 0)));
    printf("splice offset on a pipe: %s\n", res(splice(p[0], &off, f, NULL, 3, 0)));
    printf("tee file -> pipe: %s\n", res(tee(f, p[1], 3, 0)));

    char name2[] = "misc_io.cfr.XXXXXX";
    int g = mkstemp(name2);
    if (g < 0) { perror("mkstemp"); return; }
    unlink(name2);
    loff_t in = 10, outo = 2;
    printf("copy_file_range @10 -> @2: %s", res(copy_file_range(f, &in, g, &outo, 5, 0)));
    memset(b, 0, sizeof b);
    pread(g, b, sizeof b - 1, 0);
    printf(", offsets %lld %lld, file offsets %lld %lld, copy %zu bytes \"%s\"\n", (long long)in,
           (long long)outo, (long long)lseek(f, 0, SEEK_CUR), (long long)lseek(g, 0, SEEK_CUR),
           strlen(b + 2) + 2, b + 2);
    lseek(f, 0, SEEK_SET);
    printf("copy_file_range no offsets: %s", res(copy_file_range(f, NULL, g, NULL, 4, 0)));
    printf(", file offsets %lld %lld\n", (long long)lseek(f, 0, SEEK_CUR), (long long)lseek(g, 0, SEEK_CUR));
    printf("copy_file_range flags 1: %s\n", res(copy_file_range(f, NULL, g, NULL, 4, 1)));
    printf("copy_file_range from a pipe: %s\n", res(copy_file_range(p[0], NULL, g, NULL, 4, 0)));
    printf("copy_file_range bad fd: %s\n", res(copy_file_range(f, NULL, 99, NULL, 4, 0)));
    close(f);
    close(g);
    close(p[0]); close(p[1]); close(q[0]); close(q[1]);
}

/* getpriority/setpriority, the scheduling policy calls, sched_setaffinity and times(). */
static void scheduling(void) {
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0);
    printf("getpriority: %d errno %d\n", base, errno);
    printf("setpriority +1: %s", res(setpriority(PRIO_PROCESS, 0, base + 1)));
    int a = getpriority(PRIO_PROCESS, 0);
    printf(", now %d (self by pid: %d)\n", a, getpriority(PRIO_PROCESS, getpid()));
    printf("setpriority back: %s", res(setpriority(PRIO_PROCESS, 0, base)));
    printf(", now %d\n", getpriority(PRIO_PROCESS, 0));
    printf("setpriority 100 (clamped): %s", res(setpriority(PRIO_PROCESS, 0, 100)));
    printf(", now %d\n", getpriority(PRIO_PROCESS, 0));
    setpriority(PRIO_PROCESS, 0, base);
    printf("getpriority which 7: %s\n", res(getpriority(7, 0)));
    printf("getpriority no such pid: %s\n", res(getpriority(PRIO_PROCESS, 999999)));
    printf("sched_getscheduler: %s", res(sched_getscheduler(0)));
    printf(", -1: %s", res(sched_getscheduler(-1)));
    printf(", no such pid: %s\n", res(sched_getscheduler(999999)));
    struct sched_param sp = {.sched_priority = 42};
    printf("sched_getparam: %s", res(sched_getparam(0, &sp)));
    printf(" prio %d", sp.sched_priority);
    printf(", NULL: %s\n", res(sched_getparam(0, NULL)));
    printf("priority max/min: RR %d %d, FIFO %d %d, OTHER %d %d, -23 %s",
           sched_get_priority_max(SCHED_RR), sched_get_priority_min(SCHED_RR),
           sched_get_priority_max(SCHED_FIFO), sched_get_priority_min(SCHED_FIFO),
           sched_get_priority_max(SCHED_OTHER), sched_get_priority_min(SCHED_OTHER),
           res(sched_get_priority_max(-23)));
    printf(" %s\n", res(sched_get_priority_min(-23)));
    sp.sched_priority = 0;
    printf("sched_setscheduler OTHER 0: %s", res(sched_setscheduler(0, SCHED_OTHER, &sp)));
    sp.sched_priority = 5;
    printf(", OTHER 5: %s", res(sched_setscheduler(0, SCHED_OTHER, &sp)));
    sp.sched_priority = 0;
    printf(", RR 0: %s", res(sched_setscheduler(0, SCHED_RR, &sp)));
    printf(", policy 77: %s\n", res(sched_setscheduler(0, 77, &sp)));
    printf("sched_setparam 0: %s\n", res(sched_setparam(0, &sp)));
    struct timespec ts;
    printf("sched_rr_get_interval: %s", res(sched_rr_get_interval(0, &ts)));
    printf(", below a second %d\n", ts.tv_sec == 0);
    cpu_set_t all, one, now;
    sched_getaffinity(0, sizeof all, &all);
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    printf("sched_setaffinity cpu 0: %s", res(sched_setaffinity(0, sizeof one, &one)));
    sched_getaffinity(0, sizeof now, &now);
    printf(", now %d cpu(s), cpu 0 %d\n", CPU_COUNT(&now), CPU_ISSET(0, &now) != 0);
    CPU_ZERO(&one);
    printf("sched_setaffinity empty: %s\n", res(sched_setaffinity(0, sizeof one, &one)));
    printf("sched_setaffinity back: %s", res(sched_setaffinity(0, sizeof all, &all)));
    sched_getaffinity(0, sizeof now, &now);
    printf(", same as before %d\n", CPU_EQUAL(&now, &all));
    printf("sched_getaffinity -1: %s\n", res(sched_getaffinity(-1, sizeof now, &now)));
    struct tms t;
    clock_t c = times(&t);
    printf("times: positive %d, fields >= 0 %d\n", c > 0,
           t.tms_utime >= 0 && t.tms_stime >= 0 && t.tms_cutime >= 0 && t.tms_cstime >= 0);
}

/* msync, clock_settime of a clock that cannot be set, CPU-time clocks, getrusage, F_NOTIFY. */
static void clocks_and_sync(void) {
    char name[] = "misc_io.msync.XXXXXX";
    int f = mkstemp(name);
    if (f < 0) { perror("mkstemp"); return; }
    unlink(name);
    ftruncate(f, 8192);
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    memcpy(m + 4096, "synced", 6);
    printf("msync MS_SYNC: %s", res(msync(m, 8192, MS_SYNC)));
    char b[8] = {0};
    pread(f, b, 6, 4096);
    printf(", file has %s\n", b);
    printf("msync MS_ASYNC: %s, MS_INVALIDATE: %s", res(msync(m, 4096, MS_ASYNC)), res(msync(m, 4096, MS_INVALIDATE)));
    printf(", unaligned: %s", res(msync(m + 1, 10, MS_SYNC)));
    printf(", both: %s", res(msync(m, 10, MS_SYNC | MS_ASYNC)));
    printf(", flag 8: %s\n", res(msync(m, 10, 8)));
    munmap(m, 8192);
    printf("msync unmapped: %s, length 0: %s\n", res(msync(m, 4096, MS_SYNC)), res(msync(m, 0, MS_SYNC)));
    close(f);

    struct timespec ts = {0, 0};
    printf("clock_settime MONOTONIC: %s, bad clock: %s\n", res(clock_settime(CLOCK_MONOTONIC, &ts)),
           res(clock_settime(77, &ts)));
    clockid_t c;
    int r = pthread_getcpuclockid(pthread_self(), &c);
    int g = clock_gettime(c, &ts);
    printf("thread cpu clock: %d, gettime %s, positive %d\n", r, res(g), ts.tv_sec > 0 || ts.tv_nsec > 0);
    r = clock_getcpuclockid(0, &c);
    g = clock_gettime(c, &ts);
    printf("process cpu clock: %d, gettime %s, getres %s\n", r, res(g), res(clock_getres(c, &ts)));
    printf("clock_gettime of an invalid cpu clock: %s\n", res(clock_gettime((-1 & ~7) | 3, &ts)));
    struct rusage ru;
    printf("getrusage self: %s", res(getrusage(RUSAGE_SELF, &ru)));
    printf(", thread: %s", res(getrusage(RUSAGE_THREAD, &ru)));
    printf(", children: %s", res(getrusage(RUSAGE_CHILDREN, &ru)));
    printf(", who 5: %s\n", res(getrusage(5, &ru)));
    int d = open("/", O_RDONLY | O_DIRECTORY);
    printf("F_NOTIFY on a directory: %s", res(fcntl(d, F_NOTIFY, DN_CREATE)));
    close(d);
    d = open("/dev/null", O_RDONLY);
    printf(", on a file: %s\n", res(fcntl(d, F_NOTIFY, DN_CREATE)));
    close(d);
}

/* epoll_wait reports every ready descriptor up to maxevents, more than 1024 included. */
static void many_ready(void) {
    enum { N = 1500 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    struct rlimit more = {rl.rlim_max < 4096 ? rl.rlim_max : 4096, rl.rlim_max};
    setrlimit(RLIMIT_NOFILE, &more);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int fds[N], made = 0;
    for (; made < N; made++) {
        fds[made] = eventfd(0, EFD_CLOEXEC);
        if (fds[made] < 0) break;
        struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = made};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[made], &ev);
    }
    struct epoll_event *evs = calloc(N + 100, sizeof *evs);
    int n = epoll_wait(ep, evs, N + 100, 1000);
    printf("epoll_wait with %d ready: %d\n", made, n);
    n = epoll_wait(ep, evs, 1100, 1000);
    printf("epoll_wait maxevents 1100: %d\n", n);
    free(evs);
    for (int i = 0; i < made; i++) close(fds[i]);
    close(ep);
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void pty_checks(void) {
    int m, s;
    printf("openpty: %s", res(openpty(&m, &s, NULL, NULL, NULL)));
    printf(", isatty %d %d", isatty(m), isatty(s));
    unsigned n = 12345;
    printf(", TIOCGPTN %s", res(ioctl(m, TIOCGPTN, &n)));
    printf(", on the slave %s\n", res(ioctl(s, TIOCGPTN, &n)));
    struct termios tio;
    printf("tcgetattr slave %s", res(tcgetattr(s, &tio)));
    cfmakeraw(&tio);
    printf(", tcsetattr raw %s", res(tcsetattr(s, TCSANOW, &tio)));
    struct winsize ws = {.ws_row = 24, .ws_col = 80}, got = {0};
    printf(", TIOCSWINSZ %s", res(ioctl(m, TIOCSWINSZ, &ws)));
    int w = ioctl(s, TIOCGWINSZ, &got);
    printf(", TIOCGWINSZ %s %dx%d\n", res(w), got.ws_col, got.ws_row);
    char b[32] = {0};
    write(s, "to master", 9);
    ssize_t r = read(m, b, sizeof b - 1);
    printf("slave -> master: %zd %s", r, b);
    memset(b, 0, sizeof b);
    write(m, "to slave", 8);
    r = read(s, b, sizeof b - 1);
    printf(", master -> slave: %zd %s\n", r, b);
    int peer = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    printf("TIOCGPTPEER: %s, cloexec %d, isatty %d", peer >= 0 ? "ok" : res(peer),
           (fcntl(peer, F_GETFD) & FD_CLOEXEC) != 0, isatty(peer));
    printf(", on the slave %s", res(ioctl(s, TIOCGPTPEER, O_RDWR)));
    int fd = open("/dev/null", O_RDONLY);
    printf(", on /dev/null %s\n", res(ioctl(fd, TIOCGPTPEER, O_RDWR)));
    close(fd);
    close(peer);
    close(s);
    r = read(m, b, sizeof b);
    printf("master read after the slave closed: %s\n", res(r));
    close(m);
    fflush(stdout);
    pid_t pid = forkpty(&m, NULL, NULL, NULL);
    if (pid == 0) {
        printf("child: tty %d, session leader %d\n", isatty(1), getsid(0) == getpid());
        fflush(stdout);
        _exit(7);
    }
    printf("forkpty: %s\n", pid > 0 ? "ok" : res(pid));
    char out[256] = {0};
    size_t got_n = 0;
    for (;;) {
        r = read(m, out + got_n, sizeof out - 1 - got_n);
        if (r <= 0) break;
        got_n += r;
    }
    int st;
    waitpid(pid, &st, 0);
    printf("forkpty child said: %s", out);
    printf("forkpty child exit %d\n", WEXITSTATUS(st));
    close(m);
}

/* /proc/self/fd/N, /dev/fd/N and /dev/stdout opened again: a new open file description of
 * the same file (a pipe's write end from its own descriptor, a file with an offset of its
 * own); sockets cannot be opened so (ENXIO), a closed descriptor is ENOENT. */
static void reopen_fds(void) {
    int p[2];
    if (pipe(p) != 0) { perror("pipe"); return; }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
    int w = open(path, O_WRONLY);
    long n = w >= 0 ? write(w, "again", 5) : -1;
    char b[16] = {0};
    read(p[0], b, sizeof b - 1);
    printf("reopen pipe: %s, wrote %ld, read %s\n", w >= 0 ? "ok" : res(w), n, b);
    int f = open("reopen.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    write(f, "0123456789", 10);
    lseek(f, 3, SEEK_SET);
    snprintf(path, sizeof path, "/dev/fd/%d", f);
    int g = open(path, O_RDONLY);
    memset(b, 0, sizeof b);
    n = g >= 0 ? read(g, b, 4) : -1;
    printf("reopen file: %s, read %ld %s, first offset %ld\n", g >= 0 ? "ok" : res(g), n, b,
           (long)lseek(f, 0, SEEK_CUR));
    unlink("reopen.tmp");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    snprintf(path, sizeof path, "/proc/self/fd/%d", s);
    printf("reopen socket: %s\n", res(open(path, O_RDWR)));
    printf("reopen closed: %s\n", res(open("/proc/self/fd/987", O_RDONLY)));
    struct stat a, c;
    printf("stat /dev/stdout is fd 1: %d\n",
           stat("/dev/stdout", &a) == 0 && fstat(1, &c) == 0 && a.st_ino == c.st_ino &&
               a.st_dev == c.st_dev);
    close(p[0]), close(p[1]), close(w), close(f), close(g), close(s);
}

/* /proc/self and /proc/PID as directories: listed (with fd/), the link /proc/self, files
 * opened relative to the directory, and the directory as a pidfd for pidfd_send_signal. */
static volatile sig_atomic_t usr2_seen;
static void on_usr2(int sig) {
    (void)sig;
    usr2_seen = 1;
}

static int lists(const char *dir, const char *name) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) found |= strcmp(e->d_name, name) == 0;
    closedir(d);
    return found;
}

static void proc_dirs(void) {
    char self[32] = {0}, want[32];
    readlink("/proc/self", self, sizeof self - 1);
    snprintf(want, sizeof want, "%d", getpid());
    printf("/proc/self is /proc/PID: %d\n", strcmp(self, want) == 0);
    printf("/proc/self lists status maps fd: %d %d %d\n", lists("/proc/self", "status"),
           lists("/proc/self", "maps"), lists("/proc/self", "fd"));
    int keep = open("/dev/null", O_RDONLY);
    char fdname[16];
    snprintf(fdname, sizeof fdname, "%d", keep);
    printf("/proc/self/fd lists an open descriptor: %d\n", lists("/proc/self/fd", fdname));
    struct stat ps;
    int sr = stat("/proc/self/status", &ps);
    printf("stat /proc/self/status: %s, regular %d, mode %o\n", res(sr), S_ISREG(ps.st_mode),
           ps.st_mode & 07777);
    close(keep);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", getpid());
    int d = open(path, O_RDONLY | O_DIRECTORY);
    int st = d >= 0 ? openat(d, "status", O_RDONLY) : -1;
    char b[6] = {0};
    if (st >= 0) read(st, b, 5);
    printf("/proc/PID opened: %s, status through it: %s\n", d >= 0 ? "ok" : res(d), b);
    signal(SIGUSR2, on_usr2);
    signal(SIGTTOU, SIG_IGN);
    unsigned long long cgt = 0, ign = 0;
    FILE *sf = fopen("/proc/self/status", "r");
    char line[256];
    while (sf && fgets(line, sizeof line, sf)) {
        sscanf(line, "SigCgt: %llx", &cgt);
        sscanf(line, "SigIgn: %llx", &ign);
    }
    if (sf) fclose(sf);
    printf("status SigCgt has SIGUSR2: %d, SigIgn has SIGTTOU: %d\n", (int)(cgt >> (SIGUSR2 - 1) & 1),
           (int)(ign >> (SIGTTOU - 1) & 1));
    signal(SIGTTOU, SIG_DFL);
    long r = syscall(SYS_pidfd_send_signal, d, SIGUSR2, NULL, 0);
    printf("pidfd_send_signal through /proc/PID: %s, delivered %d\n", res(r), usr2_seen);
    siginfo_t si;
    r = syscall(SYS_waitid, P_PIDFD, d, &si, WEXITED | WNOHANG, NULL);
    printf("waitid P_PIDFD on /proc/PID: %s\n", res(r));
    close(st), close(d);
    /* Closing descriptors while listing /proc/self/fd, one small record at a time (CPython's
     * subprocess does so in a child): none is skipped. */
    int first = open("/dev/null", O_RDONLY);
    for (int i = 0; i < 4; i++) open("/dev/null", O_RDONLY);
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY);
    char rec[24];
    long n;
    while ((n = syscall(SYS_getdents64, dir, rec, sizeof rec)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(rec + off);
            int fd = atoi(e->d_name);
            if (e->d_name[0] != '.' && fd >= first && fd != dir) close(fd);
            off += e->d_reclen;
        }
    }
    int open_left = 0;
    for (int fd = first; fd < first + 5; fd++) open_left += fcntl(fd, F_GETFD) != -1;
    printf("closing while listing /proc/self/fd: getdents %ld, left open %d\n", n, open_left);
    close(dir);
}

/* The program a process runs cannot be written (ETXTBSY): not opened for writing, not through
 * /proc/self/fd, not truncated. */
static void text_busy(void) {
    printf("open own program for writing: %s\n", res(open("/proc/self/exe", O_WRONLY)));
    int r = open("/proc/self/exe", O_RDONLY);
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", r);
    printf("reopen own program for writing: %s\n", res(open(p, O_RDWR)));
    char exe[4096] = {0};
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    printf("truncate own program: %s\n", res(truncate(exe, 0)));
    close(r);
}

/* memfd_create: an anonymous file that reads, writes, truncates and maps. */
static void memfd(void) {
    int fd = memfd_create("misc", MFD_CLOEXEC);
    char link[64], want[64], b[16] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, want, sizeof want - 1);
    want[n > 0 ? n : 0] = 0;
    printf("memfd_create: %s, cloexec %d, link %s", fd >= 0 ? "ok" : res(fd),
           (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, want);
    n = write(fd, "in a memfd", 10);
    printf(", write %zd, offset %lld", n, (long long)lseek(fd, 0, SEEK_CUR));
    printf(", ftruncate %d", ftruncate(fd, 8192));
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memcpy(b, m, 10);
    m[4096] = 'z';
    char z = 0;
    pread(fd, &z, 1, 4096);
    printf(", mapped %s, store seen by pread %c\n", b, z);
    munmap(m, 8192);
    close(fd);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    printf("memfd_create long name: %s, flags 0x100: %s\n", res(memfd_create(longname, 0)),
           res(memfd_create("x", 0x100)));
}

/* UDP-Lite sockets and RFC 3542's IPv6 ancillary data (the hop limit of received datagrams). */
static void inet_extras(void) {
    int s = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE);
    int cov = 8, got = 0, proto = 0;
    socklen_t l = sizeof got;
    printf("udplite socket: %s", s >= 0 ? "ok" : res(s));
    printf(", send coverage %s", res(setsockopt(s, IPPROTO_UDPLITE, 10, &cov, sizeof cov)));
    getsockopt(s, IPPROTO_UDPLITE, 10, &got, &l);
    l = sizeof proto;
    getsockopt(s, SOL_SOCKET, SO_PROTOCOL, &proto, &l);
    printf(" -> %d, protocol %d", got, proto);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &al);
    int c = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE);
    sendto(c, "lite", 4, 0, (struct sockaddr *)&a, sizeof a);
    char b[16] = {0};
    ssize_t n = recv(s, b, sizeof b - 1, 0);
    printf(", datagram %zd %s\n", n, b);
    close(s);
    close(c);

    int u = socket(AF_INET6, SOCK_DGRAM, 0), on = 1;
    printf("IPV6_RECVHOPLIMIT: %s", res(setsockopt(u, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &on, sizeof on)));
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    al = sizeof a6;
    bind(u, (struct sockaddr *)&a6, sizeof a6);
    getsockname(u, (struct sockaddr *)&a6, &al);
    int v = socket(AF_INET6, SOCK_DGRAM, 0);
    sendto(v, "six", 3, 0, (struct sockaddr *)&a6, sizeof a6);
    char ctl[64];
    struct iovec io = {b, sizeof b - 1};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    memset(b, 0, sizeof b);
    n = recvmsg(u, &m, 0);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    int hops = -1;
    if (cm && cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_HOPLIMIT)
        memcpy(&hops, CMSG_DATA(cm), sizeof hops);
    printf(", recvmsg %zd %s, hop limit cmsg %d\n", n, b, hops);
    close(u);
    close(v);
}

static const char *err_name(int r) {
    if (r >= 0)
        return "ok";
    switch (errno) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case ENOSYS: return "ENOSYS";
    case EFAULT: return "EFAULT";
    case EBADF: return "EBADF";
    case EFBIG: return "EFBIG";
    case ENOTSOCK: return "ENOTSOCK";
    default: return "other";
    }
}

/* Calls the Linux Test Project found missing or answering the wrong errno: mincore,
 * mlockall, readahead, sendmmsg/recvmmsg, getsockopt at a foreign level, a privileged port
 * bound by an unprivileged user. */
static void ltp_findings(void) {
    long pg = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    m[pg] = 1;
    unsigned char vec[4] = {0};
    int r = mincore(m, 4 * pg, vec);
    printf("mincore: %s, touched page resident %d\n", err_name(r), vec[1] & 1);
    printf("mincore unaligned: %s\n", err_name(mincore(m + 1, pg, vec)));
    printf("mincore bad vector: %s\n", err_name(mincore(m, pg, (unsigned char *)8)));
    munmap(m + 2 * pg, pg);
    printf("mincore over a hole: %s\n", err_name(mincore(m, 4 * pg, vec)));
    printf("mlockall current: %s\n", err_name(mlockall(MCL_CURRENT)));
    printf("munlockall: %s\n", err_name(munlockall()));
    printf("mlockall 0: %s\n", err_name(mlockall(0)));
    int f = open("/ra", O_RDWR | O_CREAT | O_TRUNC, 0600);
    write(f, "readahead", 9);
    printf("readahead file: %s\n", err_name((int)readahead(f, 0, 4096)));
    close(f);
    unlink("/ra");
    int p[2];
    pipe(p);
    printf("readahead pipe: %s\n", err_name((int)readahead(p[0], 0, 4096)));
    close(p[0]);
    close(p[1]);
    int sv[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
    char a[] = "one", b[] = "three", c[] = "seven!";
    struct iovec iov[3] = {{a, 3}, {b, 5}, {c, 6}};
    struct mmsghdr out[3];
    memset(out, 0, sizeof out);
    for (int i = 0; i < 3; i++) {
        out[i].msg_hdr.msg_iov = &iov[i];
        out[i].msg_hdr.msg_iovlen = 1;
    }
    r = sendmmsg(sv[0], out, 3, 0);
    printf("sendmmsg: %d, lengths %u %u %u\n", r, out[0].msg_len, out[1].msg_len, out[2].msg_len);
    char bufs[5][16];
    struct iovec riov[5];
    struct mmsghdr in[5];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 5; i++) {
        riov[i].iov_base = bufs[i];
        riov[i].iov_len = sizeof bufs[i];
        in[i].msg_hdr.msg_iov = &riov[i];
        in[i].msg_hdr.msg_iovlen = 1;
    }
    r = recvmmsg(sv[1], in, 5, MSG_WAITFORONE, NULL);
    printf("recvmmsg: %d, lengths %u %u %u, third %.6s\n", r, in[0].msg_len, in[1].msg_len,
           in[2].msg_len, bufs[2]);
    r = recvmmsg(sv[1], in, 5, MSG_DONTWAIT, NULL);
    printf("recvmmsg empty: %d %s\n", r, errno == EAGAIN ? "EAGAIN" : "other");
    close(sv[0]);
    close(sv[1]);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int v;
    socklen_t len = sizeof v;
    printf("getsockopt level 500: %s\n", err_name(getsockopt(s, 500, SO_OOBINLINE, &v, &len)));
    printf("getsockopt UDP level on TCP: %s\n",
           err_name(getsockopt(s, IPPROTO_UDP, SO_OOBINLINE, &v, &len)));
    printf("getsockopt TCP -1: %s\n", err_name(getsockopt(s, IPPROTO_TCP, -1, &v, &len)));
    printf("setsockopt level 500: %s\n", err_name(setsockopt(s, 500, SO_OOBINLINE, &v, sizeof v)));
    printf("setsockopt UDP level on TCP: %s\n",
           err_name(setsockopt(s, IPPROTO_UDP, SO_OOBINLINE, &v, sizeof v)));
    int op = open("/", O_PATH);
    printf("accept on O_PATH: %s, on a directory: %s\n", err_name(accept(op, NULL, NULL)),
           err_name(accept(open("/", O_RDONLY), NULL, NULL)));
    struct timespec ts = {0, 1000};
    printf("clock_nanosleep thread cpu clock: %s\n",
           err_name((int)syscall(SYS_clock_nanosleep, CLOCK_THREAD_CPUTIME_ID, 0, &ts, NULL)));
    /* RLIMIT_FSIZE: a write that starts at the limit fails (SIGXFSZ ignored), one that
     * crosses it is cut short. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit fsz = {4096, RLIM_INFINITY};
    setrlimit(RLIMIT_FSIZE, &fsz);
    int big = open("/fsize", O_RDWR | O_CREAT | O_TRUNC, 0600);
    char blk[100] = {0};
    printf("write at the file size limit: %s, across it: %d\n",
           err_name((int)pwrite(big, blk, sizeof blk, 4096)), (int)pwrite(big, blk, sizeof blk, 4090));
    struct iovec two[2] = {{blk, 50}, {blk, 50}};
    printf("writev across the file size limit: %d\n", (int)pwritev(big, two, 2, 4026));
    printf("ftruncate past the file size limit: %s, to it: %s; truncate past it: %s; "
           "fallocate past it: %s, keeping the size: %s\n",
           err_name(ftruncate(big, 8192)), err_name(ftruncate(big, 4096)),
           err_name(truncate("/fsize", 4097)), err_name(fallocate(big, 0, 4000, 200)),
           err_name(fallocate(big, FALLOC_FL_KEEP_SIZE, 4000, 200)));
    fsz.rlim_cur = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &fsz);
    close(big);
    unlink("/fsize");
    close(s);
    struct timespec tai;
    printf("clock_gettime TAI: %s\n", err_name(clock_gettime(CLOCK_TAI, &tai)));
    int before = personality(0xffffffff);
    int set = personality(ADDR_NO_RANDOMIZE);
    int now = personality(0xffffffff);
    personality(UNAME26);
    struct utsname un;
    uname(&un);
    personality(0);
    printf("personality: query %#x, set returns %#x, now %#x, UNAME26 release 2.6 %d, bad domain %s\n",
           before, set, now, strncmp(un.release, "2.6.", 4) == 0, err_name(personality(0x42)));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setgid(65534);
        setuid(65534);
        int u = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(81)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        printf("nobody binds port 81: %s\n", err_name(bind(u, (struct sockaddr *)&sa, sizeof sa)));
        struct rlimit lim;
        getrlimit(RLIMIT_NOFILE, &lim);
        lim.rlim_max += 1;
        printf("nobody raises a hard limit: %s\n", err_name(setrlimit(RLIMIT_NOFILE, &lim)));
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "pty") == 0) {
        pty_checks();
        return 0;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        write(p[1], "through a pipe", 14);
        char b[32] = {0};
        ssize_t n = read(p[0], b, sizeof b - 1);
        printf("pipe: %zd %s, cloexec %d\n", n, b, (fcntl(p[0], F_GETFD) & FD_CLOEXEC) != 0);
        close(p[1]);
        printf("pipe after close: read %zd\n", read(p[0], b, sizeof b));
    } else perror("pipe2");
    int fd = open("/dev/null", O_WRONLY);
    printf("/dev/null: write %zd\n", write(fd, "x", 1));
    close(fd);
    fd = open("/dev/zero", O_RDONLY);
    char z[64];
    memset(z, 1, sizeof z);
    ssize_t n = read(fd, z, sizeof z);
    int zeros = 1;
    for (int i = 0; i < 64; i++) zeros &= z[i] == 0;
    printf("/dev/zero: read %zd zeros %d\n", n, zeros);
    close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    printf("/dev/urandom: read %zd\n", read(fd, z, 16));
    close(fd);
    struct sysinfo si;
    int r = sysinfo(&si);
    printf("sysinfo: %d, ram > 0: %d\n", r, si.totalram * si.mem_unit > 0);
    cpu_set_t set;
    r = sched_getaffinity(0, sizeof set, &set);
    printf("affinity: %d, cpus > 0: %d\n", r, CPU_COUNT(&set) > 0);
    int e = eventfd(3, EFD_CLOEXEC | EFD_NONBLOCK);
    uint64_t v = 4;
    write(e, &v, 8);
    v = 0;
    n = read(e, &v, 8);
    printf("eventfd: read %zd value %llu", n, (unsigned long long)v);
    printf(", again %zd\n", read(e, &v, 8));
    int tf = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    struct itimerspec its = {.it_value = {.tv_nsec = 20 * 1000 * 1000}};
    printf("timerfd: settime %d\n", timerfd_settime(tf, 0, &its, 0));
    uint64_t expirations = 0;
    n = read(tf, &expirations, 8);
    printf("timerfd: read %zd expirations %llu\n", n, (unsigned long long)expirations);
    splicing();
    scheduling();
    many_ready();
    clocks_and_sync();
    memfd();
    inet_extras();
    reopen_fds();
    proc_dirs();
    text_busy();
    ltp_findings();
    return 0;
}
