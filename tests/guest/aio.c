/* aio: Linux native AIO through the raw system calls (io_setup, io_submit, io_getevents,
 * io_pgetevents, io_cancel, io_destroy), as libaio makes them.
 *
 * Prints one line per check; the test compares stdout and the exit status natively and
 * under torpor, so nothing printed depends on the machine (the ring's size follows the CPU
 * count: only its header's fixed fields are printed) or on timing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ring {
    unsigned id, nr, head, tail, magic, compat_features, incompat_features, header_length;
    struct io_event events[];
};

static long setup(unsigned nr, aio_context_t *ctx) {
    return syscall(SYS_io_setup, nr, ctx);
}
static long destroy(aio_context_t ctx) {
    return syscall(SYS_io_destroy, ctx);
}
static long submit(aio_context_t ctx, long nr, struct iocb **cbs) {
    return syscall(SYS_io_submit, ctx, nr, cbs);
}
static long getevents(aio_context_t ctx, long min, long nr, struct io_event *ev,
                      struct timespec *ts) {
    return syscall(SYS_io_getevents, ctx, min, nr, ev, ts);
}
static long cancel(aio_context_t ctx, struct iocb *cb, struct io_event *ev) {
    return syscall(SYS_io_cancel, ctx, cb, ev);
}
struct aio_sigset {
    const sigset_t *sigmask;
    size_t sigsetsize;
};
static long pgetevents(aio_context_t ctx, long min, long nr, struct io_event *ev,
                       struct timespec *ts, struct aio_sigset *s) {
    return syscall(SYS_io_pgetevents, ctx, min, nr, ev, ts, s);
}

/* "ok", the count, or the errno's name. */
static const char *res(long r) {
    static char buf[8][32];
    static int n;
    char *b = buf[n++ % 8];
    if (r < 0)
        return strerrorname_np(errno);
    if (r == 0)
        return "ok";
    snprintf(b, 32, "%ld", r);
    return b;
}

/* An event's result: the count, or the negative errno's name. */
static const char *evres(long long r) {
    static char buf[8][32];
    static int n;
    char *b = buf[n++ % 8];
    if (r < 0)
        snprintf(b, 32, "-%s", strerrorname_np((int)-r));
    else
        snprintf(b, 32, "%lld", r);
    return b;
}

static struct timespec zero = {0, 0};

static void prep(struct iocb *cb, int op, int fd, void *buf, size_t n, long long off) {
    memset(cb, 0, sizeof(*cb));
    cb->aio_lio_opcode = op;
    cb->aio_fildes = fd;
    cb->aio_buf = (uint64_t)(uintptr_t)buf;
    cb->aio_nbytes = n;
    cb->aio_offset = off;
}

/* Submits one request and reaps its completion; prints both. */
static long long one(const char *what, aio_context_t ctx, struct iocb *cb) {
    struct iocb *cbs[1] = {cb};
    long r = submit(ctx, 1, cbs);
    if (r != 1) {
        printf("%s: submit %s\n", what, res(r));
        return -99999;
    }
    struct io_event ev;
    memset(&ev, 0, sizeof(ev));
    long g = getevents(ctx, 1, 1, &ev, NULL);
    printf("%s: submit 1, getevents %s, obj ok %d, data %llx, res %s\n", what, res(g),
           ev.obj == (uint64_t)(uintptr_t)cb, (unsigned long long)ev.data, evres(ev.res));
    return ev.res;
}

/* Submission errors: io_submit fails with the errno, nothing is queued. */
static void refused(const char *what, aio_context_t ctx, struct iocb *cb) {
    struct iocb *cbs[1] = {cb};
    printf("%s: %s\n", what, res(submit(ctx, 1, cbs)));
}

static int mapped(void *p) {
    unsigned char v;
    return mincore(p, 4096, &v) == 0;
}

static void setup_checks(void) {
    aio_context_t ctx = 0;
    printf("setup NULL ctxp: %s\n", res(setup(1, NULL)));
    ctx = 1;
    printf("setup ctx not 0: %s\n", res(setup(1, &ctx)));
    ctx = 0;
    printf("setup 0 events: %s\n", res(setup(0, &ctx)));
    printf("setup -1 events: %s\n", res(setup(-1, &ctx)));
    printf("setup 2^31 events: %s\n", res(setup(1u << 31, &ctx)));
    unsigned max = 0;
    FILE *f = fopen("/proc/sys/fs/aio-max-nr", "r");
    if (f && fscanf(f, "%u", &max) == 1)
        printf("setup aio-max-nr + 1: %s\n", res(setup(max + 1, &ctx)));
    else
        printf("no aio-max-nr\n");
    if (f)
        fclose(f);
    f = fopen("/proc/sys/fs/aio-nr", "r");
    unsigned long cur;
    printf("aio-nr readable: %d\n", f && fscanf(f, "%lu", &cur) == 1);
    if (f)
        fclose(f);
    printf("ctx still 0: %d\n", ctx == 0);
}

