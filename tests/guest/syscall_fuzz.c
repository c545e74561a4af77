/* syscall_fuzz: a hostile guest issuing random system calls with random arguments.
 *
 *   syscall_fuzz SEED COUNT [-v] [-t THREADS]
 *
 * From SEED (an xorshift generator), issues COUNT raw system calls (the `syscall` instruction,
 * never libc) with numbers drawn from 0..449, and prints one summary line:
 *
 *   syscall_fuzz: seed=S count=N done=N ok=.. err=.. enosys=.. efault=.. eintr=.. signals=.. distinct=..
 *
 * Arguments are drawn per syscall from a rough type signature (fd, path, buffer, length,
 * flags, address, timespec, sigset, sockaddr, iovec, pid, signal...) or, one time in five, with
 * no signature at all. Pointers point into the program's own scratch arena and outside it:
 * NULL, low addresses, the arena's last bytes (a PROT_NONE guard page follows), a read-only
 * page, a PROT_NONE page, code, the kernel half, non-canonical addresses, the last user
 * page, torpor's direct map (0x7f80_0000_0000), a "playground" region, valid structures
 * (timespecs, iovecs, sockaddrs, pollfds, sigsets). Lengths include 0, page sizes and huge
 * values; flags random bits, all bits, -1; fds come from a pool of real descriptors (file,
 * directory, pipe, socketpair, TCP listener and client, UDP, eventfd, timerfd, epoll) plus bad
 * numbers. `-v` prints each call before it is made (to find the one that crashes a run).
 * `-t THREADS` fuzzes from that many threads at once (COUNT calls in all, each thread with its
 * own generator, sharing the arena, the descriptors and the playground), with the main thread
 * as their watchdog (a SIGUSR1 to each every 20 ms) instead of a watchdog process.
 *
 * What keeps the program itself alive (the denylist and the sanitising, on purpose):
 * - never issued: exit (60), exit_group (231), rt_sigreturn (15), clone (56), fork (57),
 *   vfork (58), clone3 (435) (fork storms; children running this loop on a random stack),
 *   set_tid_address (218) with -t (pthread_join waits on the address it replaces); with -t,
 *   rt_sigaction only queries (another thread would take a signal before the handlers are
 *   re-installed),
 *   ptrace (101), process_vm_writev (311), seccomp (317), reboot (169) and the other host
 *   administration calls are harmless under torpor (ENOSYS) but the program refuses to run
 *   outside torpor anyway (uname's nodename must be "torpor", or pass -native-i-know).
 * - signals: kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo and pidfd_send_signal
 *   only target this process (or pids that do not exist), never with SIGKILL or SIGSTOP;
 *   every other signal has a counting handler, re-installed (with signals blocked) after each
 *   fuzzed rt_sigaction; SIGUSR1 is unblocked after each fuzzed rt_sigprocmask, and cleared
 *   from the masks that ppoll, pselect6, epoll_pwait(2) and rt_sigsuspend apply while waiting.
 * - blocking: a watchdog child process sends SIGUSR1 to this process every 20 ms, so any
 *   blocking call (a read of an empty pipe, accept, futex, flock, pause-like waits, long
 *   sleeps) ends with EINTR; sleeps and timeouts are mostly short anyway.
 * - memory: what mmap and mremap map outside the playground is unmapped every 2,000 calls
 *   (one thread) and brk set back, so that memory does not pile up to the sandbox's limit;
 *   mmap with MAP_FIXED(_NOREPLACE), munmap, mprotect, madvise, mremap (old and new
 *   address), remap_file_pages, pkey_mprotect, mbind only get addresses inside a 16 MiB
 *   playground (or the scratch arena for madvise, or invalid addresses); brk only values at
 *   or above the initial break (or invalid ones); arch_prctl never ARCH_SET_FS/GS; prctl
 *   never PR_SET_SECCOMP or PR_SET_MM; prlimit64/setrlimit never get a valid new limit.
 * - the program's own output descriptor (1000) is never closed, duplicated onto or written;
 *   0, 1 and 2 point at a scratch file; execve/execveat only name scratch files that cannot
 *   run (random bytes, a missing or looping #! interpreter, no execute bit).
 * - no pointer ever points at the stack or the program's globals, so the kernel cannot
 *   legitimately overwrite the program's own state.
 * A fault taken outside a fuzzed syscall (a corrupted program) prints a line and exits 3.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define NR_MAX 450
#define OUT_FD 1000
#define PAGE 4096UL
#define ARENA_BYTES (256 * 1024UL)
#define STR_OFF 0
#define STRUCT_OFF 8192
#define RAND_OFF 16384
#define PLAY_BYTES (16UL << 20)
#define WATCHDOG_NS 20000000L
#define REFRESH_EVERY 2000

static __thread uint64_t rng;
static int verbose;
static __thread volatile sig_atomic_t in_syscall;
static volatile sig_atomic_t signals;
static unsigned char *arena, *ro_page, *none_page, *play;
static unsigned long initial_brk;
static unsigned char strings_pristine[8192];
static int pool[24], npool;
static int listen_port;
static pid_t self_pid, watchdog;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static uint64_t below(uint64_t n) { return n ? next() % n : 0; }
static int chance(int pct) { return (int)below(100) < pct; }

static long raw(long n, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static void out(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 1)
        n = sizeof buf - 1;
    raw(SYS_write, OUT_FD, (long)buf, n, 0, 0, 0);
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    signals++;
    int sync = sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP;
    if (sync && si->si_code > 0 && !in_syscall) {
        char msg[160];
        ucontext_t *u = uc;
        int n = snprintf(msg, sizeof msg,
                         "syscall_fuzz: fault: signal %d code %d addr %p rip %#llx rsp %#llx\n",
                         sig, si->si_code, si->si_addr, (unsigned long long)u->uc_mcontext.gregs[REG_RIP],
                         (unsigned long long)u->uc_mcontext.gregs[REG_RSP]);
        raw(SYS_write, OUT_FD, (long)msg, n, 0, 0, 0);
        raw(SYS_exit_group, 3, 0, 0, 0, 0, 0);
    }
}

/* Installed with the raw call, so that glibc's reserved signals (32, 33) are covered too. */
void fz_restorer(void);
__asm__(".text\n.globl fz_restorer\nfz_restorer:\n\tmov $15, %rax\n\tsyscall\n\thlt\n");

