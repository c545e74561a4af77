// /proc files about threads and memory, compared with a native run: /proc/self/task lists
// the threads, a thread's comm (PR_SET_NAME, and written through /proc), its stat and status,
// /proc/thread-self; VmLck after mlock, mlock2, munlock, mlockall, munlockall and MAP_LOCKED;
// smaps' Rss and Locked; pagemap's present bits. Prints nothing that differs between runs
// (no addresses, no ids).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 3
#define PAGE 4096UL

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int named, release;
static pid_t tids[WORKERS];
static char seen_after[WORKERS][16];
static int thread_self_ok[WORKERS];

static int read_file(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    // /proc's files come a page or so per read: read to the end.
    size_t got = 0;
    ssize_t n;
    while (got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = 0;
    return (int)got;
}

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    char name[16], path[64], link[64], want[64];
    snprintf(name, sizeof name, "worker-%d", i);
    prctl(PR_SET_NAME, name);
    // /proc/thread-self is this thread's directory, and its comm this thread's name.
    char comm[32] = "";
    ssize_t n = readlink("/proc/thread-self", link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    snprintf(want, sizeof want, "%d/task/%d", getpid(), (int)syscall(SYS_gettid));
    read_file("/proc/thread-self/comm", comm, sizeof comm);
    snprintf(path, sizeof path, "%s\n", name);
    thread_self_ok[i] = strcmp(link, want) == 0 && strcmp(comm, path) == 0;
    pthread_mutex_lock(&lock);
    tids[i] = (pid_t)syscall(SYS_gettid);
    named++;
    pthread_cond_broadcast(&cond);
    while (!release)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    prctl(PR_GET_NAME, seen_after[i]);
    return NULL;
}

static char thread_state(pid_t tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    if (read_file(path, buf, sizeof buf) < 0)
        return '?';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static void threads(void) {
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    pthread_mutex_lock(&lock);
    while (named < WORKERS)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);

    // The listing: ., .., the main thread and each worker, nothing else.
    DIR *d = opendir("/proc/self/task");
    int entries = 0, found = 0, me = 0, dots = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
            dots++;
            continue;
        }
        entries++;
        pid_t t = atoi(e->d_name);
        if (t == getpid())
            me++;
        for (int i = 0; i < WORKERS; i++)
            found += t == tids[i] && e->d_type == DT_DIR;
    }
    if (d)
        closedir(d);
    printf("task listing: %d threads, dots %d, main %d, workers %d\n", entries, dots, me, found);
    char path[96], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/task/", getpid());
    d = opendir(path);
    printf("opendir /proc/PID/task/: %s\n", d ? "ok" : strerror(errno));
    if (d)
        closedir(d);

    for (int i = 0; i < WORKERS; i++) {
        // Each worker asleep in pthread_cond_wait: S.
        char st = '?';
        for (int tries = 0; tries < 2000 && st != 'S'; tries++) {
            st = thread_state(tids[i]);
            if (st != 'S')
                usleep(1000);
        }
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", tids[i]);
        read_file(path, buf, sizeof buf);
        buf[strcspn(buf, "\n")] = 0;
        int stat_tid = 0, status_pid = 0, tgid = 0;
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", tids[i]);
        if (read_file(path, buf + 64, sizeof buf - 64) > 0)
            stat_tid = atoi(buf + 64) == tids[i];
        snprintf(path, sizeof path, "/proc/self/task/%d/status", tids[i]);
        if (read_file(path, buf + 64, sizeof buf - 64) > 0) {
            char *p = strstr(buf + 64, "\nPid:\t");
            status_pid = p && atoi(p + 6) == tids[i];
            p = strstr(buf + 64, "\nTgid:\t");
            tgid = p && atoi(p + 7) == getpid();
        }
        printf("worker %d: comm %s, state %c, stat id 1=%d, status Pid 1=%d Tgid 1=%d, "
               "thread-self 1=%d\n",
               i, buf, st, stat_tid, status_pid, tgid, thread_self_ok[i]);
    }
    // A name written through /proc by another thread of the process.
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tids[1]);
    int fd = open(path, O_WRONLY);
    ssize_t w = fd >= 0 ? write(fd, "renamed", 7) : -1;
    printf("write comm: open %s, write %zd\n", fd >= 0 ? "ok" : strerror(errno), w);
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof path, "/proc/self/task/%d/nonexistent", tids[1]);
    printf("task file that is not: %s\n", open(path, O_RDONLY) < 0 ? strerror(errno) : "opened");
    printf("task of no thread: %s\n",
           opendir("/proc/self/task/999999") ? "opened" : strerror(errno));

    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    printf("names seen by the workers: %s %s %s\n", seen_after[0], seen_after[1], seen_after[2]);
    prctl(PR_SET_NAME, "main-thread");
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", getpid());
    read_file(path, buf, sizeof buf);
    char comm[64];
    read_file("/proc/self/comm", comm, sizeof comm);
    printf("main comm: %s", buf);
    printf("process comm: %s", comm);
}

static long vmlck(void) {
    char buf[4096];
    if (read_file("/proc/self/status", buf, sizeof buf) < 0)
        return -1;
    char *p = strstr(buf, "VmLck:");
    return p ? atol(p + 6) : -1;
}

