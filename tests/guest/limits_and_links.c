/* limits_and_links: more corners LTP's syscall tests found different in torpor, one line
 * each; the test compares the output with a native run.
 *
 * timer slack (prctl, /proc/self/timerslack_ns, inherited by a child), sched_setaffinity of
 * another user's process, splice with a directory, an O_PATH descriptor's ioctl and mmap, a
 * hard link out of /proc, exec of a file open for writing, RLIMIT_SIGPENDING and RLIMIT_CPU,
 * semop interrupted by a handled signal (never restarted), waitid on a non-blocking pidfd,
 * socket ioctls with a bad buffer, mq_notify's SIGEV_THREAD, /proc/self/fdinfo, a multicast
 * group joined on the default interface.
 *
 * `limits_and_links tunables` (torpor only: natively it would change the host's settings)
 * writes the sandbox's own /proc/sys tunables and shows they bind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mqueue.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *err(long r) { return r == -1 ? strerrorname_np(errno) : "ok"; }

static long read_number(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -2;
        fclose(f);
    }
    return v;
}

static void timer_slack(void) {
    long start = prctl(PR_GET_TIMERSLACK);
    prctl(PR_SET_TIMERSLACK, 70000);
    printf("timer slack: default %ld, set %d, file %ld\n", start, prctl(PR_GET_TIMERSLACK),
           read_number("/proc/self/timerslack_ns"));
    pid_t pid = fork();
    if (pid == 0) {
        long inherited = prctl(PR_GET_TIMERSLACK);
        prctl(PR_SET_TIMERSLACK, 0);
        printf("timer slack in a child: inherited %ld, reset to %d\n", inherited,
               prctl(PR_GET_TIMERSLACK));
        exit(0);
    }
    waitpid(pid, NULL, 0);
    prctl(PR_SET_TIMERSLACK, 0);
    printf("timer slack reset: %d\n", prctl(PR_GET_TIMERSLACK));
}

static void affinity_of_another_user(void) {
    pid_t pid = fork();
    if (pid == 0) {
        pause();
        exit(0);
    }
    cpu_set_t set;
    sched_getaffinity(0, sizeof(set), &set);
    seteuid(65534);
    long r = syscall(SYS_sched_setaffinity, pid, sizeof(set), &set);
    printf("sched_setaffinity of root's process as nobody: %s\n", err(r));
    r = syscall(SYS_sched_setaffinity, 0, sizeof(set), (void *)1);
    printf("sched_setaffinity, bad mask: %s\n", err(r));
    seteuid(0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void splice_and_o_path(void) {
    int dir = open("/tmp", O_RDONLY | O_DIRECTORY);
    int p[2];
    pipe(p);
    int file = open("/tmp/limits_and_links.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(file, "x", 1);
    printf("splice file -> directory: %s\n", err(splice(file, NULL, dir, NULL, 1, 0)));
    printf("splice directory -> pipe: %s\n", err(splice(dir, NULL, p[1], NULL, 1, 0)));
    int path = open("/tmp/limits_and_links.txt", O_PATH);
    int bsz;
    printf("O_PATH ioctl: %s\n", err(ioctl(path, FIGETBSZ, &bsz)));
    void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, path, 0);
    printf("O_PATH mmap: %s\n", m == MAP_FAILED ? strerrorname_np(errno) : "mapped");
    printf("link out of /proc: %s\n",
           err(linkat(AT_FDCWD, "/proc/cpuinfo", AT_FDCWD, "/tmp/limits_and_links.cpu", 0)));
    close(path);
    close(file);
    close(dir);
    close(p[0]);
    close(p[1]);
}

static void exec_of_a_file_open_for_writing(void) {
    int in = open("/proc/self/exe", O_RDONLY);
    int out = open("/tmp/limits_and_links.exe", O_RDWR | O_CREAT | O_TRUNC, 0755);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        write(out, buf, n);
    close(in);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"limits_and_links", "exit", NULL};
        execv("/tmp/limits_and_links.exe", argv);
        printf("exec of a file open for writing: %s\n", strerrorname_np(errno));
        exit(0);
    }
    waitpid(pid, NULL, 0);
    close(out);
    pid = fork();
    if (pid == 0) {
        char *argv[] = {"limits_and_links", "exit", NULL};
        execv("/tmp/limits_and_links.exe", argv);
        exit(1);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("exec once closed: exit %d\n", WEXITSTATUS(status));
    unlink("/tmp/limits_and_links.exe");
}

static volatile pid_t blocked_tid;
static volatile int release;

static void *blocker(void *arg) {
    (void)arg;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGRTMIN + 1);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    blocked_tid = syscall(SYS_gettid);
    while (!release)
        usleep(1000);
    return NULL;
}

static void sigpending_limit(void) {
    pthread_t th;
    pthread_create(&th, NULL, blocker, NULL);
    while (!blocked_tid)
        usleep(1000);
    struct rlimit old, zero = {0, 0};
    getrlimit(RLIMIT_SIGPENDING, &old);
    setrlimit(RLIMIT_SIGPENDING, &zero);
    long r = syscall(SYS_tgkill, getpid(), blocked_tid, SIGRTMIN + 1);
    printf("RT signal beyond RLIMIT_SIGPENDING: %s\n", err(r));
    release = 1;
    pthread_join(th, NULL);
}

static volatile int xcpu;

static void on_xcpu(int sig) { xcpu = sig; }

static void cpu_limit(void) {
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXCPU, on_xcpu);
        struct rlimit l = {1, 2};
        setrlimit(RLIMIT_CPU, &l);
        alarm(20);
        while (!xcpu)
            ;
        printf("RLIMIT_CPU soft: SIGXCPU\n");
        fflush(stdout);
        for (;;)
            ;
    }
    int status;
    waitpid(pid, &status, 0);
    printf("RLIMIT_CPU hard: %s\n",
           WIFSIGNALED(status) ? sigabbrev_np(WTERMSIG(status)) : "exited");
}

static void on_hup(int sig) { (void)sig; }

static void semop_interrupted(void) {
    struct sigaction sa = {.sa_handler = on_hup, .sa_flags = SA_RESTART};
    sigaction(SIGHUP, &sa, NULL);
    int id = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
    semctl(id, 0, SETVAL, 1);
    pid_t pid = fork();
    if (pid == 0) {
        struct sembuf wait_zero = {0, 0, 0};
        long r = semop(id, &wait_zero, 1);
        printf("semop interrupted by a SA_RESTART handler: %s\n", err(r));
        exit(0);
    }
    usleep(200000);
    kill(pid, SIGHUP);
    waitpid(pid, NULL, 0);
    semctl(id, 0, IPC_RMID);
}

static void pidfd_nonblocking(void) {
    int p[2];
    pipe(p);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        read(p[0], &c, 1);
        exit(0);
    }
    int fd = syscall(SYS_pidfd_open, pid, O_NONBLOCK);
    siginfo_t info;
    printf("waitid on a non-blocking pidfd of a live child: %s\n",
           err(waitid(P_PIDFD, fd, &info, WEXITED)));
    write(p[1], "x", 1);
    long r;
    while ((r = waitid(P_PIDFD, fd, &info, WEXITED)) == -1 && errno == EAGAIN)
        usleep(1000);
    printf("once it exited: %s, pid matches %d\n", err(r), info.si_pid == pid);
    close(fd);
}

static void socket_ioctls(void) {
    int tcp = socket(AF_INET, SOCK_STREAM, 0), udp = socket(AF_INET, SOCK_DGRAM, 0);
    int at = -1;
    const char *r = err(ioctl(tcp, SIOCATMARK, &at));
    printf("SIOCATMARK, TCP: %s %d\n", r, at);
    printf("SIOCATMARK, TCP, no buffer: %s\n", err(ioctl(tcp, SIOCATMARK, NULL)));
    printf("SIOCSIFFLAGS, no buffer: %s\n", err(ioctl(udp, SIOCSIFFLAGS, NULL)));
    close(tcp);
    close(udp);
}

static volatile int notified;

static void on_message(union sigval v) { notified = v.sival_int; }

static void mq_thread_notification(void) {
    mqd_t m = mq_open("/limits_and_links", O_CREAT | O_RDWR, 0600, NULL);
    struct sigevent sev = {0};
    sev.sigev_notify = SIGEV_THREAD;
    sev.sigev_notify_function = on_message;
    sev.sigev_value.sival_int = 42;
    printf("mq_notify SIGEV_THREAD: %s\n", err(mq_notify(m, &sev)));
    printf("removed: %s\n", err(mq_notify(m, NULL)));
    sev.sigev_value.sival_int = 43;
    printf("again: %s\n", err(mq_notify(m, &sev)));
    mq_send(m, "x", 1, 1);
    for (int i = 0; i < 500 && !notified; i++)
        usleep(10000);
    printf("the notification thread ran with %d\n", notified);
    mq_close(m);
    mq_unlink("/limits_and_links");
}

static void fdinfo(void) {
    int in = inotify_init1(IN_CLOEXEC);
    inotify_add_watch(in, "/tmp", IN_MODIFY | IN_DELETE);
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", in);
    FILE *f = fopen(path, "r");
    unsigned mask = 0;
    long flags = -1;
    while (f && fgets(line, sizeof(line), f)) {
        sscanf(line, "inotify wd:%*d ino:%*x sdev:%*x mask:%x", &mask);
        sscanf(line, "flags: %lo", &flags);
    }
    if (f)
        fclose(f);
    printf("fdinfo of an inotify fd: mask %x, close-on-exec %d\n", mask,
           flags >= 0 && (flags & O_CLOEXEC) != 0);
    close(in);
}

static void multicast_membership(void) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct group_req g = {0};
    struct sockaddr_in *a = (struct sockaddr_in *)&g.gr_group;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(0xef010203); /* 239.1.2.3 */
    printf("MCAST_JOIN_GROUP: %s\n", err(setsockopt(s, IPPROTO_IP, MCAST_JOIN_GROUP, &g, sizeof(g))));
    printf("MCAST_LEAVE_GROUP: %s\n", err(setsockopt(s, IPPROTO_IP, MCAST_LEAVE_GROUP, &g, sizeof(g))));
    printf("and again: %s\n", err(setsockopt(s, IPPROTO_IP, MCAST_LEAVE_GROUP, &g, sizeof(g))));
    close(s);
}

