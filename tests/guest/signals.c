/* signals: signal delivery, handlers, rt_sigreturn, masks and the alternate stack.
 *
 * Prints one line per check; the test compares stdout and the exit status natively and
 * under torpor, so nothing printed may depend on addresses or the machine.
 *
 *   signals            all checks, then abort() with a SIGABRT handler that returns:
 *                      exit status 134
 *   signals badstack   a signal delivered with a wild stack pointer: SIGSEGV, 139
 *   signals norestorer a handler installed without SA_RESTORER: SIGSEGV, 139
 *   signals wait       installs a SIGUSR1 handler, says "ready" and waits in sigsuspend for a
 *                      signal sent from outside, then exits 0
 *   signals restart    says "ready" and blocks in accept(): SIGUSR2 (SA_RESTART) runs its
 *                      handler and accept goes on, SIGWINCH (ignored) changes nothing, SIGTERM
 *                      (handler without SA_RESTART) makes accept fail with EINTR; exits 0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf jb;
static volatile sig_atomic_t hits;
static volatile int last_sig, last_code, addr_ok;
static volatile uintptr_t want_addr;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static void install(int sig, void (*fn)(int, siginfo_t *, void *), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fn;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        exit(1);
    }
}

static void jump_handler(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    last_sig = sig;
    last_code = si->si_code;
    addr_ok = (uintptr_t)si->si_addr == want_addr;
    siglongjmp(jb, 1);
}

static void test_segv_null(void) {
    install(SIGSEGV, jump_handler, 0);
    want_addr = 0;
    if (sigsetjmp(jb, 1) == 0) {
        *(volatile int *)0 = 42;
        say("segv: still here (wrong)\n");
    } else {
        say("segv: caught sig=%d code=%d (SEGV_MAPERR=%d) addr_ok=%d\n", last_sig, last_code, SEGV_MAPERR, addr_ok);
    }
    /* Again, to show the handler stays installed and the mask was restored by siglongjmp. */
    if (sigsetjmp(jb, 1) == 0) {
        *(volatile int *)0 = 43;
    } else {
        say("segv: caught again sig=%d\n", last_sig);
    }
}

static void test_segv_readonly(void) {
    char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    want_addr = (uintptr_t)(p + 100);
    if (sigsetjmp(jb, 1) == 0) {
        p[100] = 1;
        say("segv ro: still here (wrong)\n");
    } else {
        say("segv ro: caught sig=%d code=%d (SEGV_ACCERR=%d) addr_ok=%d\n", last_sig, last_code, SEGV_ACCERR, addr_ok);
    }
    munmap(p, 4096);
}

static void test_fpe(void) {
    install(SIGFPE, jump_handler, 0);
    volatile int zero = 0, x = 7;
    want_addr = 0;
    if (sigsetjmp(jb, 1) == 0) {
        x = x / zero;
        say("fpe: still here (wrong)\n");
    } else {
        say("fpe: caught sig=%d code=%d (FPE_INTDIV=%d)\n", last_sig, last_code, FPE_INTDIV);
    }
}

extern char ud2_here[];

static void test_ill(void) {
    install(SIGILL, jump_handler, 0);
    want_addr = (uintptr_t)ud2_here;
    if (sigsetjmp(jb, 1) == 0) {
        __asm__ volatile(".globl ud2_here\nud2_here: ud2");
        say("ill: still here (wrong)\n");
    } else {
        say("ill: caught sig=%d code=%d (ILL_ILLOPN=%d) addr_ok=%d\n", last_sig, last_code, ILL_ILLOPN, addr_ok);
    }
}

static void trap_handler(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    last_sig = sig;
    last_code = si->si_code;
    hits++;
}

static void test_trap(void) {
    install(SIGTRAP, trap_handler, 0);
    hits = 0;
    __asm__ volatile("int3");
    say("trap: returned after int3 hits=%d sig=%d code=%d\n", (int)hits, last_sig, last_code);
}

static volatile int usr1_pid_ok;

