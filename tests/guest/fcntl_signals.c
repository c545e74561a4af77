/* fcntl_signals: what fcntl(2) makes signal a process, as Linux does: a file's owner
 * (F_SETOWN, F_SETOWN_EX, F_GETOWN, F_GETOWN_EX) and signal (F_SETSIG, F_GETSIG), a pipe
 * with O_ASYNC signalling its owner when another process writes, read leases (F_SETLEASE,
 * F_GETLEASE) broken by an open for writing, directory notification (F_NOTIFY) of
 * creations, renames and attribute changes; and F_CREATED_QUERY. Prints facts that are the
 * same natively. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef F_CREATED_QUERY
#define F_CREATED_QUERY 1028
#endif

static const char *err(long r) {
    if (r >= 0) return "ok";
    switch (errno) {
    case EAGAIN: return "EAGAIN";
    case EINVAL: return "EINVAL";
    case ESRCH: return "ESRCH";
    case ENOTDIR: return "ENOTDIR";
    default: return strerror(errno);
    }
}

/* The descriptor signals should name. */
static int want_fd = -1;

/* Waits up to `ms` for one of `set`: "SIG code=C fd=... band=B", or "none". */
static const char *wait_sig(const sigset_t *set, int ms) {
    static char b[128];
    siginfo_t si;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    int s = sigtimedwait(set, &si, &ts);
    if (s < 0) return "none";
    const char *name = s == SIGIO ? "SIGIO" : s == SIGUSR1 ? "SIGUSR1" : s == SIGUSR2 ? "SIGUSR2" : s == SIGRTMIN + 1 ? "SIGRTMIN+1" : "other";
    if (si.si_code == SI_KERNEL)
        snprintf(b, sizeof b, "%s from the kernel", name);
    else
        snprintf(b, sizeof b, "%s code=%d fd=%s band=%#lx", name, si.si_code, si.si_fd == want_fd ? "ours" : "other", (long)si.si_band);
    return b;
}

static void owners(void) {
    int p[2];
    pipe(p);
    printf("default owner %d, signal %d\n", fcntl(p[0], F_GETOWN), fcntl(p[0], F_GETSIG));
    fcntl(p[0], F_SETOWN, getpid());
    printf("owner is the process: %d\n", fcntl(p[0], F_GETOWN) == getpid());
    fcntl(p[0], F_SETOWN, -getpgrp());
    printf("owner is the group: %d\n", fcntl(p[0], F_GETOWN) == -getpgrp());
    struct f_owner_ex ex;
    fcntl(p[0], F_GETOWN_EX, &ex);
    printf("F_GETOWN_EX: type %s, id is the group: %d\n", ex.type == F_OWNER_PGRP ? "pgrp" : "?", ex.pid == getpgrp());
    ex.type = F_OWNER_TID;
    ex.pid = gettid();
    printf("F_SETOWN_EX thread: %s\n", err(fcntl(p[0], F_SETOWN_EX, &ex)));
    printf("F_GETOWN is it: %d\n", fcntl(p[0], F_GETOWN) == gettid());
    ex.type = 7;
    printf("F_SETOWN_EX type 7: %s\n", err(fcntl(p[0], F_SETOWN_EX, &ex)));
    printf("F_SETOWN of nobody: %s\n", err(fcntl(p[0], F_SETOWN, 4000000)));
    printf("F_SETSIG 65: %s\n", err(fcntl(p[0], F_SETSIG, 65)));
    fcntl(p[0], F_SETSIG, SIGUSR1);
    printf("F_GETSIG is SIGUSR1: %d\n", fcntl(p[0], F_GETSIG) == SIGUSR1);
    close(p[0]);
    close(p[1]);
}

/* A child writes to a pipe whose read end the parent set O_ASYNC on. */
static void async_pipe(int sig, int own_group) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGIO);
    sigaddset(&set, SIGUSR1);
    int p[2];
    pipe(p);
    int fd = fcntl(p[0], F_DUPFD, 10);
    want_fd = fd;
    fcntl(fd, F_SETFL, O_ASYNC);
    fcntl(fd, F_SETOWN, own_group ? -getpgrp() : getpid());
    fcntl(fd, F_SETSIG, sig);
    if (fork() == 0) {
        write(p[1], "x", 1);
        _exit(0);
    }
    wait(NULL);
    char c;
    printf("pipe written by a child (signal %d, owner %s): %s\n", sig, own_group ? "group" : "process", wait_sig(&set, 2000));
    read(fd, &c, 1);
    printf("a read of it signals no reader: %s\n", wait_sig(&set, 100));
    fcntl(fd, F_SETFL, 0);
    if (fork() == 0) {
        write(p[1], "y", 1);
        _exit(0);
    }
    wait(NULL);
    printf("without O_ASYNC: %s\n", wait_sig(&set, 100));
    close(fd);
    close(p[0]);
    close(p[1]);
}

