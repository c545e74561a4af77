/* edge_cases: small corners of Linux's syscall semantics that LTP's syscall tests found
 * different in torpor, one line each; the test compares the output with a native run.
 *
 * futex keys and requeue counts, mmap's flag and descriptor checks, select under
 * STICKY_TIMEOUTS, /proc/PID/stat of a process whose leader waits, signals to a zombie and to
 * a thread's id, an empty argv, children's CPU time, a child subreaper.
 * Run as `edge_cases`; it runs itself again with an empty argv (the execve check).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *err(long r) { return r == -1 ? strerrorname_np(errno) : "ok"; }

static long futex(void *a, int op, int val, long val2, void *b, int val3) {
    return syscall(SYS_futex, a, op, val, val2, b, val3);
}

static void futexes(void) {
    uint32_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *gone = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, 4096);
    printf("futex wake shared, unmapped: %s\n", err(futex(gone, FUTEX_WAKE, 1, 0, NULL, 0)));
    printf("futex wake shared, PROT_NONE: %s\n", err(futex(none, FUTEX_WAKE, 1, 0, NULL, 0)));
    printf("futex wake private, unmapped: %s\n",
           err(futex(gone, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, 0, NULL, 0)));
    printf("futex cmp_requeue to unmapped: %s\n",
           err(futex(shared, FUTEX_CMP_REQUEUE, 1, 1, gone, 0)));
    printf("futex cmp_requeue, negative count: %s\n",
           err(futex(shared, FUTEX_CMP_REQUEUE, 1, -1, shared + 1, 0)));
    printf("futex cmp_requeue, value differs: %s\n",
           err(futex(shared, FUTEX_CMP_REQUEUE, 1, 1, shared + 1, 5)));
}

static void mmaps(void) {
    int fd = open("/tmp/edge-mmap", O_RDWR | O_CREAT, 0600);
    close(fd);
    void *p = mmap(NULL, 0, PROT_WRITE, MAP_SHARED, fd, 0);
    printf("mmap of a closed fd, length 0: %s\n", p == MAP_FAILED ? strerrorname_np(errno) : "ok");
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED_VALIDATE | MAP_ANONYMOUS | (1 << 10), -1, 0);
    printf("mmap MAP_SHARED_VALIDATE, unknown flag: %s\n",
           p == MAP_FAILED ? strerrorname_np(errno) : "ok");
    fd = open("/tmp/edge-mmap", O_RDWR);
    ftruncate(fd, 4096);
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED_VALIDATE | (1 << 10), fd, 0);
    printf("mmap of a file MAP_SHARED_VALIDATE, unknown flag: %s\n",
           p == MAP_FAILED ? strerrorname_np(errno) : "ok");
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED | (1 << 10), fd, 0);
    printf("mmap of a file MAP_SHARED, unknown flag: %s\n",
           p == MAP_FAILED ? strerrorname_np(errno) : "ok");
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
    printf("msync MS_INVALIDATE of a locked mapping: %s\n",
           p == MAP_FAILED ? "no map" : err(msync(p, 4096, MS_INVALIDATE)));
    close(fd);
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | (1 << 10), -1, 0);
    printf("mmap MAP_SHARED, unknown flag: %s\n", p == MAP_FAILED ? strerrorname_np(errno) : "ok");
    unlink("/tmp/edge-mmap");
}

/* getcwd in a directory that was removed: ENOENT. */
static void removed_cwd(void) {
    int back = open(".", O_RDONLY | O_DIRECTORY);
    mkdir("/tmp/edge-gone", 0700);
    if (chdir("/tmp/edge-gone") != 0)
        return;
    rmdir("/tmp/edge-gone");
    char buf[256];
    printf("getcwd of a removed directory: %s\n", getcwd(buf, sizeof buf) ? "ok" : strerrorname_np(errno));
    fchdir(back);
    close(back);
}

static void sticky_select(void) {
    struct timeval tv = {0, 10};
    select(0, NULL, NULL, NULL, &tv);
    printf("select changes its timeout: %d\n", tv.tv_usec != 10);
    int old = personality(0xffffffff);
    personality(old | STICKY_TIMEOUTS);
    tv.tv_sec = 0;
    tv.tv_usec = 10;
    select(0, NULL, NULL, NULL, &tv);
    printf("with STICKY_TIMEOUTS: %d\n", tv.tv_usec != 10);
    personality(old);
}

static uint32_t leader_word;
static void *watch_leader(void *arg) {
    (void)arg;
    char path[64], buf[512], state = '?';
    snprintf(path, sizeof path, "/proc/%d/stat", getpid());
    for (int i = 0; i < 2000 && state != 'S'; i++) {
        int fd = open(path, O_RDONLY);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        if (fd >= 0)
            close(fd);
        if (n > 0) {
            buf[n] = 0;
            char *q = strrchr(buf, ')');
            state = q ? q[2] : '?';
        }
        usleep(1000);
    }
    printf("another thread sees its waiting leader as %c\n", state);
    __atomic_store_n(&leader_word, 1, __ATOMIC_SEQ_CST);
    futex(&leader_word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, 0, NULL, 0);
    return NULL;
}