static void install_handlers(void) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } ka = {(void *)on_signal, SA_SIGINFO | 0x04000000 /* SA_RESTORER */, (void *)fz_restorer, 0};
    /* no SA_RESTART: a watchdog signal ends a blocking call */
    for (int s = 1; s < 65; s++)
        if (s != SIGKILL && s != SIGSTOP)
            raw(SYS_rt_sigaction, s, (long)&ka, 0, 8, 0, 0);
}

static void block_all(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, old);
}

static void unblock_usr1(void) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
}

/* ---- scratch files, descriptor pool ---- */

static void write_file(const char *path, const void *data, size_t len, mode_t mode) {
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd >= 0) {
        if (write(fd, data, len) < 0) {
        }
        close(fd);
        chmod(path, mode);
    }
}

static void make_scratch(void) {
    mkdir("/tmp", 0777);
    mkdir("/tmp/fz", 0777);
    mkdir("/tmp/fz/dir", 0777);
    unsigned char junk[512];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)next();
    write_file("/tmp/fz/garbage", junk, sizeof junk, 0755);
    memcpy(junk, "\x7f" "ELF\x02\x01\x01", 7);
    write_file("/tmp/fz/elfjunk", junk, sizeof junk, 0755);
    write_file("/tmp/fz/shebang", "#!/tmp/fz/missing -x\n", 21, 0755);
    write_file("/tmp/fz/loop", "#!/tmp/fz/loop\n", 15, 0755);
    write_file("/tmp/fz/noexec", "#!/tmp/fz/missing\n", 18, 0644);
    write_file("/tmp/fz/data", junk, sizeof junk, 0644);
}

static void close_pool(void) {
    for (int fd = 3; fd < 300; fd++)
        if (fd != OUT_FD)
            raw(SYS_close, fd, 0, 0, 0, 0, 0);
    npool = 0;
}

static void add(int fd) {
    if (fd >= 0 && npool < (int)(sizeof pool / sizeof pool[0]))
        pool[npool++] = fd;
}

static void open_pool(void) {
    int sio = open("/tmp/fz/stdio", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (sio >= 0) {
        dup2(sio, 0);
        dup2(sio, 1);
        dup2(sio, 2);
        if (sio > 2)
            close(sio);
    }
    add(open("/tmp/fz/data", O_RDWR | O_CREAT, 0644));
    add(open("/tmp/fz/dir", O_RDONLY | O_DIRECTORY));
    add(open("/tmp/fz/garbage", O_RDONLY));
    int p[2];
    if (pipe2(p, O_NONBLOCK) == 0) {
        add(p[0]);
        add(p[1]);
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p) == 0) {
        add(p[0]);
        add(p[1]);
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l >= 0 && bind(l, (void *)&sin, sizeof sin) == 0 && listen(l, 16) == 0) {
        socklen_t sl = sizeof sin;
        getsockname(l, (void *)&sin, &sl);
        listen_port = ntohs(sin.sin_port);
        add(l);
        int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (c >= 0) {
            connect(c, (void *)&sin, sizeof sin);
            add(c);
        }
    } else if (l >= 0) {
        close(l);
    }
    add(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0));
    add(socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0));
    add(socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0));
    add(eventfd(1, EFD_NONBLOCK));
    add(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK));
    int ep = epoll_create1(0);
    if (ep >= 0) {
        for (int i = 0; i < npool; i++) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)i};
            epoll_ctl(ep, EPOLL_CTL_ADD, pool[i], &ev);
        }
        add(ep);
    }
}

/* ---- the arena: strings, structures, random bytes ---- */

static const char *const path_list[] = {
    "/", ".", "..", "", "/tmp/fz/data", "/tmp/fz/dir", "/tmp/fz/new", "/tmp/fz/dir/x",
    "/tmp/fz/garbage", "/tmp/fz/shebang", "/proc/self/maps", "/proc/self/fd/3",
    "/proc/self/status", "/proc/self/exe", "/proc/self/cmdline", "/dev/null", "/dev/zero",
    "/dev/urandom", "/etc/passwd", "../../../../../../etc/shadow", "/tmp/fz/../../..",
    "/tmp/fz/sock", "relative", "tmp/fz/data", "/sys/devices/system/cpu/online",
    "/proc/self/root/../..", "/tmp/fz/link", "//tmp///fz//./data",
};
#define NPATHS (sizeof path_list / sizeof path_list[0])
static unsigned path_off[NPATHS + 2];

