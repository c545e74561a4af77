/* AF_UNIX sockets, run natively and under torpor: the outputs must be identical.
 *
 * Paths are relative ("tmp/..."): natively the program runs with the root as its working
 * directory, under torpor with "/". Values that differ between runs (pids, abstract names made
 * unique with the pid) are compared inside and printed as "ok"/"BAD".
 *
 *   unix_sockets            the conformance run
 *   unix_sockets escape N   path escape attempts with unique name N (torpor only; the test
 *                           checks the host side)
 *   unix_sockets serve P    a stream server on path P for the hibernate test: prints
 *                           "listening", then echoes one line per connection, forever
 *   unix_sockets abstract-serve N     binds and listens on abstract name N, prints
 *                                     "listening", then sleeps (isolation test)
 *   unix_sockets abstract-connect N   connects to abstract name N and binds it, printing
 *                                     both results
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, what)                                                                  \
    do {                                                                                   \
        if (cond)                                                                          \
            printf("%s: ok\n", what);                                                      \
        else {                                                                             \
            printf("%s: BAD (errno %d %s)\n", what, errno, strerror(errno));              \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

/* Prints "what: 0" or "what: -1 ENAME". */
static void result(const char *what, long r) {
    if (r < 0)
        printf("%s: -1 %s\n", what, strerrorname_np(errno));
    else
        printf("%s: %ld\n", what, r);
}

static socklen_t path_addr(struct sockaddr_un *a, const char *p) {
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t n = strnlen(p, sizeof(a->sun_path));
    memcpy(a->sun_path, p, n);
    return offsetof(struct sockaddr_un, sun_path) + n + (n < sizeof(a->sun_path));
}

static socklen_t abstract_addr(struct sockaddr_un *a, const char *name) {
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a->sun_path + 1, name, n);
    return offsetof(struct sockaddr_un, sun_path) + 1 + n;
}

/* Prints a socket name the same way in both runs (abstract names are unique per run, so
 * they are only described). */
static void show_name(const char *what, const struct sockaddr_un *a, socklen_t len) {
    if (len <= offsetof(struct sockaddr_un, sun_path))
        printf("%s: unnamed len %u\n", what, len);
    else if (a->sun_path[0] == 0)
        printf("%s: abstract len %u\n", what, len);
    else
        printf("%s: path %s len %u\n", what, a->sun_path, len);
}

