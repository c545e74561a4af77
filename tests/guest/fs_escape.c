/* fs_escape: a hostile guest that tries to change a host directory outside its root through
 * every path call that creates, removes, renames or changes a file.
 *
 * Usage: fs_escape HOST_DIR
 *   HOST_DIR is an absolute host path outside the sandbox root holding a file `victim`.
 *   The test places symlinks in the root: /out_abs -> HOST_DIR, /out_file -> HOST_DIR/victim,
 *   /out_rel -> ../../../../../..HOST_DIR.
 *
 * Each attempt prints "<call> = <result>"; the test then checks that HOST_DIR and its victim
 * are exactly as they were (entries, contents, mode, owner, times, extended attributes). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define T(expr) do { errno = 0; long r_ = (long)(expr); \
    printf("%s = %ld %s\n", #expr, r_, r_ < 0 ? strerror(errno) : ""); fflush(stdout); } while (0)

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *host = argv[1];
    const char *bases[] = {"/out_abs", "/out_rel", "/out_abs/", "/tmp/../../../../.."};
    char p[4096], q[4096];
    struct timespec ts[2] = {{1, 0}, {1, 0}};
    for (unsigned i = 0; i < sizeof bases / sizeof *bases; i++) {
        const char *b = bases[i];
        /* The last base is `..`-only: HOST_DIR is appended. */
        const char *dir = i == 3 ? (snprintf(q, sizeof q, "%s%s", b, host), q) : b;
        char d[4096];
        snprintf(d, sizeof d, "%s", dir);
        snprintf(p, sizeof p, "%s/victim", d);
        T(chmod(p, 0777));
        T(chown(p, 4242, 4242));
        T(lchown(p, 4242, 4242));
        T(truncate(p, 0));
        T(utimensat(AT_FDCWD, p, ts, 0));
        T(setxattr(p, "user.pwned", "1", 1, 0));
        T(removexattr(p, "user.keep"));
        T(unlink(p));
        T(rename(p, "/tmp/stolen"));
        T(link(p, "/tmp/hardlink"));
        T(syscall(SYS_renameat2, AT_FDCWD, p, AT_FDCWD, "/tmp/swap", 2));
        int fd = open(p, O_WRONLY | O_TRUNC);
        T(fd);
        if (fd >= 0) {
            T(write(fd, "pwned", 5));
            close(fd);
        }
        char n[4096];
        snprintf(n, sizeof n, "%s/new-dir", d);
        T(mkdir(n, 0777));
        snprintf(n, sizeof n, "%s/new-link", d);
        T(symlink("/etc", n));
        snprintf(n, sizeof n, "%s/new-fifo", d);
        T(mknod(n, S_IFIFO | 0666, 0));
        snprintf(n, sizeof n, "%s/new-file", d);
        T(open(n, O_CREAT | O_WRONLY, 0666));
        T(link("/tmp/mine", n));
        T(rename("/tmp/mine", n));
        T(rmdir(d));
        int in = inotify_init1(0);
        T(inotify_add_watch(in, d, IN_ALL_EVENTS));
        close(in);
    }
    /* Through a dangling symlink: O_CREAT follows it, inside the root. */
    T(open("/out_file", O_CREAT | O_WRONLY, 0666));
    T(chdir("/out_rel"));
    T(rename("/tmp/mine", "victim"));
    T(chdir("/"));
    T(unlink("/out_abs"));
    printf("fs_escape: done\n");
    return 0;
}