static void build_strings(void) {
    unsigned char *s = strings_pristine;
    unsigned off = 0;
    for (unsigned i = 0; i < NPATHS; i++) {
        size_t n = strlen(path_list[i]) + 1;
        memcpy(s + off, path_list[i], n);
        path_off[i] = off;
        off += n;
    }
    /* A 4,500-byte path (ENAMETOOLONG) and an unterminated run to the end of the region. */
    path_off[NPATHS] = off;
    memset(s + off, 'a', 4500);
    for (unsigned k = 100; k < 4500; k += 100)
        s[off + k] = '/';
    s[off + 4500] = 0;
    off += 4501;
    path_off[NPATHS + 1] = off;
    memset(s + off, 'b', sizeof strings_pristine - off);
}

/* Valid structures, rebuilt before every call at STRUCT_OFF. */
enum {
    TS_SMALL, TS_ZERO, TS_BADNS, TS_NEG, ITS, IOV, IOV_HUGE, SIN, SIN6, SUN, MSG, POLLFDS,
    EPEV, SIGSET, PSEL, RLIM, FDPAIR, FUTEX, NSTRUCT
};
static unsigned struct_off[NSTRUCT];

static void build_structs(void) {
    unsigned char *base = arena + STRUCT_OFF;
    unsigned off = 0;
#define PLACE(id, T) ((T *)(struct_off[id] = off, off += (sizeof(T) * 8 + 15) & ~15u, base + struct_off[id]))
    struct timespec *ts = PLACE(TS_SMALL, struct timespec);
    ts->tv_sec = 0, ts->tv_nsec = (long)below(1000000);
    ts = PLACE(TS_ZERO, struct timespec);
    ts->tv_sec = 0, ts->tv_nsec = 0;
    ts = PLACE(TS_BADNS, struct timespec);
    ts->tv_sec = 0, ts->tv_nsec = 2000000000L;
    ts = PLACE(TS_NEG, struct timespec);
    ts->tv_sec = -1, ts->tv_nsec = 0;
    struct itimerspec *it = PLACE(ITS, struct itimerspec);
    it->it_interval.tv_sec = 0, it->it_interval.tv_nsec = 1000000;
    it->it_value.tv_sec = 0, it->it_value.tv_nsec = 1000000;
    struct iovec *iov = PLACE(IOV, struct iovec);
    for (int i = 0; i < 8; i++) {
        iov[i].iov_base = arena + RAND_OFF + below(ARENA_BYTES - RAND_OFF);
        iov[i].iov_len = below(8192);
    }
    iov = PLACE(IOV_HUGE, struct iovec);
    for (int i = 0; i < 8; i++) {
        iov[i].iov_base = i & 1 ? (void *)0xffff800000000000ul : arena + RAND_OFF;
        iov[i].iov_len = i & 2 ? ~0ul >> 1 : ARENA_BYTES;
    }
    struct sockaddr_in *sin = PLACE(SIN, struct sockaddr_in);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(chance(70) ? listen_port : (uint16_t)next());
    sin->sin_addr.s_addr = chance(80) ? htonl(INADDR_LOOPBACK) : (uint32_t)next();
    struct sockaddr_in6 *sin6 = PLACE(SIN6, struct sockaddr_in6);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(listen_port);
    sin6->sin6_addr = in6addr_loopback;
    struct sockaddr_un *sun = PLACE(SUN, struct sockaddr_un);
    sun->sun_family = AF_UNIX;
    strcpy(sun->sun_path, chance(50) ? "/tmp/fz/sock" : "\0abstract");
    struct msghdr *msg = PLACE(MSG, struct msghdr);
    msg->msg_name = chance(50) ? (void *)(base + struct_off[SIN]) : NULL;
    msg->msg_namelen = chance(80) ? sizeof(struct sockaddr_in) : (socklen_t)next();
    msg->msg_iov = (void *)(base + struct_off[IOV]);
    msg->msg_iovlen = below(10);
    msg->msg_control = chance(50) ? arena + RAND_OFF : NULL;
    msg->msg_controllen = below(512);
    struct pollfd *pfd = PLACE(POLLFDS, struct pollfd);
    for (int i = 0; i < 8; i++) {
        pfd[i].fd = npool ? pool[below(npool)] : -1;
        pfd[i].events = chance(80) ? (POLLIN | POLLOUT) : (short)next();
    }
    struct epoll_event *ev = PLACE(EPEV, struct epoll_event);
    ev->events = (uint32_t)(chance(70) ? (EPOLLIN | EPOLLOUT | (chance(30) ? EPOLLET : 0)) : next());
    ev->data.u64 = next();
    uint64_t *set = PLACE(SIGSET, uint64_t);
    set[0] = next() & ~(1ull << (SIGUSR1 - 1));
    uint64_t *ps = PLACE(PSEL, uint64_t);
    ps[0] = (uint64_t)(base + struct_off[SIGSET]);
    ps[1] = chance(80) ? 8 : next();
    struct rlimit *rl = PLACE(RLIM, struct rlimit);
    rl->rlim_cur = rl->rlim_max = RLIM_INFINITY;
    int *fp = PLACE(FDPAIR, int);
    fp[0] = fp[1] = -1;
    uint32_t *fx = PLACE(FUTEX, uint32_t);
    fx[0] = (uint32_t)below(3);
#undef PLACE
}

