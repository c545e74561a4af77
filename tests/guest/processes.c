/* fork, execve, wait4, vfork/posix_spawn and pipes between processes.
 *
 * Run with the current directory at the root that holds bin/busybox and bin/processes (natively)
 * or at / (in torpor): every path below is relative, so both runs see the same files.
 * Prints one line per check; the test compares the output with a native run.
 *
 *   processes          all checks
 *   processes child N  (used by the exec check) prints its arguments and exits N
 *   processes core     core dumps (in torpor only)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void show_status(const char *what, int st) {
    if (WIFEXITED(st))
        printf("%s: exited %d\n", what, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        printf("%s: killed by signal %d\n", what, WTERMSIG(st));
    else
        printf("%s: status %#x\n", what, st);
}

/* Memory written after the fork stays private to each side. */
static void private_memory(void) {
    static char data[64] = "parent data";
    char *heap = malloc(1 << 20);
    memset(heap, 'p', 1 << 20);
    char *anon = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    strcpy(anon, "anon parent");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        strcpy(data, "child data");
        memset(heap, 'c', 1 << 20);
        strcpy(anon, "anon child");
        printf("child sees ppid == parent: %d\n", getppid() != getpid());
        _exit(heap[12345] == 'c' ? 42 : 1);
    }
    int st;
    pid_t w = waitpid(pid, &st, 0);
    printf("waitpid returned the child: %d\n", w == pid);
    show_status("child", st);
    printf("parent still has: %s, %s, heap %c\n", data, anon, heap[12345]);
    free(heap);
}

/* A child killed by a signal, and WNOHANG / ECHILD. */
static void statuses(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        *(volatile int *)0 = 1;
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    show_status("faulting child", st);
    pid = fork();
    if (pid == 0) {
        usleep(200 * 1000);
        _exit(3);
    }
    pid_t r = waitpid(pid, &st, WNOHANG);
    printf("WNOHANG before exit returns 0: %d\n", r == 0);
    r = wait(&st);
    show_status("slow child", st);
    r = waitpid(-1, &st, 0);
    printf("no more children: %d %s\n", (int)r, strerror(errno));
}

/* A pipe between two processes, like `busybox echo | busybox wc -c`. */
static void pipeline(void) {
    int p[2];
    if (pipe(p) != 0) {
        perror("pipe");
        return;
    }
    fflush(stdout);
    pid_t writer = fork();
    if (writer == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("bin/busybox", "echo", "through a pipe", (char *)NULL);
        _exit(127);
    }
    pid_t reader = fork();
    if (reader == 0) {
        dup2(p[0], 0);
        close(p[0]);
        close(p[1]);
        execl("bin/busybox", "wc", "-c", (char *)NULL);
        _exit(127);
    }
    close(p[0]);
    close(p[1]);
    int st1, st2;
    waitpid(writer, &st1, 0);
    waitpid(reader, &st2, 0);
    show_status("writer", st1);
    show_status("reader", st2);
}

