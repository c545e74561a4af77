/* Linux's permission rules between users, run natively (in a chroot of the same root, with
 * a /proc of its own) and in torpor, whose outputs must be the same
 * (crates/torpor/tests/permissions.rs sets up the files' owners and modes).
 *
 * Started as root, it forks a root process to be the target of signals and /proc reads,
 * then acts as user nobody (65534, its saved uid still 0) and as a second user (1000), as a
 * setuid-root program with and without no_new_privs, and as a root without
 * CAP_DAC_OVERRIDE, printing one line per attempt: its name and "ok" or the errno's name.
 *
 *   permissions           the whole run
 *   permissions ids       prints its ids (the setuid helper's mode)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *errname(int e) {
    switch (e) {
    case 0: return "ok";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ESRCH: return "ESRCH";
    case EINVAL: return "EINVAL";
    case EROFS: return "EROFS";
    case ENOTDIR: return "ENOTDIR";
    case EXDEV: return "EXDEV";
    default: return "other";
    }
}

/* Prints `name: ok` for a result >= 0, else the errno's name. */
static void report(const char *name, long r) {
    printf("%s: %s\n", name, errname(r >= 0 ? 0 : errno));
}

static long open_close(const char *path, int flags) {
    int fd = open(path, flags, 0644);
    if (fd >= 0)
        close(fd);
    return fd;
}

static long list_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return -1;
    closedir(d);
    return 0;
}

static long stat_of(const char *path) {
    struct stat st;
    return stat(path, &st);
}

/* A datagram socket at PATH, for which sending needs write permission on the socket file. */
static struct sockaddr_un unix_addr(const char *path) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    return a;
}

static long send_to(const char *path) {
    struct sockaddr_un a = unix_addr(path);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (s < 0)
        return -1;
    long r = sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    close(s);
    errno = e;
    return r;
}

static int caps(int get, unsigned eff, unsigned perm) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (get)
        return syscall(SYS_capget, &h, d) == 0 ? (int)d[0].effective : -1;
    d[0].effective = eff;
    d[0].permitted = perm;
    return syscall(SYS_capset, &h, d);
}

static void as_unprivileged(pid_t root_child, const char *who) {
    char proc[64];
    printf("-- %s uid=%d euid=%d\n", who, getuid(), geteuid());
    report("append /etc/passwd", open_close("/etc/passwd", O_WRONLY | O_APPEND));
    report("read /etc/passwd", open_close("/etc/passwd", O_RDONLY));
    report("read /etc/shadow", open_close("/etc/shadow", O_RDONLY));
    report("list /root", list_dir("/root"));
    report("stat /root/secret", stat_of("/root/secret"));
    report("create /usr/bin/evil", open_close("/usr/bin/evil", O_WRONLY | O_CREAT | O_EXCL));
    report("mkdir /usr/evil", mkdir("/usr/evil", 0755));
    report("unlink /tmp/rootfile", unlink("/tmp/rootfile"));
    report("rename /etc/passwd", rename("/etc/passwd", "/tmp/passwd"));
    report("chmod /etc/passwd", chmod("/etc/passwd", 0666));
    report("truncate /etc/passwd", truncate("/etc/passwd", 0));
    report("utimes now /etc/passwd", utimes("/etc/passwd", NULL));
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    report("utimes set /etc/passwd", utimes("/etc/passwd", tv));
    report("noatime /etc/passwd", open_close("/etc/passwd", O_RDONLY | O_NOATIME));
    report("access R /etc/shadow", access("/etc/shadow", R_OK));
    report("access W /etc/passwd", access("/etc/passwd", W_OK));
    report("access R /etc/passwd", access("/etc/passwd", R_OK));
    report("chdir /root", chdir("/root"));
    report("chroot /tmp", chroot("/tmp"));
    report("read pid_max", open_close("/proc/sys/kernel/pid_max", O_RDONLY));
    report("write pipe-max-size", open_close("/proc/sys/fs/pipe-max-size", O_WRONLY));
    report("sendto root's 0600 socket", send_to("/tmp/root.sock"));
    report("kill root 0", kill(root_child, 0));
    report("kill root TERM", kill(root_child, SIGTERM));
    snprintf(proc, sizeof proc, "/proc/%d/environ", root_child);
    report("read root environ", open_close(proc, O_RDONLY));
    report("read own environ", open_close("/proc/self/environ", O_RDONLY));
    snprintf(proc, sizeof proc, "/proc/%d/fd", root_child);
    report("list root fds", list_dir(proc));
    report("list own fds", list_dir("/proc/self/fd"));
    /* Its own files in /tmp, and a set-group-ID directory's group. */
    char mine[64];
    snprintf(mine, sizeof mine, "/tmp/own-%d", getuid());
    report("create own", open_close(mine, O_WRONLY | O_CREAT | O_EXCL));
    report("chmod own", chmod(mine, 0600));
    struct stat st;
    if (stat(mine, &st) == 0)
        printf("own owner: %d:%d mode %o\n", st.st_uid, st.st_gid, st.st_mode & 07777);
    report("chown own to root", chown(mine, 0, 0));
    report("unlink own", unlink(mine));
    snprintf(mine, sizeof mine, "/tmp/sgid/f-%d", getuid());
    report("create in sgid dir", open_close(mine, O_WRONLY | O_CREAT | O_EXCL));
    if (stat(mine, &st) == 0)
        printf("sgid dir file group: %d\n", st.st_gid);
    snprintf(mine, sizeof mine, "/tmp/sgid/d-%d", getuid());
    report("mkdir in sgid dir", mkdir(mine, 0755));
    if (stat(mine, &st) == 0)
        printf("sgid dir subdir group: %d mode %o\n", st.st_gid, st.st_mode & 07777);
    report("access X root-only", access("/bin/rootonly", X_OK));
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rootonly", "rootonly", "ids", (char *)NULL);
        printf("exec root-only: %s\n", errname(errno));
        _exit(0);
    }
    waitpid(p, NULL, 0);
}