static unsigned char *structp(int id) { return arena + STRUCT_OFF + struct_off[id]; }

/* ---- argument generators ---- */

int main_dummy_code_marker(void);
int main_dummy_code_marker(void) { return 0; }

static uint64_t bad_pointer(void) {
    static const uint64_t bad[] = {
        0, 1, 0xfff, 0x1000, 0x00007e0000000000ull, 0x00007f7ffffff000ull,
        0x00007f8000000000ull, 0x00007f8000001000ull, 0x00007fffffffe000ull,
        0x00007fffffffffffull, 0x0000800000000000ull, 0x0000900000000000ull,
        0xffff800000000000ull, 0xffffffff80000000ull, 0xffffffffff600000ull,
        0xfffffffffffff000ull, 0xffffffffffffffffull,
    };
    return bad[below(sizeof bad / sizeof bad[0])];
}

static uint64_t ptr(void) {
    switch (below(12)) {
    case 0: case 1: return bad_pointer();
    case 2: return (uint64_t)(arena + ARENA_BYTES - 1 - below(16)); /* guard page follows */
    case 3: return (uint64_t)(ro_page + below(PAGE));
    case 4: return (uint64_t)(none_page + below(PAGE));
    case 5: return (uint64_t)(play + below(PLAY_BYTES));
    case 6: return (uint64_t)(void *)&main_dummy_code_marker;
    case 7: return (uint64_t)(arena + STRUCT_OFF + struct_off[below(NSTRUCT)]);
    case 8: return (uint64_t)(arena + STR_OFF + path_off[below(NPATHS + 2)]);
    default: return (uint64_t)(arena + RAND_OFF + below(ARENA_BYTES - RAND_OFF));
    }
}

static uint64_t path(void) {
    if (chance(10))
        return ptr();
    return (uint64_t)(arena + STR_OFF + path_off[below(NPATHS + 2)]);
}

static uint64_t buffer(void) {
    if (chance(25))
        return ptr();
    return (uint64_t)(arena + RAND_OFF + below(ARENA_BYTES - RAND_OFF));
}

static uint64_t length(void) {
    static const uint64_t lens[] = {
        0, 1, 2, 7, 8, 16, 64, 4095, 4096, 4097, 65536, 1 << 20, 0x7ffff000, 0x80000000ull,
        0xffffffffull, 0x7fffffffffffffffull, 0xffffffffffffffffull, 0xfffffffffffff000ull,
    };
    if (chance(40))
        return below(8192);
    return lens[below(sizeof lens / sizeof lens[0])];
}

static uint64_t flags(void) {
    switch (below(6)) {
    case 0: return 0;
    case 1: return 1ull << below(32);
    case 2: return (1ull << below(32)) | (1ull << below(32)) | (1ull << below(32));
    case 3: return 0xffffffffull;
    case 4: return ~0ull;
    default: return next() & 0xffffffff;
    }
}

static uint64_t fd(void) {
    switch (below(10)) {
    case 0: return (uint64_t)-1;
    case 1: return below(64);
    case 2: return (uint64_t)(int64_t)-100; /* AT_FDCWD */
    case 3: return next() & 0xffffffff;
    default: return npool ? (uint64_t)pool[below(npool)] : 3;
    }
}

static uint64_t anything(void) {
    switch (below(8)) {
    case 0: return below(16);
    case 1: return next() & 0xffffffff;
    case 2: return next();
    case 3: return fd();
    case 4: case 5: return ptr();
    case 6: return length();
    default: return flags();
    }
}

static uint64_t timespec_ptr(void) {
    switch (below(8)) {
    case 0: return 0;
    case 1: return ptr();
    case 2: return (uint64_t)structp(TS_ZERO);
    case 3: return (uint64_t)structp(TS_BADNS);
    case 4: return (uint64_t)structp(TS_NEG);
    default: return (uint64_t)structp(TS_SMALL);
    }
}

static uint64_t sigset_ptr(void) {
    switch (below(4)) {
    case 0: return 0;
    case 1: return bad_pointer();
    default: return (uint64_t)structp(SIGSET);
    }
}

static uint64_t sockaddr_ptr(void) {
    switch (below(6)) {
    case 0: return ptr();
    case 1: return (uint64_t)structp(SIN6);
    case 2: return (uint64_t)structp(SUN);
    default: return (uint64_t)structp(SIN);
    }
}

static uint64_t play_addr(void) {
    if (chance(15))
        return bad_pointer();
    uint64_t a = (uint64_t)play + below(PLAY_BYTES);
    return chance(80) ? a & ~(PAGE - 1) : a;
}

static uint64_t pid_arg(void) {
    switch (below(5)) {
    case 0: return 0x3ffffff0;             /* no such process */
    case 1: return (uint64_t)(int64_t)-0x3ffffff0; /* no such group */
    default: return (uint64_t)self_pid;
    }
}

static uint64_t signal_arg(void) {
    int s;
    do
        s = (int)below(70);
    while (s == SIGKILL || s == SIGSTOP);
    return (uint64_t)s;
}

/* One generator per letter:
 * f fd, d dirfd, s path, b buffer, l length, i small int, F flags, x anything, a playground
 * address, t timespec, m sigset, k sigset size, S sockaddr, L socklen, v iovec, n count,
 * P pollfds, E epoll_event, M msghdr, T timeout (ms), p pid, g signal, o offset, w out-pointer */
