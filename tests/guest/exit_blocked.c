/* exit_blocked: exit_group from one thread ends a process whose other thread is blocked in a
 * system call, whatever the call.
 *
 *   exit_blocked CALL
 *
 * CALL is one of read, accept, futex, epoll, poll, eventfd, flock, recv, sleep, wait,
 * sigsuspend. A second thread blocks in it (forever, on its own); after 200 ms the main
 * thread prints a line and calls exit_group(7). The process must end with status 7 at once.
 * Regression test for a bug found by syscall_fuzz -t: a thread in nanosleep, rt_sigsuspend,
 * pause or rt_sigtimedwait (and a process in them when the sandbox's init ended) kept
 * waiting, so the sandbox never ended. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static int pipefd[2], lsock, efd, ep, lockfd2, usock;
static unsigned futexword;
static const char *which;
static void *blocker(void *arg) {
    const char *w = arg;
    char b[16];
    if (!strcmp(w, "read")) read(pipefd[0], b, 1);
    else if (!strcmp(w, "accept")) accept(lsock, 0, 0);
    else if (!strcmp(w, "futex")) syscall(SYS_futex, &futexword, FUTEX_WAIT, 0, 0, 0, 0);
    else if (!strcmp(w, "epoll")) { struct epoll_event e; epoll_wait(ep, &e, 1, -1); }
    else if (!strcmp(w, "poll")) { struct pollfd p = {pipefd[0], POLLIN, 0}; poll(&p, 1, -1); }
    else if (!strcmp(w, "eventfd")) { unsigned long long v; read(efd, &v, 8); }
    else if (!strcmp(w, "flock")) flock(lockfd2, LOCK_EX);
    else if (!strcmp(w, "recv")) recv(usock, b, 1, 0);
    else if (!strcmp(w, "sleep")) { struct timespec t = {100000, 0}; nanosleep(&t, 0); }
    else if (!strcmp(w, "wait")) waitpid(-1, 0, 0);
    else if (!strcmp(w, "sigsuspend")) { sigset_t s; sigemptyset(&s); sigsuspend(&s); }
    return 0;
}
int main(int argc, char **argv) {
    which = argc > 1 ? argv[1] : "read";
    pipe(pipefd);
    lsock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(lsock, (void *)&sin, sizeof sin); listen(lsock, 1);
    usock = socket(AF_INET, SOCK_DGRAM, 0); bind(usock, (void *)&sin, sizeof sin);
    efd = eventfd(0, 0);
    ep = epoll_create1(0); struct epoll_event e = {EPOLLIN, {0}}; epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &e);
    int l1 = open("/lockfile", O_RDWR | O_CREAT, 0644); flock(l1, LOCK_EX);
    lockfd2 = open("/lockfile", O_RDWR);
    /* For wait: a child that waits for a signal forever (killed when this process, the
     * sandbox's init, ends). */
    if (!strcmp(which, "wait") && fork() == 0) {
        pause();
        _exit(0);
    }
    pthread_t t;
    pthread_create(&t, 0, blocker, (void *)which);
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, 0);
    printf("%s: exit_group\n", which);
    fflush(stdout);
    syscall(SYS_exit_group, 7);
    return 1;
}
