/* fs_conformance: the path and file syscalls, errno for errno.
 *
 * Makes a scratch directory `fsc` in its working directory, works inside it and prints one line
 * per check: the call, its return value and, when it failed, the errno's name. Nothing that
 * differs between two runs on the same machine is printed (no pids, inode numbers, fd numbers or
 * times other than those the program sets), so the output of a native run and of a sandboxed
 * run must be identical; crates/torpor/tests/fs_conformance.rs compares them line by line.
 *
 * Raw syscall(2) is used where the C library would emulate or reject a call itself, so that the
 * kernel interface is what is tested. Run as root (privilege-dependent results are root's). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE 2
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC 4
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#define RENAME_EXCHANGE 2
#endif

static int checks;

static const char *ename(int e) {
    switch (e) {
#define E(x) case x: return #x;
        E(EPERM) E(ENOENT) E(ESRCH) E(EINTR) E(EIO) E(ENXIO) E(E2BIG) E(EBADF) E(EAGAIN)
        E(ENOMEM) E(EACCES) E(EFAULT) E(EBUSY) E(EEXIST) E(EXDEV) E(ENODEV) E(ENOTDIR)
        E(EISDIR) E(EINVAL) E(ENFILE) E(EMFILE) E(ENOTTY) E(ETXTBSY) E(EFBIG) E(ENOSPC)
        E(ESPIPE) E(EROFS) E(EMLINK) E(EPIPE) E(ERANGE) E(ENAMETOOLONG) E(ENOSYS)
        E(ENOTEMPTY) E(ELOOP) E(ENODATA) E(EOPNOTSUPP) E(EOVERFLOW) E(EBADFD) E(ENOTSOCK)
#undef E
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "errno%d", e);
        return buf;
    }
    }
}

static void report(const char *what, long r, int e) {
    checks++;
    if (r < 0)
        printf("%s = %ld %s\n", what, r, ename(e));
    else
        printf("%s = %ld\n", what, r);
    fflush(stdout);
}

static void report_fd(const char *what, long r, int e) {
    checks++;
    if (r < 0)
        printf("%s = %ld %s\n", what, r, ename(e));
    else
        printf("%s = fd\n", what);
    fflush(stdout);
}

/* C(expr): the call's value and errno. F(expr): a call that returns a descriptor. */
#define C(expr) do { errno = 0; long r_ = (long)(expr); report(#expr, r_, errno); } while (0)
#define F(expr) do { errno = 0; long r_ = (long)(expr); report_fd(#expr, r_, errno); } while (0)
/* FD(var, expr): as F, keeping the descriptor in `var`. */
#define FD(var, expr) do { errno = 0; var = (expr); report_fd(#var " = " #expr, var, errno); } while (0)

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    checks++;
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static const char *ftype(mode_t m) {
    switch (m & S_IFMT) {
    case S_IFREG: return "reg";
    case S_IFDIR: return "dir";
    case S_IFLNK: return "lnk";
    case S_IFIFO: return "fifo";
    case S_IFSOCK: return "sock";
    case S_IFCHR: return "chr";
    case S_IFBLK: return "blk";
    }
    return "?";
}

/* Prints type, permission bits, size and link count of `p` (lstat). */
static void show(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0) {
        note("  lstat(%s): %s", p, ename(errno));
        return;
    }
    note("  lstat(%s): %s %04o size %lld nlink %lu uid %u gid %u", p, ftype(st.st_mode),
         st.st_mode & 07777, (long long)st.st_size, (unsigned long)st.st_nlink, st.st_uid,
         st.st_gid);
}

static void show_times(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0) {
        note("  times(%s): %s", p, ename(errno));
        return;
    }
    note("  times(%s): atime %lld.%09ld mtime %lld.%09ld", p, (long long)st.st_atim.tv_sec,
         st.st_atim.tv_nsec, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

static int recent(struct timespec ts) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long d = (long long)now.tv_sec - ts.tv_sec;
    return d > -120 && d < 120;
}

static void put(const char *p, const char *data) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        note("  put(%s): %s", p, ename(errno));
        return;
    }
    if (write(fd, data, strlen(data)) < 0)
        note("  put(%s) write: %s", p, ename(errno));
    close(fd);
}

static void cat(const char *p) {
    char b[128] = {0};
    int fd = open(p, O_RDONLY);
    if (fd < 0) {
        note("  cat(%s): %s", p, ename(errno));
        return;
    }
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    note("  cat(%s): %zd '%s'", p, n, n > 0 ? b : "");
}

/* Removes a tree (no symlinks followed). */
static void rmtree(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char q[4096];
            snprintf(q, sizeof q, "%s/%s", p, e->d_name);
            rmtree(q);
        }
        if (d)
            closedir(d);
        rmdir(p);
    } else {
        unlink(p);
    }
}

static char longname[300];
static char longpath[5000];
/* A wild pointer the compiler cannot see through (it would warn about the overflows). */
static volatile uintptr_t bad_address = 1;
#define badptr ((void *)bad_address)
static volatile size_t huge_len = (size_t)-1;

static void section(const char *name) {
    printf("## %s\n", name);
    fflush(stdout);
}

