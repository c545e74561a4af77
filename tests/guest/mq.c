/* POSIX message queues: mq_open's names, flags, attributes and errors, priorities (highest
 * first, FIFO within one), O_NONBLOCK (EAGAIN) and mq_setattr, EMSGSIZE, EBADF, absolute
 * timeouts (ETIMEDOUT, EINVAL), a blocked receive woken by a forked child's send and a
 * blocked send woken by its receive, EINTR from a signal, poll's readiness, read(2) of the
 * descriptor's status line, fstat, mq_unlink while open, mq_notify (SIGEV_SIGNAL with its
 * siginfo from this process and from a child, SIGEV_NONE, EBUSY, removal, no signal while a
 * receiver waits, a bad SIGEV_THREAD socket), another user's permissions, and the limits
 * of /proc/sys/fs/mqueue. CAP_SYS_RESOURCE is dropped first (a container's root lacks it).
 * Run in a fresh IPC namespace (torpor's sandbox, or unshare --ipc), it prints the same
 * natively and in torpor: pids and times only as comparisons. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <mqueue.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *err(long r) { return r < 0 ? strerrorname_np(errno) : "ok"; }

static void drop_sys_resource(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0) {
        printf("capget: %s\n", strerrorname_np(errno));
        return;
    }
    unsigned drop = 1u << CAP_SYS_RESOURCE;
    d[0].effective &= ~drop;
    d[0].permitted &= ~drop;
    d[0].inheritable &= ~drop;
    if (syscall(SYS_capset, &h, d) < 0)
        printf("capset: %s\n", strerrorname_np(errno));
}

static void attrs(const char *what, mqd_t q) {
    struct mq_attr a;
    memset(&a, 0, sizeof a);
    long r = mq_getattr(q, &a);
    printf("%s: %s flags %s maxmsg %ld msgsize %ld curmsgs %ld\n", what, err(r),
           a.mq_flags & O_NONBLOCK ? "O_NONBLOCK" : "0", a.mq_maxmsg, a.mq_msgsize,
           a.mq_curmsgs);
}

static void recv_one(const char *what, mqd_t q, size_t len) {
    char buf[9000];
    unsigned prio = 99;
    ssize_t n = mq_receive(q, buf, len, &prio);
    if (n < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: prio %u len %zd \"%.*s\"\n", what, prio, n, (int)n, buf);
}

static void poll_state(const char *what, mqd_t q) {
    struct pollfd p = {q, POLLIN | POLLOUT, 0};
    int r = poll(&p, 1, 0);
    printf("%s: poll %d%s%s\n", what, r, p.revents & POLLIN ? " IN" : "",
           p.revents & POLLOUT ? " OUT" : "");
}

/* The status line, with the pid replaced by whether it is `me`. */
static void status(const char *what, mqd_t q, pid_t me) {
    char buf[128];
    lseek(q, 0, SEEK_SET);
    ssize_t n = pread(q, buf, sizeof buf - 1, 0);
    if (n < 0) {
        printf("%s: read: %s\n", what, strerrorname_np(errno));
        return;
    }
    buf[n] = 0;
    char *pid = strstr(buf, "NOTIFY_PID:");
    int p = pid ? atoi(pid + 11) : -1;
    if (pid)
        *pid = 0;
    printf("%s: %zd bytes \"%s\" pid is me %d, is 0 %d\n", what, n, buf, p == me, p == 0);
}

static struct timespec in_ms(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (ms % 1000) * 1000000;
    ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    return ts;
}