static void usr1_handler(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    last_sig = si->si_signo;
    last_code = si->si_code;
    usr1_pid_ok = si->si_pid == getpid();
    (void)sig;
    hits++;
}

static void test_raise_siginfo(void) {
    install(SIGUSR1, usr1_handler, 0);
    hits = 0;
    raise(SIGUSR1);
    say("raise: hits=%d si_signo=%d code=%d (SI_TKILL=%d) pid_ok=%d\n", (int)hits, last_sig, last_code, SI_TKILL,
        usr1_pid_ok);
    hits = 0;
    kill(getpid(), SIGUSR1);
    say("kill: hits=%d si_signo=%d code=%d (SI_USER=%d) pid_ok=%d\n", (int)hits, last_sig, last_code, SI_USER,
        usr1_pid_ok);
}

/* The handler clobbers registers and FPU state; rt_sigreturn must bring them back. */
static volatile int global_counter;
static volatile unsigned handler_mxcsr;
static volatile double handler_result;

static void clobber_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    unsigned m;
    __asm__ volatile("stmxcsr %0" : "=m"(m));
    handler_mxcsr = m;
    volatile double a = 1.0, b = 3.0;
    handler_result = a / b;
    __asm__ volatile("pxor %%xmm7, %%xmm7\n"
                     "pcmpeqd %%xmm6, %%xmm6\n"
                     "fldpi\n"
                     "fstp %%st(0)\n" ::
                         : "xmm6", "xmm7");
    if (__builtin_cpu_supports("avx"))
        __asm__ volatile("vxorps %%ymm8, %%ymm8, %%ymm8" ::: "xmm8");
    global_counter += 1;
}

static void test_registers_preserved(void) {
    install(SIGUSR2, clobber_handler, 0);
    double before = 0.0;
    for (int i = 1; i <= 1000; i++)
        before += 1.0 / (double)i;

    /* Round toward zero in the interrupted code; the handler must start with the default. */
    unsigned old_mxcsr, mxcsr;
    __asm__ volatile("stmxcsr %0" : "=m"(old_mxcsr));
    mxcsr = (old_mxcsr & ~0x6000u) | 0x6000u;
    __asm__ volatile("ldmxcsr %0" ::"m"(mxcsr));

    uint64_t out[10];
    const uint64_t xpat = 0x0123456789abcdefull;
    long pid = getpid();
    __asm__ volatile("movq $0x1111, %%r8\n"
                     "movq $0x2222, %%r9\n"
                     "movq $0x3333, %%r10\n"
                     "movq $0x4444, %%rdx\n"
                     "movq %[xpat], %%xmm7\n"
                     "movq %[xpat], %%xmm6\n"
                     "movq %[pid], %%rdi\n"
                     "movq %[sig], %%rsi\n"
                     "movq $62, %%rax\n" /* kill(getpid(), SIGUSR2) */
                     "syscall\n"
                     "movq %%r8, 0(%[out])\n"
                     "movq %%r9, 8(%[out])\n"
                     "movq %%r10, 16(%[out])\n"
                     "movq %%rdx, 24(%[out])\n"
                     "movq %%rdi, 32(%[out])\n"
                     "movq %%rsi, 40(%[out])\n"
                     "movq %%rax, 48(%[out])\n"
                     "movq %%xmm7, 56(%[out])\n"
                     "movq %%xmm6, 64(%[out])\n"
                     :
                     : [out] "r"(out), [xpat] "r"(xpat), [pid] "r"(pid), [sig] "i"(SIGUSR2)
                     : "rax", "rcx", "r11", "r8", "r9", "r10", "rdx", "rdi", "rsi", "xmm6", "xmm7", "memory");
    unsigned after_mxcsr;
    __asm__ volatile("stmxcsr %0" : "=m"(after_mxcsr));
    __asm__ volatile("ldmxcsr %0" ::"m"(old_mxcsr));

    int ymm_ok = 1;
    if (__builtin_cpu_supports("avx")) {
        static const float pat = 2.5f;
        float upper[4];
        __asm__ volatile("vbroadcastss (%[p]), %%ymm8\n"
                         "movq %[pid], %%rdi\n"
                         "movq %[sig], %%rsi\n"
                         "movq $62, %%rax\n"
                         "syscall\n"
                         "vextractf128 $1, %%ymm8, (%[u])\n"
                         :
                         : [p] "r"(&pat), [u] "r"(upper), [pid] "r"(pid), [sig] "i"(SIGUSR2)
                         : "rax", "rcx", "r11", "rdi", "rsi", "xmm8", "memory");
        __asm__ volatile("vzeroupper");
        for (int i = 0; i < 4; i++)
            ymm_ok &= upper[i] == 2.5f;
    }

    double after = 0.0;
    for (int i = 1; i <= 1000; i++)
        after += 1.0 / (double)i;
    say("regs: counter=%d r8=%llx r9=%llx r10=%llx rdx=%llx rdi_ok=%d rsi=%lld rax=%lld\n", global_counter,
        (unsigned long long)out[0], (unsigned long long)out[1], (unsigned long long)out[2],
        (unsigned long long)out[3], out[4] == (uint64_t)pid, (long long)out[5], (long long)out[6]);
    say("fpu: xmm7_ok=%d xmm6_ok=%d ymm_ok=%d handler_mxcsr=%#x rounding_restored=%d handler_result=%.6f\n",
        out[7] == xpat, out[8] == xpat, ymm_ok, handler_mxcsr & 0xffc0, (after_mxcsr & 0x6000) == 0x6000,
        handler_result);
    say("fpu: sum before=%.12f after=%.12f same=%d\n", before, after, before == after);
}

