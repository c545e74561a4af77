/* stress: many processes and threads at once, with page-table churn and signal storms, each
 * checking that its memory keeps its bytes.
 *
 *   stress PROCS THREADS ROUNDS
 *
 * The first process forks PROCS children (and keeps one share of the work itself). Every
 * process starts THREADS threads; each thread, ROUNDS times: maps a few pages, fills them
 * with a pattern of its own, unmaps some and remaps others (munmap, mprotect and madvise
 * make every other thread of the process apply page-table changes and be kicked), checks
 * every byte it still owns, and sends SIGUSR1 to a sibling thread (tgkill) and to the
 * process. The first process meanwhile sends SIGUSR1 storms to every child. A process exits
 * with 0 only if every check held; the first prints one line and exits with the number of
 * children that failed (0 when all is well). Wrong bytes print where they were found. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 8
#define PAGE 4096

static int threads_per_proc, rounds;
static volatile sig_atomic_t signals_seen;
static pid_t tids[64];
static volatile int bad;

static void on_usr1(int sig) {
    (void)sig;
    signals_seen++;
}

static uint64_t pattern(long who, long round, long page, long word) {
    return ((uint64_t)who << 48) ^ ((uint64_t)round << 32) ^ ((uint64_t)page << 16) ^ (uint64_t)word;
}

static int check(uint64_t *p, long who, long round, long page) {
    for (long w = 0; w < PAGE / 8; w++) {
        if (p[w] != pattern(who, round, page, w)) {
            fprintf(stderr, "stress: pid %d thread %ld round %ld page %ld word %ld: %#llx, want %#llx\n",
                    getpid(), who, round, page, w, (unsigned long long)p[w],
                    (unsigned long long)pattern(who, round, page, w));
            return -1;
        }
    }
    return 0;
}

static void *worker(void *arg) {
    long me = (long)arg;
    tids[me] = (pid_t)syscall(SYS_gettid);
    for (long r = 0; r < rounds && !bad; r++) {
        uint64_t *m = mmap(0, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("stress: mmap");
            bad = 1;
            break;
        }
        for (long pg = 0; pg < PAGES; pg++)
            for (long w = 0; w < PAGE / 8; w++)
                m[pg * PAGE / 8 + w] = pattern(me, r, pg, w);
        /* Drop the first page, zero the second, make the third read-only: each one a
         * page-table change the other threads must see. */
        munmap(m, PAGE);
        madvise((char *)m + PAGE, PAGE, MADV_DONTNEED);
        mprotect((char *)m + 2 * PAGE, PAGE, PROT_READ);
        sched_yield();
        for (long w = 0; w < PAGE / 8; w++)
            if (m[PAGE / 8 + w] != 0) {
                fprintf(stderr, "stress: pid %d: MADV_DONTNEED page not zero\n", getpid());
                bad = 1;
                break;
            }
        for (long pg = 2; pg < PAGES && !bad; pg++)
            if (check(m + pg * PAGE / 8, me, r, pg)) bad = 1;
        munmap((char *)m + PAGE, (PAGES - 1) * PAGE);
        pid_t sib = tids[(me + 1) % threads_per_proc];
        if (sib > 0) syscall(SYS_tgkill, getpid(), sib, SIGUSR1);
        if (r % 8 == 0) kill(getpid(), SIGUSR1);
    }
    return 0;
}

static int run_process(void) {
    pthread_t th[64];
    for (long i = 0; i < threads_per_proc; i++)
        if (pthread_create(&th[i], 0, worker, (void *)i)) {
            perror("stress: pthread_create");
            return 1;
        }
    for (long i = 0; i < threads_per_proc; i++) pthread_join(th[i], 0);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: stress PROCS THREADS ROUNDS\n");
        return 2;
    }
    int procs = atoi(argv[1]);
    threads_per_proc = atoi(argv[2]);
    rounds = atoi(argv[3]);
    if (procs < 0 || procs > 1000 || threads_per_proc < 1 || threads_per_proc > 64 || rounds < 1) {
        fprintf(stderr, "stress: bad arguments\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);

    pid_t *kids = calloc((size_t)procs + 1, sizeof(pid_t));
    int started = 0;
    for (int i = 0; i < procs; i++) {
        pid_t p = fork();
        if (p < 0) {
            perror("stress: fork");
            break;
        }
        if (p == 0) _exit(run_process());
        kids[started++] = p;
    }
    /* A signal storm at the children while they work. */
    for (int k = 0; k < 20; k++)
        for (int i = 0; i < started; i++) kill(kids[i], SIGUSR1);
    int own = run_process();
    int failed = own;
    for (int i = 0; i < started; i++) {
        int st;
        while (waitpid(kids[i], &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "stress: child %d ended with status %#x\n", kids[i], st);
            failed++;
        }
    }
    printf("stress: %d processes x %d threads x %d rounds, %d failed\n", started + 1,
           threads_per_proc, rounds, failed);
    return failed > 125 ? 125 : failed;
}