static void mkdir_rmdir_unlink(void) {
    section("mkdir rmdir unlink");
    C(mkdir("/", 0755));
    C(mkdir(".", 0755));
    C(mkdir("..", 0755));
    C(mkdir("/..", 0755));
    C(mkdir("d", 0777));
    show("d");
    C(mkdir("d", 0755));
    C(mkdir("d2/", 0755));
    C(mkdir("d3//", 0700));
    show("d3");
    C(mkdir("nx/sub", 0755));
    put("f", "hello");
    C(mkdir("f", 0755));
    C(mkdir("f/sub", 0755));
    C(mkdir("f/.", 0755));
    C(mkdir("d/.", 0755));
    C(mkdir("d/..", 0755));
    C(mkdir(longname, 0755));
    C(mkdir(longpath, 0755));
    C(mkdir("", 0755));
    C(syscall(SYS_mkdir, NULL, 0755));
    C(syscall(SYS_mkdir, badptr, 0755));
    C(symlink("dangling-target", "dl"));
    C(mkdir("dl", 0755));
    C(mkdir("dl/", 0755));
    C(umask(0));
    C(mkdir("d4", 01777));
    show("d4");
    C(umask(022));
    C(mkdirat(-1, "x", 0755));
    C(mkdirat(12345, "x", 0755));
    int fd, dfd;
    FD(fd, open("f", O_RDONLY));
    C(mkdirat(fd, "x", 0755));
    FD(dfd, open("d", O_RDONLY | O_DIRECTORY));
    C(mkdirat(dfd, "x", 0755));
    show("d/x");
    C(mkdirat(fd, "d/y", 0755) == 0 ? 1 : -1);
    char abs[4096];
    if (getcwd(abs, sizeof abs - 8))
        strcat(abs, "/d/z");
    C(mkdirat(fd, abs, 0755));
    C(mkdirat(AT_FDCWD, "d/w", 0755));

    C(rmdir("/"));
    C(rmdir("."));
    C(rmdir(".."));
    C(rmdir("d/."));
    C(rmdir("d/.."));
    C(rmdir("f"));
    C(rmdir("f/"));
    C(rmdir("nx"));
    C(rmdir("d"));
    C(rmdir("dl"));
    C(symlink("d", "dlink"));
    C(rmdir("dlink"));
    C(rmdir("dlink/"));
    C(rmdir("d2/"));
    C(rmdir("d3"));
    C(rmdir(""));
    C(syscall(SYS_rmdir, badptr));
    C(rmdir(longname));
    C(unlinkat(dfd, "x", AT_REMOVEDIR));
    C(unlinkat(dfd, "x", AT_REMOVEDIR));
    C(unlinkat(dfd, "w", 0));
    C(unlinkat(dfd, "w", 0x1));
    C(unlinkat(dfd, "w", AT_REMOVEDIR));
    C(unlinkat(fd, "x", 0));

    C(unlink("/"));
    C(unlink("."));
    C(unlink(".."));
    C(unlink("d"));
    C(unlink("d/"));
    C(unlink("f/"));
    C(unlink("nx"));
    C(unlink("nx/"));
    C(unlink("nx/y"));
    C(unlink("f/y"));
    C(unlink("dlink/"));
    C(unlink("dlink"));
    show("d");
    C(unlink(""));
    C(syscall(SYS_unlink, badptr));
    C(unlink(longname));
    C(unlink(longpath));
    close(fd);
    close(dfd);
}