static volatile int blocked_in_handler, other_blocked_in_handler;

static void mask_handler(int sig, siginfo_t *si, void *uc) {
    (void)si;
    (void)uc;
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    blocked_in_handler = sigismember(&cur, sig);
    other_blocked_in_handler = sigismember(&cur, SIGTERM);
    hits++;
}

/* ppoll, pselect and epoll_pwait wait with their own signal mask, put in place atomically:
 * a pending signal the temporary mask unblocks interrupts the wait at once (its handler runs,
 * the caller's mask is back afterwards); one the temporary mask blocks does not. select has
 * no mask and stores the time left back. */
static volatile sig_atomic_t wait_hits;
static void wait_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)si; (void)uc;
    wait_hits++;
}

static void test_wait_masks(void) {
    install(SIGUSR2, wait_handler, 0);
    sigset_t usr2, empty, now;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigemptyset(&empty);
    sigprocmask(SIG_BLOCK, &usr2, NULL);
    int ep = epoll_create1(0);
    for (int call = 0; call < 3; call++) {
        const char *name = call == 0 ? "ppoll" : call == 1 ? "pselect" : "epoll_pwait";
        struct timespec ts = {0, 20 * 1000 * 1000};
        struct epoll_event ev;
        int r;
        wait_hits = 0;
        raise(SIGUSR2);
        /* Still blocked by the temporary mask: the wait times out. */
        if (call == 0)
            r = ppoll(NULL, 0, &ts, &usr2);
        else if (call == 1)
            r = pselect(0, NULL, NULL, NULL, &ts, &usr2);
        else
            r = epoll_pwait(ep, &ev, 1, 20, &usr2);
        say("%s masked: r=%d hits=%d\n", name, r, (int)wait_hits);
        /* Unblocked by it: interrupted at once, the handler run, the caller's mask back. */
        ts.tv_sec = 5;
        errno = 0;
        if (call == 0)
            r = ppoll(NULL, 0, &ts, &empty);
        else if (call == 1)
            r = pselect(0, NULL, NULL, NULL, &ts, &empty);
        else
            r = epoll_pwait(ep, &ev, 1, 5000, &empty);
        sigprocmask(SIG_BLOCK, NULL, &now);
        say("%s unmasked: r=%d errno=%s hits=%d usr2_blocked_after=%d\n", name, r,
            errno == EINTR ? "EINTR" : "other", (int)wait_hits, sigismember(&now, SIGUSR2));
    }
    /* A bad mask pointer is EFAULT, a bad size EINVAL. */
    struct epoll_event ev;
    errno = 0;
    int r = (int)syscall(SYS_epoll_pwait, ep, &ev, 1, 0, (void *)8, 8);
    say("epoll_pwait bad mask: r=%d efault=%d\n", r, errno == EFAULT);
    errno = 0;
    r = (int)syscall(SYS_ppoll, NULL, 0, NULL, &empty, 4);
    say("ppoll bad size: r=%d einval=%d\n", r, errno == EINVAL);
    close(ep);
    sigprocmask(SIG_UNBLOCK, &usr2, NULL);
    /* select: the time left is stored back. */
    struct timeval tv = {0, 30 * 1000};
    r = select(0, NULL, NULL, NULL, &tv);
    say("select: r=%d left=%ld.%06ld\n", r, (long)tv.tv_sec, (long)tv.tv_usec);
}