static void socketpairs(void) {
    int sv[2];
    char buf[64];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair stream");
    CHECK(write(sv[0], "hello", 5) == 5, "stream write");
    ssize_t n = recv(sv[1], buf, sizeof buf, MSG_PEEK);
    printf("peek: %zd %.*s\n", n, (int)n, buf);
    n = read(sv[1], buf, 3);
    printf("read: %zd %.*s\n", n, (int)n, buf);
    n = read(sv[1], buf, sizeof buf);
    printf("read: %zd %.*s\n", n, (int)n, buf);
    struct sockaddr_un a;
    socklen_t len = sizeof a;
    CHECK(getsockname(sv[0], (struct sockaddr *)&a, &len) == 0, "pair getsockname");
    show_name("pair name", &a, len);
    len = sizeof a;
    CHECK(getpeername(sv[0], (struct sockaddr *)&a, &len) == 0, "pair getpeername");
    show_name("pair peer", &a, len);
    int v = -1;
    socklen_t vl = sizeof v;
    getsockopt(sv[0], SOL_SOCKET, SO_TYPE, &v, &vl);
    printf("SO_TYPE %d SOCK_STREAM %d\n", v, v == SOCK_STREAM);
    vl = sizeof v;
    getsockopt(sv[0], SOL_SOCKET, SO_DOMAIN, &v, &vl);
    printf("SO_DOMAIN %d\n", v);
    vl = sizeof v;
    getsockopt(sv[0], SOL_SOCKET, SO_ERROR, &v, &vl);
    printf("SO_ERROR %d\n", v);
    int big = 65536;
    CHECK(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big) == 0, "SO_SNDBUF set");
    vl = sizeof v;
    CHECK(getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &v, &vl) == 0 && v > 0, "SO_SNDBUF get");
    struct ucred cr;
    socklen_t cl = sizeof cr;
    CHECK(getsockopt(sv[0], SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0, "pair SO_PEERCRED");
    printf("pair peercred pid==getpid %d uid==getuid %d gid==getgid %d len %u\n",
           cr.pid == getpid(), cr.uid == getuid(), cr.gid == getgid(), cl);
    shutdown(sv[0], SHUT_WR);
    n = read(sv[1], buf, sizeof buf);
    printf("after shutdown: %zd\n", n);
    close(sv[0]);
    close(sv[1]);

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0,
          "socketpair nonblock");
    result("nonblock recv", recv(sv[0], buf, sizeof buf, 0));
    result("dontwait recv", recv(sv[1], buf, sizeof buf, MSG_DONTWAIT));
    printf("cloexec %d nonblock %d\n", (fcntl(sv[0], F_GETFD) & FD_CLOEXEC) != 0,
           (fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0);
    close(sv[0]);
    close(sv[1]);

    int types[] = {SOCK_DGRAM, SOCK_SEQPACKET};
    for (int i = 0; i < 2; i++) {
        const char *name = types[i] == SOCK_DGRAM ? "dgram" : "seqpacket";
        CHECK(socketpair(AF_UNIX, types[i], 0, sv) == 0, name);
        send(sv[0], "ab", 2, 0);
        send(sv[0], "cde", 3, 0);
        n = recv(sv[1], buf, sizeof buf, 0);
        printf("%s msg1: %zd\n", name, n);
        n = recv(sv[1], buf, sizeof buf, 0);
        printf("%s msg2: %zd\n", name, n);
        send(sv[0], "xyz", 3, 0);
        struct iovec iov = {buf, 1};
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        n = recvmsg(sv[1], &m, 0);
        printf("%s truncated: %zd MSG_TRUNC %d\n", name, n, (m.msg_flags & MSG_TRUNC) != 0);
        send(sv[0], "xyz", 3, 0);
        n = recv(sv[1], buf, 1, MSG_TRUNC);
        printf("%s recv MSG_TRUNC: %zd\n", name, n);
        close(sv[0]);
        close(sv[1]);
    }
    result("socketpair inet", socketpair(AF_INET, SOCK_STREAM, 0, sv));
    result("socketpair bad type", socketpair(AF_UNIX, 7, 0, sv));
    result("socketpair bad proto", socketpair(AF_UNIX, SOCK_STREAM, 5, sv));
}