static uint64_t gen(char c) {
    switch (c) {
    case 'f': return fd();
    case 'd': return chance(50) ? (uint64_t)(int64_t)-100 : fd();
    case 's': return path();
    case 'b': case 'w': return buffer();
    case 'l': return length();
    case 'i': return chance(80) ? below(16) : anything();
    case 'F': return flags();
    case 'a': return play_addr();
    case 't': return timespec_ptr();
    case 'm': return sigset_ptr();
    case 'k': return chance(80) ? 8 : length();
    case 'S': return sockaddr_ptr();
    case 'L': {
        static const uint64_t l[] = {0, 2, 16, 28, 110, 128, 4096, 0x80000000ull, ~0ull};
        return l[below(sizeof l / sizeof l[0])];
    }
    case 'v': return chance(80) ? (uint64_t)structp(IOV) : (chance(50) ? (uint64_t)structp(IOV_HUGE) : ptr());
    case 'n': return chance(80) ? below(9) : length();
    case 'P': return chance(80) ? (uint64_t)structp(POLLFDS) : ptr();
    case 'E': return chance(80) ? (uint64_t)structp(EPEV) : ptr();
    case 'M': return chance(80) ? (uint64_t)structp(MSG) : ptr();
    case 'T': {
        static const int64_t t[] = {-1, 0, 0, 1, 1, 2, 5, -5, 100000};
        return (uint64_t)t[below(sizeof t / sizeof t[0])];
    }
    case 'p': return pid_arg();
    case 'g': return signal_arg();
    case 'o': return chance(50) ? below(65536) : length();
    default: return anything();
    }
}

/* Rough signatures of the calls torpor implements (and a few more). */
static const char *const sig_of[NR_MAX] = {
    [0] = "fbl", [1] = "fbl", [2] = "sFi", [3] = "f", [4] = "sw", [5] = "fw", [6] = "sw",
    [7] = "PnT", [8] = "foi", [9] = "alFFfo", [10] = "alF", [11] = "al", [12] = "a",
    [13] = "gbwk", [14] = "imwk", [16] = "fxb", [17] = "fblo", [18] = "fblo", [19] = "fvn",
    [20] = "fvn", [21] = "si", [22] = "w", [23] = "nbbbt", [24] = "", [25] = "allFa",
    [26] = "alF", [27] = "alw", [28] = "ali", [32] = "f", [33] = "ff", [35] = "tw", [37] = "i",
    [39] = "", [40] = "ffwl", [41] = "iFi", [42] = "fSL", [43] = "fwb", [44] = "fblFSL",
    [45] = "fblFwb", [46] = "fMF", [47] = "fMF", [48] = "fi", [49] = "fSL", [50] = "fi",
    [51] = "fwb", [52] = "fwb", [53] = "iFiw", [54] = "fiibL", [55] = "fiiwb", [61] = "pwFw",
    [62] = "pg", [63] = "w", [72] = "fix", [73] = "fi", [74] = "f", [75] = "f", [76] = "so",
    [77] = "fo", [78] = "fwl", [79] = "wl", [80] = "s", [81] = "f", [82] = "ss", [83] = "si",
    [84] = "s", [85] = "si", [86] = "ss", [87] = "s", [88] = "ss", [89] = "swl", [90] = "si",
    [91] = "fi", [92] = "sii", [95] = "i", [96] = "ww", [97] = "iw", [99] = "w", [102] = "",
    [104] = "", [107] = "", [108] = "", [110] = "", [111] = "", [127] = "wk", [128] = "mwtk",
    [129] = "pgb", [130] = "mk", [131] = "bw", [137] = "sw", [138] = "fw", [149] = "al",
    [150] = "al", [157] = "ixxxx", [158] = "iw", [160] = "ib", [162] = "", [186] = "",
    [200] = "pg", [201] = "w", [202] = "bFitbi", [204] = "plw", [213] = "i", [216] = "allol",
    [217] = "fwl", [218] = "b", [228] = "iw", [229] = "iw", [230] = "iFtw", [232] = "fElT",
    [233] = "fifE", [234] = "ppg", [237] = "alibli", [238] = "ibl", [239] = "wwlbF",
    [257] = "dsFi", [258] = "dsi", [262] = "dswF", [263] = "dsF", [264] = "dsds", [265] = "dsdsF",
    [266] = "sds", [267] = "dswl", [268] = "dsiF", [269] = "dsiF", [270] = "nbbbtb", [271] = "Pntmk",
    [273] = "bl", [280] = "dswF", [281] = "fElTmk", [283] = "iF", [284] = "i", [285] = "fiol",
    [286] = "fFbw", [287] = "fw", [288] = "fwbF", [289] = "fmkF", [290] = "iF", [291] = "F",
    [292] = "ffF", [293] = "wF", [295] = "fvno", [296] = "fvno", [297] = "ppgb", [299] = "fMiFt",
    [302] = "pib", [307] = "fMiF", [309] = "www", [316] = "dsdsF", [318] = "wlF", [319] = "sF",
    [322] = "dsbbF", [324] = "iF", [325] = "alF", [326] = "fofoliF", [329] = "alFi", [332] = "dsFiw",
    [334] = "blii", [424] = "fgbF", [434] = "pF", [436] = "ffF", [437] = "dsbl", [439] = "dsiF",
    [441] = "fElbmk",
};