static void test_blocked_pending(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = mask_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGUSR1, &sa, NULL);

    sigset_t set, pend, now;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    hits = 0;
    raise(SIGUSR1);
    raise(SIGUSR1); /* a standard signal is pending at most once */
    sigpending(&pend);
    say("blocked: hits=%d pending=%d\n", (int)hits, sigismember(&pend, SIGUSR1));
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    sigpending(&pend);
    sigprocmask(SIG_BLOCK, NULL, &now);
    say("unblocked: hits=%d pending=%d self_blocked_in_handler=%d sa_mask_blocked_in_handler=%d term_blocked_now=%d\n",
        (int)hits, sigismember(&pend, SIGUSR1), blocked_in_handler, other_blocked_in_handler,
        sigismember(&now, SIGTERM));

    /* SA_NODEFER: the signal is not blocked in its own handler. */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    say("nodefer: self_blocked_in_handler=%d\n", blocked_in_handler);
}

static void test_sigsuspend_and_wait(void) {
    install(SIGUSR1, usr1_handler, 0);
    sigset_t set, empty, now;
    sigemptyset(&set);
    sigemptyset(&empty);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    hits = 0;
    raise(SIGUSR1);
    int r = sigsuspend(&empty);
    sigprocmask(SIG_BLOCK, NULL, &now);
    say("sigsuspend: r=%d hits=%d usr1_blocked_after=%d\n", r, (int)hits, sigismember(&now, SIGUSR1));

    raise(SIGUSR1);
    siginfo_t si;
    struct timespec ts = {0, 0};
    int s = sigtimedwait(&set, &si, &ts);
    say("sigtimedwait: got=%d code=%d hits=%d\n", s, si.si_code, (int)hits);
    struct timespec ts2 = {0, 10 * 1000 * 1000};
    s = sigtimedwait(&set, &si, &ts2);
    say("sigtimedwait: empty -> %d %s\n", s, s < 0 ? strerrorname_np(errno) : "");
    sigprocmask(SIG_UNBLOCK, &set, NULL);
}

static char *alt_base;
static size_t alt_size;
static volatile int on_alt, ss_flags_in_handler;

static void alt_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    char local;
    on_alt = (char *)&local >= alt_base && (char *)&local < alt_base + alt_size;
    stack_t cur;
    sigaltstack(NULL, &cur);
    ss_flags_in_handler = cur.ss_flags;
    /* Alignment as Linux: rsp + 8 is 16-byte aligned at entry, so locals of 16 bytes align. */
    hits++;
}

static void test_altstack(void) {
    alt_size = 64 * 1024;
    alt_base = malloc(alt_size);
    stack_t ss = {.ss_sp = alt_base, .ss_size = alt_size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        perror("sigaltstack");
        exit(1);
    }
    install(SIGUSR2, alt_handler, SA_ONSTACK);
    hits = 0;
    raise(SIGUSR2);
    stack_t cur;
    sigaltstack(NULL, &cur);
    say("altstack: hits=%d on_alt=%d flags_in_handler=%d (SS_ONSTACK=%d) flags_after=%d\n", (int)hits, on_alt,
        ss_flags_in_handler, SS_ONSTACK, cur.ss_flags);

    /* Without SA_ONSTACK the handler stays on the normal stack. */
    install(SIGUSR2, alt_handler, 0);
    raise(SIGUSR2);
    say("altstack: without SA_ONSTACK on_alt=%d\n", on_alt);
    stack_t bad = {.ss_sp = alt_base, .ss_size = 100, .ss_flags = 0};
    int r = sigaltstack(&bad, NULL);
    say("altstack: tiny -> %d %s\n", r, r < 0 ? strerrorname_np(errno) : "");
}

