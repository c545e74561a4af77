/* namespaces: the namespace files of /proc and the calls that would make or enter a
 * namespace, one line each; the test compares the output with a native run.
 *
 * /proc/self/ns lists its links, which read as `uts:[N]` and lead to a file whose inode is N,
 * the same for every process and thread; a namespace descriptor answers nsfs's ioctls.
 * Then, without CAP_SYS_ADMIN (dropped as a container's root lacks it), setns, unshare and
 * clone with CLONE_NEW* flags fail as on Linux. (A new user namespace, which Linux lets
 * anyone make, is left out.)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define NSIO 0xb7
#define NS_GET_USERNS _IO(NSIO, 0x1)
#define NS_GET_PARENT _IO(NSIO, 0x2)
#define NS_GET_NSTYPE _IO(NSIO, 0x3)
#define NS_GET_OWNER_UID _IO(NSIO, 0x4)

static const char *err(long r) { return r == -1 ? strerrorname_np(errno) : "ok"; }

static const char *names[] = {"cgroup", "ipc", "mnt", "net", "pid", "pid_for_children",
                              "time", "time_for_children", "user", "uts"};

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The link `path`'s target, or the error. */
static const char *link_of(const char *path, char *buf, size_t len)
{
    ssize_t n = readlink(path, buf, len - 1);
    if (n < 0)
        return strerrorname_np(errno);
    buf[n] = 0;
    return buf;
}

static void listing(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        printf("opendir %s: %s\n", dir, strerrorname_np(errno));
        return;
    }
    char *found[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        if (e->d_name[0] == '.')
            continue;
        char *s;
        if (asprintf(&s, "%s%s", e->d_name, e->d_type == DT_LNK ? "@" : "?") < 0)
            exit(1);
        found[n++] = s;
    }
    closedir(d);
    qsort(found, n, sizeof *found, by_name);
    printf("%s:", dir);
    for (int i = 0; i < n; i++)
        printf(" %s", found[i]);
    printf("\n");
}

/* Whether /proc/self has an `ns` directory entry. */
static void has_ns_dir(void)
{
    DIR *d = opendir("/proc/self");
    struct dirent *e;
    int seen = 0;
    while (d && (e = readdir(d)))
        if (!strcmp(e->d_name, "ns"))
            seen = e->d_type == DT_DIR;
    if (d)
        closedir(d);
    printf("/proc/self lists ns as a directory: %d\n", seen);
}

static void each_link(void)
{
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[64], target[64], kind[32];
        unsigned long long ino = 0;
        snprintf(path, sizeof path, "/proc/self/ns/%s", names[i]);
        const char *t = link_of(path, target, sizeof target);
        int shape = sscanf(t, "%31[a-z]:[%llu]", kind, &ino) == 2;
        struct stat st, lst;
        int s = stat(path, &st), l = lstat(path, &lst);
        printf("%s -> %s, shape %d; stat %s reg %d mode %o ino matches %d; lstat %s link %d\n",
               names[i], shape ? kind : t, shape, err(s), S_ISREG(st.st_mode),
               st.st_mode & 07777, st.st_ino == ino, err(l), S_ISLNK(lst.st_mode));
    }
    printf("access /proc/self/ns/pid: %s\n", err(access("/proc/self/ns/pid", F_OK)));
    struct stat d;
    int r = stat("/proc/self/ns", &d);
    printf("stat /proc/self/ns: %s dir %d\n", err(r), S_ISDIR(d.st_mode));
}