static long since_ms(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static volatile sig_atomic_t got_sig, got_code, got_pid, got_uid, got_value;
static void on_notify(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    got_sig = sig;
    got_code = si->si_code;
    got_pid = si->si_pid;
    got_uid = si->si_uid;
    got_value = si->si_value.sival_int;
}
static volatile sig_atomic_t alarmed;
static void on_alarm(int sig) { (void)sig; alarmed = 1; }

static void proc_limits(void) {
    const char *names[] = {"queues_max", "msg_max", "msgsize_max", "msg_default",
                           "msgsize_default"};
    for (int i = 0; i < 5; i++) {
        char path[64], buf[32] = "";
        snprintf(path, sizeof path, "/proc/sys/fs/mqueue/%s", names[i]);
        FILE *f = fopen(path, "r");
        if (!f || !fgets(buf, sizeof buf, f))
            printf("%s: unreadable\n", names[i]);
        else
            printf("%s: %s", names[i], buf);
        if (f)
            fclose(f);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    drop_sys_resource();
    umask(022);
    pid_t me = getpid();
    proc_limits();

    /* Names, flags and attributes. */
    mqd_t q = mq_open("/q", O_RDWR | O_CREAT | O_EXCL, 0666, NULL);
    printf("create /q: %s\n", err(q));
    attrs("defaults", q);
    struct stat st;
    long r = fstat(q, &st);
    printf("fstat: %s mode %o size %ld nlink %ld\n", err(r), st.st_mode, (long)st.st_size,
           (long)st.st_nlink);
    printf("cloexec: %d\n", (fcntl(q, F_GETFD) & FD_CLOEXEC) != 0);
    printf("again, O_EXCL: %s\n", err(mq_open("/q", O_RDWR | O_CREAT | O_EXCL, 0600, NULL)));
    printf("missing: %s\n", err(mq_open("/nothere", O_RDWR)));
    printf("no slash: %s\n", err(mq_open("q", O_RDWR)));
    printf("raw with a slash: %s\n", err(syscall(SYS_mq_open, "a/b", O_RDWR | O_CREAT, 0600, NULL)));
    printf("raw empty: %s\n", err(syscall(SYS_mq_open, "", O_RDWR | O_CREAT, 0600, NULL)));
    char longname[300];
    memset(longname, 'n', sizeof longname);
    longname[0] = '/';
    longname[257] = 0;
    printf("256-byte name: %s\n", err(mq_open(longname, O_RDWR | O_CREAT, 0600, NULL)));
    longname[256] = 0;
    mqd_t l = mq_open(longname, O_RDWR | O_CREAT, 0600, NULL);
    printf("255-byte name: %s, ", err(l));
    printf("unlink %s\n", err(mq_unlink(longname)));
    mq_close(l);
    printf("O_WRONLY|O_RDWR: %s\n", err(mq_open("/q", O_WRONLY | O_RDWR)));
    struct mq_attr a = {.mq_maxmsg = 0, .mq_msgsize = 16};
    printf("maxmsg 0: %s\n", err(mq_open("/bad", O_RDWR | O_CREAT, 0600, &a)));
    a.mq_maxmsg = 11;
    printf("maxmsg 11: %s\n", err(mq_open("/bad", O_RDWR | O_CREAT, 0600, &a)));
    a.mq_maxmsg = 2;
    a.mq_msgsize = 8193;
    printf("msgsize 8193: %s\n", err(mq_open("/bad", O_RDWR | O_CREAT, 0600, &a)));
    printf("bad attr pointer: %s\n",
           err(syscall(SYS_mq_open, "bad", O_RDWR | O_CREAT, 0600, (void *)8)));
    a.mq_maxmsg = 3;
    a.mq_msgsize = 16;
    mqd_t s = mq_open("/small", O_RDWR | O_CREAT | O_NONBLOCK, 0600, &a);
    attrs("small", s);

    /* Priorities, full and empty queues. */
    poll_state("empty", s);
    printf("send 1 a: %s\n", err(mq_send(s, "a", 1, 1)));
    poll_state("one", s);
    printf("send 5 bb: %s\n", err(mq_send(s, "bb", 2, 5)));
    printf("send 1 c: %s\n", err(mq_send(s, "c", 1, 1)));
    poll_state("full", s);
    printf("send, full: %s\n", err(mq_send(s, "d", 1, 0)));
    printf("send 17 bytes: %s\n", err(mq_send(s, "0123456789abcdefg", 17, 0)));
    printf("send prio 32768: %s\n", err(mq_send(s, "x", 1, 32768)));
    status("status", s, me);
    printf("read: ");
    char line[100];
    ssize_t n = read(s, line, 10);
    printf("%zd \"%.*s\", then ", n, (int)(n > 0 ? n : 0), line);
    n = read(s, line, sizeof line);
    printf("%zd, write %s\n", n, err(write(s, "x", 1)));
    recv_one("15-byte buffer", s, 15);
    recv_one("first", s, 16);
    recv_one("second", s, 16);
    recv_one("third", s, 16);
    recv_one("empty", s, 16);
    attrs("drained", s);

    /* mq_setattr: only O_NONBLOCK. */
    struct mq_attr na = {.mq_flags = 0}, old;
    r = mq_setattr(s, &na, &old);
    printf("setattr blocking: %s, old flags %s\n", err(r),
           old.mq_flags & O_NONBLOCK ? "O_NONBLOCK" : "0");
    attrs("now", s);
    na.mq_flags = O_NONBLOCK | O_APPEND;
    printf("setattr O_APPEND: %s\n", err(mq_setattr(s, &na, NULL)));
    printf("getattr of stdin: %s\n", err(mq_getattr(0, &old)));
    printf("getattr of -1: %s\n", err(mq_getattr(-1, &old)));

    /* Timeouts. */
    struct timespec t0, dl = in_ms(100);
    char buf[9000];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = mq_timedreceive(s, buf, 16, NULL, &dl);
    printf("timed receive: %s after >= 90 ms %d\n", err(r), since_ms(&t0) >= 90);
    struct timespec badts = {0, 1000000000};
    printf("tv_nsec 1e9: %s\n", err(mq_timedreceive(s, buf, 16, NULL, &badts)));
    struct timespec past = {1, 0};
    printf("past timeout, room: %s\n", err(mq_timedsend(s, "p", 1, 0, &past)));
    printf("bad timeout pointer: %s\n", err(syscall(SYS_mq_timedsend, s, "p", 1, 0, (void *)8)));
    printf("bad text pointer: %s\n", err(mq_send(s, (char *)8, 1, 0)));
    mq_send(s, "q", 1, 0);
    mq_send(s, "r", 1, 0);
    dl = in_ms(50);
    printf("timed send, full: %s\n", err(mq_timedsend(s, "s", 1, 0, &dl)));
    recv_one("left", s, 16);
    printf("receive to bad buffer: %s\n", err(mq_receive(s, (char *)8, 16, NULL)));
    attrs("after", s);
    recv_one("left", s, 16);

    /* Access modes. */
    mqd_t ro = mq_open("/small", O_RDONLY), wo = mq_open("/small", O_WRONLY);
    printf("send on O_RDONLY: %s\n", err(mq_send(ro, "x", 1, 0)));
    printf("receive on O_WRONLY: %s\n", err(mq_receive(wo, buf, 16, NULL)));
    printf("read O_WRONLY: %s\n", err(read(wo, buf, 10)));
    printf("send on a file: %s\n", err(mq_send(1, "x", 1, 0)));
    mq_close(ro);
    mq_close(wo);

    /* A blocked receive woken by a child's send; a blocked send woken by its receive. */
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        usleep(100000);
        mqd_t cq = mq_open("/small", O_WRONLY);
        mq_send(cq, "from child", 10, 7);
        for (int i = 0; i < 3; i++)
            mq_send(cq, "fill", 4, 0);
        _exit(0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    recv_one("blocked receive", s, 16);
    printf("waited >= 50 ms %d\n", since_ms(&t0) >= 50);
    waitpid(c, NULL, 0);
    attrs("child filled", s);
    recv_one("from the child's sends", s, 16);
    recv_one("and", s, 16);
    recv_one("and", s, 16);
    fflush(stdout);
    for (int i = 0; i < 3; i++)
        mq_send(s, "full", 4, 1);
    c = fork();
    if (c == 0) {
        usleep(100000);
        mqd_t cq = mq_open("/small", O_RDONLY);
        char b[16];
        unsigned p;
        mq_receive(cq, b, 16, &p);
        _exit(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = mq_send(s, "late", 4, 9);
    printf("blocked send: %s, waited >= 50 ms %d\n", err(r), since_ms(&t0) >= 50);
    int wst;
    waitpid(c, &wst, 0);
    printf("child took prio %d\n", WEXITSTATUS(wst));
    recv_one("now first", s, 16);
    recv_one("then", s, 16);
    recv_one("then", s, 16);

    /* EINTR: a handler without SA_RESTART. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    ualarm(100000, 0);
    r = mq_receive(s, buf, 16, NULL);
    printf("receive interrupted: %s, handler ran %d\n", err(r), (int)alarmed);

    /* Notification. */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_notify;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGUSR1;
    ev.sigev_value.sival_int = 0x1234;
    printf("notify: %s\n", err(mq_notify(s, &ev)));
    status("registered", s, me);
    printf("again: %s\n", err(mq_notify(s, &ev)));
    fflush(stdout);
    c = fork();
    if (c == 0) {
        printf("child: register: %s\n", err(mq_notify(s, &ev)));
        printf("child: remove, not its own: %s\n", err(mq_notify(s, NULL)));
        fflush(stdout);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    mq_send(s, "n", 1, 0);
    printf("signal %d code SI_MESGQ %d pid is me %d uid %d value %#x\n", (int)got_sig,
           got_code == SI_MESGQ, got_pid == me, (int)got_uid, (int)got_value);
    got_sig = 0;
    mq_send(s, "m", 1, 0);
    status("fired once", s, me);
    printf("no second signal: %d\n", got_sig == 0);
    recv_one("take", s, 16);
    recv_one("take", s, 16);
    /* From a child: si_pid is the child's. */
    mq_notify(s, &ev);
    fflush(stdout);
    c = fork();
    if (c == 0) {
        mq_send(s, "k", 1, 0);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    for (int i = 0; i < 100 && !got_sig; i++)
        usleep(10000);
    printf("from the child: signal %d pid is the child %d\n", (int)got_sig, got_pid == c);
    recv_one("take", s, 16);
    /* No signal while a receiver waits: the message goes to it. */
    got_sig = 0;
    mq_notify(s, &ev);
    fflush(stdout);
    c = fork();
    if (c == 0) {
        usleep(100000);
        mq_send(s, "w", 1, 0);
        _exit(0);
    }
    recv_one("waiting receiver", s, 16);
    waitpid(c, NULL, 0);
    usleep(20000);
    printf("no signal: %d\n", got_sig == 0);
    status("still registered", s, me);
    printf("remove: %s\n", err(mq_notify(s, NULL)));
    status("removed", s, me);
    /* SIGEV_NONE, then a close removes the registration. */
    ev.sigev_notify = SIGEV_NONE;
    printf("SIGEV_NONE: %s\n", err(mq_notify(s, &ev)));
    status("none", s, me);
    mqd_t s2 = mq_open("/small", O_RDWR);
    mq_close(s2);
    status("after a close", s, me);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = 65;
    printf("signal 65: %s\n", err(mq_notify(s, &ev)));
    ev.sigev_notify = 7;
    printf("sigev_notify 7: %s\n", err(mq_notify(s, &ev)));
    /* SIGEV_THREAD as the kernel sees it: a cookie and a netlink socket. */
    char cookie[32] = {0};
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_signo = 1;
    ev.sigev_value.sival_ptr = cookie;
    printf("raw SIGEV_THREAD, stdout: %s\n", err(syscall(SYS_mq_notify, s, &ev)));
    ev.sigev_signo = 999;
    printf("raw SIGEV_THREAD, closed fd: %s\n", err(syscall(SYS_mq_notify, s, &ev)));
    ev.sigev_value.sival_ptr = (void *)8;
    printf("raw SIGEV_THREAD, bad cookie: %s\n", err(syscall(SYS_mq_notify, s, &ev)));
    printf("notify on stdin: %s\n", err(mq_notify(0, NULL)));

    /* Unlink while open. */
    mq_send(s, "kept", 4, 3);
    printf("unlink: %s\n", err(mq_unlink("/small")));
    printf("unlink again: %s\n", err(mq_unlink("/small")));
    printf("open unlinked: %s\n", err(mq_open("/small", O_RDWR)));
    r = fstat(s, &st);
    printf("fstat: nlink %ld\n", (long)st.st_nlink);
    recv_one("still there", s, 16);
    mqd_t fresh = mq_open("/small", O_RDWR | O_CREAT | O_NONBLOCK, 0600, &a);
    attrs("a new one", fresh);
    mq_close(fresh);
    mq_unlink("/small");
    mq_close(s);

    /* Another user. */
    umask(0);
    mqd_t priv = mq_open("/priv", O_RDWR | O_CREAT, 0600, NULL);
    mqd_t pub = mq_open("/pub", O_RDWR | O_CREAT, 0622, NULL);
    umask(022);
    fflush(stdout);
    c = fork();
    if (c == 0) {
        if (setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000))
            printf("user: setresuid: %s\n", strerrorname_np(errno));
        printf("user: open 0600: %s\n", err(mq_open("/priv", O_RDONLY)));
        printf("user: open 0622 O_RDONLY: %s\n", err(mq_open("/pub", O_RDONLY)));
        mqd_t w = mq_open("/pub", O_WRONLY);
        printf("user: open 0622 O_WRONLY: %s, ", err(w));
        printf("send %s\n", err(mq_send(w, "u", 1, 0)));
        printf("user: unlink root's: %s\n", err(mq_unlink("/pub")));
        mqd_t own = mq_open("/mine", O_RDWR | O_CREAT, 0600, NULL);
        struct stat os;
        fstat(own, &os);
        printf("user: own queue uid %d mode %o, unlink %s\n", (int)os.st_uid, os.st_mode,
               err(mq_unlink("/mine")));
        a.mq_maxmsg = 11;
        printf("user: maxmsg 11: %s\n", err(mq_open("/big", O_RDWR | O_CREAT, 0600, &a)));
        fflush(stdout);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    attrs("pub", pub);
    mq_close(priv);
    mq_close(pub);
    mq_unlink("/priv");
    mq_unlink("/pub");
    mq_close(q);
    mq_unlink("/q");
    printf("done\n");
    return 0;
}