/// Rss and Locked of the smaps entry of the mapping at `addr`, in kB.
static void smaps_of(void *addr, long *rss, long *locked) {
    static char buf[1 << 20];
    *rss = *locked = -1;
    if (read_file("/proc/self/smaps", buf, sizeof buf) < 0)
        return;
    char want[32];
    snprintf(want, sizeof want, "%lx-", (unsigned long)addr);
    char *line = buf;
    int in = 0;
    unsigned long lo, hi;
    while (line && *line) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        if (!strncmp(line, want, strlen(want)) &&
            (line == buf || line[-1] == 0))
            in = 1;
        else if (in && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            break;
        else if (in && !strncmp(line, "Rss:", 4))
            *rss = atol(line + 4);
        else if (in && !strncmp(line, "Locked:", 7))
            *locked = atol(line + 7);
        line = next;
    }
}

static void memory(void) {
    long base = vmlck();
    printf("VmLck at start: %ld kB\n", base);
    char *a = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mlock(a, 4 * PAGE);
    printf("mlock 4 pages: %ld kB\n", vmlck() - base);
    mlock(a, 4 * PAGE);
    printf("mlock them again: %ld kB\n", vmlck() - base);
    mlock(a + 1, 4 * PAGE);
    printf("mlock 4 pages off by one byte: %ld kB\n", vmlck() - base);
    printf("mlock2 onfault: %ld, ", syscall(SYS_mlock2, a + 8 * PAGE, 4 * PAGE, 1));
    printf("then %ld kB\n", vmlck() - base);
    unsigned char vec[16];
    mincore(a, 16 * PAGE, vec);
    int resident = 0;
    for (int i = 0; i < 16; i++)
        resident += vec[i] & 1;
    printf("resident after mlock and mlock2 onfault: %d pages\n", resident);
    munlock(a, 16 * PAGE);
    printf("munlock all 16: %ld kB\n", vmlck() - base);
    munmap(a + 15 * PAGE, PAGE);
    printf("munlock over a hole: %s\n", munlock(a, 16 * PAGE) ? strerror(errno) : "ok");

    // smaps: an 8-page mapping, 3 pages touched, then locked (every page faulted in).
    // Between two PROT_NONE pages, so that it merges with no neighbour.
    char *r = mmap(NULL, 10 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *s = mmap(r + PAGE, 8 * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    memset(s, 1, 3 * PAGE);
    long rss, locked;
    smaps_of(s, &rss, &locked);
    // (torpor maps a touched page's neighbours with it: Rss is at least the touched pages.)
    printf("smaps before mlock: Rss of touched pages 1=%d, Locked %ld kB\n", rss >= 12, locked);
    mlock(s, 8 * PAGE);
    smaps_of(s, &rss, &locked);
    printf("smaps after mlock: Rss %ld kB, Locked %ld kB\n", rss, locked);
    munlock(s, 8 * PAGE);
    smaps_of(s, &rss, &locked);
    printf("smaps after munlock: Rss %ld kB, Locked %ld kB\n", rss, locked);

    // pagemap: bit 63 for the touched pages of a fresh mapping (torpor may have mapped
    // their neighbours with them), none for an unmapped page.
    char *p = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p[0] = 1;
    p[2 * PAGE] = 1;
    munmap(p + 3 * PAGE, PAGE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    uint64_t ent[4] = {0};
    ssize_t n = fd >= 0 ? pread(fd, ent, sizeof ent, (off_t)((uintptr_t)p / PAGE * 8)) : -1;
    printf("pagemap: read %zd, touched present %d %d, unmapped %llu\n", n, (int)(ent[0] >> 63),
           (int)(ent[2] >> 63), (unsigned long long)ent[3]);
    off_t end = fd >= 0 ? lseek(fd, (off_t)((uintptr_t)p / PAGE * 8), SEEK_SET) : -1;
    printf("pagemap lseek to the entry: %d\n", end == (off_t)((uintptr_t)p / PAGE * 8));
    if (fd >= 0)
        close(fd);

    // mlockall and munlockall.
    mlockall(MCL_CURRENT);
    printf("mlockall current: locked more 1=%d\n", vmlck() > base);
    munlockall();
    printf("munlockall: %ld kB\n", vmlck() - base);
    mlockall(MCL_FUTURE);
    printf("mlockall future: %ld kB now, ", vmlck() - base);
    char *f = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mincore(f, 8 * PAGE, vec);
    resident = 0;
    for (int i = 0; i < 8; i++)
        resident += vec[i] & 1;
    printf("a new 8-page mapping: %ld kB, %d pages resident\n", vmlck() - base, resident);
    munlockall();
    munmap(f, 8 * PAGE);
    printf("munlockall: %ld kB\n", vmlck() - base);
    char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_LOCKED,
                   -1, 0);
    printf("MAP_LOCKED 1 MiB: %ld kB\n", vmlck() - base);
    munmap(m, 1 << 20);
    printf("after munmap: %ld kB\n", vmlck() - base);
    // A fork's child inherits no lock.
    mlock(a, 2 * PAGE);
    pid_t c = fork();
    if (c == 0) {
        printf("child after fork: %ld kB\n", vmlck() - base);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(c, &status, 0);
    printf("parent after fork: %ld kB\n", vmlck() - base);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    threads();
    memory();
    return 0;
}
