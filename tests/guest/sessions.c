/* Process groups, sessions and the process calls servers use: setpgid, getpgid, setsid,
 * getsid, kill(-pgid), kill(0), waitid (P_PID, P_PGID, P_ALL, WNOWAIT, WNOHANG), pidfd_open,
 * pidfd_send_signal, P_PIDFD, PR_SET_PDEATHSIG, PR_SET_NAME, daemonising (double fork), and
 * /proc/self/exe. Prints only values that are the same natively and in torpor (ids relative
 * to the caller's). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(name, expr)                                                                  \
    do {                                                                                   \
        errno = 0;                                                                         \
        long r_ = (long)(expr);                                                            \
        printf("%s = %s errno=%s\n", name, r_ < 0 ? "-1" : "ok", r_ < 0 ? strerrorname_np(errno) : "0"); \
    } while (0)

static pid_t child_sleeping(void) {
    pid_t p = fork();
    if (p == 0) {
        for (;;)
            pause();
    }
    return p;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t me = getpid();
    /* Start as a session leader, as the first process of a sandbox is. */
    pid_t s = setsid();
    if (s < 0) {
        /* Natively under a test harness we may already lead a group: fork once more. */
        pid_t c = fork();
        if (c > 0) {
            int st;
            waitpid(c, &st, 0);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        }
        me = getpid();
        setsid();
    }
    printf("leader: sid=%d pgid=%d pgrp=%d\n", getsid(0) == me, getpgid(0) == me, getpgrp() == me);
    CHECK("setsid again", setsid());
    CHECK("setpgid(self, self)", setpgid(0, 0));
    CHECK("getpgid(nonexistent)", getpgid(99999));
    CHECK("getsid(nonexistent)", getsid(99999));
    CHECK("setpgid(-1)", setpgid(-1, 0));

    /* A child in its own group, killed through the group. */
    pid_t a = child_sleeping();
    printf("child inherits pgid: %d\n", getpgid(a) == me);
    CHECK("setpgid(child, child)", setpgid(a, a));
    printf("child pgid is own: %d\n", getpgid(a) == a);
    printf("child sid is ours: %d\n", getsid(a) == me);
    CHECK("setpgid(child, nonexistent group)", setpgid(a, 99999));
    pid_t b = child_sleeping();
    CHECK("setpgid(second, first's group)", setpgid(b, a));
    printf("second joined: %d\n", getpgid(b) == a);
    CHECK("kill(-group, 0)", kill(-a, 0));
    CHECK("kill(-nonexistent, 0)", kill(-99999, 0));
    CHECK("kill(-group, SIGTERM)", kill(-a, SIGTERM));
    int st;
    pid_t w1 = waitpid(-a, &st, 0);
    printf("waitpid(-group): one of them=%d signaled=%d sig=%d\n", w1 == a || w1 == b,
           WIFSIGNALED(st), WTERMSIG(st));
    pid_t w2 = waitpid(-a, &st, 0);
    printf("waitpid(-group): other=%d signaled=%d\n", (w2 == a || w2 == b) && w2 != w1,
           WIFSIGNALED(st));
    CHECK("waitpid(-group) when empty", waitpid(-a, &st, 0));

    /* waitid. */
    pid_t c = fork();
    if (c == 0)
        _exit(7);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    CHECK("waitid(P_PID, WEXITED|WNOWAIT)", waitid(P_PID, c, &si, WEXITED | WNOWAIT));
    printf("  signo=%d code=%d pid=%d status=%d\n", si.si_signo, si.si_code, si.si_pid == c, si.si_status);
    memset(&si, 0, sizeof si);
    CHECK("waitid(P_ALL, WEXITED)", waitid(P_ALL, 0, &si, WEXITED));
    printf("  code=%d pid=%d status=%d\n", si.si_code, si.si_pid == c, si.si_status);
    CHECK("waitid(no flags)", waitid(P_ALL, 0, &si, 0));
    CHECK("waitid(no child)", waitid(P_ALL, 0, &si, WEXITED));
    pid_t d = child_sleeping();
    memset(&si, 0xff, sizeof si);
    CHECK("waitid(WNOHANG, running)", waitid(P_PGID, 0, &si, WEXITED | WNOHANG));
    printf("  pid zeroed=%d\n", si.si_pid == 0);

    /* pidfd. */
    int pfd = syscall(SYS_pidfd_open, d, 0);
    printf("pidfd_open: %s\n", pfd >= 0 ? "ok" : strerrorname_np(errno));
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    printf("poll before exit: %d\n", poll(&p, 1, 50));
    CHECK("pidfd_send_signal(SIGKILL)", syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0));
    printf("poll after kill: %d\n", poll(&p, 1, 5000));
    memset(&si, 0, sizeof si);
    CHECK("waitid(P_PIDFD)", waitid(P_PIDFD, pfd, &si, WEXITED));
    printf("  code=%d sig=%d\n", si.si_code, si.si_status);
    close(pfd);
    CHECK("pidfd_open(nonexistent)", syscall(SYS_pidfd_open, 99999, 0));

    /* PR_SET_PDEATHSIG: a grandchild told when its parent (the child) dies, by a pipe. */
    int fds[2];
    pipe(fds);
    pid_t e = fork();
    if (e == 0) {
        pid_t g = fork();
        if (g == 0) {
            close(fds[0]);
            prctl(PR_SET_PDEATHSIG, SIGUSR1);
            int sig = 0;
            prctl(PR_GET_PDEATHSIG, &sig);
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGUSR1);
            sigprocmask(SIG_BLOCK, &set, NULL);
            write(fds[1], "r", 1);
            int got = 0;
            sigwait(&set, &got);
            char msg = got == SIGUSR1 && sig == SIGUSR1 ? 'y' : 'n';
            write(fds[1], &msg, 1);
            _exit(0);
        }
        char r;
        read(fds[0], &r, 1);
        _exit(0);
    }
    close(fds[1]);
    char buf[2] = {0};
    waitpid(e, &st, 0);
    if (read(fds[0], buf, 1) != 1)
        buf[0] = '?';
    printf("pdeathsig: %c\n", buf[0]);
    close(fds[0]);

    /* PR_SET_NAME. */
    prctl(PR_SET_NAME, "torpor-name-longer-than-15");
    char name[17] = {0};
    prctl(PR_GET_NAME, name);
    printf("name: %s\n", name);

    /* Daemonising: fork, setsid, fork; the daemon writes through a pipe. */
    pipe(fds);
    pid_t f = fork();
    if (f == 0) {
        close(fds[0]);
        pid_t sid = setsid();
        if (fork() == 0) {
            char line[64];
            int n = snprintf(line, sizeof line, "daemon: new session=%d leader=%d\n",
                             sid == getppid() || sid > 0, getsid(0) == getpid());
            write(fds[1], line, n);
            _exit(0);
        }
        _exit(0);
    }
    close(fds[1]);
    waitpid(f, &st, 0);
    char line[64] = {0};
    int n = read(fds[0], line, sizeof line - 1);
    printf("%.*s", n > 0 ? n : 0, line);

    char exe[256] = {0};
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    printf("exe ends with /sessions: %d\n", strlen(exe) >= 9 && !strcmp(exe + strlen(exe) - 9, "/sessions"));
    /* /proc of another process of the sandbox: the parent reads its child's files. */
    pipe(fds);
    pid_t named = fork();
    if (named == 0) {
        prctl(PR_SET_NAME, "proc-child");
        close(fds[0]);
        write(fds[1], "n", 1);
        for (;;)
            pause();
    }
    close(fds[1]);
    char ready;
    read(fds[0], &ready, 1);
    close(fds[0]);
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%d/comm", named);
    FILE *pf = fopen(path, "r");
    text[0] = 0;
    if (pf) {
        fgets(text, sizeof text, pf);
        fclose(pf);
    }
    printf("/proc/child/comm: %s", text[0] ? text : "(none)\n");
    snprintf(path, sizeof path, "/proc/%d/status", named);
    pf = fopen(path, "r");
    int saw_ppid = 0, saw_name = 0;
    if (pf) {
        while (fgets(text, sizeof text, pf)) {
            int v;
            if (sscanf(text, "PPid: %d", &v) == 1)
                saw_ppid = v == getpid();
            if (!strncmp(text, "Name:\tproc-child", 16))
                saw_name = 1;
        }
        fclose(pf);
    }
    printf("/proc/child/status: ppid=%d name=%d\n", saw_ppid, saw_name);
    snprintf(path, sizeof path, "/proc/%d/cmdline", named);
    pf = fopen(path, "r");
    size_t got = pf ? fread(text, 1, sizeof text, pf) : 0;
    if (pf)
        fclose(pf);
    printf("/proc/child/cmdline ends with sessions: %d\n", got >= 9 && !memcmp(text + strlen(text) - 9, "/sessions", 9));
    snprintf(path, sizeof path, "/proc/%d/exe", named);
    char cexe[256] = {0};
    readlink(path, cexe, sizeof cexe - 1);
    printf("/proc/child/exe ends with /sessions: %d\n", strlen(cexe) >= 9 && !strcmp(cexe + strlen(cexe) - 9, "/sessions"));
    kill(named, SIGKILL);
    waitpid(named, &st, 0);
    snprintf(path, sizeof path, "/proc/%d/status", named);
    errno = 0;
    pf = fopen(path, "r");
    printf("/proc of a reaped child: %s\n", pf ? "exists" : strerrorname_np(errno));
    if (pf)
        fclose(pf);

    kill(0, 0);
    printf("done\n");
    return 0;
}