static int threads = 1;

static int denied(long nr) {
    /* A thread's clear_child_tid address is what pthread_join waits on. */
    if (nr == SYS_set_tid_address && threads > 1)
        return 1;
    switch (nr) {
    case SYS_rt_sigreturn: case SYS_exit: case SYS_exit_group: case SYS_clone: case SYS_fork:
    case SYS_vfork: case 435 /* clone3 */: case SYS_ptrace: case SYS_process_vm_writev:
    case SYS_seccomp:
        return 1;
    }
    return 0;
}

static int playground_or_bad(uint64_t a, uint64_t len) {
    uint64_t p = (uint64_t)play;
    if (a >= p && a < p + PLAY_BYTES && len <= p + PLAY_BYTES - a)
        return 1;
    /* Kernel-half, non-canonical and low addresses are refused by any kernel. */
    return a >= 0x0000800000000000ull || (a < 0x10000 && len <= 0x10000 - a);
}

static int in_arena(uint64_t a, uint64_t len) {
    uint64_t p = (uint64_t)arena;
    return a >= p && a < p + ARENA_BYTES && len <= p + ARENA_BYTES - a;
}

static const char *const exec_paths[] = {
    "/tmp/fz/garbage", "/tmp/fz/elfjunk", "/tmp/fz/shebang", "/tmp/fz/loop", "/tmp/fz/noexec",
    "/tmp/fz/missing", "/tmp/fz/dir",
};

/* Makes the call harmless for the program itself; returns 0 to skip it. */
static int sanitise(long nr, uint64_t *a) {
    switch (nr) {
    case SYS_mmap:
        if ((a[3] & (MAP_FIXED | MAP_FIXED_NOREPLACE)) && !playground_or_bad(a[0], a[1]))
            a[0] = play_addr();
        if ((a[3] & (MAP_FIXED | MAP_FIXED_NOREPLACE)) && !playground_or_bad(a[0], a[1]))
            a[1] = PAGE;
        return 1;
    case SYS_munmap: case SYS_mprotect: case 329 /* pkey_mprotect */: case SYS_mbind:
    case SYS_remap_file_pages: case SYS_msync:
        if (!playground_or_bad(a[0], a[1]))
            a[0] = play_addr(), a[1] = below(PLAY_BYTES / 4);
        return playground_or_bad(a[0], a[1]);
    case SYS_madvise:
        if (!playground_or_bad(a[0], a[1]) && !in_arena(a[0], a[1]))
            a[0] = play_addr(), a[1] = below(PLAY_BYTES / 4);
        if (in_arena(a[0], a[1]) && a[0] < (uint64_t)arena + RAND_OFF)
            a[0] = (uint64_t)arena + RAND_OFF;
        return playground_or_bad(a[0], a[1]) || in_arena(a[0], a[1]);
    case SYS_mremap:
        if (!playground_or_bad(a[0], a[1]))
            a[0] = play_addr(), a[1] = below(PLAY_BYTES / 4);
        if ((a[3] & MREMAP_FIXED) && !playground_or_bad(a[4], a[2]))
            a[4] = play_addr(), a[2] = below(PLAY_BYTES / 4);
        return playground_or_bad(a[0], a[1]) &&
               (!(a[3] & MREMAP_FIXED) || playground_or_bad(a[4], a[2]));
    case SYS_brk:
        if (a[0] != 0 && a[0] < initial_brk)
            a[0] = initial_brk + below(64 << 20);
        return 1;
    case SYS_arch_prctl: /* int code: the kernel looks at the low 32 bits */
        return (uint32_t)a[0] != 0x1001 && (uint32_t)a[0] != 0x1002; /* ARCH_SET_GS, _FS */
    case SYS_prctl:
        return (uint32_t)a[0] != 22 && (uint32_t)a[0] != 35; /* PR_SET_SECCOMP, PR_SET_MM */
    case SYS_rt_sigaction:
        /* With threads, a disposition changed by one thread hits the others before it is
         * re-installed: only queries (and bad pointers) then. */
        if (threads > 1)
            a[1] = chance(50) ? 0 : bad_pointer();
        return 1;
    case SYS_setrlimit:
        a[1] = chance(50) ? 0 : bad_pointer();
        return 1;
    case SYS_prlimit64:
        a[2] = chance(50) ? 0 : bad_pointer();
        return 1;
    case SYS_kill:
        a[0] = pid_arg(), a[1] = signal_arg();
        return 1;
    case SYS_tkill:
        a[0] = chance(80) ? (uint64_t)self_pid : 0x3ffffff0, a[1] = signal_arg();
        return 1;
    case SYS_tgkill:
        a[0] = chance(80) ? (uint64_t)self_pid : 0x3ffffff0;
        a[1] = chance(80) ? (uint64_t)self_pid : 0x3ffffff0;
        a[2] = signal_arg();
        return 1;
    case SYS_rt_sigqueueinfo:
        a[0] = pid_arg(), a[1] = signal_arg();
        return 1;
    case SYS_rt_tgsigqueueinfo:
        a[0] = pid_arg(), a[1] = chance(80) ? (uint64_t)self_pid : 0x3ffffff0, a[2] = signal_arg();
        return 1;
    case 424: /* pidfd_send_signal */
        a[1] = signal_arg();
        return 1;
    case SYS_close: case SYS_dup: case SYS_fsync: case SYS_fcntl: case SYS_ioctl:
    case SYS_write: case SYS_writev: case SYS_pwrite64: case SYS_pwritev: case SYS_ftruncate:
    case SYS_sendfile: case SYS_lseek: case SYS_fdatasync: case SYS_flock: case SYS_fchmod:
    case SYS_fchown: case SYS_close_range:
        if (a[0] == OUT_FD)
            a[0] = (uint64_t)-1;
        if (nr == SYS_close_range && a[1] >= OUT_FD)
            a[1] = OUT_FD - 1;
        return 1;
    case SYS_dup2: case SYS_dup3:
        if (a[1] == OUT_FD)
            a[1] = 5;
        if (a[0] == OUT_FD)
            a[0] = (uint64_t)-1;
        return 1;
    case SYS_execve:
        a[0] = chance(90) ? (uint64_t)exec_paths[below(sizeof exec_paths / sizeof exec_paths[0])]
                          : bad_pointer();
        return 1;
    case 322: /* execveat */
        a[0] = (uint64_t)(int64_t)-100;
        a[1] = chance(90) ? (uint64_t)exec_paths[below(sizeof exec_paths / sizeof exec_paths[0])]
                          : bad_pointer();
        a[4] &= ~(uint64_t)0x1000; /* AT_EMPTY_PATH would run fd a[0] */
        return 1;
    case SYS_ppoll: case SYS_rt_sigsuspend:
        if (nr == SYS_rt_sigsuspend)
            a[0] = sigset_ptr();
        else
            a[3] = sigset_ptr();
        return 1;
    case SYS_epoll_pwait: case 441 /* epoll_pwait2 */:
        a[4] = sigset_ptr();
        return 1;
    case SYS_pselect6:
        a[5] = chance(70) ? (uint64_t)structp(PSEL) : bad_pointer();
        return 1;
    case SYS_nanosleep: case SYS_clock_nanosleep:
        /* Long sleeps end at the next watchdog signal; keep most of them short. */
        return 1;
    }
    return 1;
}