static void open_flags(void) {
    section("open flags");
    int fd, fd2, dfd;
    put("f", "0123456789");
    C(symlink("f", "sf"));
    C(symlink("nothere", "sdangle"));
    C(symlink("loop1", "loop2"));
    C(symlink("loop2", "loop1"));
    F(open("nx", O_RDONLY));
    F(open("nx", O_WRONLY));
    F(open("new", O_CREAT | O_EXCL | O_WRONLY, 0666));
    show("new");
    F(open("new", O_CREAT | O_EXCL | O_WRONLY, 0666));
    F(open("new", O_EXCL | O_RDONLY));
    F(open("sf", O_CREAT | O_EXCL | O_WRONLY, 0600));
    F(open("sdangle", O_CREAT | O_EXCL | O_WRONLY, 0600));
    F(open("sf", O_RDONLY | O_NOFOLLOW));
    F(open("sf", O_PATH | O_NOFOLLOW));
    F(open("sdangle", O_RDONLY));
    F(open("sdangle", O_WRONLY | O_CREAT, 0640));
    show("nothere");
    F(open("loop1", O_RDONLY));
    F(open("loop1", O_RDONLY | O_NOFOLLOW));
    F(open("f", O_RDONLY | O_DIRECTORY));
    F(open("sf", O_RDONLY | O_DIRECTORY));
    F(open("d", O_RDONLY | O_DIRECTORY));
    F(open("d", O_WRONLY));
    F(open("d", O_RDWR));
    F(open("d", O_RDONLY | O_CREAT, 0644));
    F(open("d", O_RDONLY | O_TRUNC));
    F(open("dnew", O_RDONLY | O_CREAT | O_DIRECTORY, 0755));
    F(open("f/", O_RDONLY));
    F(open("f/.", O_RDONLY));
    F(open("d/", O_RDONLY));
    F(open("d/.", O_RDONLY));
    F(open("d/..", O_RDONLY));
    F(open("nx/", O_RDONLY | O_CREAT, 0644));
    F(open("nx/y", O_RDONLY | O_CREAT, 0644));
    F(open(longname, O_RDONLY | O_CREAT, 0644));
    F(open(longpath, O_RDONLY));
    F(open("", O_RDONLY));
    F(syscall(SYS_open, badptr, O_RDONLY));
    F(open("f", O_RDONLY | 0x40000000));
    F(open("f", O_ACCMODE));
    F(syscall(SYS_openat, -1, "f", O_RDONLY));
    F(syscall(SYS_openat, 9999, "f", O_RDONLY));
    FD(fd, open("f", O_RDONLY));
    F(openat(fd, "x", O_RDONLY));
    F(openat(fd, "/", O_RDONLY));
    close(fd);
    FD(dfd, open("d", O_RDONLY | O_DIRECTORY));
    F(openat(dfd, "../f", O_RDONLY));
    F(openat(dfd, "nx", O_RDONLY));
    close(dfd);

    /* Access modes. */
    char b[16];
    FD(fd, open("f", O_RDONLY));
    C(write(fd, "x", 1));
    C(read(fd, b, 4));
    close(fd);
    FD(fd, open("f", O_WRONLY));
    C(read(fd, b, 4));
    C(write(fd, "AB", 2));
    close(fd);
    cat("f");
    FD(fd, open("f", O_WRONLY | O_APPEND));
    C(write(fd, "ZZ", 2));
    C(lseek(fd, 0, SEEK_CUR));
    C(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    C(fcntl(fd, F_SETFL, O_NONBLOCK));
    C(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    close(fd);
    cat("f");
    FD(fd, open("f", O_RDWR | O_TRUNC));
    close(fd);
    show("f");
    FD(fd, open("f", O_PATH));
    C(read(fd, b, 1));
    C(write(fd, b, 1));
    C(fchmod(fd, 0644));
    struct stat st;
    C(fstat(fd, &st));
    C(fcntl(fd, F_GETFL) & (O_ACCMODE | O_PATH));
    close(fd);
    C(umask(027));
    F(open("masked", O_CREAT | O_WRONLY, 0777));
    show("masked");
    C(umask(022));
    F(open("f", O_CREAT | O_WRONLY, 0777));
    F(syscall(SYS_creat, "created", 0600));
    show("created");
    F(syscall(SYS_creat, "d", 0600));

    /* O_TMPFILE. */
    FD(fd, open("d", O_TMPFILE | O_RDWR, 0600));
    C(write(fd, "tmp", 3));
    C(fstat(fd, &st) == 0 ? (long)st.st_nlink : -1);
    C(linkat(fd, "", AT_FDCWD, "d/fromtmp", AT_EMPTY_PATH));
    cat("d/fromtmp");
    close(fd);
    FD(fd, open("d", O_TMPFILE | O_WRONLY | O_EXCL, 0600));
    C(linkat(fd, "", AT_FDCWD, "d/fromtmp2", AT_EMPTY_PATH));
    close(fd);
    F(open("d", O_TMPFILE | O_RDONLY, 0600));
    F(open("f", O_TMPFILE | O_RDWR, 0600));
    F(open("nx", O_TMPFILE | O_RDWR, 0600));
    FD(fd, open("d", O_TMPFILE | O_RDWR, 0600));
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    C(linkat(AT_FDCWD, proc, AT_FDCWD, "d/fromproc", AT_SYMLINK_FOLLOW));
    show("d/fromproc");
    close(fd);
    unlink("d/fromtmp");
    unlink("d/fromtmp2");
    unlink("d/fromproc");

    /* Two descriptions of one file. */
    FD(fd, open("f", O_RDWR));
    FD(fd2, dup(fd));
    C(write(fd, "abc", 3));
    C(lseek(fd2, 0, SEEK_CUR));
    C(fcntl(fd2, F_GETFD));
    FD(fd2, fcntl(fd, F_DUPFD_CLOEXEC, 50));
    C(fcntl(fd2, F_GETFD));
    C(fcntl(fd, F_DUPFD, -1));
    C(fcntl(fd, 9999));
    close(fd2);
    close(fd);
    unlink("new");
    unlink("masked");
    unlink("created");
    unlink("nothere");
}

static void rename_calls(void) {
    section("rename");
    put("a", "A");
    put("b", "B");
    C(mkdir("e1", 0755));
    C(mkdir("e2", 0755));
    C(mkdir("full", 0755));
    put("full/x", "x");
    C(rename("a", "a2"));
    C(rename("a", "a3"));
    C(rename("a2", "a"));
    C(rename("a", "a"));
    C(rename("a", "e1"));
    C(rename("e1", "a"));
    C(rename("e1", "full"));
    C(rename("e1", "e2"));
    show("e1");
    show("e2");
    C(mkdir("e1", 0755));
    C(rename("e2", "e2/sub"));
    C(rename("e2", "e2/sub/deeper"));
    C(rename("/", "x"));
    C(rename(".", "x"));
    C(rename("..", "x"));
    C(rename("a", "."));
    C(rename("a", ".."));
    C(rename("a", "/"));
    C(rename("e1", "e1/."));
    C(rename("a/", "c"));
    C(rename("a", "c/"));
    C(rename("e1/", "e3/"));
    C(rename("e3", "e1"));
    C(rename("nx", "c"));
    C(rename("a", "nx/c"));
    C(rename("a", "b/c"));
    C(rename("a", longname));
    C(rename(longname, "a"));
    C(rename("", "a"));
    C(rename("a", ""));
    C(syscall(SYS_rename, badptr, "a"));
    C(syscall(SYS_rename, "a", badptr));
    C(link("a", "ahard"));
    C(rename("a", "ahard"));
    show("a");
    show("ahard");
    unlink("ahard");
    int dfd = open("full", O_RDONLY | O_DIRECTORY);
    C(renameat(dfd, "x", AT_FDCWD, "x-moved"));
    C(renameat(AT_FDCWD, "x-moved", dfd, "x"));
    C(renameat(-1, "x", AT_FDCWD, "y"));
    C(renameat(AT_FDCWD, "a", 9999, "y"));
    close(dfd);
    C(syscall(SYS_renameat2, AT_FDCWD, "a", AT_FDCWD, "b", RENAME_NOREPLACE));
    C(syscall(SYS_renameat2, AT_FDCWD, "a", AT_FDCWD, "c", RENAME_NOREPLACE));
    cat("c");
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "b", RENAME_EXCHANGE));
    cat("b");
    cat("c");
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "nx", RENAME_EXCHANGE));
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "e1", RENAME_EXCHANGE));
    show("c");
    show("e1");
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "e1", RENAME_EXCHANGE));
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "b", RENAME_EXCHANGE | RENAME_NOREPLACE));
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "b", 0x100));
    C(syscall(SYS_renameat2, AT_FDCWD, "c", AT_FDCWD, "b", 0));
    cat("b");
    show("c");
    rmtree("e1");
    rmtree("e2");
    rmtree("full");
    unlink("b");
}