/* execve: arguments, environment, errors; close-on-exec. */
static void exec_checks(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"processes", "child", "9", "an argument", NULL};
        char *envp[] = {"FROM_PARENT=yes", NULL};
        execve("bin/processes", argv, envp);
        _exit(126);
    }
    int st;
    waitpid(pid, &st, 0);
    show_status("exec'd child", st);

    char *argv[] = {"x", NULL};
    errno = 0;
    execve("bin/does-not-exist", argv, environ);
    printf("execve of a missing file: %s\n", strerror(errno));
    execve("bin", argv, environ);
    printf("execve of a directory: %s\n", strerror(errno));
    int fd = open("tmp/not-executable", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0) {
        write(fd, "data\n", 5);
        close(fd);
    }
    execve("tmp/not-executable", argv, environ);
    printf("execve without an execute bit: %s\n", strerror(errno));
    fd = open("tmp/garbage", O_CREAT | O_WRONLY | O_TRUNC, 0755);
    if (fd >= 0) {
        write(fd, "\x7f" "ELF garbage", 12);
        close(fd);
    }
    execve("tmp/garbage", argv, environ);
    printf("execve of a bad ELF: %s\n", strerror(errno));
    char **volatile wild = (char **)8;
    execve("bin/processes", wild, environ);
    printf("execve with a wild argv: %s\n", strerror(errno));

    /* execveat: relative to a directory fd, and fexecve (AT_EMPTY_PATH) of an open file. */
    int dir = open("bin", O_RDONLY | O_DIRECTORY);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *av[] = {"processes", "child", "5", "by execveat", NULL};
        char *ev[] = {"FROM_PARENT=dirfd", NULL};
        syscall(SYS_execveat, dir, "processes", av, ev, 0);
        _exit(126);
    }
    waitpid(pid, &st, 0);
    show_status("execveat child", st);
    fd = open("bin/processes", O_RDONLY);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *av[] = {"processes", "child", "6", "by fexecve", NULL};
        char *ev[] = {"FROM_PARENT=fd", NULL};
        fexecve(fd, av, ev);
        _exit(126);
    }
    waitpid(pid, &st, 0);
    show_status("fexecve child", st);
    close(fd);
    errno = 0;
    syscall(SYS_execveat, dir, "", argv, environ, 0);
    printf("execveat of an empty path: %s\n", strerror(errno));
    syscall(SYS_execveat, dir, "", argv, environ, 0x1000);
    printf("execveat of a directory fd: %s\n", strerror(errno));
    syscall(SYS_execveat, dir, "processes", argv, environ, 0x4);
    printf("execveat with a bad flag: %s\n", strerror(errno));
    symlink("processes", "tmp/link-to-processes");
    int tdir = open("tmp", O_RDONLY | O_DIRECTORY);
    syscall(SYS_execveat, tdir, "link-to-processes", argv, environ, AT_SYMLINK_NOFOLLOW);
    printf("execveat of a symlink with AT_SYMLINK_NOFOLLOW: %s\n", strerror(errno));
    unlink("tmp/link-to-processes");
    close(tdir);
    close(dir);
}