static void test_resethand(void) {
    install(SIGUSR2, usr1_handler, SA_RESETHAND);
    hits = 0;
    raise(SIGUSR2);
    struct sigaction old;
    sigaction(SIGUSR2, NULL, &old);
    say("resethand: hits=%d now_default=%d\n", (int)hits, old.sa_handler == SIG_DFL);
}

static void test_ignore(void) {
    signal(SIGUSR1, SIG_IGN);
    raise(SIGUSR1);
    signal(SIGCHLD, SIG_DFL);
    raise(SIGCHLD);
    raise(SIGURG);
    say("ignore: survived SIG_IGN and default-ignored signals\n");
}

/* rt_sigreturn with a garbage frame: SIGSEGV, caught on the alternate stack. */
static void test_bad_sigreturn(void) {
    static char zeros[4096] __attribute__((aligned(64)));
    install(SIGSEGV, jump_handler, SA_ONSTACK);
    want_addr = 0;
    /* A frame of zeros but for Linux's 64-bit user segments (cs 0x33, ss 0x2b: torpor forces
     * its own): everything restores to 0, so execution resumes at address 0 and faults. */
    uint16_t seg[4] = {0x33, 0, 0, 0x2b};
    memcpy(zeros + 1024 + 40 + 144, seg, sizeof seg);
    if (sigsetjmp(jb, 1) == 0) {
        __asm__ volatile("movq %0, %%rsp\n"
                         "movq $15, %%rax\n"
                         "syscall\n" ::"r"(zeros + 1024)
                         : "memory");
        say("bad sigreturn: still here (wrong)\n");
    } else {
        say("bad sigreturn (zero frame): caught sig=%d code=%d addr_ok=%d\n", last_sig, last_code, addr_ok);
    }
    if (sigsetjmp(jb, 1) == 0) {
        __asm__ volatile("movq $0x10, %%rsp\n"
                         "movq $15, %%rax\n"
                         "syscall\n" ::
                             : "memory");
    } else {
        say("bad sigreturn (unmapped frame): caught sig=%d code=%d\n", last_sig, last_code);
    }
}

static void abrt_handler(int sig, siginfo_t *si, void *uc) {
    (void)si;
    (void)uc;
    say("abort handler: sig=%d, returning\n", sig);
}

static void note_handler(int sig) {
    say("handler %d\n", sig);
}

static void usr1_wait_handler(int sig) {
    (void)sig;
    say("wait: got SIGUSR1\n");
}

/* kill(getpid()) from a thread that blocks the signal, while the main thread waits for it in
 * sigwait: the signal is the process's, and the main thread takes it. */
static void *kill_process(void *arg) {
    (void)arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGUSR2);
    return NULL;
}

static void test_process_signal_to_sigwait(void) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, &old);
    pthread_t th;
    pthread_create(&th, NULL, kill_process, NULL);
    int got = 0;
    int r = sigwait(&set, &got);
    pthread_join(th, NULL);
    say("sigwait in main, kill from a thread: %d sig %d\n", r, got);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* The siginfo of a signal from another process: kill's SI_USER with the sender's pid and
 * uid, SIGCHLD's CLD_EXITED with the child's pid and status, rt_sigqueueinfo's own value,
 * pidfd_send_signal's; rt_sigqueueinfo claiming SI_USER to another process is EPERM. */