static void watchdog_loop(pid_t parent) {
    struct timespec ts = {0, WATCHDOG_NS};
    for (;;) {
        nanosleep(&ts, NULL);
        if (getppid() != parent)
            _exit(0);
        kill(parent, SIGUSR1);
    }
}

struct stats {
    unsigned long done, ok, err, enosys, efault, eintr;
};

struct worker {
    int id;
    uint64_t seed;
    unsigned long count;
    pid_t tid;
    int finished;
    struct stats st;
};

/* Mappings the fuzzed mmap and mremap made outside the playground, unmapped at each refresh
 * (with brk set back), so that populated memory does not pile up until the sandbox's memory
 * limit kills the program. */
#define MAX_MAPS 4096
static struct {
    uint64_t addr, len;
} maps[MAX_MAPS];
static int nmaps;

static void note_mapping(long nr, const uint64_t *a, long r) {
    uint64_t len = nr == SYS_mmap ? a[1] : a[2];
    if (r < 0 && r > -4096)
        return;
    if (playground_or_bad((uint64_t)r, len) || nmaps == MAX_MAPS)
        return;
    maps[nmaps].addr = (uint64_t)r;
    maps[nmaps].len = len;
    nmaps++;
}

static void unmap_noted(void) {
    for (int i = 0; i < nmaps; i++)
        raw(SYS_munmap, (long)maps[i].addr, (long)maps[i].len, 0, 0, 0, 0);
    nmaps = 0;
    raw(SYS_brk, (long)initial_brk, 0, 0, 0, 0, 0);
}

static long known[NR_MAX];
static int nknown;
static unsigned char seen[NR_MAX];

