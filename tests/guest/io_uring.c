/* io_uring: the raw system calls (io_uring_setup, io_uring_enter, io_uring_register) and the
 * rings mapped from the descriptor, as liburing uses them, without liburing.
 *
 * Prints one line per check; the test compares stdout and the exit status natively and
 * under torpor, so nothing printed depends on the machine, the kernel's extra features or
 * timing: several completions are printed sorted by user data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The ABI, spelled out (the build machine's headers may be older than the kernel). */
struct sq_off { uint32_t head, tail, ring_mask, ring_entries, flags, dropped, array, resv1; uint64_t user_addr; };
struct cq_off { uint32_t head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1; uint64_t user_addr; };
struct params {
    uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd, resv[3];
    struct sq_off sq_off;
    struct cq_off cq_off;
};
struct sqe {
    uint8_t opcode, flags;
    uint16_t ioprio;
    int32_t fd;
    uint64_t off, addr;
    uint32_t len, op_flags;
    uint64_t user_data;
    uint16_t buf_index, personality;
    int32_t splice_fd_in;
    uint64_t addr3, pad2;
};
struct cqe { uint64_t user_data; int32_t res; uint32_t flags; };
struct getevents_arg { uint64_t sigmask; uint32_t sigmask_sz, min_wait_usec; uint64_t ts; };
struct probe_op { uint8_t op, resv; uint16_t flags; uint32_t resv2; };
struct probe { uint8_t last_op, ops_len; uint16_t resv; uint32_t resv2[3]; struct probe_op ops[64]; };

enum {
    OP_NOP = 0, OP_READV = 1, OP_WRITEV = 2, OP_FSYNC = 3, OP_READ_FIXED = 4, OP_WRITE_FIXED = 5,
    OP_POLL_ADD = 6, OP_POLL_REMOVE = 7, OP_SENDMSG = 9, OP_RECVMSG = 10, OP_TIMEOUT = 11,
    OP_ASYNC_CANCEL = 14, OP_LINK_TIMEOUT = 15, OP_OPENAT = 18, OP_CLOSE = 19, OP_STATX = 21,
    OP_READ = 22, OP_WRITE = 23, OP_SEND = 26, OP_RECV = 27, OP_UNLINKAT = 36, OP_MSG_RING = 40,
};
#define SQE_FIXED_FILE 1
#define SQE_IO_DRAIN 2
#define SQE_IO_LINK 4
#define SQE_IO_HARDLINK 8
#define SQE_CQE_SKIP_SUCCESS 64
#define SETUP_SQPOLL 2
#define SETUP_CQSIZE 8
#define SETUP_CLAMP 16
#define SETUP_NO_SQARRAY (1u << 16)
#define ENTER_GETEVENTS 1
#define ENTER_SQ_WAKEUP 2
#define ENTER_EXT_ARG 8
#define FEAT_SINGLE_MMAP 1
#define FEAT_NODROP 2
#define FEAT_SUBMIT_STABLE 4
#define FEAT_RW_CUR_POS 8
#define FEAT_EXT_ARG 256
#define SQ_NEED_WAKEUP 1
#define OFF_SQ_RING 0ULL
#define OFF_CQ_RING 0x8000000ULL
#define OFF_SQES 0x10000000ULL
#define REG_BUFFERS 0
#define UNREG_BUFFERS 1
#define REG_FILES 2
#define UNREG_FILES 3
#define REG_EVENTFD 4
#define REG_PROBE 8
#define CQE_F_MORE 2
#define POLL_ADD_MULTI 1

static long setup(unsigned entries, struct params *p) {
    return syscall(425, entries, p);
}
static long enter(int fd, unsigned submit, unsigned min, unsigned flags, void *arg, size_t sz) {
    return syscall(426, fd, submit, min, flags, arg, sz);
}
static long reg(int fd, unsigned op, void *arg, unsigned nr) {
    return syscall(427, fd, op, arg, nr);
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

/* A completion's result: the count, or the negative errno's name. */
static const char *cres(int r) {
    static char buf[8][32];
    static int n;
    char *b = buf[n++ % 8];
    if (r < 0)
        snprintf(b, 32, "-%s", strerrorname_np(-r));
    else
        snprintf(b, 32, "%d", r);
    return b;
}

struct ring {
    int fd;
    struct params p;
    unsigned char *sq, *cq;
    struct sqe *sqes;
    size_t sq_len, cq_len;
};

#define SQ(r, f) ((volatile uint32_t *)((r)->sq + (r)->p.sq_off.f))
#define CQ(r, f) ((volatile uint32_t *)((r)->cq + (r)->p.cq_off.f))

static int ring_init(struct ring *r, unsigned entries, unsigned flags) {
    memset(r, 0, sizeof(*r));
    r->p.flags = flags;
    r->fd = setup(entries, &r->p);
    if (r->fd < 0)
        return -1;
    r->sq_len = r->p.sq_off.array + r->p.sq_entries * 4;
    r->cq_len = r->p.cq_off.cqes + r->p.cq_entries * sizeof(struct cqe);
    r->sq = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                 OFF_SQ_RING);
    r->cq = mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                 OFF_CQ_RING);
    r->sqes = mmap(NULL, r->p.sq_entries * sizeof(struct sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, OFF_SQES);
    if (r->sq == MAP_FAILED || r->cq == MAP_FAILED || r->sqes == (void *)MAP_FAILED)
        return -1;
    return 0;
}