static void links(void) {
    section("link symlink readlink");
    char buf[64];
    put("t", "target");
    C(link("t", "h"));
    show("t");
    C(link("t", "h"));
    C(link("nx", "h2"));
    C(link("d", "dh"));
    C(link("t", "nx/h"));
    C(link("t/", "h3"));
    C(link("t", "h3/"));
    C(link("t", "d"));
    C(link("t", longname));
    C(syscall(SYS_link, badptr, "h4"));
    C(syscall(SYS_link, "t", badptr));
    C(symlink("t", "st"));
    C(linkat(AT_FDCWD, "st", AT_FDCWD, "hl-nofollow", 0));
    show("hl-nofollow");
    C(linkat(AT_FDCWD, "st", AT_FDCWD, "hl-follow", AT_SYMLINK_FOLLOW));
    show("hl-follow");
    C(linkat(AT_FDCWD, "st", AT_FDCWD, "hl-bad", 0x8000));
    C(linkat(AT_FDCWD, "", AT_FDCWD, "hl-empty", 0));
    int fd = open("t", O_RDONLY);
    C(linkat(fd, "", AT_FDCWD, "hl-fd", AT_EMPTY_PATH));
    show("hl-fd");
    C(linkat(fd, "x", AT_FDCWD, "hl-fd2", 0));
    close(fd);
    C(symlink("t", "st"));
    C(symlink("", "s-empty"));
    C(symlink("t", "nx/s"));
    C(symlink("t", "s-slash/"));
    C(symlink("/etc/passwd", "s-abs"));
    C(symlink(longname, "s-long"));
    C(symlink("t", longname));
    C(syscall(SYS_symlink, badptr, "s1"));
    C(syscall(SYS_symlink, "t", badptr));
    show("s-abs");
    memset(buf, 0, sizeof buf);
    C(readlink("s-abs", buf, sizeof buf));
    note("  readlink -> '%s'", buf);
    memset(buf, 0, sizeof buf);
    C(readlink("s-abs", buf, 4));
    note("  readlink -> '%s'", buf);
    C(readlink("s-abs", buf, 0));
    C(readlink("s-abs", buf, huge_len));
    C(readlink("t", buf, sizeof buf));
    C(readlink("d", buf, sizeof buf));
    C(readlink("nx", buf, sizeof buf));
    C(readlink("st/", buf, sizeof buf));
    C(readlink("", buf, sizeof buf));
    C(readlink("s-abs", badptr, sizeof buf));
    int dfd = open(".", O_RDONLY | O_DIRECTORY);
    memset(buf, 0, sizeof buf);
    C(readlinkat(dfd, "st", buf, sizeof buf));
    note("  readlinkat -> '%s'", buf);
    int lfd = open("st", O_PATH | O_NOFOLLOW);
    memset(buf, 0, sizeof buf);
    C(readlinkat(lfd, "", buf, sizeof buf));
    note("  readlinkat(empty) -> '%s'", buf);
    close(lfd);
    close(dfd);
    /* Relative targets resolve from the link's directory; `..` stops at the root. */
    C(symlink("../t", "d/up"));
    cat("d/up");
    C(symlink("../../../../../../../../..", "toroot"));
    struct stat a, b;
    C(stat("toroot", &a) == 0 && stat("/", &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    C(stat("toroot/..", &a) == 0 && a.st_ino == b.st_ino);
    C(stat("/..", &a) == 0 && a.st_ino == b.st_ino);
    C(stat("/../../..", &a) == 0 && a.st_ino == b.st_ino);
    C(symlink("loopA", "loopB"));
    C(symlink("loopB", "loopA"));
    C(stat("loopA", &a));
    C(lstat("loopA", &a) == 0 ? (long)(a.st_mode & S_IFMT) == S_IFLNK : -1);
    C(stat("loopA/x", &a));
    C(unlink("h"));
    show("t");
    C(unlink("st"));
    show("t");
    unlink("d/up");
    unlink("toroot");
    unlink("loopA");
    unlink("loopB");
    unlink("hl-nofollow");
    unlink("hl-follow");
    unlink("hl-fd");
    unlink("s-abs");
    unlink("s-long");
}

static void modes_owners(void) {
    section("chmod chown");
    put("m", "mode");
    C(symlink("m", "sm"));
    C(chmod("m", 0600));
    show("m");
    C(chmod("m", 07777));
    show("m");
    C(chmod("sm", 0640));
    show("m");
    show("sm");
    C(chmod("nx", 0600));
    C(chmod("m/", 0600));
    C(chmod("", 0600));
    C(syscall(SYS_chmod, badptr, 0600));
    int fd = open("m", O_RDONLY);
    C(fchmod(fd, 0604));
    show("m");
    C(fchmod(-1, 0604));
    close(fd);
    C(syscall(SYS_fchmodat, AT_FDCWD, "m", 0644));
    C(syscall(SYS_fchmodat2, AT_FDCWD, "m", 0640, AT_SYMLINK_NOFOLLOW));
    show("m");
    C(syscall(SYS_fchmodat2, AT_FDCWD, "sm", 0600, AT_SYMLINK_NOFOLLOW));
    C(syscall(SYS_fchmodat2, AT_FDCWD, "sm", 0600, 0));
    C(syscall(SYS_fchmodat2, AT_FDCWD, "m", 0600, 0x8000));
    fd = open("m", O_PATH);
    C(syscall(SYS_fchmodat2, fd, "", 0644, AT_EMPTY_PATH));
    show("m");
    close(fd);
    C(chown("m", 1234, 5678));
    show("m");
    C(chown("m", -1, -1));
    show("m");
    C(chown("m", -1, 42));
    show("m");
    C(lchown("sm", 77, 88));
    show("sm");
    show("m");
    C(chown("sm", 0, 0));
    show("m");
    C(chmod("m", 06755));
    C(chown("m", 0, 0));
    show("m");
    C(chown("nx", 0, 0));
    C(syscall(SYS_chown, badptr, 0, 0));
    fd = open("m", O_RDONLY);
    C(fchown(fd, 5, 6));
    show("m");
    C(fchown(-1, 5, 6));
    C(fchownat(fd, "", 7, 8, AT_EMPTY_PATH));
    show("m");
    C(fchownat(fd, "", 7, 8, 0));
    C(fchownat(AT_FDCWD, "sm", 9, 9, AT_SYMLINK_NOFOLLOW));
    show("sm");
    C(fchownat(AT_FDCWD, "sm", 9, 9, 0x8000));
    close(fd);
    C(chown("m", 0, 0));
    unlink("sm");
}

static void sizes(void) {
    section("truncate fallocate");
    put("z", "0123456789");
    C(truncate("z", 100));
    show("z");
    C(truncate("z", 3));
    cat("z");
    C(truncate("z", -1));
    C(truncate("d", 0));
    C(truncate("nx", 0));
    C(truncate("z/", 0));
    C(truncate("", 0));
    C(syscall(SYS_truncate, badptr, 0));
    C(mkfifo("zf", 0644));
    C(truncate("zf", 0));
    unlink("zf");
    int ro = open("z", O_RDONLY), rw = open("z", O_RDWR), dfd = open("d", O_RDONLY);
    C(ftruncate(ro, 0));
    C(ftruncate(rw, -5));
    C(ftruncate(rw, 10));
    show("z");
    C(ftruncate(dfd, 0));
    C(ftruncate(-1, 0));
    C(fallocate(rw, 0, 0, 4096));
    show("z");
    C(fallocate(rw, FALLOC_FL_KEEP_SIZE, 0, 65536));
    show("z");
    C(fallocate(rw, FALLOC_FL_PUNCH_HOLE, 0, 10));
    C(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10));
    C(fallocate(rw, 0, 0, 0));
    C(fallocate(rw, 0, -1, 10));
    C(fallocate(rw, 0x1000, 0, 10));
    C(fallocate(ro, 0, 0, 10));
    C(fallocate(dfd, 0, 0, 10));
    C(fallocate(-1, 0, 0, 10));
    int p[2];
    C(pipe(p));
    C(fallocate(p[1], 0, 0, 10));
    C(ftruncate(p[1], 0));
    close(p[0]);
    close(p[1]);
    C(fsync(rw));
    C(fdatasync(rw));
    C(syncfs(rw));
    C(fsync(-1));
    close(ro);
    close(rw);
    close(dfd);
    unlink("z");
}

static void xattrs(void) {
    section("xattr");
    char buf[256];
    put("x", "xattr");
    C(symlink("x", "sx"));
    C(setxattr("x", "user.a", "v1", 2, 0));
    C(getxattr("x", "user.a", NULL, 0));
    memset(buf, 0, sizeof buf);
    C(getxattr("x", "user.a", buf, sizeof buf));
    note("  value '%s'", buf);
    C(getxattr("x", "user.a", buf, 1));
    C(getxattr("x", "user.nx", buf, sizeof buf));
    C(getxattr("sx", "user.a", buf, sizeof buf));
    C(lgetxattr("sx", "user.a", buf, sizeof buf));
    C(lsetxattr("sx", "user.a", "v", 1, 0));
    C(setxattr("x", "user.a", "v2", 2, XATTR_CREATE));
    C(setxattr("x", "user.b", "v2", 2, XATTR_REPLACE));
    C(setxattr("x", "user.b", "bee", 3, XATTR_CREATE));
    C(setxattr("x", "user.c", "", 0, 0));
    C(getxattr("x", "user.c", buf, sizeof buf));
    C(setxattr("x", "user.a", "v", 1, 4));
    C(setxattr("x", "user.a", "v", 1, XATTR_CREATE | XATTR_REPLACE));
    C(setxattr("x", "bogus.a", "v", 1, 0));
    C(setxattr("x", "user.", "v", 1, 0));
    C(setxattr("x", "", "v", 1, 0));
    char big[300];
    memset(big, 'n', sizeof big);
    memcpy(big, "user.", 5);
    big[299] = 0;
    C(setxattr("x", big, "v", 1, 0));
    C(getxattr("x", big, buf, sizeof buf));
    static char huge[70000];
    C(setxattr("x", "user.huge", huge, sizeof huge, 0));
    C(setxattr("nx", "user.a", "v", 1, 0));
    C(setxattr("x", "user.a", badptr, 1, 0));
    C(setxattr("x", badptr, "v", 1, 0));
    C(setxattr(badptr, "user.a", "v", 1, 0));
    C(getxattr("x", "user.a", badptr, 10));
    C(listxattr("x", NULL, 0));
    memset(buf, 0, sizeof buf);
    long n = listxattr("x", buf, sizeof buf);
    C(n);
    for (long i = 0; i < n; i += strlen(buf + i) + 1)
        if (!strncmp(buf + i, "user.", 5))
            note("  name %s", buf + i);
    C(listxattr("x", buf, 3));
    C(listxattr("nx", buf, sizeof buf));
    C(llistxattr("sx", buf, sizeof buf));
    C(removexattr("x", "user.b"));
    C(removexattr("x", "user.b"));
    C(removexattr("x", "bogus.b"));
    C(lremovexattr("sx", "user.a"));
    C(removexattr("sx", "user.c"));
    int fd = open("x", O_RDWR);
    C(fsetxattr(fd, "user.f", "fv", 2, 0));
    memset(buf, 0, sizeof buf);
    C(fgetxattr(fd, "user.f", buf, sizeof buf));
    note("  value '%s'", buf);
    C(flistxattr(fd, NULL, 0));
    C(fremovexattr(fd, "user.f"));
    C(fgetxattr(fd, "user.f", buf, sizeof buf));
    C(fgetxattr(-1, "user.f", buf, sizeof buf));
    close(fd);
    fd = open("x", O_PATH);
    C(fgetxattr(fd, "user.a", buf, sizeof buf));
    C(fsetxattr(fd, "user.a", "v", 1, 0));
    close(fd);
    C(setxattr("d", "user.dir", "dv", 2, 0));
    C(getxattr("d", "user.dir", buf, sizeof buf));
    C(removexattr("d", "user.dir"));
    int p[2];
    C(pipe(p));
    C(fsetxattr(p[0], "user.p", "v", 1, 0));
    close(p[0]);
    close(p[1]);
    unlink("sx");
    unlink("x");
}

static void times(void) {
    section("utimensat utimes");
    put("u", "times");
    C(symlink("u", "su"));
    struct timespec ts[2] = {{1000, 500}, {2000, 600}};
    C(utimensat(AT_FDCWD, "u", ts, 0));
    show_times("u");
    struct timespec om[2] = {{0, UTIME_OMIT}, {3000, 7}};
    C(utimensat(AT_FDCWD, "u", om, 0));
    show_times("u");
    struct timespec nw[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    C(utimensat(AT_FDCWD, "u", nw, 0));
    struct stat st;
    lstat("u", &st);
    note("  atime recent %d mtime %lld", recent(st.st_atim), (long long)st.st_mtim.tv_sec);
    C(utimensat(AT_FDCWD, "u", NULL, 0));
    lstat("u", &st);
    note("  atime recent %d mtime recent %d", recent(st.st_atim), recent(st.st_mtim));
    struct timespec bad[2] = {{1, 1000000000}, {1, 0}};
    C(utimensat(AT_FDCWD, "u", bad, 0));
    struct timespec neg[2] = {{1, -1}, {1, 0}};
    C(utimensat(AT_FDCWD, "u", neg, 0));
    C(utimensat(AT_FDCWD, "nx", ts, 0));
    C(utimensat(AT_FDCWD, "u/", ts, 0));
    C(utimensat(AT_FDCWD, "u", ts, 0x8000));
    C(utimensat(AT_FDCWD, "u", badptr, 0));
    C(utimensat(AT_FDCWD, badptr, ts, 0));
    C(utimensat(AT_FDCWD, "", ts, 0));
    C(syscall(SYS_utimensat, AT_FDCWD, NULL, ts, 0));
    struct timespec lt[2] = {{4000, 0}, {5000, 0}};
    C(utimensat(AT_FDCWD, "su", lt, AT_SYMLINK_NOFOLLOW));
    show_times("su");
    lstat("u", &st);
    note("  target untouched %d", st.st_mtim.tv_sec != 5000);
    int fd = open("u", O_RDONLY);
    struct timespec ft[2] = {{6000, 1}, {7000, 2}};
    C(syscall(SYS_utimensat, fd, NULL, ft, 0));
    show_times("u");
    C(syscall(SYS_utimensat, fd, NULL, ft, AT_SYMLINK_NOFOLLOW));
    C(utimensat(fd, "", ts, AT_EMPTY_PATH));
    show_times("u");
    C(futimens(fd, ft));
    show_times("u");
    C(futimens(-1, ft));
    close(fd);
    struct timeval tv[2] = {{8000, 3}, {9000, 4}};
    C(utimes("u", tv));
    show_times("u");
    struct timeval tvbad[2] = {{1, 1000000}, {1, 0}};
    C(utimes("u", tvbad));
    C(utimes("nx", tv));
    C(syscall(SYS_futimesat, AT_FDCWD, "u", tv));
    C(syscall(SYS_futimesat, -1, "u", tv));
    struct utimbuf ub = {10000, 11000};
    C(utime("u", &ub));
    show_times("u");
    C(utime("u", NULL));
    lstat("u", &st);
    note("  atime recent %d mtime recent %d", recent(st.st_atim), recent(st.st_mtim));
    C(utime("nx", &ub));
    unlink("su");
    unlink("u");
}

static void locks(void) {
    section("fcntl locks flock");
    put("l", "0123456789");
    int rw = open("l", O_RDWR), ro = open("l", O_RDONLY), wo = open("l", O_WRONLY);
    int rw2 = open("l", O_RDWR);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 5};
    C(fcntl(rw, F_SETLK, &fl));
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    C(fcntl(rw2, F_GETLK, &q));
    note("  getlk type %d", q.l_type);
    C(fcntl(ro, F_SETLK, &fl));
    fl.l_type = F_RDLCK;
    C(fcntl(wo, F_SETLK, &fl));
    C(fcntl(ro, F_SETLK, &fl));
    fl.l_type = 7;
    C(fcntl(rw, F_SETLK, &fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = 9;
    C(fcntl(rw, F_SETLK, &fl));
    fl.l_whence = SEEK_SET;
    fl.l_start = -10;
    C(fcntl(rw, F_SETLK, &fl));
    fl.l_start = 0;
    C(fcntl(rw, F_SETLK, badptr));
    C(fcntl(rw, F_GETLK, badptr));
    C(fcntl(rw, F_SETLKW, &fl));
    fl.l_type = F_UNLCK;
    C(fcntl(rw, F_SETLK, &fl));

    struct flock o = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 2, .l_len = 3};
    C(fcntl(rw, F_OFD_SETLK, &o));
    C(fcntl(rw2, F_OFD_SETLK, &o));
    struct flock oq = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    C(fcntl(rw2, F_OFD_GETLK, &oq));
    note("  ofd getlk type %d start %lld len %lld pid %d", oq.l_type, (long long)oq.l_start,
         (long long)oq.l_len, oq.l_pid);
    oq.l_type = F_RDLCK;
    oq.l_start = 6;
    C(fcntl(rw2, F_OFD_GETLK, &oq));
    note("  ofd getlk type %d", oq.l_type);
    o.l_pid = 1;
    C(fcntl(rw2, F_OFD_SETLK, &o));
    o.l_pid = 0;
    o.l_start = 6;
    C(fcntl(rw2, F_OFD_SETLKW, &o));
    o.l_type = F_UNLCK;
    o.l_start = 2;
    C(fcntl(rw, F_OFD_SETLK, &o));
    o.l_type = F_WRLCK;
    C(fcntl(rw2, F_OFD_SETLK, &o));
    C(fcntl(rw, F_OFD_GETLK, &oq));
    C(fcntl(-1, F_OFD_GETLK, &oq));

    C(flock(rw, LOCK_EX));
    C(flock(rw2, LOCK_EX | LOCK_NB));
    C(flock(rw2, LOCK_SH | LOCK_NB));
    C(flock(rw, LOCK_SH));
    C(flock(rw2, LOCK_SH | LOCK_NB));
    C(flock(rw, LOCK_UN));
    C(flock(rw2, LOCK_UN));
    C(flock(ro, LOCK_EX | LOCK_NB));
    C(flock(rw, 0));
    C(flock(rw, 64));
    C(flock(-1, LOCK_EX));
    close(rw);
    close(ro);
    close(wo);
    close(rw2);
    unlink("l");
}

static void close_range_calls(void) {
    section("close_range");
    int fd = open("f", O_RDONLY);
    C(dup2(fd, 100));
    C(dup2(fd, 101));
    C(dup2(fd, 102));
    C(dup2(fd, 103));
    close(fd);
    C(syscall(SYS_close_range, 100, 101, 0));
    C(fcntl(100, F_GETFD));
    C(fcntl(101, F_GETFD));
    C(fcntl(102, F_GETFD));
    C(syscall(SYS_close_range, 102, 100, 0));
    C(syscall(SYS_close_range, 102, 102, 0x80));
    C(syscall(SYS_close_range, 102, 103, CLOSE_RANGE_CLOEXEC));
    C(fcntl(102, F_GETFD));
    C(fcntl(103, F_GETFD));
    C(syscall(SYS_close_range, 103, 103, CLOSE_RANGE_UNSHARE));
    C(fcntl(103, F_GETFD));
    C(syscall(SYS_close_range, 102, ~0U, 0));
    C(fcntl(102, F_GETFD));
    C(syscall(SYS_close_range, 3000, ~0U, 0));
}

static void mknods(void) {
    section("mknod");
    C(mknod("fifo", S_IFIFO | 0644, 0));
    show("fifo");
    C(mknod("fifo", S_IFIFO | 0644, 0));
    C(mknod("reg", S_IFREG | 0600, 0));
    show("reg");
    C(mknod("zero", 0600, 0));
    show("zero");
    C(mknod("sock", S_IFSOCK | 0600, 0));
    show("sock");
    C(mknod("dir", S_IFDIR | 0755, 0));
    C(mknod("bad", 0170000 | 0755, 0));
    C(mknod("nx/fifo", S_IFIFO | 0644, 0));
    C(mknod("fifo2/", S_IFIFO | 0644, 0));
    C(mknod(longname, S_IFIFO | 0644, 0));
    C(syscall(SYS_mknod, badptr, S_IFIFO | 0644, 0));
    int dfd = open("d", O_RDONLY | O_DIRECTORY);
    C(mknodat(dfd, "fifo", S_IFIFO | 0600, 0));
    show("d/fifo");
    C(mkfifoat(dfd, "fifo", 0600));
    close(dfd);
    C(umask(077));
    C(mkfifo("masked", 0666));
    show("masked");
    C(umask(022));
    F(open("fifo", O_RDONLY | O_NONBLOCK));
    F(open("fifo", O_WRONLY | O_NONBLOCK));
    int r = open("fifo", O_RDONLY | O_NONBLOCK);
    F(open("fifo", O_WRONLY | O_NONBLOCK));
    close(r);
    F(open("sock", O_RDONLY));
    unlink("fifo");
    unlink("reg");
    unlink("zero");
    unlink("sock");
    unlink("masked");
    unlink("d/fifo");
}

static void stats(void) {
    section("stat statx access");
    struct stat st;
    put("s", "stat");
    C(symlink("s", "ss"));
    C(stat("nx", &st));
    C(stat("s/", &st));
    C(stat("", &st));
    C(stat("s", badptr));
    C(stat(badptr, &st));
    C(stat(longname, &st));
    C(stat(longpath, &st));
    C(lstat("ss", &st) == 0 ? (long)st.st_size : -1);
    C(stat("ss", &st) == 0 ? (long)st.st_size : -1);
    C(lstat("ss/", &st));
    int fd = open("s", O_RDONLY);
    C(fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 ? (long)st.st_size : -1);
    C(fstatat(fd, "", &st, 0));
    C(fstatat(fd, "x", &st, 0));
    C(fstatat(AT_FDCWD, "s", &st, 0x8000));
    C(fstatat(AT_FDCWD, "", &st, AT_EMPTY_PATH) == 0 ? (long)((st.st_mode & S_IFMT) == S_IFDIR) : -1);
    C(fstat(-1, &st));
    C(fstat(fd, badptr));
    struct statx sx;
    C(statx(AT_FDCWD, "s", 0, STATX_BASIC_STATS, &sx));
    note("  statx size %llu mode %o nlink %u", (unsigned long long)sx.stx_size, sx.stx_mode,
         sx.stx_nlink);
    C(statx(AT_FDCWD, "ss", AT_SYMLINK_NOFOLLOW, STATX_TYPE, &sx));
    note("  statx type %s", ftype(sx.stx_mode));
    C(statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &sx));
    note("  statx size %llu", (unsigned long long)sx.stx_size);
    C(statx(AT_FDCWD, "s", 0x8000, STATX_BASIC_STATS, &sx));
    C(statx(AT_FDCWD, "s", AT_STATX_FORCE_SYNC | AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &sx));
    C(statx(AT_FDCWD, "s", 0, 0x80000000U, &sx));
    C(statx(AT_FDCWD, "nx", 0, STATX_BASIC_STATS, &sx));
    C(statx(AT_FDCWD, "s", 0, STATX_BASIC_STATS, badptr));
    C(statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &sx));
    close(fd);
    C(access("s", F_OK));
    C(access("s", R_OK | W_OK));
    C(access("s", X_OK));
    C(chmod("s", 0100));
    C(access("s", X_OK));
    C(access("s", R_OK));
    C(chmod("s", 0644));
    C(access("d", X_OK));
    C(access("nx", F_OK));
    C(access("s/", F_OK));
    C(access("s", 8));
    C(access("", F_OK));
    C(access(badptr, F_OK));
    C(syscall(SYS_faccessat2, AT_FDCWD, "ss", R_OK, AT_SYMLINK_NOFOLLOW));
    C(syscall(SYS_faccessat2, AT_FDCWD, "s", R_OK, AT_EACCESS));
    C(syscall(SYS_faccessat2, AT_FDCWD, "s", R_OK, 0x8000));
    C(syscall(SYS_faccessat, AT_FDCWD, "s", R_OK));
    C(syscall(SYS_faccessat, -1, "s", R_OK));
    unlink("ss");
    unlink("s");
}