static void fuzz_loop(struct worker *w) {
    rng = w->seed;
    __atomic_store_n(&w->tid, (pid_t)raw(SYS_gettid, 0, 0, 0, 0, 0, 0), __ATOMIC_SEQ_CST);
    struct stats *st = &w->st;
    for (unsigned long it = 0; st->done < w->count; it++) {
        if (w->id == 0 && it && it % REFRESH_EVERY == 0) {
            if (threads == 1)
                unmap_noted();
            close_pool();
            make_scratch();
            open_pool();
        }
        memcpy(arena + STR_OFF, strings_pristine, sizeof strings_pristine);
        build_structs();
        uint64_t r0 = RAND_OFF + below((ARENA_BYTES - RAND_OFF) / PAGE) * PAGE;
        for (unsigned k = 0; k < PAGE; k += 8)
            *(uint64_t *)(arena + r0 + k) = next();

        /* Three calls in four among those with a signature (most of what torpor implements). */
        long nr = (long)below(NR_MAX);
        if (chance(75))
            nr = known[below(nknown)];
        if (denied(nr))
            continue;
        uint64_t a[6];
        const char *sig = sig_of[nr];
        int typed = sig && chance(80);
        for (int k = 0; k < 6; k++)
            a[k] = typed && sig[k] ? gen(sig[k]) : (typed ? below(4) : anything());
        if (!sanitise(nr, a))
            continue;
        if (verbose)
            out("%d/%lu: %ld(%#lx, %#lx, %#lx, %#lx, %#lx, %#lx)\n", w->id, it, nr, a[0], a[1],
                a[2], a[3], a[4], a[5]);

        sigset_t old;
        int guard = nr == SYS_rt_sigaction;
        if (guard)
            block_all(&old);
        in_syscall = 1;
        long r = raw(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        in_syscall = 0;
        if (guard) {
            install_handlers();
            sigprocmask(SIG_SETMASK, &old, NULL);
        }
        if (nr == SYS_rt_sigprocmask || guard)
            unblock_usr1();
        if ((nr == SYS_mmap || nr == SYS_mremap) && threads == 1)
            note_mapping(nr, a, r);
        if (verbose)
            out("  %d = %ld\n", w->id, r);
        st->done++;
        seen[nr] = 1;
        if (r >= 0 || r < -4095) {
            st->ok++;
        } else {
            st->err++;
            if (r == -38)
                st->enosys++;
            else if (r == -14)
                st->efault++;
            else if (r == -4)
                st->eintr++;
        }
    }
    __atomic_store_n(&w->finished, 1, __ATOMIC_SEQ_CST);
}

static void *fuzz_thread(void *arg) {
    /* glibc's first pthread_create installs its SIGSETXID (33) handler, which dereferences
     * its setxid command on any SI_TKILL signal 33 of the process's own: a fuzzed tgkill(33)
     * would crash it, natively too. Ours again (glibc installs it once). */
    install_handlers();
    unblock_usr1();
    fuzz_loop(arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: syscall_fuzz SEED COUNT [-v]\n");
        return 2;
    }
    uint64_t seed = strtoull(argv[1], NULL, 0);
    unsigned long count = strtoul(argv[2], NULL, 0);
    int native_ok = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-native-i-know"))
            native_ok = 1;
    }
    struct utsname u;
    if (!native_ok && (uname(&u) != 0 || strcmp(u.nodename, "torpor") != 0)) {
        fprintf(stderr, "syscall_fuzz: refusing to run outside torpor (nodename %s)\n",
                u.nodename);
        return 2;
    }
    rng = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    if (!rng)
        rng = 1;
    if (dup2(1, OUT_FD) != OUT_FD) {
        perror("dup2");
        return 2;
    }
    self_pid = getpid();
    initial_brk = (unsigned long)sbrk(0);

    arena = mmap(NULL, ARENA_BYTES + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ro_page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    none_page = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    play = mmap(NULL, PLAY_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED || ro_page == MAP_FAILED || none_page == MAP_FAILED || play == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    mprotect(arena + ARENA_BYTES, PAGE, PROT_NONE);
    memset(ro_page, 'r', PAGE);
    mprotect(ro_page, PAGE, PROT_READ);
    for (unsigned long i = RAND_OFF; i < ARENA_BYTES; i += 8)
        *(uint64_t *)(arena + i) = next();
    build_strings();

    install_handlers();
    make_scratch();
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "syscall_fuzz: 1 to 64 threads\n");
        return 2;
    }
    if (threads == 1) {
        watchdog = fork();
        if (watchdog < 0) {
            perror("fork");
            return 2;
        }
        if (watchdog == 0)
            watchdog_loop(self_pid);
    }
    open_pool();
    struct stats totals = {0};

    for (int i = 0; i < NR_MAX; i++)
        if (sig_of[i])
            known[nknown++] = i;
    if (threads <= 1) {
        struct worker w = {.id = 0, .seed = rng, .count = count};
        fuzz_loop(&w);
        totals = w.st;
    } else {
        static struct worker ws[64];
        pthread_t th[64];
        for (int i = 0; i < threads; i++) {
            /* splitmix64 of (seed, i): consecutive xorshift states would give every thread the
             * same stream, shifted by one draw. */
            uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            ws[i] = (struct worker){.id = i, .seed = z | 1,
                                    .count = count / threads + (i == 0 ? count % threads : 0)};
            pthread_create(&th[i], NULL, fuzz_thread, &ws[i]);
        }
        /* The watchdog of the threads: a blocking call in any of them ends within 20 ms. */
        for (;;) {
            struct timespec ts = {0, WATCHDOG_NS};
            nanosleep(&ts, NULL);
            int all = 1;
            for (int i = 0; i < threads; i++) {
                pid_t tid = __atomic_load_n(&ws[i].tid, __ATOMIC_SEQ_CST);
                if (!__atomic_load_n(&ws[i].finished, __ATOMIC_SEQ_CST)) {
                    all = 0;
                    if (tid)
                        raw(SYS_tgkill, self_pid, tid, SIGUSR1, 0, 0, 0);
                }
            }
            if (all)
                break;
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            totals.done += ws[i].st.done, totals.ok += ws[i].st.ok, totals.err += ws[i].st.err;
            totals.enosys += ws[i].st.enosys, totals.efault += ws[i].st.efault;
            totals.eintr += ws[i].st.eintr;
        }
    }
    int distinct = 0;
    for (int i = 0; i < NR_MAX; i++)
        distinct += seen[i];
    if (watchdog > 0) {
        kill(watchdog, SIGKILL);
        waitpid(watchdog, NULL, 0);
    }
    out("syscall_fuzz: seed=%lu count=%lu done=%lu ok=%lu err=%lu enosys=%lu efault=%lu "
        "eintr=%lu signals=%lu distinct=%d threads=%d\n",
        (unsigned long)seed, count, totals.done, totals.ok, totals.err, totals.enosys,
        totals.efault, totals.eintr, (unsigned long)signals, distinct, threads);
    return 0;
}
