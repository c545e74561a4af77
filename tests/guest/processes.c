/* fork, execve, wait4, vfork/posix_spawn and pipes between processes.
 *
 * Run with the current directory at the root that holds bin/busybox and bin/processes (natively)
 * or at / (in torpor): every path below is relative, so both runs see the same files.
 * Prints one line per check; the test compares the output with a native run.
 *
 *   processes          all checks
 *   processes child N  (used by the exec check) prints its arguments and exits N
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "child") == 0) {
        printf("child argv:");
        for (int i = 0; i < argc; i++)
            printf(" [%s]", argv[i]);
        printf(" env FROM_PARENT=%s\n", getenv("FROM_PARENT") ? getenv("FROM_PARENT") : "(unset)");
        return atoi(argv[2]);
    }
    private_memory();
    statuses();
    pipeline();
    exec_checks();
    spawn_checks();
    printf("done\n");
    return 0;
}
