/* record_locks: POSIX record locks (fcntl F_SETLK, F_SETLKW, F_GETLK) between processes, as
 * Linux keeps them: per process, excluding each other, reported with the holder's pid,
 * released when the holder closes any descriptor of the file (not when another process
 * closes one), not inherited by fork; SEEK_CUR counts from the descriptor's offset; a lock
 * needs a descriptor opened for its kind; an F_SETLKW that would wait for a process waiting
 * for the caller fails with EDEADLK. Prints facts that are the same natively. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int lk(int fd, int cmd, short type, short whence, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = whence, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl) == 0 ? 0 : -errno;
}

static const char *name(int r) {
    return r == 0 ? "ok" : r == -EAGAIN ? "EAGAIN" : r == -EACCES ? "EACCES" : r == -EBADF ? "EBADF" : r == -EINVAL ? "EINVAL" : r == -EDEADLK ? "EDEADLK" : "other";
}

/* Who holds a conflicting lock over [start, start+len): "none", "parent", "child" or "?". */
static const char *who(int fd, short type, off_t start, off_t len, pid_t parent, pid_t child) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    if (fcntl(fd, F_GETLK, &fl) != 0) return "error";
    if (fl.l_type == F_UNLCK) return "none";
    static char b[64];
    snprintf(b, sizeof b, "%s %s [%ld,+%ld)", fl.l_pid == parent ? "parent" : fl.l_pid == child ? "child" : "?",
             fl.l_type == F_WRLCK ? "write" : "read", (long)fl.l_start, (long)fl.l_len);
    return b;
}

static void msleep(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, 0);
}

int main(void) {
    const char *path = "record_locks.tmp";
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    write(fd, "0123456789abcdefghij", 20);
    pid_t parent = getpid();
    printf("parent write [0,10): %s\n", name(lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10)));
    lseek(fd, 15, SEEK_SET);
    printf("parent read from offset 15 (SEEK_CUR) to the end: %s\n", name(lk(fd, F_SETLK, F_RDLCK, SEEK_CUR, 0, 0)));
    int ro = open(path, O_RDONLY);
    printf("write lock through a read-only descriptor: %s\n", name(lk(ro, F_SETLK, F_WRLCK, SEEK_SET, 30, 1)));
    printf("own lock is no conflict: %s\n", who(fd, F_WRLCK, 0, 5, parent, 0));
    int sync[2], back[2];
    pipe(sync);
    pipe(back);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        char c;
        child = getpid();
        int cfd = open(path, O_RDWR);
        printf("child write [5,6): %s\n", name(lk(cfd, F_SETLK, F_WRLCK, SEEK_SET, 5, 1)));
        printf("child inherited none: write [0,10) through the parent's descriptor: %s\n",
               name(lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10)));
        printf("child asks [0,20): %s\n", who(cfd, F_WRLCK, 0, 20, parent, child));
        printf("child asks [15,16) for reading: %s\n", who(cfd, F_RDLCK, 15, 1, parent, child));
        printf("child asks [17,18) for writing: %s\n", who(cfd, F_WRLCK, 17, 1, parent, child));
        printf("child read [16,17): %s\n", name(lk(cfd, F_SETLK, F_RDLCK, SEEK_SET, 16, 1)));
        printf("child write [10,15): %s\n", name(lk(cfd, F_SETLK, F_WRLCK, SEEK_SET, 10, 5)));
        /* Closing a descriptor of its own releases only its own locks. */
        int other = open(path, O_RDONLY);
        close(other);
        printf("child write [10,15) again after its close: %s\n", name(lk(cfd, F_SETLK, F_WRLCK, SEEK_SET, 10, 5)));
        fflush(stdout);
        write(back[1], "1", 1);
        read(sync[0], &c, 1);
        /* The parent now waits for [10,15): let it, after a while. */
        msleep(200);
        lk(cfd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);
        read(sync[0], &c, 1);
        /* The parent closed a descriptor: all its locks went. */
        printf("child after the parent's close: write [0,0): %s\n", name(lk(cfd, F_SETLKW, F_WRLCK, SEEK_SET, 0, 0)));
        fflush(stdout);
        _exit(0);
    }
    char c;
    read(back[0], &c, 1);
    printf("parent asks [10,15): %s\n", who(fd, F_WRLCK, 10, 5, parent, child));
    printf("parent asks [5,6) (its own): %s\n", who(fd, F_WRLCK, 5, 1, parent, child));
    printf("parent asks [16,17) (the child's read lock, gone with its close): %s\n", who(fd, F_WRLCK, 16, 1, parent, child));
    write(sync[1], "1", 1);
    int r = lk(fd, F_SETLKW, F_WRLCK, SEEK_SET, 10, 5);
    printf("parent waited for [10,15): %s\n", name(r));
    /* Closing the read-only descriptor releases every lock the parent holds on the file. */
    close(ro);
    printf("parent asks after its close: %s\n", who(fd, F_WRLCK, 0, 0, parent, child));
    fflush(stdout);
    write(sync[1], "1", 1);
    int st;
    waitpid(child, &st, 0);
    printf("child exited %d; its locks went with it: %s\n", WEXITSTATUS(st), who(fd, F_WRLCK, 0, 0, parent, child));

    /* Deadlock: the child holds [1,2) and waits for the parent's [0,1); the parent asking to
     * wait for [1,2) would never be granted it. */
    lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 1);
    fflush(stdout);
    child = fork();
    if (child == 0) {
        int cfd = open(path, O_RDWR);
        lk(cfd, F_SETLK, F_WRLCK, SEEK_SET, 1, 1);
        write(back[1], "1", 1);
        int w = lk(cfd, F_SETLKW, F_WRLCK, SEEK_SET, 0, 1);
        printf("child waited for the parent's [0,1): %s\n", name(w));
        fflush(stdout);
        _exit(0);
    }
    read(back[0], &c, 1);
    /* Let the child start waiting. */
    msleep(300);
    printf("parent waits for the waiting child's [1,2): %s\n", name(lk(fd, F_SETLKW, F_WRLCK, SEEK_SET, 1, 1)));
    printf("parent tries it: %s\n", name(lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 1, 1)));
    fflush(stdout);
    lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);
    waitpid(child, &st, 0);
    printf("second child exited %d\n", WEXITSTATUS(st));
    unlink(path);
    return 0;
}