/* posix_spawn (glibc: clone with CLONE_VM | CLONE_VFORK) and a #! script. */
static void spawn_checks(void) {
    int fd = open("tmp/script.sh", O_CREAT | O_WRONLY | O_TRUNC, 0755);
    if (fd >= 0) {
        const char *s = "#!bin/busybox sh\necho \"script got: $*\"\nexit 4\n";
        write(fd, s, strlen(s));
        close(fd);
    }
    fflush(stdout);
    pid_t pid;
    char *argv[] = {"tmp/script.sh", "one", "two", NULL};
    int r = posix_spawn(&pid, "tmp/script.sh", NULL, NULL, argv, environ);
    int st = 0;
    if (r == 0)
        waitpid(pid, &st, 0);
    /* Printed after the script's own line, whichever process runs first. */
    printf("posix_spawn: %d\n", r);
    if (r == 0)
        show_status("spawned script", st);
    pid = vfork();
    if (pid == 0) {
        execl("bin/busybox", "true", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    show_status("vfork + exec", st);
}

/* What clone's sharing flags share between two processes: CLONE_FILES the descriptor table
 * (close_range's CLOSE_RANGE_UNSHARE takes a copy), CLONE_FS the working directory and
 * umask, CLONE_PARENT the parent (the grandparent reaps the grandchild). */
static char clone_stack[256 * 1024];
static int opened_fd = -1;

static int open_and_move(void *arg) {
    (void)arg;
    opened_fd = open("/", O_RDONLY | O_DIRECTORY);
    chdir("/tmp");
    umask(027);
    return opened_fd;
}

static int unshare_and_close(void *arg) {
    int fd = *(int *)arg;
    return syscall(SYS_close_range, fd, fd, 2 /* CLOSE_RANGE_UNSHARE */) == 0 ? 0 : 1;
}

static int sibling(void *arg) {
    (void)arg;
    _exit(7);
}

static void sharing_flags(void) {
    char *top = clone_stack + sizeof clone_stack;
    int status;
    char cwd[64];
    pid_t p = clone(open_and_move, top, CLONE_FILES | CLONE_FS | SIGCHLD, NULL);
    waitpid(p, &status, 0);
    int fd = WEXITSTATUS(status);
    mode_t old = umask(022);
    printf("CLONE_FILES|CLONE_FS: child's fd open here %d, cwd %s, umask %03o\n",
           fcntl(fd, F_GETFD) >= 0, getcwd(cwd, sizeof cwd) ? cwd : "?", (unsigned)old);
    p = clone(unshare_and_close, top, CLONE_FILES | SIGCHLD, &fd);
    waitpid(p, &status, 0);
    printf("close_range UNSHARE in a CLONE_FILES child: %d, still open here %d\n",
           WEXITSTATUS(status), fcntl(fd, F_GETFD) >= 0);
    close(fd);
    chdir("/");
    p = clone(open_and_move, top, SIGCHLD, NULL);
    waitpid(p, &status, 0);
    fd = WEXITSTATUS(status);
    old = umask(022);
    printf("no flags: child's fd open here %d, cwd %s, umask %03o\n",
           fcntl(fd, F_GETFD) >= 0, getcwd(cwd, sizeof cwd) ? cwd : "?", (unsigned)old);
    int pipefd[2];
    pipe(pipefd);
    p = fork();
    if (p == 0) {
        pid_t g = clone(sibling, top, CLONE_PARENT | SIGCHLD, NULL);
        write(pipefd[1], &g, sizeof g);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    pid_t g = -1;
    read(pipefd[0], &g, sizeof g);
    close(pipefd[0]);
    close(pipefd[1]);
    pid_t r = waitpid(g, &status, 0);
    printf("CLONE_PARENT: grandchild reaped by its grandparent %d, status %d\n", r == g,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Robust mutexes: a process-shared one in shared memory, left locked by a child that exits,
 * and a private one left locked by a thread that exits, are taken by the next locker with
 * EOWNERDEAD (the kernel walks the dead thread's robust list). */
static pthread_mutex_t *robust_init(pthread_mutex_t *m, int shared) {
    pthread_mutexattr_t at;
    pthread_mutexattr_init(&at);
    pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
    if (shared)
        pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(m, &at);
    return m;
}

static void *lock_and_leave(void *arg) {
    pthread_mutex_lock(arg);
    return NULL;
}

static void robust_mutexes(void) {
    pthread_mutex_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    robust_init(m, 1);
    pid_t p = fork();
    if (p == 0) {
        pthread_mutex_lock(m);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    int r = pthread_mutex_lock(m);
    printf("robust mutex of a dead process: %s", r == EOWNERDEAD ? "EOWNERDEAD" : r == 0 ? "0" : "other");
    int c = pthread_mutex_consistent(m);
    printf(", consistent %d, unlock %d\n", c, pthread_mutex_unlock(m));
    static pthread_mutex_t private_m;
    robust_init(&private_m, 0);
    pthread_t th;
    pthread_create(&th, NULL, lock_and_leave, &private_m);
    pthread_join(th, NULL);
    r = pthread_mutex_lock(&private_m);
    printf("robust mutex of a dead thread: %s\n", r == EOWNERDEAD ? "EOWNERDEAD" : r == 0 ? "0" : "other");
    void *head = NULL;
    size_t len = 0;
    long g = syscall(SYS_get_robust_list, 0, &head, &len);
    printf("get_robust_list: %ld, head set %d, len %zu\n", g, head != NULL, len);
    munmap(m, 4096);
}

/* Job control: a stopped process runs nothing until SIGCONT; its parent hears of the stop and
 * the continue (SIGCHLD's si_code, wait4's WUNTRACED/WCONTINUED, waitid's WSTOPPED/WCONTINUED,
 * /proc/PID/stat's T). */
static volatile sig_atomic_t chld_codes[8];
static volatile sig_atomic_t chld_count;
static void on_chld(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (chld_count < 8)
        chld_codes[chld_count] = si->si_code;
    chld_count++;
}
static volatile unsigned long *spin_counter;
static void *spin(void *arg) {
    (void)arg;
    for (;;)
        __atomic_add_fetch(spin_counter, 1, __ATOMIC_RELAXED);
    return NULL;
}
static char proc_state(pid_t pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return '?';
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}
static void tstp_handler(int sig) { (void)sig; }
static void job_control(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_chld;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    spin_counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    /* A child that stops itself, then is continued and exits once told to. */
    int go[2];
    if (pipe(go) != 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        char x;
        raise(SIGSTOP);
        close(go[1]);
        _exit(read(go[0], &x, 1) == 1 ? 3 : 4);
    }
    close(go[0]);
    int st = 0;
    pid_t w = waitpid(c, &st, WUNTRACED);
    printf("job: stopped child reported %d, WIFSTOPPED %d, WSTOPSIG %d\n", w == c,
           WIFSTOPPED(st), WIFSTOPPED(st) ? WSTOPSIG(st) : 0);
    printf("job: stopped child's state %c\n", proc_state(c));
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int r = waitid(P_PID, c, &si, WSTOPPED | WNOHANG);
    printf("job: stop reported once: waitid %d, si_pid set %d\n", r, si.si_pid != 0);
    kill(c, SIGCONT);
    w = waitpid(c, &st, WCONTINUED);
    printf("job: continued reported %d, WIFCONTINUED %d\n", w == c, WIFCONTINUED(st));
    if (write(go[1], "x", 1) != 1)
        return;
    close(go[1]);
    w = waitpid(c, &st, 0);
    printf("job: then exited %d, code %d\n", w == c, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    /* Which codes arrived (a standard signal pending twice is delivered once: the exit's
     * SIGCHLD may merge with the continue's, natively as here). */
    int saw_stop = 0, saw_cont = 0;
    for (int i = 0; i < chld_count && i < 8; i++) {
        saw_stop |= chld_codes[i] == CLD_STOPPED;
        saw_cont |= chld_codes[i] == CLD_CONTINUED;
    }
    printf("job: SIGCHLD for the stop %d, for the continue %d\n", saw_stop, saw_cont);

    /* A multi-threaded child stopped from outside: none of its threads runs. */
    *spin_counter = 0;
    c = fork();
    if (c == 0) {
        pthread_t th;
        pthread_create(&th, NULL, spin, NULL);
        for (;;)
            pause();
    }
    while (__atomic_load_n(spin_counter, __ATOMIC_RELAXED) == 0)
        sched_yield();
    kill(c, SIGSTOP);
    memset(&si, 0, sizeof si);
    r = waitid(P_PID, c, &si, WSTOPPED | WNOWAIT);
    printf("job: waitid WNOWAIT: %d, code stopped %d, status %d\n", r, si.si_code == CLD_STOPPED,
           si.si_status);
    memset(&si, 0, sizeof si);
    r = waitid(P_PID, c, &si, WSTOPPED);
    printf("job: waitid again: %d, code stopped %d\n", r, si.si_code == CLD_STOPPED);
    unsigned long a = *spin_counter;
    usleep(50000);
    unsigned long b = *spin_counter;
    printf("job: threads of a stopped process still %d\n", a == b);
    kill(c, SIGCONT);
    int moved = 0;
    for (int i = 0; i < 2000 && !moved; i++) {
        usleep(1000);
        moved = *spin_counter != b;
    }
    printf("job: they run again %d\n", moved);
    /* SIGKILL ends a stopped process. */
    kill(c, SIGSTOP);
    waitpid(c, &st, WUNTRACED);
    kill(c, SIGKILL);
    w = waitpid(c, &st, 0);
    printf("job: SIGKILL while stopped: %d, killed by %d\n", w == c,
           WIFSIGNALED(st) ? WTERMSIG(st) : 0);

    /* SIGTSTP with a handler runs the handler; SIGCONT then SIGSTOP sent at once stops. */
    c = fork();
    if (c == 0) {
        signal(SIGTSTP, tstp_handler);
        raise(SIGTSTP);
        _exit(5);
    }
    w = waitpid(c, &st, WUNTRACED);
    printf("job: SIGTSTP with a handler: exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

    /* SA_NOCLDSTOP: no SIGCHLD for a stop, the wait still reports it. */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    chld_count = 0;
    c = fork();
    if (c == 0) {
        raise(SIGSTOP);
        _exit(0);
    }
    w = waitpid(c, &st, WUNTRACED);
    usleep(20000);
    printf("job: SA_NOCLDSTOP: stop reported %d, SIGCHLDs %d\n", WIFSTOPPED(st), (int)chld_count);
    kill(c, SIGCONT);
    waitpid(c, &st, 0);
    signal(SIGCHLD, SIG_DFL);
    munmap((void *)spin_counter, 4096);
}

/* Core dumps (`processes core`, in torpor only: natively the host's core_pattern decides):
 * a child that aborts with RLIMIT_CORE raised leaves an ELF core file in its working
 * directory holding its memory; with RLIMIT_CORE 0 it leaves none. */
static char core_marker[64] = "torpor core marker 0123456789";
static int core_child(rlim_t limit, const char *dir) {
    pid_t c = fork();
    if (c == 0) {
        struct rlimit rl = {limit, RLIM_INFINITY};
        setrlimit(RLIMIT_CORE, &rl);
        if (chdir(dir) != 0)
            _exit(99);
        core_marker[0] = 'T'; /* written after the fork: the child's own copy */
        abort();
    }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    waitid(P_PID, c, &si, WEXITED | WNOWAIT);
    int st = 0;
    waitpid(c, &st, 0);
    printf("core: limit %s: signal %d, WCOREDUMP %d, si_code %s\n", limit ? "raised" : "0",
           WIFSIGNALED(st) ? WTERMSIG(st) : 0, WIFSIGNALED(st) ? WCOREDUMP(st) != 0 : -1,
           si.si_code == CLD_DUMPED ? "CLD_DUMPED" : si.si_code == CLD_KILLED ? "CLD_KILLED" : "other");
    return st;
}
static void core_dumps(void) {
    mkdir("/tmp/core-a", 0700);
    mkdir("/tmp/core-b", 0700);
    core_child(RLIM_INFINITY, "/tmp/core-a");
    int fd = open("/tmp/core-a/core", O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        printf("core: no file\n");
        return;
    }
    unsigned char eh[64];
    pread(fd, eh, 64, 0);
    unsigned short type = eh[16] | eh[17] << 8, phnum = eh[56] | eh[57] << 8;
    unsigned long phoff;
    memcpy(&phoff, eh + 32, 8);
    printf("core: file mode %o, ELF %d, ET_CORE %d\n", sb.st_mode & 0777, memcmp(eh, "\x7f" "ELF", 4) == 0, type == 4);
    int notes = 0, found = 0;
    for (int i = 0; i < phnum; i++) {
        unsigned char ph[56];
        pread(fd, ph, 56, phoff + 56 * i);
        unsigned int pt;
        unsigned long off, va, filesz;
        memcpy(&pt, ph, 4);
        memcpy(&off, ph + 8, 8);
        memcpy(&va, ph + 16, 8);
        memcpy(&filesz, ph + 32, 8);
        if (pt == 4) {
            /* The first note is NT_PRSTATUS, whose pr_cursig is SIGABRT. */
            unsigned char n[64];
            pread(fd, n, 64, off);
            unsigned int ntype;
            memcpy(&ntype, n + 8, 4);
            short cursig;
            memcpy(&cursig, n + 20 + 12, 2);
            notes = ntype == 1 && cursig == SIGABRT;
        }
        unsigned long at = (unsigned long)core_marker;
        if (pt == 1 && va <= at && at + 64 <= va + filesz) {
            char got[64];
            pread(fd, got, 64, off + (at - va));
            found = memcmp(got, "Torpor core marker", 18) == 0;
        }
    }
    printf("core: NT_PRSTATUS with SIGABRT %d, the child's memory in it %d\n", notes, found);
    close(fd);
    core_child(0, "/tmp/core-b");
    printf("core: with RLIMIT_CORE 0 a file %d\n", access("/tmp/core-b/core", F_OK) == 0);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "child") == 0) {
        printf("child argv:");
        for (int i = 0; i < argc; i++)
            printf(" [%s]", argv[i]);
        printf(" env FROM_PARENT=%s\n", getenv("FROM_PARENT") ? getenv("FROM_PARENT") : "(unset)");
        return atoi(argv[2]);
    }
    if (argc == 2 && strcmp(argv[1], "core") == 0) {
        core_dumps();
        return 0;
    }
    private_memory();
    statuses();
    pipeline();
    exec_checks();
    spawn_checks();
    sharing_flags();
    robust_mutexes();
    job_control();
    printf("done\n");
    return 0;
}
