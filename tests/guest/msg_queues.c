/* System V message queues: msgget keys and flags, msgsnd and msgrcv by type (first, of a
 * type, MSG_EXCEPT, lowest type, MSG_COPY), truncation (E2BIG, MSG_NOERROR), full and empty
 * queues with IPC_NOWAIT, a parent and a forked child exchanging messages and waking each
 * other, IPC_RMID waking blocked receivers and senders (EIDRM), a signal interrupting a
 * blocked msgrcv (EINTR even with SA_RESTART), permissions of another user and of a root
 * without CAP_IPC_OWNER, CAP_SYS_ADMIN and CAP_SYS_RESOURCE (dropped first, as a container's
 * root lacks them), msgctl's IPC_STAT, IPC_SET, MSG_STAT, MSG_STAT_ANY, IPC_INFO and
 * MSG_INFO, /proc/sysvipc/msg and the limits in /proc/sys/kernel. Run in a fresh IPC
 * namespace (torpor's sandbox, or unshare --ipc), it prints the same natively and in torpor:
 * queue ids included, pids and times only as comparisons.
 *
 * `msg_queues checkpoint` queues three messages on two queues, forks a child that blocks in
 * msgrcv, says "ready" and waits for SIGUSR1 (a checkpoint and restore in between); then it
 * wakes the child with a message and checks that every queue, message, count and id came
 * back, printing one line each. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <linux/capability.h>
#include <sys/msg.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MSG_COPY
#define MSG_COPY 040000
#endif
#ifndef MSG_STAT_ANY
#define MSG_STAT_ANY 13
#endif

struct mbuf {
    long mtype;
    char mtext[8200];
};

static struct mbuf m;
static const char *err(long r) { return r < 0 ? strerrorname_np(errno) : "ok"; }

static long snd(int id, long type, const char *text, size_t len, int flags) {
    m.mtype = type;
    memcpy(m.mtext, text, len);
    return msgsnd(id, &m, len, flags);
}

/* msgrcv, printing what came: type, length and text, or the error. */
static void rcv(const char *what, int id, size_t size, long type, int flags) {
    memset(&m, 0, sizeof m);
    ssize_t n = msgrcv(id, &m, size, type, flags);
    if (n < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: type %ld len %zd \"%.*s\"\n", what, m.mtype, n, (int)(n > 20 ? 20 : n), m.mtext);
}

/* /proc/sysvipc/msg without the pids and times: its header, then each queue's key, id,
 * mode, bytes, messages, owner and creator. */
static void show_proc(void) {
    FILE *f = fopen("/proc/sysvipc/msg", "r");
    char line[256];
    if (!f || !fgets(line, sizeof line, f)) {
        printf("/proc/sysvipc/msg: %s\n", strerrorname_np(errno));
        if (f)
            fclose(f);
        return;
    }
    printf("/proc/sysvipc/msg: %s", line);
    int key, id, lspid, lrpid;
    unsigned mode, uid, gid, cuid, cgid;
    unsigned long cbytes, qnum;
    while (fscanf(f, "%d %d %o %lu %lu %d %d %u %u %u %u %*u %*u %*u", &key, &id, &mode, &cbytes,
                  &qnum, &lspid, &lrpid, &uid, &gid, &cuid, &cgid) == 11)
        printf("  key %d id %d mode %o cbytes %lu qnum %lu uid %u gid %u cuid %u cgid %u\n", key,
               id, mode, cbytes, qnum, uid, gid, cuid, cgid);
    fclose(f);
}

static struct msqid_ds stat_of(int id) {
    struct msqid_ds ds;
    memset(&ds, 0, sizeof ds);
    if (msgctl(id, IPC_STAT, &ds) < 0)
        printf("IPC_STAT %d: %s\n", id, strerrorname_np(errno));
    return ds;
}

static void show(const char *what, int id) {
    struct msqid_ds ds = stat_of(id);
    printf("%s: qnum %lu cbytes %lu qbytes %lu mode %o uid %u cuid %u\n", what,
           (unsigned long)ds.msg_qnum, (unsigned long)ds.__msg_cbytes,
           (unsigned long)ds.msg_qbytes, ds.msg_perm.mode, ds.msg_perm.uid, ds.msg_perm.cuid);
}