static void dirents(void) {
    section("getdents64");
    enum { N = 5000 };
    C(mkdir("big", 0755));
    int created = 0;
    for (int i = 0; i < N; i++) {
        char p[64];
        snprintf(p, sizeof p, "big/entry-%05d", i);
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) {
            created++;
            close(fd);
        }
    }
    note("  created %d", created);
    C(rmdir("big"));
    int fd = open("big", O_RDONLY | O_DIRECTORY);
    static unsigned char seen[N];
    static char buf[32768];
    int dots = 0, entries = 0, dups = 0, calls = 0;
    long long mid_off = -1;
    int before_mid = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) {
            C(n);
            break;
        }
        calls++;
        for (long o = 0; o < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + o);
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
                dots++;
                if (e->d_type != DT_DIR)
                    note("  bad d_type for %s", e->d_name);
            } else {
                int i = atoi(e->d_name + 6);
                if (strncmp(e->d_name, "entry-", 6) || i < 0 || i >= N || e->d_type != DT_REG) {
                    note("  unexpected entry %s", e->d_name);
                } else if (seen[i]++) {
                    dups++;
                }
            }
            entries++;
            if (entries == N / 2) {
                mid_off = e->d_off;
                before_mid = entries;
            }
            o += e->d_reclen;
        }
    }
    int missing = 0;
    for (int i = 0; i < N; i++)
        missing += !seen[i];
    note("  entries %d dots %d duplicates %d missing %d several calls %d", entries, dots, dups,
         missing, calls > 1);
    /* Seek back to a remembered position and read the rest. */
    C(lseek(fd, mid_off, SEEK_SET) == mid_off);
    int rest = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long o = 0; o < n; o += ((struct dirent64 *)(buf + o))->d_reclen)
            rest++;
    }
    note("  after seek: %d entries, total %d", rest, rest + before_mid);
    C(lseek(fd, 0, SEEK_SET));
    long n = syscall(SYS_getdents64, fd, buf, 40);
    C(n > 0 && n <= 40);
    C(syscall(SYS_getdents64, fd, buf, 1));
    C(syscall(SYS_getdents64, fd, badptr, sizeof buf));
    C(syscall(SYS_getdents64, -1, buf, sizeof buf));
    int ffd = open("f", O_RDONLY);
    C(syscall(SYS_getdents64, ffd, buf, sizeof buf));
    close(ffd);
    close(fd);
    /* A directory read through readdir(3), after unlinking half of it while open. */
    DIR *d = opendir("big");
    int removed = 0;
    for (int i = 0; i < N; i += 2) {
        char p[64];
        snprintf(p, sizeof p, "big/entry-%05d", i);
        removed += unlink(p) == 0;
    }
    int after = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        after++;
    if (d)
        closedir(d);
    note("  removed %d, readdir after %d", removed, after);
    for (int i = 1; i < N; i += 2) {
        char p[64];
        snprintf(p, sizeof p, "big/entry-%05d", i);
        unlink(p);
    }
    C(rmdir("big"));
}