/* SCM_RIGHTS on a TCP socket: Linux accepts and ignores it. */
static void rights_on_tcp(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t n = sizeof(a);
    bind(l, (struct sockaddr *)&a, n);
    listen(l, 1);
    getsockname(l, (struct sockaddr *)&a, &n);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&a, n);
    int s = accept(l, NULL, NULL);
    char cbuf[CMSG_SPACE(sizeof(int))] = {0};
    struct cmsghdr *cm = (struct cmsghdr *)cbuf;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    int one = 1;
    memcpy(CMSG_DATA(cm), &one, sizeof(int));
    struct iovec iov = {"hi", 2};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = cm->cmsg_len};
    long r = sendmsg(s, &mh, 0);
    char got[3] = "";
    read(c, got, 2);
    printf("SCM_RIGHTS on a TCP socket: %s, %ld bytes, received %s\n", err(r), r, got);
    close(s);
    close(c);
    close(l);
}


static int write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return -1;
    int r = write(fd, text, strlen(text)) < 0 ? -1 : 0;
    close(fd);
    return r;
}

static void tunables(void) {
    printf("pipe-max-size write: %s\n", err(write_text("/proc/sys/fs/pipe-max-size", "5000")));
    printf("pipe-max-size now %ld\n", read_number("/proc/sys/fs/pipe-max-size"));
    int p[2];
    pipe(p);
    printf("F_SETPIPE_SZ 8192: %s\n", err(fcntl(p[0], F_SETPIPE_SZ, 8192)));
    printf("F_SETPIPE_SZ 65536: %s\n", err(fcntl(p[0], F_SETPIPE_SZ, 65536)));
    write(p[1], "sandbox.example", 15);
    int fd = open("/proc/sys/kernel/domainname", O_WRONLY);
    printf("splice into domainname: %zd\n", splice(p[0], NULL, fd, NULL, 15, 0));
    close(fd);
    char dn[65] = "";
    getdomainname(dn, sizeof(dn));
    printf("domainname now %s\n", dn);
    printf("max_user_instances write: %s\n",
           err(write_text("/proc/sys/fs/inotify/max_user_instances", "3")));
    int a = inotify_init(), b = inotify_init(), c = inotify_init();
    printf("a fourth inotify instance beyond 3: %s\n", err(inotify_init()));
    close(a);
    printf("after closing one: %s\n", inotify_init() >= 0 ? "ok" : strerrorname_np(errno));
    close(b);
    close(c);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "exit") == 0)
        return 7;
    if (argc > 1 && strcmp(argv[1], "tunables") == 0) {
        tunables();
        return 0;
    }
    timer_slack();
    affinity_of_another_user();
    splice_and_o_path();
    exec_of_a_file_open_for_writing();
    sigpending_limit();
    cpu_limit();
    semop_interrupted();
    pidfd_nonblocking();
    socket_ioctls();
    mq_thread_notification();
    fdinfo();
    multicast_membership();
    rights_on_tcp();
    return 0;
}