/* Runs the setuid-root copy of this program (`ids` mode) and waits for it. */
static void run_setuid(int no_new_privs) {
    pid_t p = fork();
    if (p == 0) {
        if (no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
            _exit(3);
        execl("/bin/suid", "suid", "ids", (char *)NULL);
        printf("exec suid: %s\n", errname(errno));
        _exit(2);
    }
    int status;
    waitpid(p, &status, 0);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "ids") == 0) {
        uid_t r, e, s;
        getresuid(&r, &e, &s);
        printf("setuid program: uid=%d euid=%d suid=%d\n", r, e, s);
        report("setuid program reads /etc/shadow", open_close("/etc/shadow", O_RDONLY));
        return 0;
    }
    /* Root's datagram socket, mode 0600. */
    struct sockaddr_un sa = unix_addr("/tmp/root.sock");
    unlink(sa.sun_path);
    int rs = socket(AF_UNIX, SOCK_DGRAM, 0);
    report("bind root socket", bind(rs, (struct sockaddr *)&sa, sizeof sa));
    report("chmod root socket", chmod(sa.sun_path, 0600));
    report("root sends to its socket", send_to(sa.sun_path));
    pid_t root_child = fork();
    if (root_child == 0) {
        for (;;)
            pause();
    }
    /* A root whose effective set lacks CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH is held to
     * modes; raised again, it is not. */
    pid_t p = fork();
    if (p == 0) {
        int eff = caps(1, 0, 0);
        unsigned drop = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        syscall(SYS_capget, &h, d);
        d[0].effective = (unsigned)eff & ~drop;
        report("capset drop DAC", syscall(SYS_capset, &h, d));
        report("root without DAC reads 0600 of 1000",
               open_close("/home/u1000/private", O_RDONLY));
        report("root without DAC lists 0700 of 1000", list_dir("/home/u1000"));
        report("root without DAC chowns", chown("/tmp/chownme", 0, 0));
        d[0].effective = (unsigned)eff;
        report("capset raise DAC", syscall(SYS_capset, &h, d));
        report("root reads 0600 of 1000", open_close("/home/u1000/private", O_RDONLY));
        _exit(0);
    }
    waitpid(p, NULL, 0);

    /* chroot: root moves into a directory of its root, whose outside it no longer sees. */
    p = fork();
    if (p == 0) {
        char cwd[256];
        report("chroot missing", chroot("/nonexistent"));
        report("chroot a file", chroot("/etc/passwd"));
        report("chdir /home", chdir("/home"));
        report("chroot /home", chroot("/home"));
        printf("cwd in chroot: %s\n", getcwd(cwd, sizeof cwd) ? cwd : errname(errno));
        report("chroot reads /u1000/private", open_close("/u1000/private", O_RDONLY));
        report("chroot reads /etc/passwd", open_close("/etc/passwd", O_RDONLY));
        report("chroot reads ../etc/passwd", open_close("../etc/passwd", O_RDONLY));
        _exit(0);
    }
    waitpid(p, NULL, 0);

    /* User 1000, for good. */
    p = fork();
    if (p == 0) {
        setgroups(0, NULL);
        setresgid(1000, 1000, 1000);
        report("setresuid 1000", setresuid(1000, 1000, 1000));
        as_unprivileged(root_child, "user 1000");
        report("1000 reads its own private file", open_close("/home/u1000/private", O_RDONLY));
        report("1000 unlinks its file in sticky /tmp", unlink("/tmp/userfile"));
        report("setuid back to 0", setuid(0));
        _exit(0);
    }
    waitpid(p, NULL, 0);

    /* nobody, its saved uid still 0. */
    setgroups(0, NULL);
    report("setresgid nobody", setresgid(65534, 65534, 65534));
    report("setresuid nobody keeping saved 0", setresuid(65534, 65534, 0));
    as_unprivileged(root_child, "nobody");
    report("nobody reads 1000's private file", open_close("/home/u1000/private", O_RDONLY));
    run_setuid(0);
    run_setuid(1);
    report("seteuid 0 from saved 0", seteuid(0));
    printf("euid now %d\n", geteuid());
    report("root kills root", kill(root_child, SIGKILL));
    waitpid(root_child, NULL, 0);
    return 0;
}