static void wait_child(pid_t p) {
    int st;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        printf("child failed: %x\n", st);
}

/* Forks a child that writes to a pipe just before its blocking call; the parent returns once
 * it has read that and waited a little longer, the child then blocked. */
static pid_t fork_blocking(int *fds) {
    if (pipe(fds) < 0)
        exit(2);
    pid_t c = fork();
    if (c > 0) {
        char b;
        close(fds[1]);
        if (read(fds[0], &b, 1) != 1)
            printf("child did not start\n");
        close(fds[0]);
        usleep(200 * 1000);
    } else {
        close(fds[0]);
    }
    return c;
}

static void ready(int *fds) {
    if (write(fds[1], "r", 1) != 1)
        _exit(3);
    close(fds[1]);
}

static void read_limit(const char *name) {
    char path[64], b[32] = "";
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(b, sizeof b, f))
        printf("%s: unreadable\n", name);
    else
        printf("%s: %s", name, b);
    if (f)
        fclose(f);
}

static void info(const char *what, int cmd) {
    struct msginfo mi;
    memset(&mi, 0, sizeof mi);
    int r = msgctl(0, cmd, (struct msqid_ds *)&mi);
    printf("%s: max index %d pool %d map %d max %d mnb %d mni %d ssz %d tql %d seg %u\n", what, r,
           mi.msgpool, mi.msgmap, mi.msgmax, mi.msgmnb, mi.msgmni, mi.msgssz, mi.msgtql,
           mi.msgseg);
}

/* Drops CAP_IPC_OWNER, CAP_SYS_ADMIN and CAP_SYS_RESOURCE from the effective and permitted
 * sets (a container's root has none of them). */
static void drop_ipc_caps(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0) {
        printf("capget: %s\n", strerrorname_np(errno));
        return;
    }
    unsigned drop = (1u << CAP_IPC_OWNER) | (1u << CAP_SYS_ADMIN) | (1u << CAP_SYS_RESOURCE);
    d[0].effective &= ~drop;
    d[0].permitted &= ~drop;
    d[0].inheritable &= ~drop;
    if (syscall(SYS_capset, &h, d) < 0)
        printf("capset: %s\n", strerrorname_np(errno));
}

static volatile sig_atomic_t handled;
static void on_usr1(int sig) { (void)sig; handled = 1; }