static void ring_checks(aio_context_t ctx) {
    struct ring *r = (struct ring *)(uintptr_t)ctx;
    printf("ring: magic %x compat %u incompat %u header %u id %u head %u tail %u nr>=32 %d\n",
           r->magic, r->compat_features, r->incompat_features, r->header_length, r->id,
           r->head, r->tail, r->nr >= 32);
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    int seen = 0;
    while (m && fgets(line, sizeof(line), m))
        if (strstr(line, "[aio]") && strtoull(line, NULL, 16) == ctx)
            seen = 1;
    if (m)
        fclose(m);
    printf("ring in maps: %d\n", seen);
}

static void file_checks(aio_context_t ctx) {
    int fd = open("aio.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    struct iocb cb;
    char msg[] = "hello aio world";
    prep(&cb, IOCB_CMD_PWRITE, fd, msg, strlen(msg), 0);
    cb.aio_data = 0x1234;
    cb.aio_key = 77;
    one("pwrite", ctx, &cb);
    printf("aio_key after submit: %u\n", cb.aio_key);
    char buf[64] = {0};
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 3, 6);
    cb.aio_data = 0x5678;
    one("pread at 6", ctx, &cb);
    printf("read: %s\n", buf);
    printf("file position still 0: %d\n", lseek(fd, 0, SEEK_CUR) == 0);

    char a[] = "vec", b[] = "tored";
    struct iovec wv[2] = {{a, 3}, {b, 5}};
    prep(&cb, IOCB_CMD_PWRITEV, fd, wv, 2, 100);
    one("pwritev at 100", ctx, &cb);
    char r1[4] = {0}, r2[8] = {0};
    struct iovec rv[2] = {{r1, 2}, {r2, 7}};
    prep(&cb, IOCB_CMD_PREADV, fd, rv, 2, 99);
    one("preadv at 99", ctx, &cb);
    printf("readv: [%d %s] [%s]\n", r1[0], r1 + 1, r2);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, sizeof(buf), 4096);
    one("pread past the end", ctx, &cb);
    prep(&cb, IOCB_CMD_FSYNC, fd, NULL, 0, 0);
    one("fsync", ctx, &cb);
    prep(&cb, IOCB_CMD_FDSYNC, fd, NULL, 0, 0);
    one("fdatasync", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 0, 0);
    one("zero-length read", ctx, &cb);

    /* A buffer that is not mapped: accepted, the read's EFAULT is the completion's. */
    char *hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 4096);
    prep(&cb, IOCB_CMD_PREAD, fd, hole, 10, 0);
    one("pread into a hole", ctx, &cb);

    /* Several at once, completed in order. */
    struct iocb many[3], *mp[3];
    char bufs[3][4];
    for (int i = 0; i < 3; i++) {
        prep(&many[i], IOCB_CMD_PREAD, fd, bufs[i], 3, i * 2);
        many[i].aio_data = 100 + i;
        mp[i] = &many[i];
    }
    printf("submit 3: %s\n", res(submit(ctx, 3, mp)));
    struct io_event evs[8];
    long n = getevents(ctx, 3, 8, evs, NULL);
    printf("getevents 3..8: %s:", res(n));
    for (long i = 0; i < n; i++)
        printf(" %llu/%lld/%.3s", (unsigned long long)evs[i].data, (long long)evs[i].res,
               bufs[i]);
    printf("\n");

    /* The first good, the second bad: one submitted. */
    struct iocb bad;
    prep(&many[0], IOCB_CMD_PREAD, fd, bufs[0], 3, 0);
    prep(&bad, IOCB_CMD_PREAD, 9999, bufs[1], 3, 0);
    struct iocb *pair[2] = {&many[0], &bad};
    printf("submit good+bad: %s\n", res(submit(ctx, 2, pair)));
    printf("reaped: %s\n", res(getevents(ctx, 1, 8, evs, NULL)));
    printf("nr 0: %s\n", res(submit(ctx, 0, NULL)));

    /* Submission errors. */
    struct iocb *nullcb[1] = {NULL};
    printf("nr -1: %s\n", res(submit(ctx, -1, mp)));
    printf("bad ctx: %s\n", res(submit(12345, 1, mp)));
    printf("ctx 0: %s\n", res(submit(0, 1, mp)));
    printf("iocbpp -1: %s\n", res(submit(ctx, 1, (struct iocb **)-1L)));
    printf("NULL iocb: %s\n", res(submit(ctx, 1, nullcb)));
    prep(&cb, IOCB_CMD_PREAD, -1, buf, 3, 0);
    refused("fd -1", ctx, &cb);
    int ro = open("aio.tmp", O_RDONLY), wo = open("aio.tmp", O_WRONLY);
    prep(&cb, IOCB_CMD_PWRITE, ro, buf, 3, 0);
    refused("write to read-only", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, wo, buf, 3, 0);
    refused("read from write-only", ctx, &cb);
    prep(&cb, 99, fd, buf, 3, 0);
    refused("opcode 99", ctx, &cb);
    prep(&cb, IOCB_CMD_NOOP, fd, buf, 3, 0);
    refused("noop", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 3, 0);
    cb.aio_reserved2 = 1;
    refused("reserved2", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 3, 0);
    cb.aio_rw_flags = 0x10000;
    refused("unknown rw flag", ctx, &cb);
    prep(&cb, IOCB_CMD_PWRITE, fd, buf, 3, 0);
    cb.aio_rw_flags = RWF_APPEND | RWF_NOAPPEND;
    refused("append and noappend", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 3, -1);
    refused("negative offset", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, -1L, 0);
    refused("negative length", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, (void *)-4096L, 10, 0);
    refused("kernel buffer", ctx, &cb);
    struct iovec many_iov[1025];
    prep(&cb, IOCB_CMD_PREADV, fd, many_iov, 1025, 0);
    refused("1025 iovecs", ctx, &cb);
    prep(&cb, IOCB_CMD_PREADV, fd, (void *)8, 1, 0);
    refused("iovecs at 8", ctx, &cb);
    prep(&cb, IOCB_CMD_FSYNC, fd, buf, 0, 0);
    refused("fsync with a buffer", ctx, &cb);
    int d = open(".", O_RDONLY | O_DIRECTORY);
    prep(&cb, IOCB_CMD_PREAD, d, buf, 3, 0);
    refused("read a directory", ctx, &cb);
    prep(&cb, IOCB_CMD_FSYNC, d, NULL, 0, 0);
    one("fsync a directory", ctx, &cb);
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 3, 0);
    cb.aio_flags = IOCB_FLAG_RESFD;
    cb.aio_resfd = 9999;
    refused("resfd closed", ctx, &cb);
    cb.aio_resfd = fd;
    refused("resfd not an eventfd", ctx, &cb);
    struct iocb ro_cb;
    prep(&ro_cb, IOCB_CMD_PREAD, fd, buf, 3, 0);
    void *ro_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(ro_page, &ro_cb, sizeof(ro_cb));
    mprotect(ro_page, 4096, PROT_READ);
    refused("read-only iocb", ctx, ro_page);
    printf("nothing queued: %s\n", res(getevents(ctx, 0, 8, evs, &zero)));
    close(ro);
    close(wo);
    close(d);
    close(fd);
    unlink("aio.tmp");
}

