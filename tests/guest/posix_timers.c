/* posix_timers: POSIX per-process timers (timer_create, timer_settime, timer_gettime,
 * timer_getoverrun, timer_delete).
 *
 * Prints one line per check; the test compares stdout and the exit status natively and
 * under torpor, so nothing printed depends on timing beyond what a loaded machine keeps
 * (counts are compared with the elapsed time, not printed). Most calls are the raw system
 * calls, whose timer ids are the kernel's; SIGEV_THREAD goes through the C library.
 *
 *   posix_timers                 every check; ends by exec'ing itself (below); exit 0
 *   posix_timers after-exec ID   what exec left: timer ID is gone, new ids go on
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIG_A (SIGRTMIN + 4)
#define SIG_B (SIGRTMIN + 5)
#define MS 1000000L

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static const char *err(long r) {
    return r == 0 ? "ok" : strerrorname_np(errno);
}

static const char *yes(int c) {
    return c ? "yes" : "no";
}

/* The raw system calls: the kernel's timer ids, no C library encoding. */
static long k_create(clockid_t c, struct sigevent *ev, void *id) {
    return syscall(SYS_timer_create, c, ev, id);
}
static long k_settime(int id, int flags, const void *n, void *o) {
    return syscall(SYS_timer_settime, id, flags, n, o);
}
static long k_gettime(int id, void *cur) {
    return syscall(SYS_timer_gettime, id, cur);
}
static long k_getoverrun(int id) {
    return syscall(SYS_timer_getoverrun, id);
}
static long k_delete(int id) {
    return syscall(SYS_timer_delete, id);
}

static long long now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long ns_of(struct timespec ts) {
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * MS};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static struct itimerspec spec(long value_ns, long interval_ns) {
    struct itimerspec it;
    it.it_value.tv_sec = value_ns / 1000000000L;
    it.it_value.tv_nsec = value_ns % 1000000000L;
    it.it_interval.tv_sec = interval_ns / 1000000000L;
    it.it_interval.tv_nsec = interval_ns % 1000000000L;
    return it;
}

static struct sigevent sig_event(int signo, int value) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = signo;
    ev.sigev_value.sival_int = value;
    return ev;
}

static void block(int sig) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_BLOCK, &s, NULL);
}

/* Waits up to `ms` for `sig` (blocked); its number, or -1 with errno. */
static int wait_sig(int sig, siginfo_t *si, long ms) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    struct timespec ts = {ms / 1000, (ms % 1000) * MS};
    memset(si, 0, sizeof *si);
    return sigtimedwait(&s, si, &ts);
}