static void test_process_siginfo(void) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, &old);
    pid_t parent = getpid();
    pid_t c = fork();
    if (c == 0) {
        kill(parent, SIGUSR1);
        siginfo_t q;
        memset(&q, 0, sizeof q);
        q.si_code = SI_QUEUE;
        q.si_value.sival_int = 42;
        syscall(SYS_rt_sigqueueinfo, parent, SIGRTMIN, &q);
        q.si_code = SI_USER;
        errno = 0;
        long r = syscall(SYS_rt_sigqueueinfo, parent, SIGRTMIN, &q);
        _exit(r == -1 && errno == EPERM ? 5 : 6);
    }
    siginfo_t si;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    sigwaitinfo(&one, &si);
    say("kill from a child: code SI_USER %d, pid is the child's %d, uid %d\n",
        si.si_code == SI_USER, si.si_pid == c, (int)si.si_uid);
    sigemptyset(&one);
    sigaddset(&one, SIGRTMIN);
    sigwaitinfo(&one, &si);
    say("rt_sigqueueinfo from a child: code SI_QUEUE %d, value %d, pid %d\n",
        si.si_code == SI_QUEUE, si.si_value.sival_int, si.si_pid == c);
    sigemptyset(&one);
    sigaddset(&one, SIGCHLD);
    sigwaitinfo(&one, &si);
    say("SIGCHLD: code CLD_EXITED %d, pid is the child's %d, status %d\n",
        si.si_code == CLD_EXITED, si.si_pid == c, si.si_status);
    waitpid(c, NULL, 0);
    c = fork();
    if (c == 0) {
        for (;;)
            pause();
    }
    int pfd = (int)syscall(SYS_pidfd_open, c, 0);
    errno = 0;
    long r = syscall(SYS_pidfd_send_signal, -1, SIGKILL, NULL, 0);
    say("pidfd_send_signal bad fd: %ld %s\n", r, errno == EBADF ? "EBADF" : "other");
    r = syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
    int status;
    waitpid(c, &status, 0);
    say("pidfd_send_signal SIGKILL: %ld, killed %d\n", r,
        WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    sigemptyset(&one);
    sigaddset(&one, SIGCHLD);
    sigwaitinfo(&one, &si);
    say("SIGCHLD of a killed child: code CLD_KILLED %d, status %d\n", si.si_code == CLD_KILLED,
        si.si_status);
    close(pfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* A blocking write to a full pipe returns early only for a signal: another thread's munmap
 * (which makes the runtime kick every thread) does not cut it short; SIGALRM then does, with
 * the partial count. */
static int pipe_r;
static volatile int alarm_hits;
static void alarm_handler(int sig) { (void)sig; alarm_hits++; }

static void *read_one_then_munmap(void *arg) {
    (void)arg;
    char c;
    read(pipe_r, &c, 1);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < 5; i++) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *(volatile char *)p = 1;
        munmap(p, 4096);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ITIMER_VIRTUAL and ITIMER_PROF: SIGVTALRM and SIGPROF once the process has used the CPU
 * time asked for (a busy loop, no system call), again every interval; getitimer shows a
 * running timer; an unknown timer is EINVAL. */
static volatile sig_atomic_t cpu_ticks;
static void cpu_tick(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)si, (void)uc;
    cpu_ticks++;
}

static int spin_until_ticks(int n) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (volatile unsigned long i = 0; cpu_ticks < n; i++) {
        if ((i & 0xfffff) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &b);
            if (b.tv_sec - a.tv_sec > 20) return 0;
        }
    }
    return 1;
}

static void test_cpu_timers(void) {
    int which[2] = {ITIMER_VIRTUAL, ITIMER_PROF};
    int sigs[2] = {SIGVTALRM, SIGPROF};
    for (int k = 0; k < 2; k++) {
        install(sigs[k], cpu_tick, 0);
        cpu_ticks = 0;
        struct itimerval it = {.it_interval = {0, 20000}, .it_value = {0, 50000}}, now;
        int r = setitimer(which[k], &it, NULL);
        getitimer(which[k], &now);
        int running = now.it_value.tv_sec == 0 && now.it_value.tv_usec > 0 &&
                      now.it_value.tv_usec <= 100000 /* Linux rounds up to its tick */ &&
                      now.it_interval.tv_usec == 20000;
        int got = spin_until_ticks(3);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(which[k], &off, NULL);
        getitimer(which[k], &now);
        say("%s: set %d, running %d, three signals %d, disarmed %d\n",
            k ? "ITIMER_PROF" : "ITIMER_VIRTUAL", r, running, got,
            now.it_value.tv_sec == 0 && now.it_value.tv_usec == 0);
        signal(sigs[k], SIG_DFL);
    }
    struct itimerval it = {{0, 0}, {1, 0}};
    int r = setitimer(3, &it, NULL);
    say("setitimer(3): %d %s\n", r, errno == EINVAL ? "EINVAL" : "?");
}

