/* The program `torpor demo` runs: a static binary embedded in the torpor
 * executable (see ../build.rs), run in a throwaway sandbox.
 *
 * It greets, prints its argv and uname, and writes then reads back a file in
 * /tmp of its root filesystem. Every line goes through real system calls
 * that torpor implements on the host.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

int main(int argc, char **argv) {
    printf("Hello from inside a torpor sandbox!\n");
    printf("This static Linux program runs in guest ring 3 of a KVM virtual machine;\n");
    printf("the torpor process on the host serves each of its system calls.\n\n");

    printf("argc = %d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("argv[%d] = \"%s\"\n", i, argv[i]);

    struct utsname u;
    if (uname(&u) == 0)
        printf("uname: sysname = %s, machine = %s\n", u.sysname, u.machine);
    else
        perror("uname");

    static const char path[] = "/tmp/torpor-demo.txt";
    static const char msg[] = "written inside the sandbox\n";
    struct stat st;
    if (stat("/tmp", &st) != 0)
        mkdir("/tmp", 01777);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    if (write(fd, msg, sizeof msg - 1) != (ssize_t)(sizeof msg - 1)) {
        perror("write");
        return 1;
    }
    close(fd);
    char back[64] = {0};
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    ssize_t n = read(fd, back, sizeof back - 1);
    close(fd);
    if (n != (ssize_t)(sizeof msg - 1) || memcmp(back, msg, sizeof msg - 1) != 0) {
        printf("file %s: read back %zd bytes that differ from what was written\n", path, n);
        return 1;
    }
    printf("file %s: wrote and read back %zd bytes: ok\n", path, n);
    printf("\nGoodbye from the sandbox.\n");
    return 0;
}