static void ring_exit(struct ring *r) {
    munmap(r->sq, r->sq_len);
    munmap(r->cq, r->cq_len);
    munmap(r->sqes, r->p.sq_entries * sizeof(struct sqe));
    close(r->fd);
}

/* Queues one entry (not submitted yet); returns it for more fields. */
static struct sqe *queue(struct ring *r, int op, int fd, uint64_t addr, uint32_t len, uint64_t off,
                         uint64_t data) {
    uint32_t tail = *SQ(r, tail);
    uint32_t i = tail & *SQ(r, ring_mask);
    struct sqe *s = &r->sqes[i];
    memset(s, 0, sizeof(*s));
    s->opcode = op;
    s->fd = fd;
    s->addr = addr;
    s->len = len;
    s->off = off;
    s->user_data = data;
    if (!(r->p.flags & SETUP_NO_SQARRAY))
        ((uint32_t *)(r->sq + r->p.sq_off.array))[i] = i;
    __atomic_store_n(SQ(r, tail), tail + 1, __ATOMIC_RELEASE);
    return s;
}

static int cmp_cqe(const void *a, const void *b) {
    const struct cqe *x = a, *y = b;
    return x->user_data < y->user_data ? -1 : x->user_data > y->user_data;
}

/* Takes the completions waiting (at most 64), sorted by user data. */
static int reap(struct ring *r, struct cqe *out) {
    uint32_t head = *CQ(r, head);
    uint32_t tail = __atomic_load_n(CQ(r, tail), __ATOMIC_ACQUIRE);
    int n = 0;
    for (; head != tail && n < 64; head++)
        out[n++] = ((struct cqe *)(r->cq + r->p.cq_off.cqes))[head & *CQ(r, ring_mask)];
    __atomic_store_n(CQ(r, head), head, __ATOMIC_RELEASE);
    qsort(out, n, sizeof(*out), cmp_cqe);
    return n;
}

/* Prints the completions waiting. */
static void show(const char *what, struct ring *r) {
    struct cqe c[64];
    int n = reap(r, c);
    printf("%s:", what);
    if (n == 0)
        printf(" none");
    for (int i = 0; i < n; i++)
        printf(" [%llu %s%s]", (unsigned long long)c[i].user_data, cres(c[i].res),
               c[i].flags & CQE_F_MORE ? " more" : "");
    printf("\n");
}

/* Submits what is queued, waits for `min` completions, prints the call and them. */
static void go(const char *what, struct ring *r, unsigned submit, unsigned min) {
    long e = enter(r->fd, submit, min, ENTER_GETEVENTS, NULL, 0);
    printf("%s: enter %s; ", what, res(e));
    show("cqes", r);
}

static void setup_checks(void) {
    struct params p;
    memset(&p, 0, sizeof(p));
    printf("setup 0 entries: %s\n", res(setup(0, &p)));
    memset(&p, 0, sizeof(p));
    printf("setup 32769 entries: %s\n", res(setup(32769, &p)));
    memset(&p, 0, sizeof(p));
    p.flags = SETUP_CLAMP;
    long fd = setup(100000, &p);
    printf("setup clamped: %s, sq %u cq %u\n", fd < 0 ? res(fd) : "ok", p.sq_entries,
           p.cq_entries);
    if (fd >= 0)
        close(fd);
    printf("setup NULL params: %s\n", res(setup(4, NULL)));
    memset(&p, 0, sizeof(p));
    p.resv[1] = 1;
    printf("setup reserved field: %s\n", res(setup(4, &p)));
    memset(&p, 0, sizeof(p));
    p.flags = 1u << 31;
    printf("setup unknown flag: %s\n", res(setup(4, &p)));
    memset(&p, 0, sizeof(p));
    p.flags = SETUP_CQSIZE;
    p.cq_entries = 2;
    printf("setup cq smaller than sq: %s\n", res(setup(4, &p)));
    memset(&p, 0, sizeof(p));
    p.flags = SETUP_CQSIZE;
    p.cq_entries = 100;
    fd = setup(3, &p);
    printf("setup cq size 100 for 3: %s, sq %u cq %u\n", fd < 0 ? res(fd) : "ok", p.sq_entries,
           p.cq_entries);
    if (fd >= 0)
        close(fd);
    /* The answer cannot be written back. */
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("setup read-only params: %s\n", res(setup(4, ro)));
    munmap(ro, 4096);

    memset(&p, 0, sizeof(p));
    fd = setup(3, &p);
    unsigned need = FEAT_SINGLE_MMAP | FEAT_NODROP | FEAT_SUBMIT_STABLE | FEAT_RW_CUR_POS |
                    FEAT_EXT_ARG;
    printf("setup 3: sq %u cq %u, features %s, flags %u\n", p.sq_entries, p.cq_entries,
           (p.features & need) == need ? "ok" : "missing", p.flags);
    printf("sq_off: head %u tail %u mask %u entries %u flags %u dropped %u array %u\n",
           p.sq_off.head, p.sq_off.tail, p.sq_off.ring_mask, p.sq_off.ring_entries,
           p.sq_off.flags, p.sq_off.dropped, p.sq_off.array);
    printf("cq_off: head %u tail %u mask %u entries %u overflow %u cqes %u flags %u\n",
           p.cq_off.head, p.cq_off.tail, p.cq_off.ring_mask, p.cq_off.ring_entries,
           p.cq_off.overflow, p.cq_off.cqes, p.cq_off.flags);
    int cloexec = fcntl(fd, F_GETFD);
    printf("descriptor close-on-exec: %d\n", cloexec >= 0 && (cloexec & FD_CLOEXEC));
    char b[8];
    printf("read the descriptor: %s\n", res(read(fd, b, 8)));
    printf("write the descriptor: %s\n", res(write(fd, b, 8)));
    printf("mmap bad offset: %s\n",
           mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0x18000000) == MAP_FAILED
               ? strerrorname_np(errno) : "mapped");
    printf("mmap with an address: %s\n",
           mmap((void *)0x700000000000, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED
               ? strerrorname_np(errno) : "mapped");
    void *low = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0x4000000);
    printf("mmap offset low bits: %s\n", low == MAP_FAILED ? strerrorname_np(errno) : "mapped");
    if (low != MAP_FAILED)
        munmap(low, 4096);
    printf("enter bad fd: %s\n", res(enter(1000, 0, 0, 0, NULL, 0)));
    int pp[2];
    pipe(pp);
    printf("enter not io_uring: %s\n", res(enter(pp[0], 0, 0, 0, NULL, 0)));
    printf("register not io_uring: %s\n", res(reg(pp[0], REG_PROBE, NULL, 0)));
    close(pp[0]);
    close(pp[1]);
    printf("enter bad flags: %s\n", res(enter(fd, 0, 0, 1u << 30, NULL, 0)));
    printf("register bad opcode: %s\n", res(reg(fd, 1000, NULL, 0)));
    close(fd);
}