static void leases(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    const char *path = "fcntl_signals.lease";
    int w = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    printf("read lease through a descriptor open for writing: %s\n", err(fcntl(w, F_SETLEASE, F_RDLCK)));
    close(w);
    int fd = open(path, O_RDONLY);
    want_fd = fd;
    printf("read lease: %s\n", err(fcntl(fd, F_SETLEASE, F_RDLCK)));
    printf("F_GETLEASE is F_RDLCK: %d\n", fcntl(fd, F_GETLEASE) == F_RDLCK);
    printf("unlock: %s\n", err(fcntl(fd, F_SETLEASE, F_UNLCK)));
    printf("unlock again: %s\n", err(fcntl(fd, F_SETLEASE, F_UNLCK)));
    printf("lease type 9: %s\n", err(fcntl(fd, F_SETLEASE, 9)));
    fcntl(fd, F_SETSIG, SIGUSR2);
    fcntl(fd, F_SETLEASE, F_RDLCK);
    int r = open(path, O_RDONLY);
    printf("an open for reading keeps it: %d\n", fcntl(fd, F_GETLEASE) == F_RDLCK);
    close(r);
    fflush(stdout);
    int sync[2];
    pipe(sync);
    pid_t child = fork();
    if (child == 0) {
        int x = open(path, O_WRONLY | O_NONBLOCK);
        printf("child's non-blocking open for writing: %s\n", err(x));
        fflush(stdout);
        write(sync[1], "1", 1);
        /* This one waits until the parent lets its lease go. */
        x = open(path, O_WRONLY);
        printf("child's open for writing: %s\n", err(x));
        fflush(stdout);
        _exit(0);
    }
    char c;
    read(sync[0], &c, 1);
    close(sync[0]);
    close(sync[1]);
    printf("holder told: %s\n", wait_sig(&set, 5000));
    printf("F_GETLEASE while broken: %s\n", fcntl(fd, F_GETLEASE) == F_UNLCK ? "F_UNLCK" : "other");
    fflush(stdout);
    usleep(200000);
    fcntl(fd, F_SETLEASE, F_UNLCK);
    waitpid(child, NULL, 0);
    wait_sig(&set, 10);
    close(fd);
    unlink(path);
}

static void dnotify(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 1);
    sigaddset(&set, SIGIO);
    mkdir("dn", 0700);
    int d = open("dn", O_RDONLY | O_DIRECTORY);
    want_fd = d;
    int f = open("dn/a", O_RDONLY | O_CREAT, 0600);
    printf("F_NOTIFY on a file: %s\n", err(fcntl(f, F_NOTIFY, DN_CREATE)));
    close(f);
    fcntl(d, F_SETSIG, SIGRTMIN + 1);
    printf("F_NOTIFY create|rename multishot: %s\n", err(fcntl(d, F_NOTIFY, DN_CREATE | DN_RENAME | DN_MULTISHOT)));
    printf("owner is the caller: %d\n", fcntl(d, F_GETOWN) == getpid());
    close(open("dn/b", O_RDONLY | O_CREAT, 0600));
    printf("create: %s\n", wait_sig(&set, 1000));
    printf("then: %s\n", wait_sig(&set, 50));
    rename("dn/b", "dn/c");
    printf("rename within: %s\n", wait_sig(&set, 1000));
    while (strcmp(wait_sig(&set, 50), "none")) {
    }
    rename("dn/c", "c");
    printf("move out (not asked for): %s\n", wait_sig(&set, 100));
    /* A second request adds its events to the first (still DN_MULTISHOT). */
    fcntl(d, F_SETSIG, 0);
    fcntl(d, F_NOTIFY, DN_ATTRIB);
    chmod("dn/a", 0644);
    printf("attrib added: %s\n", wait_sig(&set, 1000));
    chmod("dn/a", 0600);
    printf("attrib again: %s\n", wait_sig(&set, 1000));
    /* A request without DN_MULTISHOT signals once. */
    fcntl(d, F_NOTIFY, 0);
    fcntl(d, F_NOTIFY, DN_ATTRIB);
    chmod("dn/a", 0644);
    printf("attrib, one shot: %s\n", wait_sig(&set, 1000));
    chmod("dn/a", 0600);
    printf("one shot, again: %s\n", wait_sig(&set, 100));
    fcntl(d, F_NOTIFY, DN_ATTRIB | DN_MULTISHOT);
    fcntl(d, F_NOTIFY, 0);
    chmod("dn/a", 0644);
    printf("after F_NOTIFY 0: %s\n", wait_sig(&set, 100));
    /* A child's change signals the owner. */
    fcntl(d, F_SETSIG, SIGRTMIN + 1);
    fcntl(d, F_NOTIFY, DN_DELETE | DN_MULTISHOT);
    if (fork() == 0) {
        unlink("dn/a");
        _exit(0);
    }
    wait(NULL);
    printf("a child's delete: %s\n", wait_sig(&set, 1000));
    close(d);
    unlink("c");
    rmdir("dn");
}

static void created(void) {
    int fd = open(".", O_RDONLY);
    printf("F_CREATED_QUERY of a directory opened: %d\n", fcntl(fd, F_CREATED_QUERY, 0));
    close(fd);
    fd = open("fcntl_signals.new", O_RDWR | O_CREAT, 0600);
    printf("F_CREATED_QUERY after creating: %d\n", fcntl(fd, F_CREATED_QUERY, 0));
    close(fd);
    fd = open("fcntl_signals.new", O_RDWR | O_CREAT, 0600);
    printf("F_CREATED_QUERY of an existing file with O_CREAT: %d\n", fcntl(fd, F_CREATED_QUERY, 0));
    close(fd);
    unlink("fcntl_signals.new");
    fd = open("fcntl_signals.new", O_RDWR | O_CREAT | O_EXCL, 0600);
    printf("F_CREATED_QUERY with O_EXCL: %d\n", fcntl(fd, F_CREATED_QUERY, 0));
    close(fd);
    unlink("fcntl_signals.new");
}

int main(void) {
    sigset_t all;
    sigemptyset(&all);
    sigaddset(&all, SIGIO);
    sigaddset(&all, SIGUSR1);
    sigaddset(&all, SIGUSR2);
    sigaddset(&all, SIGRTMIN + 1);
    sigprocmask(SIG_BLOCK, &all, NULL);
    /* Signals to the process group reach only this program and its children. */
    setpgid(0, 0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    owners();
    async_pipe(SIGUSR1, 0);
    async_pipe(0, 1);
    leases();
    dnotify();
    created();
    printf("done\n");
    return 0;
}