static void inotify(void) {
    section("inotify");
    char buf[4096] __attribute__((aligned(8)));
    int in;
    C(mkdir("w", 0755));
    put("wfile", "w");
    FD(in, inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    C(fcntl(in, F_GETFD));
    F(inotify_init1(0x4));
    F(syscall(SYS_inotify_init));
    C(inotify_add_watch(in, "w", IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE));
    C(inotify_add_watch(in, "w", IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE));
    C(inotify_add_watch(in, "wfile", IN_ATTRIB));
    C(inotify_add_watch(in, "nx", IN_ALL_EVENTS));
    C(inotify_add_watch(in, "w", 0));
    C(inotify_add_watch(in, "wfile", IN_ALL_EVENTS | IN_ONLYDIR));
    C(inotify_add_watch(in, "", IN_ALL_EVENTS));
    C(inotify_add_watch(in, badptr, IN_ALL_EVENTS));
    C(inotify_add_watch(in, "w", IN_MASK_ADD | IN_MASK_CREATE | IN_CREATE));
    C(inotify_add_watch(in, "w", IN_MASK_CREATE | IN_CREATE));
    int plain = open("f", O_RDONLY);
    C(inotify_add_watch(plain, "w", IN_CREATE));
    C(inotify_add_watch(-1, "w", IN_CREATE));
    C(inotify_add_watch(in, "toolong-then-some", IN_CREATE) < 0 ? -1 : 0);
    C(read(in, buf, sizeof buf));
    struct pollfd pf = {.fd = in, .events = POLLIN};
    C(poll(&pf, 1, 0));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 42}, got;
    C(epoll_ctl(ep, EPOLL_CTL_ADD, in, &ev));
    C(epoll_wait(ep, &got, 1, 0));
    put("w/one", "1");
    C(rename("w/one", "w/two"));
    C(unlink("w/two"));
    C(mkdir("w/sub", 0755));
    C(chmod("wfile", 0600));
    C(poll(&pf, 1, 1000));
    note("  revents %x", pf.revents);
    C(epoll_wait(ep, &got, 1, 1000));
    note("  epoll data %u", got.data.u32);
    int avail = 0;
    C(ioctl(in, FIONREAD, &avail) == 0 && avail > 0);
    C(read(in, buf, 1));
    long n = read(in, buf, sizeof buf);
    C(n > 0);
    uint32_t cookie_from = 0;
    for (long o = 0; o < n;) {
        struct inotify_event *e = (struct inotify_event *)(buf + o);
        int cookie_ok = e->mask & (IN_MOVED_FROM | IN_MOVED_TO) ? e->cookie != 0 : e->cookie == 0;
        if (e->mask & IN_MOVED_FROM)
            cookie_from = e->cookie;
        if (e->mask & IN_MOVED_TO)
            cookie_ok = cookie_ok && e->cookie == cookie_from;
        note("  event wd %d mask %08x cookie ok %d name '%s'", e->wd, e->mask, cookie_ok,
             e->len ? e->name : "");
        o += sizeof *e + e->len;
    }
    C(read(in, buf, sizeof buf));
    C(inotify_rm_watch(in, 1));
    C(inotify_rm_watch(in, 1));
    C(inotify_rm_watch(in, 99));
    C(inotify_rm_watch(plain, 1));
    n = read(in, buf, sizeof buf);
    C(n);
    for (long o = 0; o < n;) {
        struct inotify_event *e = (struct inotify_event *)(buf + o);
        note("  event wd %d mask %08x", e->wd, e->mask);
        o += sizeof *e + e->len;
    }
    C(symlink("w", "wlink"));
    C(inotify_add_watch(in, "wlink", IN_CREATE));
    C(inotify_add_watch(in, "wlink", IN_CREATE | IN_DONT_FOLLOW));
    put("w/three", "3");
    n = read(in, buf, sizeof buf);
    C(n);
    for (long o = 0; o < n;) {
        struct inotify_event *e = (struct inotify_event *)(buf + o);
        note("  event wd %d mask %08x name '%s'", e->wd, e->mask, e->len ? e->name : "");
        o += sizeof *e + e->len;
    }
    char link[64], proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", in);
    memset(link, 0, sizeof link);
    C(readlink(proc, link, sizeof link - 1));
    note("  link %s", link);
    close(ep);
    close(plain);
    close(in);
    unlink("wlink");
    rmtree("w");
    unlink("wfile");
}

