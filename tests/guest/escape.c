/* escape: a hostile guest that tries to read a host file outside its root.
 *
 * Usage: escape HOST_SECRET_PATH
 *   HOST_SECRET_PATH is an absolute host path outside the sandbox root.
 *   The test also places symlinks in the root: /link_abs -> HOST_SECRET_PATH,
 *   /link_dir -> dirname(HOST_SECRET_PATH), /link_rel -> ../../../../..HOST_SECRET_PATH.
 *   The current directory must be the root (natively: the rootfs directory),
 *   which must contain tmp/.
 *
 * Every attempt prints one line, "READ <how>: <first bytes>" when it could
 * read something and "DENIED <how>: <error>" otherwise; the test asserts the
 * secret's contents never appear under torpor. Directory listings print
 * "LS <label>: <name>" so the test can check that "/.." lists "/".
 * Run natively (unconfined), the same program does read the secret: that
 * proves the probes are real.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void try_read_at(int dirfd, const char *path, const char *how) {
    int fd = openat(dirfd, path, O_RDONLY);
    if (fd < 0) {
        printf("DENIED %s (%s): %s\n", how, path, strerror(errno));
        return;
    }
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) {
        printf("DENIED %s (%s): read: %s\n", how, path, strerror(errno));
        return;
    }
    buf[n] = 0;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n')
            buf[i] = ' ';
    printf("READ %s (%s): %s\n", how, path, buf);
}

static void try_read(const char *path, const char *how) { try_read_at(AT_FDCWD, path, how); }

static void list(const char *path, const char *label) {
    DIR *d = opendir(path);
    if (!d) {
        printf("LSERR %s: %s\n", label, strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            printf("LS %s: %s\n", label, e->d_name);
    closedir(d);
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] != '/') {
        fprintf(stderr, "usage: escape /ABSOLUTE/HOST/SECRET\n");
        return 2;
    }
    const char *secret = argv[1];
    const char *base = strrchr(secret, '/') + 1;
    char p[PATH_MAX];

    /* 1. The absolute host path as such, and with leading "/.." runs. */
    try_read(secret, "absolute");
    snprintf(p, sizeof p, "/../../../..%s", secret);
    try_read(p, "dotdot-absolute");
    /* 2. Relative "../" runs from the current directory. */
    snprintf(p, sizeof p, "../../../../../../../../..%s", secret);
    try_read(p, "dotdot-relative");
    try_read("../../../../../../../../etc/hostname", "dotdot-hostname");
    try_read("/../../../../etc/hostname", "dotdot-abs-hostname");
    /* 3. Symlinks planted in the root by the test. */
    try_read("/link_abs", "symlink-absolute");
    try_read("/link_rel", "symlink-relative");
    snprintf(p, sizeof p, "/link_dir/%s", base);
    try_read(p, "symlink-dir");
    /* 4. Symlinks the guest makes itself (may be unsupported: that is fine). */
    unlink("tmp/mylink");
    if (symlink(secret, "tmp/mylink") == 0)
        try_read("tmp/mylink", "guest-symlink");
    else
        printf("DENIED guest-symlink: %s\n", strerror(errno));
    /* 5. chdir("..") many times, then relative and absolute opens. */
    for (int i = 0; i < 64; i++)
        if (chdir("..") != 0)
            break;
    if (getcwd(p, sizeof p))
        printf("CWD after chdir(..) x64: %s\n", p);
    snprintf(p, sizeof p, ".%s", secret);
    try_read(p, "chdir-relative");
    /* 6. openat relative to a directory fd of "/" walking up. */
    int root = open("/", O_RDONLY | O_DIRECTORY);
    if (root >= 0) {
        snprintf(p, sizeof p, "../../..%s", secret);
        try_read_at(root, p, "openat-rootfd");
        int up = openat(root, "..", O_RDONLY | O_DIRECTORY);
        if (up >= 0) {
            snprintf(p, sizeof p, "..%s", secret);
            try_read_at(up, p, "openat-upfd");
            close(up);
        }
        close(root);
    }
    /* 7. /proc tricks. */
    snprintf(p, sizeof p, "/proc/self/root%s", secret);
    try_read(p, "proc-self-root");
    snprintf(p, sizeof p, "/proc/1/root%s", secret);
    try_read(p, "proc-1-root");
    snprintf(p, sizeof p, "/proc/self/cwd/../../..%s", secret);
    try_read(p, "proc-self-cwd");
    /* 8. What "/" and "/.." list. */
    list("/", "/");
    list("/..", "/..");
    list("/../../..", "/../../..");
    printf("escape: done\n");
    return 0;
}
