/* checkpoint_state: state a checkpoint must carry, checked after the restore.
 *
 *   checkpoint_state MIB [THREADS [PORT]]
 *
 * Fills MIB MiB of anonymous memory with a pattern (each 8-byte word its own index mixed
 * with a seed), writes 17 bytes into a pipe it never reads, adds 42 to an eventfd, writes a
 * file in the root and leaves its offset at 2, installs a SIGUSR1 handler (SA_RESTART) and a
 * blocked, pending SIGUSR2 and a POSIX timer whose one shot has fired, its (blocked) signal
 * pending, says "ready" and waits in pause() for SIGUSR1. Then it checks everything (the
 * whole pattern, the pipe's bytes, the counter, the file's bytes from its offset, the pending
 * signals, the timer, its own pid and working directory), prints one line each,
 * and exits 0 if all hold, 1 otherwise. Run straight through, it passes natively too.
 *
 * With THREADS (1 to 3), as many threads wait meanwhile, each in another blocking call: a
 * condition variable (futex), a read from a pipe, a sleep loop adding to a double (FPU state);
 * each then checks its thread-local variable and a pattern on its stack.
 *
 * With PORT, it also listens on 0.0.0.0:PORT and makes an epoll set of the listener (data 1)
 * and the eventfd (data 2): after SIGUSR1 only the eventfd is ready; once everything is
 * checked it says "serving", answers one connection with "restored\n" and exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s) { (void)s; got_usr1 = 1; }

static const char PIPE_BYTES[] = "bytes in the pipe";

static uint64_t word(uint64_t i) { return (i * 0x9e3779b97f4a7c15ULL) ^ 0x5eed; }

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int go;
static int wake_pipe[2];
static __thread int mine;

/* Each thread's own checks after its wait: its thread-local variable and its stack. */
static void *waiter(void *arg) {
    long kind = (long)arg;
    mine = (int)kind * 7 + 1;
    volatile uint64_t stack[512];
    for (int i = 0; i < 512; i++)
        stack[i] = word(i + kind * 1000);
    double acc = 0;
    long rounds = 0;
    if (kind == 0) {
        pthread_mutex_lock(&lock);
        while (!go)
            pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
    } else if (kind == 1) {
        char c;
        if (read(wake_pipe[0], &c, 1) != 1)
            return (void *)0;
    } else {
        while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST)) {
            acc += 0.5;
            rounds++;
            usleep(2000);
        }
    }
    int ok = mine == (int)kind * 7 + 1 && acc == rounds * 0.5;
    for (int i = 0; i < 512; i++)
        ok &= stack[i] == word(i + kind * 1000);
    return (void *)(long)ok;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
    size_t words = mib << 17;
    int nthreads = argc > 2 ? atoi(argv[2]) : 0;
    if (nthreads < 0 || nthreads > 3)
        nthreads = 3;
    pthread_t th[3];
    if (pipe(wake_pipe) != 0)
        return 1;
    /* The POSIX timer's signal, blocked in every thread (natively any thread may take it). */
    sigset_t rt;
    sigemptyset(&rt);
    sigaddset(&rt, SIGRTMIN + 3);
    sigprocmask(SIG_BLOCK, &rt, NULL);
    for (long i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, waiter, (void *)i);
    uint64_t *mem = mmap(NULL, mib << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < words; i++)
        mem[i] = word(i);

    int p[2];
    if (pipe(p) != 0 || write(p[1], PIPE_BYTES, 17) != 17) {
        perror("pipe");
        return 1;
    }
    int efd = eventfd(0, EFD_NONBLOCK);
    uint64_t add = 42;
    if (efd < 0 || write(efd, &add, 8) != 8) {
        perror("eventfd");
        return 1;
    }
    int f = open("/tmp/checkpoint-file", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (f < 0 || write(f, "hello world", 11) != 11 || lseek(f, 2, SEEK_SET) != 2) {
        perror("file");
        return 1;
    }
    int port = argc > 3 ? atoi(argv[3]) : 0;
    int lsock = -1, ep = -1;
    if (port > 0) {
        lsock = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        if (bind(lsock, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lsock, 16) != 0) {
            perror("listen");
            return 1;
        }
        ep = epoll_create1(0);
        struct epoll_event e1 = {.events = EPOLLIN, .data.u64 = 1};
        struct epoll_event e2 = {.events = EPOLLIN, .data.u64 = 2};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, lsock, &e1) != 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &e2) != 0) {
            perror("epoll_ctl");
            return 1;
        }
    }
    struct sigaction a = {0};
    a.sa_handler = on_usr1;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR2);
    sigprocmask(SIG_BLOCK, &block, NULL);
    raise(SIGUSR2);
    pid_t pid = getpid();
    struct sigevent sev = {0};
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGRTMIN + 3;
    sev.sigev_value.sival_int = 1717;
    timer_t timer;
    struct itimerspec once = {.it_value = {0, 1000000}};
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0 ||
        timer_settime(timer, 0, &once, NULL) != 0) {
        perror("timer");
        return 1;
    }
    for (int i = 0; i < 2000; i++) {
        sigset_t p;
        sigpending(&p);
        if (sigismember(&p, SIGRTMIN + 3))
            break;
        usleep(1000);
    }

    printf("ready\n");
    fflush(stdout);
    while (!got_usr1)
        pause();

    int ok = 1;
    if (ep >= 0) {
        struct epoll_event evs[4];
        int n = epoll_wait(ep, evs, 4, 0);
        printf("epoll: %d ready, data %llu\n", n, n > 0 ? (unsigned long long)evs[0].data.u64 : 0ULL);
        ok &= n == 1 && evs[0].data.u64 == 2;
    }
    size_t bad = 0;
    for (size_t i = 0; i < words; i++)
        bad += mem[i] != word(i);
    printf("pattern: %zu of %zu words differ\n", bad, words);
    ok &= bad == 0;

    char buf[64] = {0};
    ssize_t n = read(p[0], buf, sizeof buf);
    printf("pipe: %zd bytes \"%.*s\"\n", n, n > 0 ? (int)n : 0, buf);
    ok &= n == 17 && memcmp(buf, PIPE_BYTES, 17) == 0;

    uint64_t count = 0;
    n = read(efd, &count, 8);
    printf("eventfd: %llu\n", (unsigned long long)count);
    ok &= n == 8 && count == 42;

    memset(buf, 0, sizeof buf);
    n = read(f, buf, sizeof buf);
    printf("file: \"%.*s\"\n", n > 0 ? (int)n : 0, buf);
    ok &= n == 9 && memcmp(buf, "llo world", 9) == 0;

    sigset_t pending;
    sigpending(&pending);
    int usr2 = sigismember(&pending, SIGUSR2);
    printf("SIGUSR2 pending: %d\n", usr2);
    ok &= usr2 == 1;

    siginfo_t si = {0};
    struct timespec zero = {0, 0};
    int timer_sig = sigtimedwait(&rt, &si, &zero) == SIGRTMIN + 3 && si.si_code == SI_TIMER &&
                    si.si_value.sival_int == 1717;
    struct itimerspec later = {.it_value = {10, 0}}, cur = {0};
    int timer_kept = timer_settime(timer, 0, &later, NULL) == 0 &&
                     timer_gettime(timer, &cur) == 0 && cur.it_value.tv_sec >= 9;
    printf("POSIX timer: kept %d, its signal pending: %d\n", timer_kept, timer_sig);
    ok &= timer_kept && timer_sig;

    if (nthreads > 0) {
        pthread_mutex_lock(&lock);
        __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        if (write(wake_pipe[1], "x", 1) != 1)
            ok = 0;
        int kept = 0;
        for (int i = 0; i < nthreads; i++) {
            void *r;
            pthread_join(th[i], &r);
            kept += r == (void *)1;
        }
        printf("threads: %d of %d kept their state\n", kept, nthreads);
        ok &= kept == nthreads;
    }

    printf("pid unchanged: %d\n", getpid() == pid);
    ok &= getpid() == pid;
    printf("%s\n", ok ? "all state kept" : "STATE LOST");
    fflush(stdout);
    if (lsock >= 0) {
        printf("serving\n");
        fflush(stdout);
        int c = accept(lsock, NULL, NULL);
        if (c < 0 || write(c, "restored\n", 9) != 9)
            ok = 0;
        close(c);
    }
    return ok ? 0 : 1;
}