/* A child's and a thread's links are the parent's. */
static void shared(void)
{
    char mine[64], theirs[64], path[64];
    link_of("/proc/self/ns/pid", mine, sizeof mine);
    int p[2];
    if (pipe(p))
        exit(1);
    pid_t c = fork();
    if (c == 0) {
        char got[64];
        link_of("/proc/self/ns/pid", got, sizeof got);
        if (write(p[1], got, strlen(got) + 1) < 0)
            _exit(1);
        pause();
        _exit(0);
    }
    char got[64] = {0};
    if (read(p[0], got, sizeof got) <= 0)
        exit(1);
    printf("child's pid namespace is the parent's: %d\n", !strcmp(got, mine));
    snprintf(path, sizeof path, "/proc/%d/ns/uts", c);
    link_of(path, theirs, sizeof theirs);
    link_of("/proc/self/ns/uts", mine, sizeof mine);
    printf("/proc/CHILD/ns/uts is the parent's: %d\n", !strcmp(theirs, mine));
    struct stat a, b;
    stat(path, &a);
    stat("/proc/self/ns/uts", &b);
    printf("their uts stat is the same inode: %d\n", a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    close(p[0]);
    close(p[1]);
    snprintf(path, sizeof path, "/proc/self/task/%d/ns/net", (int)gettid());
    link_of(path, theirs, sizeof theirs);
    link_of("/proc/self/ns/net", mine, sizeof mine);
    printf("/proc/self/task/TID/ns/net is the process's: %d\n", !strcmp(theirs, mine));
    link_of("/proc/thread-self/ns/net", theirs, sizeof theirs);
    printf("/proc/thread-self/ns/net is the process's: %d\n", !strcmp(theirs, mine));
}

static int open_ns(const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/ns/%s", name);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static void ioctls(void)
{
    int uts = open_ns("uts"), pid = open_ns("pid"), user = open_ns("user");
    printf("open uts, pid, user: %s %s %s\n", err(uts), err(pid), err(user));
    struct stat a, b;
    fstat(uts, &a);
    stat("/proc/self/ns/uts", &b);
    printf("fstat of a descriptor is its link's stat: %d\n", a.st_ino == b.st_ino);
    char fdlink[64], target[64], ns_target[64];
    snprintf(fdlink, sizeof fdlink, "/proc/self/fd/%d", uts);
    link_of(fdlink, target, sizeof target);
    link_of("/proc/self/ns/uts", ns_target, sizeof ns_target);
    printf("/proc/self/fd/N of it reads as the link: %d\n", !strcmp(target, ns_target));
    printf("open for writing: %s\n", err(open("/proc/self/ns/uts", O_RDWR)));

    long r = ioctl(uts, NS_GET_NSTYPE);
    printf("NS_GET_NSTYPE uts: %s is CLONE_NEWUTS %d\n", err(r), r == CLONE_NEWUTS);
    r = ioctl(pid, NS_GET_NSTYPE);
    printf("NS_GET_NSTYPE pid: %s is CLONE_NEWPID %d\n", err(r), r == CLONE_NEWPID);
    r = ioctl(user, NS_GET_NSTYPE);
    printf("NS_GET_NSTYPE user: %s is CLONE_NEWUSER %d\n", err(r), r == CLONE_NEWUSER);
    printf("NS_GET_PARENT uts: %s\n", err(ioctl(uts, NS_GET_PARENT)));
    printf("NS_GET_PARENT pid: %s\n", err(ioctl(pid, NS_GET_PARENT)));
    printf("NS_GET_PARENT user: %s\n", err(ioctl(user, NS_GET_PARENT)));
    printf("NS_GET_USERNS user: %s\n", err(ioctl(user, NS_GET_USERNS)));
    int owner = ioctl(uts, NS_GET_USERNS);
    struct stat o, u;
    fstat(owner, &o);
    fstat(user, &u);
    printf("NS_GET_USERNS uts: %s, the user namespace %d, cloexec %d\n", err(owner),
           o.st_ino == u.st_ino, owner >= 0 && (fcntl(owner, F_GETFD) & FD_CLOEXEC) != 0);
    close(owner);
    uid_t uid = 77;
    r = ioctl(user, NS_GET_OWNER_UID, &uid);
    printf("NS_GET_OWNER_UID user: %s uid %u\n", err(r), uid);
    printf("NS_GET_OWNER_UID uts: %s\n", err(ioctl(uts, NS_GET_OWNER_UID, &uid)));
    struct termios tio;
    printf("TCGETS on it: %s\n", err(ioctl(uts, TCGETS, &tio)));
    printf("FIONCLEX on it: %s\n", err(ioctl(uts, FIONCLEX)));
    close(uts);
    close(pid);
    close(user);
}

/* Drops CAP_SYS_ADMIN from the effective and permitted sets, as a container's root lacks it. */
static void drop_sys_admin(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    long r = syscall(SYS_capget, &h, d);
    if (r == 0) {
        d[0].effective &= ~(1u << CAP_SYS_ADMIN);
        d[0].permitted &= ~(1u << CAP_SYS_ADMIN);
        r = syscall(SYS_capset, &h, d);
    }
    printf("drop CAP_SYS_ADMIN: %s\n", err(r));
}

static void refusals(void)
{
    int uts = open_ns("uts"), pid = open_ns("pid"), user = open_ns("user");
    int mnt = open_ns("mnt"), net = open_ns("net");
    printf("setns uts: %s\n", err(setns(uts, 0)));
    printf("setns uts as CLONE_NEWUTS: %s\n", err(setns(uts, CLONE_NEWUTS)));
    printf("setns uts as CLONE_NEWPID: %s\n", err(setns(uts, CLONE_NEWPID)));
    printf("setns pid: %s\n", err(setns(pid, 0)));
    printf("setns mnt: %s\n", err(setns(mnt, 0)));
    printf("setns net: %s\n", err(setns(net, CLONE_NEWNET)));
    printf("setns user: %s\n", err(setns(user, 0)));
    int fds[2];
    if (pipe(fds))
        exit(1);
    printf("setns a pipe end: %s\n", err(setns(fds[0], 0)));
    printf("setns a closed fd: %s\n", err(setns(999, 0)));
    int pidfd = syscall(SYS_pidfd_open, getpid(), 0);
    printf("pidfd_open self: %s\n", err(pidfd));
    printf("setns pidfd, no type: %s\n", err(setns(pidfd, 0)));
    printf("setns pidfd, CLONE_NEWUTS: %s\n", err(setns(pidfd, CLONE_NEWUTS)));
    printf("setns pidfd, CLONE_NEWNET|CLONE_NEWIPC: %s\n",
           err(setns(pidfd, CLONE_NEWNET | CLONE_NEWIPC)));
    printf("setns pidfd, CLONE_VM: %s\n", err(setns(pidfd, CLONE_VM)));

    printf("unshare 0: %s\n", err(unshare(0)));
    printf("unshare CLONE_FILES: %s\n", err(unshare(CLONE_FILES)));
    printf("unshare CLONE_FS: %s\n", err(unshare(CLONE_FS)));
    printf("unshare CLONE_SYSVSEM: %s\n", err(unshare(CLONE_SYSVSEM)));
    printf("unshare CLONE_NEWUTS: %s\n", err(unshare(CLONE_NEWUTS)));
    printf("unshare CLONE_NEWNS: %s\n", err(unshare(CLONE_NEWNS)));
    printf("unshare CLONE_NEWPID: %s\n", err(unshare(CLONE_NEWPID)));
    printf("unshare CLONE_NEWIPC|CLONE_NEWNET: %s\n", err(unshare(CLONE_NEWIPC | CLONE_NEWNET)));
    printf("unshare CLONE_NEWCGROUP: %s\n", err(unshare(CLONE_NEWCGROUP)));
    printf("unshare CLONE_NEWTIME: %s\n", err(unshare(0x80)));
    printf("unshare an unknown flag: %s\n", err(unshare(CLONE_PARENT)));

    static const struct {
        long flags;
        const char *name;
    } clones[] = {
        {CLONE_NEWPID, "CLONE_NEWPID"},       {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
        {CLONE_NEWIPC, "CLONE_NEWIPC"},       {CLONE_NEWNET, "CLONE_NEWNET"},
        {CLONE_NEWNS, "CLONE_NEWNS"},         {CLONE_NEWUTS, "CLONE_NEWUTS"},
        {CLONE_NEWNS | CLONE_FS, "CLONE_NEWNS|CLONE_FS"},
        {CLONE_NEWPID | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM, "CLONE_NEWPID|CLONE_THREAD"},
        {CLONE_NEWUTS | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM, "CLONE_NEWUTS|CLONE_THREAD"},
    };
    for (size_t i = 0; i < sizeof clones / sizeof *clones; i++) {
        long r = syscall(SYS_clone, clones[i].flags | SIGCHLD, 0, 0, 0, 0);
        if (r == 0)
            _exit(0);
        if (r > 0)
            waitpid(r, NULL, 0);
        printf("clone %s: %s\n", clones[i].name, err(r));
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    listing("/proc/self/ns");
    has_ns_dir();
    each_link();
    shared();
    ioctls();
    drop_sys_admin();
    refusals();
    return 0;
}