static void path_stream(void) {
    const char *path = "tmp/us-stream.sock";
    unlink(path);
    umask(027);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a, b;
    socklen_t len = path_addr(&a, path);
    result("bind path", bind(s, (struct sockaddr *)&a, len));
    struct stat st;
    int stat_ok = stat(path, &st) == 0;
    printf("socket file: %d mode %o\n", stat_ok && S_ISSOCK(st.st_mode), st.st_mode & 0777);
    socklen_t bl = sizeof b;
    getsockname(s, (struct sockaddr *)&b, &bl);
    show_name("bound name", &b, bl);
    bl = 4;
    getsockname(s, (struct sockaddr *)&b, &bl);
    printf("short getsockname len %u\n", bl);
    umask(022);
    result("listen", listen(s, 8));
    int v = 0;
    socklen_t vl = sizeof v;
    getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl);
    printf("SO_ACCEPTCONN %d\n", v);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int c = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un ca;
        socklen_t cl = path_addr(&ca, path);
        if (connect(c, (struct sockaddr *)&ca, cl) != 0)
            _exit(10);
        struct sockaddr_un p;
        socklen_t pl = sizeof p;
        getpeername(c, (struct sockaddr *)&p, &pl);
        show_name("client peer", &p, pl);
        struct ucred cr;
        socklen_t crl = sizeof cr;
        getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl);
        printf("client peercred pid==getppid %d uid %d\n", cr.pid == getppid(),
               cr.uid == getuid());
        fflush(stdout);
        write(c, "from child", 10);
        char buf[32];
        ssize_t n = read(c, buf, sizeof buf);
        printf("child got: %.*s\n", (int)n, buf);
        fflush(stdout);
        _exit(0);
    }
    struct sockaddr_un p;
    socklen_t pl = sizeof p;
    int c = accept(s, (struct sockaddr *)&p, &pl);
    /* The child has printed its lines once its message is here. */
    char buf[32];
    ssize_t n = read(c, buf, sizeof buf);
    CHECK(c >= 0, "accept");
    show_name("accepted peer", &p, pl);
    bl = sizeof b;
    getsockname(c, (struct sockaddr *)&b, &bl);
    show_name("accepted name", &b, bl);
    struct ucred cr;
    socklen_t crl = sizeof cr;
    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl);
    printf("server peercred pid==child %d uid %d gid %d\n", cr.pid == child, cr.uid == getuid(),
           cr.gid == getgid());
    printf("server got: %.*s\n", (int)n, buf);
    fflush(stdout);
    write(c, "reply", 5);
    int status;
    waitpid(child, &status, 0);
    printf("child status %d\n", WEXITSTATUS(status));
    close(c);

    /* errno cases */
    int o = socket(AF_UNIX, SOCK_STREAM, 0);
    result("bind existing", bind(o, (struct sockaddr *)&a, len));
    result("bind twice", bind(s, (struct sockaddr *)&a, len));
    struct sockaddr_un x;
    socklen_t xl = path_addr(&x, "tmp/us-other.sock");
    unlink("tmp/us-other.sock");
    result("bind bound socket elsewhere", bind(s, (struct sockaddr *)&x, xl));
    unlink("tmp/us-other.sock");
    xl = path_addr(&x, "tmp/no-such-dir/s");
    result("bind missing dir", bind(o, (struct sockaddr *)&x, xl));
    result("connect missing dir", connect(o, (struct sockaddr *)&x, xl));
    xl = path_addr(&x, "tmp/us-missing.sock");
    result("connect missing", connect(o, (struct sockaddr *)&x, xl));
    int fd = open("tmp/us-regular", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    close(fd);
    xl = path_addr(&x, "tmp/us-regular");
    result("connect regular file", connect(o, (struct sockaddr *)&x, xl));
    result("bind regular file", bind(o, (struct sockaddr *)&x, xl));
    result("connect short len", connect(o, (struct sockaddr *)&x, 2));
    result("connect len 1", connect(o, (struct sockaddr *)&x, 1));
    result("bind too long", bind(o, (struct sockaddr *)&x, sizeof(struct sockaddr_un) + 1));
    x.sun_family = AF_INET;
    result("bind AF_INET family", bind(o, (struct sockaddr *)&x, xl));
    result("connect AF_INET family", connect(o, (struct sockaddr *)&x, xl));
    result("listen unbound", listen(o, 1));
    result("accept unlistened", accept(o, NULL, NULL));
    pl = sizeof p;
    result("getpeername unconnected", getpeername(o, (struct sockaddr *)&p, &pl));
    result("write unconnected", write(o, "x", 1));
    int ns = socket(AF_UNIX, SOCK_STREAM, 0);
    xl = path_addr(&x, "tmp/us-notlistening.sock");
    unlink("tmp/us-notlistening.sock");
    bind(ns, (struct sockaddr *)&x, xl);
    result("connect not listening", connect(o, (struct sockaddr *)&x, xl));
    close(ns);
    result("connect stale", connect(o, (struct sockaddr *)&x, xl));
    unlink("tmp/us-notlistening.sock");
    result("socket bad type", socket(AF_UNIX, 9, 0));
    result("socket bad protocol", socket(AF_UNIX, SOCK_STREAM, 3));
    close(o);
    /* A full-length (108-byte, unterminated) path: getsockname reports 111. */
    char longp[109];
    memset(longp, 'L', 108);
    longp[108] = 0;
    memcpy(longp, "tmp/", 4);
    unlink(longp);
    int ls = socket(AF_UNIX, SOCK_DGRAM, 0);
    memset(&x, 0, sizeof x);
    x.sun_family = AF_UNIX;
    memcpy(x.sun_path, longp, 108);
    result("bind 108-byte path", bind(ls, (struct sockaddr *)&x, sizeof x));
    bl = sizeof b + 8;
    struct {
        struct sockaddr_un a;
        char pad[8];
    } big;
    bl = sizeof big;
    getsockname(ls, (struct sockaddr *)&big, &bl);
    printf("long name len %u same %d\n", bl, memcmp(big.a.sun_path, longp, 108) == 0);
    close(ls);
    unlink(longp);
    /* A relative name is reported as bound. */
    chdir("tmp");
    int rs = socket(AF_UNIX, SOCK_STREAM, 0);
    unlink("rel.sock");
    xl = path_addr(&x, "rel.sock");
    result("bind relative", bind(rs, (struct sockaddr *)&x, xl));
    bl = sizeof b;
    getsockname(rs, (struct sockaddr *)&b, &bl);
    show_name("relative name", &b, bl);
    listen(rs, 1);
    chdir("..");
    int rc = socket(AF_UNIX, SOCK_STREAM, 0);
    xl = path_addr(&x, "tmp/rel.sock");
    result("connect by other path", connect(rc, (struct sockaddr *)&x, xl));
    pl = sizeof p;
    getpeername(rc, (struct sockaddr *)&p, &pl);
    show_name("peer of relative", &p, pl);
    close(rc);
    close(rs);
    unlink("tmp/rel.sock");
    close(s);
    unlink(path);
}