static void test_partial_pipe_write(void) {
    int p[2];
    pipe(p);
    pipe_r = p[0];
    struct sigaction sa = {0};
    sa.sa_handler = alarm_handler;
    sigaction(SIGALRM, &sa, NULL);
    size_t len = 4 * 1024 * 1024 + 1;
    char *buf = calloc(1, len);
    pthread_t th;
    pthread_create(&th, NULL, read_one_then_munmap, NULL);
    alarm(2);
    ssize_t n = write(p[1], buf, len);
    alarm(0);
    pthread_join(th, NULL);
    say("blocking pipe write interrupted by SIGALRM: %zd bytes, handler ran %d\n", n, alarm_hits);
    free(buf);
    close(p[0]);
    close(p[1]);
    signal(SIGALRM, SIG_DFL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    if (strcmp(mode, "badstack") == 0) {
        install(SIGUSR1, usr1_handler, 0);
        say("badstack: raising with a wild stack\n");
        __asm__ volatile("movq $0x10, %%rsp\n"
                         "movq %0, %%rdi\n"
                         "movq %1, %%rsi\n"
                         "movq $62, %%rax\n"
                         "syscall\n"
                         "ud2\n" ::"r"((long)getpid()),
                         "i"(SIGUSR1)
                         : "rax", "rdi", "rsi", "memory");
        return 0;
    }
    if (strcmp(mode, "norestorer") == 0) {
        struct {
            void *handler;
            unsigned long flags;
            void *restorer;
            unsigned long mask;
        } ka = {(void *)usr1_handler, SA_SIGINFO, NULL, 0};
        long r = syscall(SYS_rt_sigaction, SIGUSR1, &ka, NULL, 8);
        say("norestorer: rt_sigaction -> %ld, raising\n", r);
        raise(SIGUSR1);
        say("norestorer: still here (wrong)\n");
        return 0;
    }
    if (strcmp(mode, "restart") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = note_handler;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR2, &sa, NULL);
        sa.sa_flags = 0;
        sigaction(SIGTERM, &sa, NULL);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (s < 0 || bind(s, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(s, 1) != 0) {
            perror("socket");
            return 1;
        }
        say("ready\n");
        int c = accept(s, NULL, NULL);
        say("accept -> %d %s\n", c, c < 0 ? strerrorname_np(errno) : "");
        return 0;
    }
    if (strcmp(mode, "wait") == 0) {
        signal(SIGUSR1, usr1_wait_handler);
        sigset_t empty;
        sigemptyset(&empty);
        say("ready\n");
        int r = sigsuspend(&empty);
        say("wait: sigsuspend returned %d\n", r);
        return 0;
    }

    stack_t ss = {.ss_sp = malloc(65536), .ss_size = 65536, .ss_flags = 0};
    test_segv_null();
    test_segv_readonly();
    test_fpe();
    test_ill();
    test_trap();
    test_raise_siginfo();
    test_registers_preserved();
    test_blocked_pending();
    test_wait_masks();
    test_sigsuspend_and_wait();
    test_altstack();
    sigaltstack(&ss, NULL);
    test_bad_sigreturn();
    test_resethand();
    test_ignore();
    test_process_signal_to_sigwait();
    test_process_siginfo();
    test_partial_pipe_write();
    test_cpu_timers();
    install(SIGABRT, abrt_handler, 0);
    say("aborting\n");
    abort();
}