static void misc(void) {
    section("misc");
    char cwd[4096];
    C(chdir("f"));
    C(chdir("nx"));
    C(chdir("d"));
    C(getcwd(cwd, sizeof cwd) != NULL);
    C(chdir(".."));
    C(getcwd(cwd, 1) != NULL);
    int dfd = open("d", O_RDONLY | O_DIRECTORY), ffd = open("f", O_RDONLY);
    C(fchdir(ffd));
    C(fchdir(-1));
    C(fchdir(dfd));
    C(chdir(".."));
    close(dfd);
    close(ffd);
    C(syscall(SYS_sync));
}

int main(int argc, char **argv) {
    const char *scratch = argc > 1 ? argv[1] : "fsc";
    memset(longname, 'n', 256);
    longname[256] = 0;
    for (int i = 0; i < (int)sizeof longpath - 1; i++)
        longpath[i] = i % 2 ? '/' : 'p';
    longpath[sizeof longpath - 1] = 0;
    rmtree(scratch);
    umask(022);
    if (mkdir(scratch, 0755) != 0 || chdir(scratch) != 0) {
        perror("scratch");
        return 1;
    }
    mkdir_rmdir_unlink();
    open_flags();
    rename_calls();
    links();
    modes_owners();
    sizes();
    xattrs();
    times();
    locks();
    close_range_calls();
    mknods();
    stats();
    dirents();
    inotify();
    misc();
    if (chdir("..") == 0)
        rmtree(scratch);
    printf("checks %d\n", checks);
    return 0;
}