/* The checkpoint mode (see the top). */
static int across_a_checkpoint(void) {
    int fds[2];
    int q = msgget(IPC_PRIVATE, 0600);
    int k = msgget(0x5a5a, IPC_CREAT | 0640);
    char big[8192];
    memset(big, 'c', sizeof big);
    snd(q, 2, "two", 3, 0);
    snd(q, 1, "one", 3, 0);
    snd(q, 3, big, sizeof big, 0);
    pid_t c = fork_blocking(fds);
    if (c == 0) {
        ready(fds);
        struct mbuf in;
        ssize_t n = msgrcv(k, &in, sizeof in.mtext, 7, 0);
        if (n < 0)
            printf("child: %s\n", strerrorname_np(errno));
        else
            printf("child woke: type %ld \"%.*s\"\n", in.mtype, (int)n, in.mtext);
        _exit(n < 0);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    printf("ready\n");
    while (!handled)
        sigsuspend(&old);

    int ok = 1;
    ok &= snd(k, 7, "wake", 4, 0) == 0;
    int st;
    ok &= waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    struct msqid_ds ds = stat_of(q);
    printf("queue: qnum %lu cbytes %lu mode %o lspid is me %d\n", (unsigned long)ds.msg_qnum,
           (unsigned long)ds.__msg_cbytes, ds.msg_perm.mode, ds.msg_lspid == getpid());
    ok &= ds.msg_qnum == 3 && ds.__msg_cbytes == 8198 && ds.msg_lspid == getpid();
    ds = stat_of(k);
    printf("keyed: qnum %lu lrpid is the child %d, same id %d\n", (unsigned long)ds.msg_qnum,
           ds.msg_lrpid == c, msgget(0x5a5a, 0) == k);
    ok &= ds.msg_qnum == 0 && ds.msg_lrpid == c && msgget(0x5a5a, 0) == k;
    rcv("type -2", q, 100, -2, IPC_NOWAIT);
    rcv("type 0", q, 100, 0, IPC_NOWAIT);
    ssize_t n = msgrcv(q, &m, sizeof m.mtext, 3, IPC_NOWAIT);
    int same = n == 8192 && memcmp(m.mtext, big, sizeof big) == 0;
    printf("type 3: %zd bytes, the same %d\n", n, same);
    ok &= same;
    int next = msgget(IPC_PRIVATE, 0600);
    printf("next id: %d\n", next);
    ok &= next == 2;
    msgctl(q, IPC_RMID, NULL);
    msgctl(k, IPC_RMID, NULL);
    msgctl(next, IPC_RMID, NULL);
    printf(ok ? "all queues kept\n" : "queues lost\n");
    return !ok;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "checkpoint") == 0)
        return across_a_checkpoint();
    pid_t me = getpid();
    int fds[2];
    drop_ipc_caps();

    /* 1. The limits. */
    read_limit("msgmax");
    read_limit("msgmnb");
    read_limit("msgmni");

    /* 2. msgget: keys, IPC_PRIVATE, IPC_CREAT|IPC_EXCL. */
    int q = msgget(IPC_PRIVATE, 0600);
    printf("msgget(IPC_PRIVATE): %d\n", q);
    int k = msgget(0x7171, IPC_CREAT | IPC_EXCL | 0640);
    printf("msgget(key, IPC_CREAT|IPC_EXCL): %d\n", k);
    printf("again, IPC_EXCL: %s\n", err(msgget(0x7171, IPC_CREAT | IPC_EXCL | 0600)));
    printf("again, no flags: same id %d\n", msgget(0x7171, 0) == k);
    printf("again, IPC_CREAT: same id %d\n", msgget(0x7171, IPC_CREAT | 0600) == k);
    printf("missing key: %s\n", err(msgget(0x7272, 0600)));
    show("new queue", q);
    struct msqid_ds ds = stat_of(q);
    printf("times: stime %d rtime %d ctime set %d; pids %d %d\n", ds.msg_stime == 0,
           ds.msg_rtime == 0, ds.msg_ctime != 0, ds.msg_lspid, ds.msg_lrpid);

    /* 3. msgsnd's errors. */
    printf("msgsnd(type 0): %s\n", err(snd(q, 0, "x", 1, 0)));
    printf("msgsnd(type -1): %s\n", err(snd(q, -1, "x", 1, 0)));
    printf("msgsnd(8193 bytes): %s\n", err(snd(q, 1, "x", 8193, 0)));
    printf("msgsnd(size -1): %s\n", err(msgsnd(q, &m, (size_t)-1, 0)));
    printf("msgsnd(id -1): %s\n", err(snd(-1, 1, "x", 1, 0)));
    printf("msgsnd(no such id): %s\n", err(snd(12345, 1, "x", 1, 0)));
    printf("msgsnd(bad pointer): %s\n", err(msgsnd(q, (void *)8, 1, 0)));
    printf("msgrcv(size -1): %s\n", err(msgrcv(q, &m, (size_t)-1, 0, IPC_NOWAIT)));
    printf("msgrcv(bad pointer, empty): %s\n", err(msgrcv(q, (void *)8, 1, 0, IPC_NOWAIT)));

    /* 4. Messages by type. */
    snd(q, 3, "three", 5, 0);
    snd(q, 1, "one-a", 5, 0);
    snd(q, 2, "two", 3, 0);
    snd(q, 1, "one-b", 5, 0);
    snd(q, 5, "five", 4, 0);
    show("five sent", q);
    ds = stat_of(q);
    printf("lspid is me %d, lrpid %d, stime set %d, rtime %d\n", ds.msg_lspid == me, ds.msg_lrpid,
           ds.msg_stime != 0, ds.msg_rtime == 0);
    rcv("type 2", q, 100, 2, 0);
    rcv("type -3", q, 100, -3, 0);
    rcv("type 3 MSG_EXCEPT", q, 100, 3, MSG_EXCEPT);
    rcv("MSG_COPY 1", q, 100, 1, MSG_COPY | IPC_NOWAIT);
    rcv("MSG_COPY 0", q, 100, 0, MSG_COPY | IPC_NOWAIT);
    rcv("MSG_COPY 5", q, 100, 5, MSG_COPY | IPC_NOWAIT);
    rcv("MSG_COPY without IPC_NOWAIT", q, 100, 0, MSG_COPY);
    rcv("MSG_COPY with MSG_EXCEPT", q, 100, 0, MSG_COPY | MSG_EXCEPT | IPC_NOWAIT);
    show("after the copies", q);
    rcv("type 7 IPC_NOWAIT", q, 100, 7, IPC_NOWAIT);
    rcv("type 0", q, 100, 0, 0);
    rcv("type -100", q, 100, -100, 0);
    rcv("empty, IPC_NOWAIT", q, 100, 0, IPC_NOWAIT);
    ds = stat_of(q);
    printf("lrpid is me %d, rtime set %d\n", ds.msg_lrpid == me, ds.msg_rtime != 0);

    /* 5. A message longer than the buffer. */
    snd(q, 1, "0123456789", 10, 0);
    rcv("4-byte buffer", q, 4, 0, IPC_NOWAIT);
    show("still queued", q);
    rcv("4-byte buffer, MSG_NOERROR", q, 4, 0, MSG_NOERROR | IPC_NOWAIT);
    show("taken", q);

    /* 6. A full queue. */
    char big[8192];
    memset(big, 'b', sizeof big);
    printf("8192 bytes: %s\n", err(snd(q, 1, big, 8192, 0)));
    printf("8192 bytes: %s\n", err(snd(q, 2, big, 8192, 0)));
    printf("one more byte, IPC_NOWAIT: %s\n", err(snd(q, 1, "x", 1, IPC_NOWAIT)));
    printf("an empty message, IPC_NOWAIT: %s\n", err(snd(q, 3, "", 0, IPC_NOWAIT)));
    show("full", q);

    /* 7. A sender blocked on the full queue, let in by a receive in another process. */
    pid_t c = fork_blocking(fds);
    if (c == 0) {
        ready(fds);
        long r = snd(q, 4, "late", 4, 0);
        printf("child: blocked send: %s\n", err(r));
        _exit(0);
    }
    /* The child prints once its send is through: the parent prints after waiting for it. */
    ssize_t got = msgrcv(q, &m, 8192, 1, 0);
    wait_child(c);
    printf("parent took type %ld len %zd\n", m.mtype, got);
    rcv("then type 4", q, 8192, 4, IPC_NOWAIT);
    rcv("type 2", q, 8192, 2, IPC_NOWAIT);
    rcv("type 3", q, 8192, 3, IPC_NOWAIT);

    /* 8. Parent and child exchange messages by type; the child's receive blocks. */
    c = fork_blocking(fds);
    if (c == 0) {
        ready(fds);
        struct mbuf in;
        ssize_t n = msgrcv(q, &in, sizeof in.mtext, 1, 0);
        if (n < 0) {
            printf("child: receive: %s\n", strerrorname_np(errno));
            _exit(1);
        }
        char reply[64];
        int len = snprintf(reply, sizeof reply, "pong:%.*s", (int)n, in.mtext);
        m.mtype = 2;
        memcpy(m.mtext, reply, len);
        printf("child: got type %ld\n", in.mtype);
        if (msgsnd(q, &m, len, 0) < 0) {
            printf("child: reply: %s\n", strerrorname_np(errno));
            _exit(1);
        }
        _exit(0);
    }
    snd(q, 3, "noise", 5, 0);
    snd(q, 1, "ping", 4, 0);
    rcv("parent's reply", q, 100, 2, 0);
    wait_child(c);
    ds = stat_of(q);
    printf("lspid is the child %d, lrpid is me %d\n", ds.msg_lspid == c, ds.msg_lrpid == me);
    show("the noise is left", q);

    /* 9. IPC_RMID wakes a blocked receiver, and a blocked sender, with EIDRM. */
    int r1 = msgget(IPC_PRIVATE, 0600);
    printf("msgget: %d\n", r1);
    c = fork_blocking(fds);
    if (c == 0) {
        ready(fds);
        struct mbuf in;
        printf("child: blocked receive: %s\n", err(msgrcv(r1, &in, 10, 0, 0)));
        _exit(0);
    }
    long rm = msgctl(r1, IPC_RMID, NULL);
    wait_child(c);
    printf("IPC_RMID: %s\n", err(rm));
    printf("removed, IPC_STAT: %s\n", err(msgctl(r1, IPC_STAT, &ds)));
    printf("removed, msgsnd: %s\n", err(snd(r1, 1, "x", 1, 0)));
    int r2 = msgget(IPC_PRIVATE, 0600);
    printf("msgget: %d\n", r2);
    snd(r2, 1, big, 8192, 0);
    snd(r2, 1, big, 8192, 0);
    c = fork_blocking(fds);
    if (c == 0) {
        ready(fds);
        printf("child: blocked send: %s\n", err(snd(r2, 1, "x", 1, 0)));
        _exit(0);
    }
    rm = msgctl(r2, IPC_RMID, NULL);
    wait_child(c);
    printf("IPC_RMID: %s\n", err(rm));

    /* 10. A signal ends a blocked receive with EINTR, even with SA_RESTART. */
    c = fork_blocking(fds);
    if (c == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
        ready(fds);
        struct mbuf in;
        long r = msgrcv(q, &in, 10, 99, 0);
        printf("child: receive interrupted: %s, handler ran %d\n", err(r), handled);
        _exit(0);
    }
    kill(c, SIGUSR1);
    wait_child(c);

    /* 11. Another user. */
    show("keyed queue", k);
    c = fork();
    if (c == 0) {
        if (setgid(1000) < 0 || setuid(1000) < 0)
            printf("child: setuid: %s\n", strerrorname_np(errno));
        printf("user: msgget(key, 0600): %s\n", err(msgget(0x7171, 0600)));
        printf("user: msgget(key, 0): same id %d\n", msgget(0x7171, 0) == k);
        printf("user: msgsnd: %s\n", err(snd(k, 1, "u", 1, IPC_NOWAIT)));
        printf("user: msgrcv: %s\n", err(msgrcv(k, &m, 10, 0, IPC_NOWAIT)));
        printf("user: IPC_STAT: %s\n", err(msgctl(k, IPC_STAT, &ds)));
        int idx = k & 0x7fff;
        printf("user: MSG_STAT: %s\n", err(msgctl(idx, MSG_STAT, &ds)));
        printf("user: MSG_STAT_ANY: same id %d\n", msgctl(idx, MSG_STAT_ANY, &ds) == k);
        printf("user: IPC_SET: %s\n", err(msgctl(k, IPC_SET, &ds)));
        printf("user: IPC_RMID: %s\n", err(msgctl(k, IPC_RMID, NULL)));
        _exit(0);
    }
    wait_child(c);
    /* Root may raise msg_qbytes; then the queue is given to user 1000. */
    ds = stat_of(k);
    ds.msg_qbytes = 20000;
    printf("root raises qbytes: %s\n", err(msgctl(k, IPC_SET, &ds)));
    show("raised", k);
    ds.msg_perm.uid = 1000;
    ds.msg_perm.gid = 1000;
    ds.msg_perm.mode = 0600;
    ds.msg_qbytes = 16384;
    printf("root gives it to 1000: %s\n", err(msgctl(k, IPC_SET, &ds)));
    show("given", k);
    ds.msg_perm.uid = (uid_t)-1;
    printf("IPC_SET uid -1: %s\n", err(msgctl(k, IPC_SET, &ds)));
    c = fork();
    if (c == 0) {
        if (setgid(1000) < 0 || setuid(1000) < 0)
            printf("child: setuid: %s\n", strerrorname_np(errno));
        printf("owner: msgsnd: %s\n", err(snd(k, 6, "mine", 4, IPC_NOWAIT)));
        struct msqid_ds d = stat_of(k);
        d.msg_qbytes = 16385;
        printf("owner raises qbytes: %s\n", err(msgctl(k, IPC_SET, &d)));
        d.msg_qbytes = 100;
        printf("owner lowers qbytes: %s\n", err(msgctl(k, IPC_SET, &d)));
        printf("owner: 100 bytes more, IPC_NOWAIT: %s\n", err(snd(k, 6, big, 100, IPC_NOWAIT)));
        show("owner's", k);
        _exit(0);
    }
    wait_child(c);

    /* A queue of user 1000's: root, not its owner nor creator, is held to its bits. */
    pid_t owner = fork_blocking(fds);
    if (owner == 0) {
        if (setgid(1000) < 0 || setuid(1000) < 0)
            printf("child: setuid: %s\n", strerrorname_np(errno));
        int u = msgget(0x7474, IPC_CREAT | 0600);
        printf("user's queue: %d\n", u);
        ready(fds);
        /* Waits for root's message once root may write, then removes the queue. */
        struct mbuf in;
        long r = msgrcv(u, &in, 10, 1, 0);
        printf("user: woken: %s, IPC_RMID: %s\n", err(r), err(msgctl(u, IPC_RMID, NULL)));
        _exit(0);
    }
    int u = msgget(0x7474, 0);
    printf("root: msgget(user's key, 0600): %s\n", err(msgget(0x7474, 0600)));
    printf("root: msgsnd: %s\n", err(snd(u, 2, "r", 1, IPC_NOWAIT)));
    printf("root: IPC_STAT: %s\n", err(msgctl(u, IPC_STAT, &ds)));
    printf("root: IPC_SET: %s\n", err(msgctl(u, IPC_SET, &ds)));
    printf("root: IPC_RMID: %s\n", err(msgctl(u, IPC_RMID, NULL)));
    printf("root: MSG_STAT_ANY: same id %d\n", msgctl(u & 0x7fff, MSG_STAT_ANY, &ds) == u);
    c = fork();
    if (c == 0) {
        if (setgid(1000) < 0 || setuid(1000) < 0)
            printf("child: setuid: %s\n", strerrorname_np(errno));
        struct msqid_ds d = stat_of(u);
        d.msg_perm.mode = 0622;
        printf("user: IPC_SET 0622: %s\n", err(msgctl(u, IPC_SET, &d)));
        _exit(0);
    }
    wait_child(c);
    long sent = snd(u, 1, "r", 1, 0);
    wait_child(owner);
    printf("root: msgsnd: %s\n", err(sent));

    /* 12. msgctl's table views and errors. */
    info("IPC_INFO", IPC_INFO);
    info("MSG_INFO", MSG_INFO);
    show_proc();
    for (int i = 0; i < 8; i++) {
        int r = msgctl(i, MSG_STAT, &ds);
        if (r >= 0)
            printf("MSG_STAT %d: id %d qnum %lu\n", i, r, (unsigned long)ds.msg_qnum);
        else
            printf("MSG_STAT %d: %s\n", i, strerrorname_np(errno));
    }
    printf("msgctl(bad cmd): %s\n", err(msgctl(q, 99, &ds)));
    printf("msgctl(id -1): %s\n", err(msgctl(-1, IPC_STAT, &ds)));
    printf("msgctl(bad pointer): %s\n", err(msgctl(q, IPC_STAT, (void *)8)));

    printf("IPC_RMID: %s %s\n", err(msgctl(q, IPC_RMID, NULL)), err(msgctl(k, IPC_RMID, NULL)));
    info("MSG_INFO at the end", MSG_INFO);
    printf("done\n");
    return 0;
}