static void stream_checks(aio_context_t ctx) {
    int p[2];
    pipe(p);
    struct iocb cb;
    char buf[32] = {0};
    prep(&cb, IOCB_CMD_PREAD, p[0], buf, sizeof(buf), 0);
    cb.aio_rw_flags = RWF_NOWAIT;
    one("nowait read of an empty pipe", ctx, &cb);
    write(p[1], "piped", 5);
    prep(&cb, IOCB_CMD_PREAD, p[0], buf, sizeof(buf), 12345);
    one("read a pipe at 12345", ctx, &cb);
    printf("read: %s\n", buf);
    prep(&cb, IOCB_CMD_PWRITE, p[1], "again", 5, 777);
    one("write a pipe", ctx, &cb);
    prep(&cb, IOCB_CMD_FSYNC, p[1], NULL, 0, 0);
    refused("fsync a pipe", ctx, &cb);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    prep(&cb, IOCB_CMD_PWRITE, p[1], "lost", 4, 0);
    one("write a pipe without reader", ctx, &cb);
    close(p[1]);
    int null = open("/dev/null", O_WRONLY);
    prep(&cb, IOCB_CMD_PWRITE, null, "void", 4, 0);
    one("write /dev/null", ctx, &cb);
    close(null);
}

static void eventfd_checks(aio_context_t ctx) {
    int efd = eventfd(0, EFD_NONBLOCK);
    int fd = open("aio2.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    struct iocb cb[2], *cbs[2] = {&cb[0], &cb[1]};
    for (int i = 0; i < 2; i++) {
        prep(&cb[i], IOCB_CMD_PWRITE, fd, "xy", 2, i * 2);
        cb[i].aio_flags = IOCB_FLAG_RESFD;
        cb[i].aio_resfd = efd;
    }
    printf("submit 2 with resfd: %s\n", res(submit(ctx, 2, cbs)));
    uint64_t v = 0;
    long r = read(efd, &v, 8);
    printf("eventfd read: %s, value %llu\n", res(r), (unsigned long long)v);
    struct io_event evs[2];
    printf("reaped: %s\n", res(getevents(ctx, 2, 2, evs, NULL)));
    printf("eventfd empty: %s\n", res(read(efd, &v, 8)));
    close(efd);
    close(fd);
    unlink("aio2.tmp");
}

static void getevents_checks(aio_context_t ctx) {
    int fd = open("/dev/zero", O_RDONLY);
    struct iocb cb;
    char buf[8];
    struct io_event ev[4];
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 8, 0);
    cb.aio_data = 42;
    struct iocb *cbs[1] = {&cb};
    printf("getevents ctx 0: %s\n", res(getevents(0, 0, 0, NULL, NULL)));
    printf("getevents bad ctx: %s\n", res(getevents(ctx + 4096, 0, 1, ev, &zero)));
    printf("getevents min > nr: %s\n", res(getevents(ctx, 2, 1, ev, &zero)));
    printf("getevents min -1: %s\n", res(getevents(ctx, -1, 1, ev, &zero)));
    printf("getevents bad timeout: %s\n", res(getevents(ctx, 1, 1, ev, (void *)8)));
    printf("getevents none, no wait: %s\n", res(getevents(ctx, 1, 1, ev, &zero)));
    struct timespec t0, t1, ts = {0, 60 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long r = getevents(ctx, 1, 1, ev, &ts);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("getevents none, 60 ms: %s, waited %d\n", res(r), ms >= 50);
    printf("submit: %s\n", res(submit(ctx, 1, cbs)));
    printf("getevents into NULL: %s\n", res(getevents(ctx, 1, 1, NULL, NULL)));
    printf("getevents nr 0: %s\n", res(getevents(ctx, 0, 0, ev, NULL)));
    r = getevents(ctx, 1, 4, ev, NULL);
    printf("event kept: %s, data %llu\n", res(r), (unsigned long long)ev[0].data);

    /* io_pgetevents */
    sigset_t none;
    sigemptyset(&none);
    struct aio_sigset ss = {&none, 8}, small = {&none, 4}, wild = {(void *)8, 8};
    printf("submit: %s\n", res(submit(ctx, 1, cbs)));
    printf("pgetevents bad usig: %s\n", res(pgetevents(ctx, 1, 1, ev, NULL, (void *)8)));
    printf("pgetevents sigset size 4: %s\n", res(pgetevents(ctx, 1, 1, ev, NULL, &small)));
    printf("pgetevents bad mask: %s\n", res(pgetevents(ctx, 1, 1, ev, NULL, &wild)));
    printf("pgetevents bad ctx: %s\n", res(pgetevents(0, 1, 1, ev, NULL, &ss)));
    printf("pgetevents: %s\n", res(pgetevents(ctx, 1, 1, ev, &zero, &ss)));
    printf("submit: %s\n", res(submit(ctx, 1, cbs)));
    printf("pgetevents no usig: %s\n", res(pgetevents(ctx, 1, 1, ev, &zero, NULL)));

    /* io_cancel */
    printf("cancel NULL: %s\n", res(cancel(ctx, NULL, ev)));
    printf("cancel completed: %s\n", res(cancel(ctx, &cb, ev)));
    cb.aio_key = 5;
    printf("cancel wrong key: %s\n", res(cancel(ctx, &cb, ev)));
    cb.aio_key = 0;
    printf("cancel bad ctx: %s\n", res(cancel(0, &cb, ev)));
    close(fd);
}

/* libaio's fast path: it reads completions from the ring and moves head itself. */
static void ring_fast_path(aio_context_t ctx) {
    struct ring *r = (struct ring *)(uintptr_t)ctx;
    int fd = open("/dev/zero", O_RDONLY);
    struct iocb cb;
    char buf[8];
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 8, 0);
    cb.aio_data = 7;
    struct iocb *cbs[1] = {&cb};
    printf("submit: %s\n", res(submit(ctx, 1, cbs)));
    unsigned head = r->head, tail = r->tail;
    printf("ring holds %u\n", (tail + r->nr - head) % r->nr);
    struct io_event ev = r->events[head];
    printf("ring event: data %llu res %lld obj ok %d\n", (unsigned long long)ev.data,
           (long long)ev.res, ev.obj == (uint64_t)(uintptr_t)&cb);
    r->head = (head + 1) % r->nr;
    struct io_event evs[1];
    printf("consumed in user space, getevents: %s\n", res(getevents(ctx, 0, 1, evs, &zero)));

    /* Fill the ring: EAGAIN before it overflows. */
    long n = 0, last = 0;
    while (n < 100000) {
        last = submit(ctx, 1, cbs);
        if (last != 1)
            break;
        n++;
    }
    printf("full ring: %s, took at least 16 %d, fewer than nr %d\n", res(last), n >= 16,
           n < r->nr);
    struct io_event *all = calloc(r->nr, sizeof(*all));
    long got = getevents(ctx, n, r->nr, all, NULL);
    printf("reaped them all: %d\n", got == n);
    free(all);
    close(fd);
}

