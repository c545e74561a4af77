/* clock_gap: whether CLOCK_MONOTONIC continued across a checkpoint as across a suspend.
 *
 * Says "ready", waits in pause() for SIGUSR1, then prints whether the monotonic clock moved
 * by less than the wall clock minus one second (the time spent checkpointed not counted),
 * and never backwards. Run straight through (no checkpoint), it prints "no gap".
 */
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
    signal(SIGUSR1, on_usr1);
    double m0 = now(CLOCK_MONOTONIC), r0 = now(CLOCK_REALTIME);
    printf("ready\n");
    fflush(stdout);
    while (!go)
        pause();
    double dm = now(CLOCK_MONOTONIC) - m0, dr = now(CLOCK_REALTIME) - r0;
    if (dm < 0)
        printf("monotonic went back\n");
    else if (dr < 1.0)
        printf("no gap\n");
    else
        printf("%s\n", dm < dr - 1.0 ? "monotonic continued" : "monotonic counted the gap");
    fflush(stdout);
    return 0;
}