static void abstract_and_autobind(void) {
    char name[64];
    snprintf(name, sizeof name, "torpor-unix-test-%d", (int)getpid());
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a, b;
    socklen_t len = abstract_addr(&a, name);
    result("bind abstract", bind(s, (struct sockaddr *)&a, len));
    socklen_t bl = sizeof b;
    getsockname(s, (struct sockaddr *)&b, &bl);
    printf("abstract name same %d\n", bl == len && memcmp(&a, &b, len) == 0);
    listen(s, 4);
    int t = socket(AF_UNIX, SOCK_STREAM, 0);
    result("bind abstract again", bind(t, (struct sockaddr *)&a, len));
    result("connect abstract", connect(t, (struct sockaddr *)&a, len));
    bl = sizeof b;
    getpeername(t, (struct sockaddr *)&b, &bl);
    printf("abstract peer same %d\n", bl == len && memcmp(&a, &b, len) == 0);
    int c = accept(s, NULL, NULL);
    write(t, "abs", 3);
    char buf[8];
    printf("abstract read %zd\n", read(c, buf, sizeof buf));
    close(c);
    close(t);
    close(s);
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un m;
    socklen_t ml = abstract_addr(&m, "torpor-unix-test-missing-name");
    result("connect abstract missing", connect(u, (struct sockaddr *)&m, ml));
    close(u);

    /* Autobind: family only. */
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    sa_family_t fam = AF_UNIX;
    result("autobind", bind(d, (struct sockaddr *)&fam, sizeof fam));
    bl = sizeof b;
    getsockname(d, (struct sockaddr *)&b, &bl);
    int hex = 1;
    for (int i = 1; i < 6; i++)
        hex &= (b.sun_path[i] >= '0' && b.sun_path[i] <= '9') ||
               (b.sun_path[i] >= 'a' && b.sun_path[i] <= 'f');
    printf("autobind len %u abstract %d hex %d\n", bl, b.sun_path[0] == 0, hex);
    result("autobind again", bind(d, (struct sockaddr *)&fam, sizeof fam));

    /* Datagrams to an abstract name: the source is the autobound name, and a reply to it
     * arrives. */
    int r = socket(AF_UNIX, SOCK_DGRAM, 0);
    snprintf(name, sizeof name, "torpor-unix-dgram-%d", (int)getpid());
    len = abstract_addr(&a, name);
    bind(r, (struct sockaddr *)&a, len);
    result("sendto abstract", sendto(d, "ping", 4, 0, (struct sockaddr *)&a, len));
    struct sockaddr_un from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(r, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    printf("recvfrom %zd from autobound %d\n", n, fl == bl && memcmp(&from, &b, bl) == 0);
    result("reply", sendto(r, "pong", 4, 0, (struct sockaddr *)&from, fl));
    n = recv(d, buf, sizeof buf, 0);
    printf("reply got %zd %.*s\n", n, (int)n, buf);
    /* An unbound sender shows as no address. */
    int anon = socket(AF_UNIX, SOCK_DGRAM, 0);
    sendto(anon, "x", 1, 0, (struct sockaddr *)&a, len);
    fl = sizeof from;
    n = recvfrom(r, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    printf("anonymous sender len %u\n", fl);
    result("send unconnected", send(anon, "x", 1, 0));
    close(anon);
    close(d);
    close(r);
}

static void path_dgram(void) {
    const char *sp = "tmp/us-dg.sock", *cp = "tmp/us-dgc.sock";
    unlink(sp);
    unlink(cp);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0), c = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sa, ca, from;
    socklen_t sl = path_addr(&sa, sp), cl = path_addr(&ca, cp);
    bind(s, (struct sockaddr *)&sa, sl);
    bind(c, (struct sockaddr *)&ca, cl);
    result("dgram sendto path", sendto(c, "hi", 2, 0, (struct sockaddr *)&sa, sl));
    char buf[16];
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    printf("dgram got %zd\n", n);
    show_name("dgram from", &from, fl);
    struct sockaddr_un m;
    socklen_t ml = path_addr(&m, "tmp/us-dg-missing");
    result("dgram sendto missing", sendto(c, "x", 1, 0, (struct sockaddr *)&m, ml));
    result("dgram connect", connect(c, (struct sockaddr *)&sa, sl));
    result("dgram send connected", send(c, "yo", 2, 0));
    struct msghdr mh = {0};
    struct iovec iov = {buf, sizeof buf};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_name = &from;
    mh.msg_namelen = sizeof from;
    n = recvmsg(s, &mh, 0);
    printf("recvmsg %zd\n", n);
    show_name("recvmsg from", &from, mh.msg_namelen);
    result("dgram nonblock empty", recv(s, buf, sizeof buf, MSG_DONTWAIT));
    struct sockaddr_un un = {.sun_family = AF_UNSPEC};
    result("dgram disconnect", connect(c, (struct sockaddr *)&un, sizeof un));
    result("dgram send after disconnect", send(c, "x", 1, 0));
    close(s);
    close(c);
    unlink(sp);
    unlink(cp);
}

static int send_fds(int sock, const int *fds, int n) {
    char data = 'F';
    struct iovec iov = {&data, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    return sendmsg(sock, &m, 0);
}

/* Receives up to `room` fds; returns how many arrived, the flags in *flags. */
static int recv_fds(int sock, int *fds, int room, int flags_in, int *flags) {
    char data;
    struct iovec iov = {&data, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    /* Room for exactly `room` fds (CMSG_SPACE would round one up to two). */
    m.msg_controllen = CMSG_LEN(sizeof(int) * room);
    if (recvmsg(sock, &m, flags_in) < 0)
        return -1;
    *flags = m.msg_flags;
    int got = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            memcpy(fds + got, CMSG_DATA(c), sizeof(int) * k);
            got += k;
        }
    }
    return got;
}

static void rights(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    int fd = open("tmp/us-rights.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(fd, "file contents", 13);
    int p[2];
    pipe(p);
    write(p[1], "pipe data", 9);
    close(p[1]);
    int dir = open("tmp", O_RDONLY | O_DIRECTORY);
    int pair[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, pair);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        int got[8], flags;
        int n = recv_fds(sv[1], got, 8, MSG_CMSG_CLOEXEC, &flags);
        printf("child received %d fds ctrunc %d\n", n, (flags & MSG_CTRUNC) != 0);
        if (n != 4)
            _exit(1);
        printf("cloexec %d\n", (fcntl(got[0], F_GETFD) & FD_CLOEXEC) != 0);
        struct stat st;
        fstat(got[0], &st);
        printf("fd0 regular %d\n", S_ISREG(st.st_mode));
        char buf[32];
        ssize_t r = pread(got[0], buf, sizeof buf, 0);
        printf("file via fd: %.*s\n", (int)r, buf);
        fstat(got[1], &st);
        printf("fd1 fifo %d\n", S_ISFIFO(st.st_mode));
        r = read(got[1], buf, sizeof buf);
        printf("pipe via fd: %.*s\n", (int)r, buf);
        int f2 = openat(got[2], "us-rights.txt", O_RDONLY);
        r = read(f2, buf, sizeof buf);
        printf("openat via dir fd: %.*s\n", (int)r, buf);
        int ty = 0;
        socklen_t tl = sizeof ty;
        getsockopt(got[3], SOL_SOCKET, SO_TYPE, &ty, &tl);
        printf("socket via fd: type dgram %d\n", ty == SOCK_DGRAM);
        send(got[3], "through", 7, 0);
        /* Truncation: two fds into room for one. */
        n = recv_fds(sv[1], got, 1, 0, &flags);
        printf("truncated receive %d ctrunc %d cloexec %d\n", n, (flags & MSG_CTRUNC) != 0,
               (fcntl(got[0], F_GETFD) & FD_CLOEXEC) != 0);
        r = pread(got[0], buf, 4, 0);
        printf("first of two: %.*s\n", (int)r, buf);
        /* No room at all. */
        char data;
        struct iovec iov = {&data, 1};
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        r = recvmsg(sv[1], &m, 0);
        printf("no control buffer: %zd ctrunc %d\n", r, (m.msg_flags & MSG_CTRUNC) != 0);
        fflush(stdout);
        _exit(0);
    }
    close(sv[1]);
    int fds[4] = {fd, p[0], dir, pair[1]};
    /* The parent's lines are printed once the child, which prints too, has ended: the
     * output's order must not depend on scheduling. */
    int two[2] = {fd, fd};
    int sent[3], err[3];
    sent[0] = send_fds(sv[0], fds, 4);
    err[0] = errno;
    sent[1] = send_fds(sv[0], two, 2);
    err[1] = errno;
    sent[2] = send_fds(sv[0], two, 1);
    err[2] = errno;
    int status;
    waitpid(child, &status, 0);
    const char *what[3] = {"sendmsg 4 fds", "sendmsg 2 fds", "sendmsg 1 fd"};
    for (int i = 0; i < 3; i++) {
        errno = err[i];
        result(what[i], sent[i]);
    }
    printf("child status %d\n", WEXITSTATUS(status));
    char buf[16];
    ssize_t r = recv(pair[0], buf, sizeof buf, MSG_DONTWAIT);
    printf("from passed socket: %.*s\n", (int)(r < 0 ? 0 : r), buf);
    int bad[1] = {999};
    result("sendmsg bad fd", send_fds(sv[0], bad, 1));
    /* A malformed control message. */
    char data = 'x';
    struct iovec iov = {&data, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = 8;
    result("sendmsg short cmsg_len", sendmsg(sv[0], &m, 0));
    c->cmsg_len = 4096;
    result("sendmsg long cmsg_len", sendmsg(sv[0], &m, 0));
    c->cmsg_len = CMSG_LEN(sizeof(int));
    c->cmsg_type = 77;
    result("sendmsg unknown type", sendmsg(sv[0], &m, 0));
    close(fd);
    close(p[0]);
    close(dir);
    close(pair[0]);
    close(pair[1]);
    close(sv[0]);
    unlink("tmp/us-rights.txt");
}

static void credentials(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
    int on = 1;
    result("SO_PASSCRED", setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &on, sizeof on));
    int v = 0;
    socklen_t vl = sizeof v;
    getsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &v, &vl);
    printf("SO_PASSCRED get %d\n", v);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        send(sv[1], "c", 1, 0);
        /* Explicit credentials: its own. */
        char data = 'e';
        struct iovec iov = {&data, 1};
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof u);
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = u.buf;
        m.msg_controllen = sizeof u.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_CREDENTIALS;
        c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
        struct ucred cr = {getpid(), getuid(), getgid()};
        memcpy(CMSG_DATA(c), &cr, sizeof cr);
        if (sendmsg(sv[1], &m, 0) != 1)
            _exit(2);
        c->cmsg_len = CMSG_LEN(8);
        if (sendmsg(sv[1], &m, 0) != -1 || errno != EINVAL)
            _exit(3);
        _exit(0);
    }
    for (int i = 0; i < 2; i++) {
        char data;
        struct iovec iov = {&data, 1};
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } u;
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = u.buf;
        m.msg_controllen = sizeof u.buf;
        ssize_t n = recvmsg(sv[0], &m, 0);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        int ok = n == 1 && c && c->cmsg_type == SCM_CREDENTIALS;
        struct ucred cr = {0};
        if (ok)
            memcpy(&cr, CMSG_DATA(c), sizeof cr);
        printf("creds %c: present %d pid==child %d uid %d gid %d controllen %zu\n", data, ok,
               cr.pid == child, cr.uid == getuid(), cr.gid == getgid(),
               (size_t)m.msg_controllen);
    }
    int status;
    waitpid(child, &status, 0);
    printf("child status %d\n", WEXITSTATUS(status));
    close(sv[0]);
    close(sv[1]);
}

