/* sleep_interrupt: a signal ends nanosleep and clock_nanosleep early (EINTR, time left in
 * rem), whatever the duration asked. Regression test for a bug found by syscall_fuzz: torpor
 * slept on the host for the whole duration, so a long sleep could neither be interrupted nor
 * parked, and the program hung.
 *
 * Each case forks a child that sends SIGUSR1 to the parent after 100 ms while the parent
 * sleeps (a handler is installed without SA_RESTART). Prints one line per case. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_usr1(int sig) {
    (void)sig;
    got++;
}

static pid_t poke_later(void) {
    pid_t parent = getpid();
    pid_t c = fork();
    if (c == 0) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kill(parent, SIGUSR1);
        _exit(0);
    }
    return c;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void report(const char *what, long r, struct timespec *rem, long min_left, double t0) {
    int e = r < 0 ? errno : 0;
    double took = now() - t0;
    printf("%s: %s, handler %s, %s, rem %s\n", what, e == EINTR ? "EINTR" : "not EINTR",
           got ? "ran" : "did not run", took < 30 ? "early" : "late",
           !rem ? "-" : rem->tv_sec >= min_left ? "ok" : "wrong");
    fflush(stdout);
    got = 0;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);

    struct timespec rem;
    pid_t c = poke_later();
    struct timespec d = {100000, 0};
    double t0 = now();
    long r = syscall(SYS_nanosleep, &d, &rem);
    report("nanosleep 100000 s", r, &rem, 99000, t0);
    waitpid(c, NULL, 0);

    c = poke_later();
    struct timespec huge = {INT64_MAX, 999999999};
    t0 = now();
    r = syscall(SYS_nanosleep, &huge, &rem);
    report("nanosleep INT64_MAX s", r, &rem, 1000000000L, t0);
    waitpid(c, NULL, 0);

    c = poke_later();
    t0 = now();
    r = syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &d, &rem);
    if (r > 0) /* the raw call returns the error as -errno; keep the wrapper's convention */
        errno = (int)r, r = -1;
    report("clock_nanosleep relative", r, &rem, 99000, t0);
    waitpid(c, NULL, 0);

    c = poke_later();
    struct timespec abs;
    clock_gettime(CLOCK_REALTIME, &abs);
    abs.tv_sec += 100000;
    t0 = now();
    r = syscall(SYS_clock_nanosleep, CLOCK_REALTIME, TIMER_ABSTIME, &abs, NULL);
    report("clock_nanosleep absolute", r, NULL, 0, t0);
    waitpid(c, NULL, 0);
    return 0;
}
