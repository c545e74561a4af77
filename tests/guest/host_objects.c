/* The host objects a sandbox is handed (the host's /dev/null when its root has no /dev, the
 * runtime's stdio, eventfds) must not have their metadata changed from inside: each attempt
 * is EPERM. Prints one line per attempt. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static void show(const char *what, int r) {
    printf("%s: %s\n", what, r == 0 ? "ok" : strerrorname_np(errno));
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int null = open("/dev/null", O_RDWR);
    printf("open /dev/null: %s\n", null >= 0 ? "ok" : strerrorname_np(errno));
    show("fchmod /dev/null", fchmod(null, 0));
    show("fchown /dev/null", fchown(null, 12345, 12345));
    show("futimens /dev/null", futimens(null, NULL));
    show("fsetxattr /dev/null", fsetxattr(null, "user.x", "1", 1, 0));
    show("chmod /proc/self/fd/N", fchmodat(AT_FDCWD, "/proc/self/fd/3", 0, 0));
    show("fchmod stdout", fchmod(1, 0));
    show("fchown stderr", fchown(2, 12345, 12345));
    int e = eventfd(0, 0);
    show("fchmod eventfd", fchmod(e, 0777));
    struct stat st;
    fstat(null, &st);
    printf("/dev/null mode still 0666: %d\n", (st.st_mode & 0777) == 0666);
    return 0;
}