static void errors(void) {
    int id = -1;
    struct sigevent ev = sig_event(SIG_A, 0);
    say("errors: unknown clock: %s\n", err(k_create(12345, &ev, &id)));
    say("errors: CLOCK_MONOTONIC_RAW: %s\n", err(k_create(CLOCK_MONOTONIC_RAW, &ev, &id)));
    say("errors: CLOCK_REALTIME_COARSE: %s\n",
        err(k_create(CLOCK_REALTIME_COARSE, &ev, &id)));
    ev.sigev_notify = 99;
    say("errors: sigev_notify 99: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
    ev = sig_event(0, 0);
    say("errors: signal 0: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
    ev = sig_event(65, 0);
    say("errors: signal 65: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
    ev = sig_event(SIG_A, 0);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev._sigev_un._tid = 0x7ffffff0;
    say("errors: SIGEV_THREAD_ID of no thread: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
    ev.sigev_notify = SIGEV_SIGNAL;
    say("errors: sevp unmapped: %s\n", err(k_create(CLOCK_MONOTONIC, (void *)8, &id)));
    say("errors: timerid unmapped: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, (void *)8)));

    long r = k_create(CLOCK_MONOTONIC, &ev, &id);
    say("errors: created: %s id=%d\n", err(r), id);
    struct itimerspec it = spec(10 * MS, 0), cur;
    it.it_value.tv_nsec = 1000000000L;
    say("errors: tv_nsec 1e9: %s\n", err(k_settime(id, 0, &it, NULL)));
    it = spec(10 * MS, 0);
    it.it_interval.tv_nsec = -1;
    say("errors: interval tv_nsec -1: %s\n", err(k_settime(id, 0, &it, NULL)));
    it = spec(10 * MS, 0);
    it.it_value.tv_sec = -1;
    say("errors: tv_sec -1: %s\n", err(k_settime(id, 0, &it, NULL)));
    say("errors: new_value NULL: %s\n", err(k_settime(id, 0, NULL, NULL)));
    say("errors: new_value unmapped: %s\n", err(k_settime(id, 0, (void *)8, NULL)));
    say("errors: settime bad id: %s\n", err(k_settime(id + 1000, 0, &it, NULL)));
    say("errors: settime negative id: %s\n", err(k_settime(-1, 0, &it, NULL)));
    say("errors: gettime bad id: %s\n", err(k_gettime(id + 1000, &cur)));
    say("errors: gettime unmapped: %s\n", err(k_gettime(id, (void *)8)));
    say("errors: getoverrun bad id: %s\n", err(k_getoverrun(id + 1000) < 0 ? -1 : 0));
    say("errors: getoverrun fresh: %ld\n", k_getoverrun(id));
    say("errors: delete: %s\n", err(k_delete(id)));
    say("errors: delete again: %s\n", err(k_delete(id)));
    say("errors: gettime deleted: %s\n", err(k_gettime(id, &cur)));
}

/* A periodic SIGEV_SIGNAL timer, taken with sigtimedwait for about 100 ms: every expiry is
 * a signal or an overrun of one. */
static void periodic(void) {
    block(SIG_A);
    struct sigevent ev = sig_event(SIG_A, 1234);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    say("periodic: id=%d\n", id);
    struct itimerspec it = spec(10 * MS, 10 * MS);
    long long start = now_ns(CLOCK_MONOTONIC);
    k_settime(id, 0, &it, NULL);
    int count = 0, code_ok = 1, value_ok = 1, id_ok = 1;
    long overruns = 0;
    long long elapsed = 0;
    while (elapsed < 100 * MS) {
        siginfo_t si;
        if (wait_sig(SIG_A, &si, 2000) != SIG_A)
            break;
        elapsed = now_ns(CLOCK_MONOTONIC) - start;
        count++;
        overruns += si.si_overrun;
        code_ok &= si.si_code == SI_TIMER;
        value_ok &= si.si_value.sival_int == 1234;
        id_ok &= si.si_timerid == id;
    }
    long long expected = elapsed / (10 * MS);
    long long total = count + overruns;
    say("periodic: signals: %s\n", yes(count >= 2));
    say("periodic: expiries (signals + overruns) match the time: %s\n",
        yes(total >= expected - 1 && total <= expected + 1));
    if (total < expected - 1 || total > expected + 1)
        fprintf(stderr, "periodic: %d signals, %ld overruns, %lld ns\n", count, overruns,
                elapsed);
    say("periodic: si_code SI_TIMER: %s, si_value: %s, si_timerid: %s\n", yes(code_ok),
        yes(value_ok), yes(id_ok));
    k_delete(id);
    siginfo_t si;
    while (wait_sig(SIG_A, &si, 0) == SIG_A) {
    }
}

static void gettime_and_old_value(void) {
    struct sigevent ev = sig_event(SIG_A, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(10000 * MS, 0), cur, old;
    k_gettime(id, &cur);
    say("gettime: disarmed: %ld.%09ld %ld.%09ld\n", (long)cur.it_value.tv_sec,
        cur.it_value.tv_nsec, (long)cur.it_interval.tv_sec, cur.it_interval.tv_nsec);
    memset(&old, 0x55, sizeof old);
    k_settime(id, 0, &it, &old);
    say("gettime: old value of a disarmed timer: %s\n",
        yes(ns_of(old.it_value) == 0 && ns_of(old.it_interval) == 0));
    k_gettime(id, &cur);
    long long v = ns_of(cur.it_value);
    say("gettime: armed one shot 10 s: left in (9 s, 10 s]: %s, interval %lld\n",
        yes(v > 9000 * MS && v <= 10000 * MS), ns_of(cur.it_interval));
    it = spec(5000 * MS, 2000 * MS);
    k_settime(id, 0, &it, &old);
    v = ns_of(old.it_value);
    say("gettime: settime's old value: %s\n", yes(v > 9000 * MS && v <= 10000 * MS));
    k_gettime(id, &cur);
    v = ns_of(cur.it_value);
    say("gettime: periodic: left in (4 s, 5 s]: %s, interval %lld ms\n",
        yes(v > 4000 * MS && v <= 5000 * MS), ns_of(cur.it_interval) / MS);
    it = spec(0, 2000 * MS);
    k_settime(id, 0, &it, NULL);
    k_gettime(id, &cur);
    say("gettime: disarmed by a zero value: %lld %lld\n", ns_of(cur.it_value),
        ns_of(cur.it_interval));
    k_delete(id);
}

static void absolute(void) {
    block(SIG_A);
    struct sigevent ev = sig_event(SIG_A, 7);
    int id = -1;
    k_create(CLOCK_REALTIME, &ev, &id);
    long long at = now_ns(CLOCK_REALTIME) + 50 * MS;
    struct itimerspec it = spec(0, 0), cur;
    it.it_value.tv_sec = at / 1000000000LL;
    it.it_value.tv_nsec = at % 1000000000LL;
    long long start = now_ns(CLOCK_MONOTONIC);
    say("abstime: settime: %s\n", err(k_settime(id, TIMER_ABSTIME, &it, NULL)));
    k_gettime(id, &cur);
    say("abstime: gettime is relative: %s\n",
        yes(ns_of(cur.it_value) > 0 && ns_of(cur.it_value) <= 50 * MS));
    siginfo_t si;
    int s = wait_sig(SIG_A, &si, 2000);
    long long took = now_ns(CLOCK_MONOTONIC) - start;
    say("abstime: fired at the time: %s\n", yes(s == SIG_A && took >= 40 * MS));
    if (!(s == SIG_A && took >= 40 * MS))
        fprintf(stderr, "abstime: %d after %lld ns\n", s, took);
    it = spec(1000 * MS, 0);
    start = now_ns(CLOCK_MONOTONIC);
    k_settime(id, TIMER_ABSTIME, &it, NULL);
    s = wait_sig(SIG_A, &si, 2000);
    took = now_ns(CLOCK_MONOTONIC) - start;
    say("abstime: a time past fires at once: %s\n", yes(s == SIG_A && took < 1000 * MS));
    k_gettime(id, &cur);
    say("abstime: then disarmed: %lld\n", ns_of(cur.it_value));
    k_delete(id);
}

/* The signal blocked while a periodic timer goes on: one signal, the rest overruns. */
static void overruns(void) {
    block(SIG_A);
    struct sigevent ev = sig_event(SIG_A, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(5 * MS, 5 * MS);
    long long start = now_ns(CLOCK_MONOTONIC);
    k_settime(id, 0, &it, NULL);
    sleep_ms(100);
    siginfo_t si;
    int s = wait_sig(SIG_A, &si, 2000);
    long long elapsed = now_ns(CLOCK_MONOTONIC) - start;
    long long expected = elapsed / (5 * MS) - 1;
    say("overrun: one signal: %s, si_overrun about the expiries missed: %s\n",
        yes(s == SIG_A), yes(si.si_overrun >= expected - 1 && si.si_overrun <= expected + 1));
    if (!(si.si_overrun >= expected - 1 && si.si_overrun <= expected + 1))
        fprintf(stderr, "overrun: %d after %lld ns\n", si.si_overrun, elapsed);
    long g = k_getoverrun(id);
    say("overrun: timer_getoverrun == si_overrun: %s\n", yes(g == si.si_overrun));
    s = wait_sig(SIG_A, &si, 2000);
    say("overrun: next signal: %s, few overruns: %s\n", yes(s == SIG_A),
        yes(si.si_overrun <= 2));
    struct itimerspec cur;
    k_gettime(id, &cur);
    say("overrun: gettime within the period: %s\n",
        yes(ns_of(cur.it_value) > 0 && ns_of(cur.it_value) <= 5 * MS));
    /* Re-arming resets the count. */
    it = spec(0, 0);
    k_settime(id, 0, &it, NULL);
    say("overrun: after re-arming: %ld\n", k_getoverrun(id));
    while (wait_sig(SIG_A, &si, 0) == SIG_A) {
    }
    k_delete(id);
    /* Expiries every microsecond since 1970: capped at DELAYTIMER_MAX. */
    k_create(CLOCK_REALTIME, &ev, &id);
    it = spec(1, 1000);
    k_settime(id, TIMER_ABSTIME, &it, NULL);
    s = wait_sig(SIG_A, &si, 2000);
    say("overrun: capped at INT_MAX: %s %s\n", yes(si.si_overrun == INT_MAX),
        yes(k_getoverrun(id) == INT_MAX));
    k_delete(id);
    while (wait_sig(SIG_A, &si, 0) == SIG_A) {
    }
}

static atomic_int target_tid, got_tid, thread_ready;

static void *sigwaiter(void *arg) {
    (void)arg;
    block(SIG_B);
    target_tid = gettid();
    thread_ready = 1;
    siginfo_t si;
    if (wait_sig(SIG_B, &si, 5000) == SIG_B && si.si_code == SI_TIMER &&
        si.si_value.sival_int == 77)
        got_tid = gettid();
    return NULL;
}

static void thread_id(void) {
    block(SIG_B);
    pthread_t th;
    pthread_create(&th, NULL, sigwaiter, NULL);
    while (!thread_ready)
        sched_yield();
    struct sigevent ev = sig_event(SIG_B, 77);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev._sigev_un._tid = target_tid;
    int id = -1;
    say("thread_id: create: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
    struct itimerspec it = spec(20 * MS, 0);
    k_settime(id, 0, &it, NULL);
    pthread_join(th, NULL);
    say("thread_id: delivered to the thread named: %s\n",
        yes(got_tid == target_tid && got_tid != getpid()));
    siginfo_t si;
    say("thread_id: not to the main thread: %s\n", yes(wait_sig(SIG_B, &si, 0) < 0));
    k_delete(id);
    ev._sigev_un._tid = getppid();
    say("thread_id: another process: %s\n", err(k_create(CLOCK_MONOTONIC, &ev, &id)));
}

static volatile sig_atomic_t handled;
static void on_sig(int sig) {
    (void)sig;
    handled++;
}

static void deletion(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIG_B, &sa, NULL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIG_B);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    struct sigevent ev = sig_event(SIG_B, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(5 * MS, 5 * MS);
    k_settime(id, 0, &it, NULL);
    long long start = now_ns(CLOCK_MONOTONIC);
    while (handled < 3 && now_ns(CLOCK_MONOTONIC) - start < 5000 * MS)
        sleep_ms(1);
    say("delete: handler ran: %s\n", yes(handled >= 3));
    k_delete(id);
    sleep_ms(10);
    int after = handled;
    sleep_ms(50);
    say("delete: no signal after timer_delete: %s\n", yes(handled == after));
    sigprocmask(SIG_BLOCK, &s, NULL);
}

static volatile int first_overrun = -1;
static void on_first(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (handled++ == 0)
        first_overrun = si->si_overrun;
}

/* A periodic timer whose signal is ignored for a while: the expiries meanwhile are
 * overruns of the first signal handled after. */
static void ignored(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIG_B, &sa, NULL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIG_B);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    struct sigevent ev = sig_event(SIG_B, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(5 * MS, 5 * MS);
    k_settime(id, 0, &it, NULL);
    sleep_ms(100);
    handled = 0;
    sa.sa_sigaction = on_first;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIG_B, &sa, NULL);
    long long start = now_ns(CLOCK_MONOTONIC);
    while (handled < 1 && now_ns(CLOCK_MONOTONIC) - start < 5000 * MS)
        sleep_ms(1);
    long ov = first_overrun;
    say("ignored: handled once no longer ignored: %s, ignored expiries are overruns: %s\n",
        yes(handled >= 1), yes(ov >= 10));
    if (ov < 10)
        fprintf(stderr, "ignored: overrun %ld\n", ov);
    k_delete(id);
    sigprocmask(SIG_BLOCK, &s, NULL);
}

static atomic_int notified, notify_value_ok;

static void notify(union sigval v) {
    if (v.sival_int == 4321)
        notify_value_ok = 1;
    notified++;
}

static void sigev_thread(void) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = notify;
    ev.sigev_value.sival_int = 4321;
    timer_t t;
    say("sigev_thread: create: %s\n", err(timer_create(CLOCK_MONOTONIC, &ev, &t)));
    struct itimerspec it = spec(10 * MS, 10 * MS);
    timer_settime(t, 0, &it, NULL);
    long long start = now_ns(CLOCK_MONOTONIC);
    while (notified < 3 && now_ns(CLOCK_MONOTONIC) - start < 5000 * MS)
        sleep_ms(5);
    say("sigev_thread: notified: %s, value: %s\n", yes(notified >= 3), yes(notify_value_ok));
    say("sigev_thread: delete: %s\n", err(timer_delete(t)));
    sleep_ms(30);
    int after = notified;
    sleep_ms(50);
    say("sigev_thread: stopped: %s\n", yes(notified == after));
}

static void sigev_none(void) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_NONE;
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(50 * MS, 50 * MS), cur;
    k_settime(id, 0, &it, NULL);
    sleep_ms(120);
    k_gettime(id, &cur);
    long long v = ns_of(cur.it_value);
    say("sigev_none: periodic: within the period: %s\n", yes(v > 0 && v <= 50 * MS));
    it = spec(10 * MS, 0);
    k_settime(id, 0, &it, NULL);
    sleep_ms(30);
    k_gettime(id, &cur);
    say("sigev_none: one shot expired: %lld\n", ns_of(cur.it_value));
    sigset_t p;
    sigpending(&p);
    say("sigev_none: nothing pending: %s\n", yes(sigisemptyset(&p)));
    k_delete(id);
}

/* Without a sigevent: SIGALRM with the id as the value. Two such timers expiring together
 * queue a signal each, though SIGALRM is a standard signal. */
static void default_event(void) {
    block(SIGALRM);
    int a = -1, b = -1;
    k_create(CLOCK_MONOTONIC, NULL, &a);
    k_create(CLOCK_MONOTONIC, NULL, &b);
    struct itimerspec it = spec(10 * MS, 0);
    k_settime(a, 0, &it, NULL);
    k_settime(b, 0, &it, NULL);
    sleep_ms(50);
    siginfo_t s1, s2;
    int r1 = wait_sig(SIGALRM, &s1, 1000), r2 = wait_sig(SIGALRM, &s2, 100);
    say("default: SIGALRM, SI_TIMER: %s\n", yes(r1 == SIGALRM && s1.si_code == SI_TIMER));
    say("default: value is the id: %s\n",
        yes(s1.si_value.sival_int == s1.si_timerid &&
            (s1.si_timerid == a || s1.si_timerid == b)));
    say("default: both timers' signals: %s\n",
        yes(r2 == SIGALRM && s2.si_timerid != s1.si_timerid &&
            (s2.si_timerid == a || s2.si_timerid == b)));
    k_delete(a);
    k_delete(b);
}

static void via_signalfd(void) {
    block(SIG_A);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIG_A);
    int fd = signalfd(-1, &s, SFD_CLOEXEC);
    struct sigevent ev = sig_event(SIG_A, 99);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(10 * MS, 0);
    k_settime(id, 0, &it, NULL);
    struct signalfd_siginfo ssi;
    memset(&ssi, 0, sizeof ssi);
    ssize_t n = read(fd, &ssi, sizeof ssi);
    say("signalfd: read: %s, code SI_TIMER: %s, ssi_tid is the id: %s, ssi_int: %d\n",
        yes(n == sizeof ssi), yes(ssi.ssi_code == SI_TIMER), yes((int)ssi.ssi_tid == id),
        ssi.ssi_int);
    close(fd);
    k_delete(id);
}

static void cpu_clocks(void) {
    block(SIG_A);
    struct sigevent ev = sig_event(SIG_A, 5);
    int id = -1;
    say("cpu: process clock: %s\n", err(k_create(CLOCK_PROCESS_CPUTIME_ID, &ev, &id)));
    struct itimerspec it = spec(30 * MS, 0), cur;
    k_settime(id, 0, &it, NULL);
    k_gettime(id, &cur);
    say("cpu: armed: %s\n", yes(ns_of(cur.it_value) > 0 && ns_of(cur.it_value) <= 30 * MS));
    long long start = now_ns(CLOCK_MONOTONIC), used = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    siginfo_t si;
    int s = -1;
    volatile unsigned long spin = 0;
    while (now_ns(CLOCK_MONOTONIC) - start < 10000 * MS) {
        for (int i = 0; i < 100000; i++)
            spin++;
        if ((s = wait_sig(SIG_A, &si, 0)) == SIG_A)
            break;
    }
    used = now_ns(CLOCK_PROCESS_CPUTIME_ID) - used;
    say("cpu: fired after the CPU time: %s\n", yes(s == SIG_A && used >= 25 * MS));
    if (!(s == SIG_A && used >= 25 * MS))
        fprintf(stderr, "cpu: %d after %lld ns of CPU\n", s, used);
    k_delete(id);
    /* A thread's clock: created and armed (it advances only with the thread's own time). */
    say("cpu: thread clock: %s\n", err(k_create(CLOCK_THREAD_CPUTIME_ID, &ev, &id)));
    it = spec(10000 * MS, 0);
    k_settime(id, 0, &it, NULL);
    k_gettime(id, &cur);
    say("cpu: thread clock armed: %s\n", yes(ns_of(cur.it_value) > 9000 * MS));
    k_delete(id);
    clockid_t mine;
    pthread_getcpuclockid(pthread_self(), &mine);
    say("cpu: pthread_getcpuclockid clock: %s\n", err(k_create(mine, &ev, &id)));
    k_delete(id);
}

static void forked(void) {
    int id = -1;
    struct sigevent ev = sig_event(SIG_A, 0);
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(10000 * MS, 0), cur;
    k_settime(id, 0, &it, NULL);
    pid_t p = fork();
    if (p == 0) {
        int mine = -1;
        long r = k_gettime(id, &cur);
        say("fork: child sees the parent's timer: %s\n", r == 0 ? "yes" : strerrorname_np(errno));
        k_create(CLOCK_MONOTONIC, &ev, &mine);
        say("fork: child's first id: %d\n", mine);
        _exit(0);
    }
    int st;
    waitpid(p, &st, 0);
    say("fork: parent's timer still armed: %s\n",
        yes(k_gettime(id, &cur) == 0 && ns_of(cur.it_value) > 0));
    k_delete(id);
}

static void after_exec(int old) {
    struct itimerspec cur;
    say("exec: the timer is gone: %s\n", err(k_gettime(old, &cur)));
    struct sigevent ev = sig_event(SIG_A, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    say("exec: a new timer: id=%d\n", id);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "after-exec") == 0) {
        after_exec(atoi(argv[2]));
        return 0;
    }
    errors();
    periodic();
    gettime_and_old_value();
    absolute();
    overruns();
    thread_id();
    deletion();
    ignored();
    sigev_thread();
    sigev_none();
    default_event();
    via_signalfd();
    cpu_clocks();
    forked();

    struct sigevent ev = sig_event(SIG_A, 0);
    int id = -1;
    k_create(CLOCK_MONOTONIC, &ev, &id);
    struct itimerspec it = spec(10000 * MS, 0);
    k_settime(id, 0, &it, NULL);
    say("exec: timer id=%d armed\n", id);
    char arg[16];
    snprintf(arg, sizeof arg, "%d", id);
    execl(argv[0], argv[0], "after-exec", arg, (char *)NULL);
    say("exec: %s\n", strerrorname_np(errno));
    return 1;
}