static void leader_state(void) {
    pthread_t th;
    pthread_create(&th, NULL, watch_leader, NULL);
    while (__atomic_load_n(&leader_word, __ATOMIC_SEQ_CST) == 0)
        futex(&leader_word, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0, 0, NULL, 0);
    pthread_join(th, NULL);
}

static volatile pid_t sleeper_tid;
static void *sleeper(void *arg) {
    (void)arg;
    sleeper_tid = (pid_t)syscall(SYS_gettid);
    for (;;)
        pause();
    return NULL;
}

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s) {
    (void)s;
    got_usr1 = 1;
}

static void signals(void) {
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    siginfo_t si;
    waitid(P_PID, c, &si, WEXITED | WNOWAIT);
    printf("kill of a zombie: %s\n", err(kill(c, SIGTERM)));
    waitpid(c, NULL, 0);
    printf("kill once reaped: %s\n", err(kill(c, SIGTERM)));
    signal(SIGUSR1, on_usr1);
    pthread_t th;
    pthread_create(&th, NULL, sleeper, NULL);
    while (sleeper_tid == 0)
        usleep(1000);
    long r = kill(sleeper_tid, SIGUSR1);
    for (int i = 0; i < 1000 && !got_usr1; i++)
        usleep(1000);
    printf("kill of a thread's id reaches its process: %s, delivered %d\n", err(r), (int)got_usr1);
    /* A siginfo claiming to come from the kernel goes only from a thread to itself. */
    siginfo_t fake;
    memset(&fake, 0, sizeof fake);
    fake.si_code = SI_KERNEL;
    printf("rt_tgsigqueueinfo, kernel si_code, another thread: %s\n",
           err(syscall(SYS_rt_tgsigqueueinfo, getpid(), sleeper_tid, SIGUSR1, &fake)));
    printf("rt_sigqueueinfo, kernel si_code, a thread's id: %s\n",
           err(syscall(SYS_rt_sigqueueinfo, sleeper_tid, SIGUSR1, &fake)));
    fake.si_code = SI_QUEUE;
    got_usr1 = 0;
    r = syscall(SYS_rt_tgsigqueueinfo, getpid(), sleeper_tid, SIGUSR1, &fake);
    for (int i = 0; i < 1000 && !got_usr1; i++)
        usleep(1000);
    printf("rt_tgsigqueueinfo, SI_QUEUE, another thread: %s, delivered %d\n", err(r), (int)got_usr1);
}

/* A reaped child's CPU time reaches its parent: wait4's rusage, times' tms_cutime,
 * getrusage(RUSAGE_CHILDREN). */
static void children_times(void) {
    struct tms before;
    times(&before);
    pid_t c = fork();
    if (c == 0) {
        volatile unsigned long x = 0;
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        do {
            for (int i = 0; i < 1000000; i++)
                x += i;
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 300000000L);
        _exit(0);
    }
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    wait4(c, NULL, 0, &ru);
    struct tms after;
    times(&after);
    struct rusage ch;
    getrusage(RUSAGE_CHILDREN, &ch);
    long us = ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec;
    long chus = ch.ru_utime.tv_sec * 1000000L + ch.ru_utime.tv_usec;
    printf("children's CPU time: wait4 rusage >= 0.2s %d, tms_cutime grew %d, RUSAGE_CHILDREN >= 0.2s %d\n",
           us >= 200000, after.tms_cutime > before.tms_cutime, chus >= 200000);
}

/* PR_SET_CHILD_SUBREAPER: an orphaned grandchild is reparented to the subreaper, which reaps
 * it; the flag is not inherited. */
static void subreaper(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t me = getpid();
    int go[2];
    if (pipe(go) != 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        int inherited = -1;
        prctl(PR_GET_CHILD_SUBREAPER, &inherited);
        if (fork() == 0) {
            char x;
            close(go[1]);
            read(go[0], &x, 1);
            _exit(getppid() == me ? 7 : 8);
        }
        _exit(inherited == 0 ? 0 : 1);
    }
    int st;
    waitpid(c, &st, 0);
    int inherited_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    close(go[0]);
    write(go[1], "x", 1);
    close(go[1]);
    pid_t w = wait(&st);
    int on = -1;
    prctl(PR_GET_CHILD_SUBREAPER, &on);
    printf("subreaper: not inherited %d, orphan reaped here %d, saw its new parent %d, flag %d\n",
           inherited_ok, w > 0, WIFEXITED(st) && WEXITSTATUS(st) == 7, on);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 1 && argv[0][0] == 0) {
        printf("exec'd with an empty argv: argc %d, argv[0] empty\n", argc);
        return 0;
    }
    futexes();
    mmaps();
    sticky_select();
    removed_cwd();
    leader_state();
    signals();
    children_times();
    subreaper();
    pid_t c = fork();
    if (c == 0) {
        char *none[] = {NULL};
        char *env[] = {NULL};
        execve("/proc/self/exe", none, env);
        _exit(127);
    }
    int st;
    waitpid(c, &st, 0);
    printf("done\n");
    return 0;
}