static void escape(const char *n) {
    char p[256];
    /* `..` past the root stays at the root. */
    snprintf(p, sizeof p, "../../../../../../tmp/%s-dotdot", n);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    socklen_t l = path_addr(&a, p);
    result("bind dotdot", bind(s, (struct sockaddr *)&a, l));
    listen(s, 4);
    snprintf(p, sizeof p, "/tmp/%s-dotdot", n);
    struct stat st;
    printf("inside root: %d\n", stat(p, &st) == 0 && S_ISSOCK(st.st_mode));
    /* A symlinked directory pointing at the host's /tmp resolves inside the root. */
    unlink("esc-dir");
    symlink("/tmp", "esc-dir");
    snprintf(p, sizeof p, "esc-dir/%s-viadir", n);
    int s2 = socket(AF_UNIX, SOCK_STREAM, 0);
    l = path_addr(&a, p);
    result("bind through dir symlink", bind(s2, (struct sockaddr *)&a, l));
    snprintf(p, sizeof p, "/tmp/%s-viadir", n);
    printf("inside root: %d\n", stat(p, &st) == 0 && S_ISSOCK(st.st_mode));
    /* A symlink as the last component is never followed by bind. */
    snprintf(p, sizeof p, "/tmp/%s-final", n);
    unlink("esc-final");
    symlink(p, "esc-final");
    int s3 = socket(AF_UNIX, SOCK_STREAM, 0);
    l = path_addr(&a, "esc-final");
    result("bind over symlink", bind(s3, (struct sockaddr *)&a, l));
    /* connect follows symlinks, inside the root. */
    snprintf(p, sizeof p, "/tmp/%s-dotdot", n);
    unlink("esc-conn");
    symlink(p, "esc-conn");
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    l = path_addr(&a, "esc-conn");
    result("connect through symlink", connect(c, (struct sockaddr *)&a, l));
    /* /proc/self/fd of the runtime is not reachable. */
    l = path_addr(&a, "/proc/self/fd/3/x");
    int c2 = socket(AF_UNIX, SOCK_STREAM, 0);
    printf("proc fd bind fails: %d\n", bind(c2, (struct sockaddr *)&a, l) != 0);
}