static aio_context_t shared_ctx;

static void *waiter(void *arg) {
    struct io_event ev;
    long r = getevents(shared_ctx, 1, 1, &ev, NULL);
    *(long *)arg = r == 1 ? (long)ev.data : -1;
    return NULL;
}

static void on_alarm(int sig) {
    (void)sig;
}

static void wait_checks(aio_context_t ctx) {
    shared_ctx = ctx;
    long out = 0;
    pthread_t th;
    pthread_create(&th, NULL, waiter, &out);
    usleep(50 * 1000);
    int fd = open("/dev/zero", O_RDONLY);
    struct iocb cb;
    char buf[8];
    prep(&cb, IOCB_CMD_PREAD, fd, buf, 8, 0);
    cb.aio_data = 99;
    struct iocb *cbs[1] = {&cb};
    printf("submit from main: %s\n", res(submit(ctx, 1, cbs)));
    pthread_join(th, NULL);
    printf("thread got data %ld\n", out);

    /* A signal with SA_RESTART still interrupts io_getevents (never restarted). */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 50 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    struct io_event ev;
    printf("getevents interrupted: %s\n", res(getevents(ctx, 1, 1, &ev, NULL)));
    close(fd);
}

static void fork_checks(aio_context_t ctx) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct io_event ev;
        printf("child: ring mapped %d\n", mapped((void *)(uintptr_t)ctx));
        printf("child: getevents %s\n", res(getevents(ctx, 0, 1, &ev, &zero)));
        printf("child: destroy %s\n", res(destroy(ctx)));
        aio_context_t mine = 0;
        printf("child: setup %s\n", res(setup(4, &mine)));
        printf("child: destroy own %s\n", res(destroy(mine)));
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    printf("parent: ring mapped %d, getevents %s\n", mapped((void *)(uintptr_t)ctx),
           res(getevents(ctx, 0, 1, NULL, &zero)));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    setup_checks();
    aio_context_t ctx = 0;
    long r = setup(16, &ctx);
    printf("setup 16: %s, ctx page-aligned %d\n", res(r), ctx != 0 && ctx % 4096 == 0);
    ring_checks(ctx);
    aio_context_t second = 0;
    r = setup(1, &second);
    printf("second setup: %s, differs %d, id %u\n", res(r), second != ctx,
           ((struct ring *)(uintptr_t)second)->id);
    file_checks(ctx);
    stream_checks(ctx);
    eventfd_checks(ctx);
    getevents_checks(ctx);
    ring_fast_path(second);
    wait_checks(ctx);
    fork_checks(ctx);
    printf("destroy: %s\n", res(destroy(ctx)));
    printf("ring unmapped: %d\n", !mapped((void *)(uintptr_t)ctx));
    printf("destroy again: %s\n", res(destroy(ctx)));
    printf("getevents after destroy: %s\n", res(getevents(ctx, 0, 1, NULL, &zero)));
    printf("destroy second: %s\n", res(destroy(second)));
    aio_context_t third = 0;
    r = setup(1, &third);
    printf("setup after: %s, id %u\n", res(r), ((struct ring *)(uintptr_t)third)->id);
    return 0;
}
