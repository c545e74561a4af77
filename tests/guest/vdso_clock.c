/* vdso_clock: the clocks a program reads through the vDSO agree with the kernel's.
 *
 * Prints "vdso" if the kernel gave a vDSO (AT_SYSINFO_EHDR) and "no vdso" if not, then, for
 * CLOCK_REALTIME, CLOCK_MONOTONIC and CLOCK_BOOTTIME, reads the clock through libc (the vDSO
 * where there is one) and through the system call in turn, 1000 times, and checks that the
 * readings never go back from one path to the other; checks gettimeofday and time the same
 * way against CLOCK_REALTIME (time() reads the coarse clock, the last tick's seconds, as Linux's
 * vDSO does, so it is bounded below by CLOCK_REALTIME_COARSE, not the precise clock), and that a CPU-time clock (which the vDSO hands to the system
 * call) moves. Prints "clocks agree" or what went wrong; exits 0 only if they agree.
 */
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

static long long sys_clock(clockid_t c) {
    struct timespec t;
    syscall(SYS_clock_gettime, c, &t);
    return ns(t);
}

static long long libc_clock(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return ns(t);
}

int main(void) {
    printf(getauxval(AT_SYSINFO_EHDR) ? "vdso\n" : "no vdso\n");
    const clockid_t clocks[] = {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME};
    const char *names[] = {"CLOCK_REALTIME", "CLOCK_MONOTONIC", "CLOCK_BOOTTIME"};
    int bad = 0;
    for (int c = 0; c < 3; c++) {
        long long last = 0;
        for (int i = 0; i < 1000; i++) {
            long long a = libc_clock(clocks[c]);
            long long b = sys_clock(clocks[c]);
            long long d = libc_clock(clocks[c]);
            if (a < last || b < a || d < b) {
                printf("%s went back: %lld %lld %lld after %lld\n", names[c], a, b, d, last);
                bad = 1;
                break;
            }
            last = d;
        }
    }
    for (int i = 0; i < 100 && !bad; i++) {
        struct timeval tv;
        long long coarse_before = sys_clock(CLOCK_REALTIME_COARSE);
        long long before = sys_clock(CLOCK_REALTIME);
        gettimeofday(&tv, NULL);
        long long mid = tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL;
        time_t secs = time(NULL);
        long long after = sys_clock(CLOCK_REALTIME);
        if (mid < before - 1000 || mid > after || secs < coarse_before / 1000000000LL || secs > after / 1000000000LL) {
            printf("gettimeofday or time disagree: %lld %lld %lld %lld\n", before, mid, (long long)secs, after);
            bad = 1;
        }
    }
    long long cpu0 = libc_clock(CLOCK_PROCESS_CPUTIME_ID);
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 20000000UL; i++) x += i;
    long long cpu1 = libc_clock(CLOCK_PROCESS_CPUTIME_ID);
    if (cpu1 <= cpu0) {
        printf("CLOCK_PROCESS_CPUTIME_ID did not move: %lld %lld\n", cpu0, cpu1);
        bad = 1;
    }
    if (!bad)
        printf("clocks agree\n");
    return bad;
}
