/* execve from a multi-threaded process, from a thread that is not the main one, while the
 * other threads sleep, wait on a condition variable and spin: the new program runs alone,
 * with the same pid (Linux's de_thread). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int spin;
static char pidbuf[32];
static char *self_path;

static void *sleeper(void *a) {
    (void)a;
    for (;;)
        sleep(100);
}
static void *waiter(void *a) {
    (void)a;
    pthread_mutex_lock(&mu);
    for (;;)
        pthread_cond_wait(&cv, &mu);
}
static void *spinner(void *a) {
    (void)a;
    for (;;)
        spin++;
}
static void *execer(void *a) {
    (void)a;
    usleep(50000);
    char *argv[] = {self_path, "after", pidbuf, NULL};
    execv(self_path, argv);
    perror("execv");
    exit(3);
}

static int threads_now(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "Threads: %d", &n);
    if (f)
        fclose(f);
    return n;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 3 && !strcmp(argv[1], "after")) {
        printf("after exec: same pid=%d tid is pid=%d threads=%d\n", atoi(argv[2]) == getpid(),
               (pid_t)syscall(SYS_gettid) == getpid(), threads_now());
        return 0;
    }
    self_path = argv[0];
    snprintf(pidbuf, sizeof pidbuf, "%d", getpid());
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_create(&t, NULL, waiter, NULL);
    pthread_create(&t, NULL, spinner, NULL);
    printf("before exec: threads=%d\n", threads_now() + 1);
    pthread_create(&t, NULL, execer, NULL);
    pthread_join(t, NULL);
    return 1;
}