static void serve(const char *path) {
    unlink(path);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    socklen_t l = path_addr(&a, path);
    if (bind(s, (struct sockaddr *)&a, l) != 0 || listen(s, 16) != 0) {
        perror("serve");
        exit(1);
    }
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        char buf[256];
        ssize_t n = read(c, buf, sizeof buf);
        if (n > 0) {
            write(c, "echo: ", 6);
            write(c, buf, n);
        }
        close(c);
    }
}

static void abstract_mode(const char *name, int serve_it) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    socklen_t l = abstract_addr(&a, name);
    if (serve_it) {
        if (bind(s, (struct sockaddr *)&a, l) != 0 || listen(s, 4) != 0) {
            perror("abstract-serve");
            exit(1);
        }
        printf("listening\n");
        fflush(stdout);
        sleep(60);
        return;
    }
    result("connect", connect(s, (struct sockaddr *)&a, l));
    int t = socket(AF_UNIX, SOCK_STREAM, 0);
    result("bind", bind(t, (struct sockaddr *)&a, l));
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2 && strcmp(argv[1], "escape") == 0) {
        escape(argv[2]);
        return 0;
    }
    if (argc > 2 && strncmp(argv[1], "abstract-", 9) == 0) {
        abstract_mode(argv[2], strcmp(argv[1], "abstract-serve") == 0);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "serve") == 0) {
        serve(argv[2]);
        return 0;
    }
    socketpairs();
    path_stream();
    abstract_and_autobind();
    path_dgram();
    rights();
    credentials();
    printf("failures %d\n", failures);
    printf("done\n");
    return failures != 0;
}