static void rw_checks(void) {
    struct ring r;
    if (ring_init(&r, 8, 0)) {
        printf("ring: %s\n", strerrorname_np(errno));
        return;
    }
    printf("ring: mask %u entries %u, cq mask %u entries %u, head %u tail %u\n",
           *SQ(&r, ring_mask), *SQ(&r, ring_entries), *CQ(&r, ring_mask), *CQ(&r, ring_entries),
           *SQ(&r, head), *CQ(&r, tail));
    queue(&r, OP_NOP, -1, 0, 0, 0, 1);
    queue(&r, OP_NOP, -1, 0, 0, 0, 2);
    go("two nops", &r, 2, 2);
    /* One mapping, two views: the completion tail moved in the SQ ring's mapping too. */
    printf("single mmap: %d\n",
           *(uint32_t *)(r.sq + r.p.cq_off.tail) == *CQ(&r, tail) && *CQ(&r, tail) == 2);
    printf("sq head after: %u\n", *SQ(&r, head));

    int fd = open("uring.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    char out[64] = "hello, ring: the quick brown fox jumps", in[64] = {0};
    queue(&r, OP_WRITE, fd, (uintptr_t)out, 38, 0, 10);
    go("write 38 at 0", &r, 1, 1);
    queue(&r, OP_READ, fd, (uintptr_t)in, 64, 7, 11);
    go("read at 7", &r, 1, 1);
    printf("read back: %s\n", in);
    /* Offset -1: the file position, which moves. */
    lseek(fd, 0, SEEK_SET);
    memset(in, 0, sizeof(in));
    queue(&r, OP_READ, fd, (uintptr_t)in, 5, -1, 12);
    queue(&r, OP_READ, fd, (uintptr_t)in + 5, 7, -1, 13);
    go("two reads at the position", &r, 2, 2);
    printf("read: %s, position %ld\n", in, (long)lseek(fd, 0, SEEK_CUR));
    struct iovec iov[2] = {{out, 5}, {out + 7, 4}};
    queue(&r, OP_WRITEV, fd, (uintptr_t)iov, 2, 100, 14);
    go("writev at 100", &r, 1, 1);
    char v1[3], v2[6];
    struct iovec riov[2] = {{v1, 3}, {v2, 6}};
    queue(&r, OP_READV, fd, (uintptr_t)riov, 2, 100, 15);
    go("readv at 100 (9 asked)", &r, 1, 1);
    printf("readv: %.3s|%.6s\n", v1, v2);
    queue(&r, OP_FSYNC, fd, 0, 0, 0, 16);
    go("fsync", &r, 1, 1);
    queue(&r, OP_FSYNC, fd, 0, 0, 0, 17)->op_flags = 0x80;
    go("fsync bad flags", &r, 1, 1);

    /* Errors in the completions. */
    queue(&r, OP_READ, 999, (uintptr_t)in, 4, 0, 20);
    queue(&r, OP_NOP, -1, 0, 0, 0, 21);
    go("read bad fd, then nop", &r, 2, 2);
    int wo = open("uring.tmp", O_WRONLY);
    queue(&r, OP_READ, wo, (uintptr_t)in, 4, 0, 22);
    go("read a write-only fd", &r, 1, 1);
    queue(&r, OP_READ, fd, 0x10, 4, 0, 23);
    go("read to a bad address", &r, 1, 1);
    queue(&r, OP_READ, fd, (uintptr_t)in, 4, -5, 24);
    go("read at offset -5", &r, 1, 1);
    queue(&r, 200, -1, 0, 0, 0, 25);
    queue(&r, OP_NOP, -1, 0, 0, 0, 26);
    go("unknown opcode, then nop (submission stops)", &r, 2, 1);
    go("the nop left queued", &r, 1, 1);
    queue(&r, OP_NOP, -1, 0, 0, 0, 27)->flags = 0x80;
    go("bad sqe flags", &r, 1, 1);
    queue(&r, OP_NOP, -1, 0, 0, 0, 28)->ioprio = 1;
    go("nop with ioprio", &r, 1, 1);
    queue(&r, OP_NOP, -1, 0, 0, 0, 29)->personality = 5;
    go("unknown personality", &r, 1, 1);

    /* Link chains. */
    queue(&r, OP_READ, 999, (uintptr_t)in, 4, 0, 30)->flags = SQE_IO_LINK;
    queue(&r, OP_NOP, -1, 0, 0, 0, 31)->flags = SQE_IO_LINK;
    queue(&r, OP_NOP, -1, 0, 0, 0, 32);
    go("link after a failure", &r, 3, 3);
    queue(&r, OP_READ, 999, (uintptr_t)in, 4, 0, 33)->flags = SQE_IO_HARDLINK;
    queue(&r, OP_NOP, -1, 0, 0, 0, 34);
    go("hardlink after a failure", &r, 2, 2);
    queue(&r, OP_READ, fd, (uintptr_t)in, 64, 0, 35)->flags = SQE_IO_LINK;
    queue(&r, OP_NOP, -1, 0, 0, 0, 36);
    go("link after a short read", &r, 2, 2);
    queue(&r, OP_NOP, -1, 0, 0, 0, 37)->flags = SQE_IO_LINK;
    queue(&r, 200, -1, 0, 0, 0, 38)->flags = SQE_IO_LINK;
    queue(&r, OP_NOP, -1, 0, 0, 0, 39);
    go("link with a bad entry", &r, 3, 3);
    queue(&r, OP_NOP, -1, 0, 0, 0, 40)->flags = SQE_CQE_SKIP_SUCCESS;
    queue(&r, OP_READ, 999, 0, 0, 0, 41)->flags = SQE_CQE_SKIP_SUCCESS;
    queue(&r, OP_NOP, -1, 0, 0, 0, 42);
    go("skip on success", &r, 3, 2);
    queue(&r, OP_NOP, -1, 0, 0, 0, 43)->flags = SQE_IO_DRAIN;
    go("drain after skip", &r, 1, 1);

    /* Hostile ring words. */
    uint32_t tail = *SQ(&r, tail);
    queue(&r, OP_NOP, -1, 0, 0, 0, 50);
    ((uint32_t *)(r.sq + r.p.sq_off.array))[tail & 7] = 1000;
    long e = enter(r.fd, 1, 0, 0, NULL, 0);
    printf("bad index: enter %s, dropped %u\n", res(e), *SQ(&r, dropped));
    show("bad index cqes", &r);
    uint32_t head = *SQ(&r, head);
    for (int i = 0; i < 8; i++)
        queue(&r, OP_NOP, -1, 0, 0, 0, 51);
    __atomic_store_n(SQ(&r, tail), head + 1000, __ATOMIC_RELEASE);
    e = enter(r.fd, 1000, 0, 0, NULL, 0);
    printf("tail far ahead: enter %s, head moved %u\n", res(e), *SQ(&r, head) - head);
    __atomic_store_n(SQ(&r, tail), *SQ(&r, head), __ATOMIC_RELEASE);
    show("tail far ahead cqes", &r);
    printf("enter with nothing queued: %s\n", res(enter(r.fd, 4, 0, 0, NULL, 0)));
    close(wo);
    close(fd);
    unlink("uring.tmp");
    ring_exit(&r);
}

static void fixed_checks(void) {
    struct ring r;
    ring_init(&r, 4, 0);
    char *bufs = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct iovec iov[2] = {{bufs, 4096}, {bufs + 4096, 4096}};
    printf("register NULL buffers: %s\n", res(reg(r.fd, REG_BUFFERS, NULL, 2)));
    printf("register 0 buffers: %s\n", res(reg(r.fd, REG_BUFFERS, iov, 0)));
    struct iovec bad[1] = {{(void *)0x1000, 4096}};
    printf("register unmapped buffer: %s\n", res(reg(r.fd, REG_BUFFERS, bad, 1)));
    struct iovec huge[1] = {{bufs, (1UL << 30) + 4096}};
    printf("register 1 GiB + 4 KiB: %s\n", res(reg(r.fd, REG_BUFFERS, huge, 1)));
    printf("unregister none: %s\n", res(reg(r.fd, UNREG_BUFFERS, NULL, 0)));
    printf("register 2 buffers: %s\n", res(reg(r.fd, REG_BUFFERS, iov, 2)));
    printf("register again: %s\n", res(reg(r.fd, REG_BUFFERS, iov, 2)));
    int fd = open("uring.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    strcpy(bufs, "fixed buffers go straight to the file");
    queue(&r, OP_WRITE_FIXED, fd, (uintptr_t)bufs, 37, 0, 1)->buf_index = 0;
    go("write_fixed", &r, 1, 1);
    queue(&r, OP_READ_FIXED, fd, (uintptr_t)bufs + 4096 + 100, 20, 6, 2)->buf_index = 1;
    go("read_fixed", &r, 1, 1);
    printf("read_fixed data: %.20s\n", bufs + 4096 + 100);
    queue(&r, OP_READ_FIXED, fd, (uintptr_t)bufs + 4000, 200, 0, 3)->buf_index = 0;
    go("read_fixed past the buffer", &r, 1, 1);
    queue(&r, OP_READ_FIXED, fd, (uintptr_t)bufs, 20, 0, 4)->buf_index = 7;
    go("read_fixed bad index", &r, 1, 1);
    printf("unregister with an argument: %s\n", res(reg(r.fd, UNREG_BUFFERS, NULL, 1)));
    printf("unregister: %s\n", res(reg(r.fd, UNREG_BUFFERS, NULL, 0)));
    queue(&r, OP_READ_FIXED, fd, (uintptr_t)bufs, 20, 0, 5)->buf_index = 0;
    go("read_fixed unregistered", &r, 1, 1);

    /* Registered files. */
    int fds[3] = {-1, fd, -1};
    printf("register files: %s\n", res(reg(r.fd, REG_FILES, fds, 3)));
    int self[1] = {r.fd};
    printf("register files again: %s\n", res(reg(r.fd, REG_FILES, self, 1)));
    memset(bufs, 0, 64);
    struct sqe *s = queue(&r, OP_READ, 1, (uintptr_t)bufs, 5, 0, 6);
    s->flags = SQE_FIXED_FILE;
    s = queue(&r, OP_READ, 0, (uintptr_t)bufs, 5, 0, 7);
    s->flags = SQE_FIXED_FILE;
    go("read fixed file 1, then empty slot 0", &r, 2, 2);
    printf("fixed file data: %.5s\n", bufs);
    printf("unregister files: %s\n", res(reg(r.fd, UNREG_FILES, NULL, 0)));
    printf("unregister files again: %s\n", res(reg(r.fd, UNREG_FILES, NULL, 0)));
    int ur[1] = {r.fd};
    printf("register the ring itself: %s\n", res(reg(r.fd, REG_FILES, ur, 1)));

    /* The probe. */
    struct probe pr;
    memset(&pr, 0, sizeof(pr));
    printf("probe: %s\n", res(reg(r.fd, REG_PROBE, &pr, 64)));
    int ops[] = {OP_NOP, OP_READV, OP_WRITEV, OP_READ_FIXED, OP_READ, OP_WRITE, OP_SENDMSG,
                 OP_TIMEOUT, OP_OPENAT, OP_CLOSE, OP_POLL_ADD};
    printf("probe: ops_len %u, supported:", pr.ops_len);
    for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        printf(" %d", pr.ops[ops[i]].op == ops[i] && (pr.ops[ops[i]].flags & 1));
    printf("\n");
    pr.resv = 1;
    printf("probe not zeroed: %s\n", res(reg(r.fd, REG_PROBE, &pr, 64)));
    close(fd);
    unlink("uring.tmp");
    munmap(bufs, 8192);
    ring_exit(&r);
}

static void wait_checks(void) {
    struct ring r;
    ring_init(&r, 8, 0);
    struct timespec ts = {0, 20 * 1000 * 1000};
    struct getevents_arg arg = {0, 0, 0, (uintptr_t)&ts};
    printf("wait with a timeout, nothing pending: %s\n",
           res(enter(r.fd, 0, 1, ENTER_GETEVENTS | ENTER_EXT_ARG, &arg, sizeof(arg))));
    printf("ext arg of the wrong size: %s\n",
           res(enter(r.fd, 0, 1, ENTER_GETEVENTS | ENTER_EXT_ARG, &arg, 8)));
    printf("ext arg at a bad address: %s\n",
           res(enter(r.fd, 0, 1, ENTER_GETEVENTS | ENTER_EXT_ARG, (void *)8, sizeof(arg))));
    sigset_t m;
    sigemptyset(&m);
    printf("sigmask of the wrong size, no wait: %s\n",
           res(enter(r.fd, 0, 0, ENTER_GETEVENTS, &m, 4)));
    printf("sigmask of the wrong size, a wait: %s\n",
           res(enter(r.fd, 0, 1, ENTER_GETEVENTS, &m, 4)));

    /* A read of an empty pipe waits for data. */
    int pp[2];
    pipe(pp);
    char b[16] = {0};
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), 0, 1);
    printf("read an empty pipe: enter %s\n", res(enter(r.fd, 1, 0, 0, NULL, 0)));
    struct pollfd pf = {r.fd, POLLIN, 0};
    poll(&pf, 1, 0);
    printf("ring readable before: %d\n", !!(pf.revents & POLLIN));
    write(pp[1], "pipe data", 9);
    go("after the write", &r, 0, 1);
    printf("pipe read: %s\n", b);
    /* Readiness of the descriptor. */
    queue(&r, OP_NOP, -1, 0, 0, 0, 2);
    enter(r.fd, 1, 0, 0, NULL, 0);
    pf.revents = 0;
    poll(&pf, 1, 1000);
    printf("ring readable with a completion: %d\n", !!(pf.revents & POLLIN));
    show("cqes", &r);
    enter(r.fd, 0, 0, ENTER_GETEVENTS, NULL, 0);
    pf.revents = 0;
    poll(&pf, 1, 0);
    printf("ring readable once reaped: %d\n", !!(pf.revents & POLLIN));
    /* RWF_NOWAIT: EAGAIN; a non-blocking pipe waits all the same. */
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), 0, 3)->op_flags = RWF_NOWAIT;
    go("read an empty pipe, RWF_NOWAIT", &r, 1, 1);
    fcntl(pp[0], F_SETFL, O_NONBLOCK);
    memset(b, 0, sizeof(b));
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), 0, 13);
    printf("read an empty non-blocking pipe: enter %s\n", res(enter(r.fd, 1, 0, 0, NULL, 0)));
    write(pp[1], "nb", 2);
    go("after the write", &r, 0, 1);
    printf("non-blocking pipe read: %s\n", b);
    fcntl(pp[0], F_SETFL, 0);
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), -7, 14);
    go("read a pipe at offset -7", &r, 1, 1);
    queue(&r, OP_NOP, -1, 0, 42, 0, 15)->op_flags = 1;
    go("nop injecting a result", &r, 1, 1);

    /* Polls. */
    queue(&r, OP_POLL_ADD, pp[0], 0, 0, 0, 4)->op_flags = POLLIN;
    printf("poll an empty pipe: enter %s\n", res(enter(r.fd, 1, 0, 0, NULL, 0)));
    write(pp[1], "x", 1);
    go("poll after a write", &r, 0, 1);
    read(pp[0], b, 1);
    queue(&r, OP_POLL_ADD, pp[0], 0, 0, 0, 5)->op_flags = POLLIN;
    enter(r.fd, 1, 0, 0, NULL, 0);
    queue(&r, OP_POLL_REMOVE, -1, 5, 0, 0, 6);
    go("poll removed", &r, 1, 2);
    queue(&r, OP_POLL_REMOVE, -1, 5, 0, 0, 7);
    go("poll removed again", &r, 1, 1);
    queue(&r, OP_POLL_ADD, pp[0], 0, 0, 0, 8)->op_flags = POLLIN;
    enter(r.fd, 1, 0, 0, NULL, 0);
    queue(&r, OP_ASYNC_CANCEL, -1, 8, 0, 0, 9);
    go("async cancel of a poll", &r, 1, 2);
    queue(&r, OP_ASYNC_CANCEL, -1, 12345, 0, 0, 10);
    go("async cancel of nothing", &r, 1, 1);
    struct sqe *s = queue(&r, OP_POLL_ADD, pp[0], 0, POLL_ADD_MULTI, 0, 11);
    s->op_flags = POLLIN;
    enter(r.fd, 1, 0, 0, NULL, 0);
    write(pp[1], "y", 1);
    go("multishot poll", &r, 0, 1);
    read(pp[0], b, 1);
    queue(&r, OP_ASYNC_CANCEL, -1, 11, 0, 0, 12);
    go("multishot poll cancelled", &r, 1, 2);

    /* Timeouts. */
    struct timespec t10 = {0, 10 * 1000 * 1000};
    queue(&r, OP_TIMEOUT, -1, (uintptr_t)&t10, 1, 0, 20);
    go("timeout 10 ms", &r, 1, 1);
    struct timespec t10s = {10, 0};
    queue(&r, OP_TIMEOUT, -1, (uintptr_t)&t10s, 1, 1, 21);
    queue(&r, OP_NOP, -1, 0, 0, 0, 22);
    go("timeout of one completion", &r, 2, 2);
    queue(&r, OP_TIMEOUT, -1, (uintptr_t)&t10s, 1, 0, 23);
    enter(r.fd, 1, 0, 0, NULL, 0);
    queue(&r, 12 /* TIMEOUT_REMOVE */, -1, 23, 0, 0, 24);
    go("timeout removed", &r, 1, 2);
    queue(&r, OP_TIMEOUT, -1, 8, 1, 0, 25);
    go("timeout at a bad address", &r, 1, 1);
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), 0, 26)->flags = SQE_IO_LINK;
    queue(&r, OP_LINK_TIMEOUT, -1, (uintptr_t)&t10, 1, 0, 27);
    go("linked timeout on an empty pipe", &r, 2, 2);
    queue(&r, OP_NOP, -1, 0, 0, 0, 28)->flags = SQE_IO_LINK;
    queue(&r, OP_LINK_TIMEOUT, -1, (uintptr_t)&t10, 1, 0, 29);
    go("linked timeout on a nop", &r, 2, 2);
    queue(&r, OP_LINK_TIMEOUT, -1, (uintptr_t)&t10, 1, 0, 30);
    go("linked timeout alone", &r, 1, 1);

    /* Drain: after the pending read. */
    queue(&r, OP_READ, pp[0], (uintptr_t)b, sizeof(b), 0, 31);
    queue(&r, OP_NOP, -1, 0, 0, 0, 32)->flags = SQE_IO_DRAIN;
    queue(&r, OP_NOP, -1, 0, 0, 0, 33);
    printf("drain behind a read: enter %s; ", res(enter(r.fd, 3, 0, ENTER_GETEVENTS, NULL, 0)));
    show("cqes", &r);
    write(pp[1], "z", 1);
    go("after the read", &r, 0, 3);

    close(pp[0]);
    close(pp[1]);
    ring_exit(&r);

    /* Overflow: more completions than the queue holds (16), none lost (a ring of its own:
     * after a drain, Linux completes later requests asynchronously). */
    ring_init(&r, 8, 0);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++)
            queue(&r, OP_NOP, -1, 0, 0, 0, 100 + round * 8 + i);
        enter(r.fd, 8, 0, 0, NULL, 0);
    }
    printf("overflow flag: %d\n", !!(*SQ(&r, flags) & 2));
    struct cqe c[64];
    int n = reap(&r, c);
    enter(r.fd, 0, 0, ENTER_GETEVENTS, NULL, 0);
    n += reap(&r, c + n);
    printf("overflow: %d completions, flag after %d\n", n, !!(*SQ(&r, flags) & 2));
    ring_exit(&r);
}

