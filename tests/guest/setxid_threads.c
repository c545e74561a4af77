/* Id changes and cancellation in a process with threads: glibc makes every thread change its
 * ids by signalling them (SIGSETXID) and cancels a thread with SIGCANCEL, and its handlers
 * check that the signal came from the process itself (SI_TKILL and the sender's pid). */
#define _GNU_SOURCE
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void *sleeper(void *a) {
    (void)a;
    for (;;)
        sleep(100);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, sleeper, NULL);
    uid_t uid = getuid();
    gid_t gid = getgid();
    printf("setresgid: %d\n", setresgid(gid, gid, gid));
    printf("setresuid: %d\n", setresuid(uid, uid, uid));
    printf("setgroups: %d\n", setgroups(0, NULL));
    printf("setuid: %d\n", setuid(uid));
    for (int i = 0; i < 3; i++) {
        pthread_cancel(t[i]);
        void *r;
        pthread_join(t[i], &r);
        printf("thread %d cancelled: %d\n", i, r == PTHREAD_CANCELED);
    }
    return 0;
}