static void socket_checks(void) {
    struct ring r;
    ring_init(&r, 8, 0);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    char msg[] = "sent through the ring", got[64] = {0};
    struct iovec iov = {msg, sizeof(msg)};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    queue(&r, OP_SENDMSG, sv[0], (uintptr_t)&mh, 1, 0, 1);
    go("sendmsg", &r, 1, 1);
    struct iovec riov = {got, sizeof(got)};
    struct msghdr rh = {0};
    rh.msg_iov = &riov;
    rh.msg_iovlen = 1;
    queue(&r, OP_RECVMSG, sv[1], (uintptr_t)&rh, 1, 0, 2);
    go("recvmsg", &r, 1, 1);
    printf("recvmsg data: %s\n", got);
    memset(got, 0, sizeof(got));
    queue(&r, OP_RECV, sv[1], (uintptr_t)got, sizeof(got), 0, 3);
    printf("recv on an empty socket: enter %s\n", res(enter(r.fd, 1, 0, 0, NULL, 0)));
    queue(&r, OP_SEND, sv[0], (uintptr_t)"later", 5, 0, 4);
    go("send, then the recv", &r, 1, 2);
    printf("recv data: %s\n", got);
    close(sv[1]);
    signal(SIGPIPE, SIG_DFL);
    queue(&r, OP_SEND, sv[0], (uintptr_t)"x", 1, 0, 5);
    go("send to a closed peer (no SIGPIPE)", &r, 1, 1);
    close(sv[0]);

    /* Paths: in the process's root and working directory. */
    queue(&r, OP_OPENAT, AT_FDCWD, (uintptr_t)"uring2.tmp", 0644, 0, 6)->op_flags =
        O_CREAT | O_RDWR | O_EXCL;
    struct cqe c[64];
    enter(r.fd, 1, 1, ENTER_GETEVENTS, NULL, 0);
    int n = reap(&r, c);
    int fd = n == 1 ? c[0].res : -1;
    printf("openat: %s\n", fd >= 0 ? "a descriptor" : cres(fd));
    queue(&r, OP_OPENAT, AT_FDCWD, (uintptr_t)"uring2.tmp", 0644, 0, 7)->op_flags =
        O_CREAT | O_RDWR | O_EXCL;
    go("openat again, O_EXCL", &r, 1, 1);
    queue(&r, OP_OPENAT, AT_FDCWD, (uintptr_t)"/no/such/dir/f", 0, 0, 8);
    go("openat a missing path", &r, 1, 1);
    struct statx stx;
    queue(&r, OP_STATX, AT_FDCWD, (uintptr_t)"uring2.tmp", STATX_SIZE, (uintptr_t)&stx, 9);
    go("statx", &r, 1, 1);
    printf("statx size %llu\n", (unsigned long long)stx.stx_size);
    queue(&r, OP_CLOSE, fd, 0, 0, 0, 10);
    go("close", &r, 1, 1);
    printf("closed: %s\n", res(fcntl(fd, F_GETFD)));
    queue(&r, OP_CLOSE, r.fd, 0, 0, 0, 11);
    go("close the ring", &r, 1, 1);
    queue(&r, OP_UNLINKAT, AT_FDCWD, (uintptr_t)"uring2.tmp", 0, 0, 12);
    go("unlinkat", &r, 1, 1);
    printf("unlinked: %s\n", res(access("uring2.tmp", F_OK)));

    /* An io_uring descriptor cannot be passed to another process. */
    int sp[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
    char one = 'x', cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec oiov = {&one, 1};
    struct msghdr om = {0};
    om.msg_iov = &oiov;
    om.msg_iovlen = 1;
    om.msg_control = cbuf;
    om.msg_controllen = sizeof(cbuf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&om);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &r.fd, sizeof(int));
    printf("pass the ring with SCM_RIGHTS: %s\n", res(sendmsg(sp[0], &om, 0)));
    close(sp[0]);
    close(sp[1]);

    /* MSG_RING to another ring. */
    struct ring r2;
    ring_init(&r2, 4, 0);
    queue(&r, OP_MSG_RING, r2.fd, 0, 77, 0xabc, 13);
    go("msg_ring", &r, 1, 1);
    show("the other ring", &r2);
    queue(&r, OP_MSG_RING, 0, 0, 77, 0xabc, 14);
    go("msg_ring to stdin", &r, 1, 1);
    /* A registered eventfd. */
    int efd = eventfd(0, EFD_NONBLOCK);
    printf("register eventfd: %s\n", res(reg(r2.fd, REG_EVENTFD, &efd, 1)));
    printf("register eventfd again: %s\n", res(reg(r2.fd, REG_EVENTFD, &efd, 1)));
    queue(&r2, OP_NOP, -1, 0, 0, 0, 1);
    go("nop on the eventfd ring", &r2, 1, 1);
    uint64_t count = 0;
    long rd = read(efd, &count, 8);
    printf("eventfd: %s, count %llu\n", res(rd), (unsigned long long)count);
    close(efd);
    ring_exit(&r2);
    ring_exit(&r);
}

static struct ring shared;
static long waited;

static void *waiter(void *arg) {
    (void)arg;
    waited = enter(shared.fd, 0, 1, ENTER_GETEVENTS, NULL, 0);
    return NULL;
}

static void *submitter(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < 50; i++) {
        /* One submitter at a time writes the queue; the kernel side serialises the rest. */
        static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&m);
        queue(&shared, OP_NOP, -1, 0, 0, 0, 1000 * id + i);
        enter(shared.fd, 1, 0, 0, NULL, 0);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void thread_checks(void) {
    ring_init(&shared, 64, 0);
    /* Another thread's completion ends a wait. */
    pthread_t w;
    pthread_create(&w, NULL, waiter, NULL);
    usleep(50 * 1000);
    queue(&shared, OP_NOP, -1, 0, 0, 0, 1);
    enter(shared.fd, 1, 0, 0, NULL, 0);
    pthread_join(w, NULL);
    printf("a waiting thread woken by another's completion: %s; ", res(waited));
    show("cqes", &shared);
    /* Four threads submitting at once: every completion arrives once. */
    pthread_t th[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, submitter, (void *)(i + 1));
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    unsigned seen = 0, dup = 0;
    static unsigned char got[5][50];
    memset(got, 0, sizeof(got));
    for (;;) {
        struct cqe c[64];
        int n = reap(&shared, c);
        if (n == 0) {
            /* The overflow list comes back as the queue empties. */
            enter(shared.fd, 0, 0, ENTER_GETEVENTS, NULL, 0);
            n = reap(&shared, c);
            if (n == 0)
                break;
        }
        for (int i = 0; i < n; i++) {
            unsigned t = c[i].user_data / 1000, k = c[i].user_data % 1000;
            if (t >= 1 && t <= 4 && k < 50) {
                dup += got[t][k]++ != 0;
                seen++;
            }
        }
    }
    printf("four submitting threads: %u completions, %u twice\n", seen, dup);
    ring_exit(&shared);
}

static void fork_checks(void) {
    struct ring r;
    ring_init(&r, 4, 0);
    pid_t pid = fork();
    if (pid == 0) {
        queue(&r, OP_NOP, -1, 0, 0, 0, 1234);
        enter(r.fd, 1, 0, 0, NULL, 0);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    go("the child's nop, seen by the parent", &r, 0, 1);
    ring_exit(&r);

    struct ring s;
    if (ring_init(&s, 4, SETUP_SQPOLL)) {
        printf("sqpoll: %s\n", strerrorname_np(errno));
        return;
    }
    queue(&s, OP_NOP, -1, 0, 0, 0, 5);
    uint32_t need = *SQ(&s, flags) & SQ_NEED_WAKEUP;
    long e = enter(s.fd, 1, 1, ENTER_GETEVENTS | (need ? ENTER_SQ_WAKEUP : 0), NULL, 0);
    printf("sqpoll: enter %s; ", res(e));
    show("cqes", &s);
    ring_exit(&s);

    struct ring q;
    if (ring_init(&q, 4, SETUP_NO_SQARRAY) == 0) {
        queue(&q, OP_NOP, -1, 0, 0, 0, 6);
        go("no sq array", &q, 1, 1);
        ring_exit(&q);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    setup_checks();
    rw_checks();
    fixed_checks();
    wait_checks();
    socket_checks();
    thread_checks();
    fork_checks();
    return 0;
}
