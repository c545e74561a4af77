/* misc_io: pipes, the standard character devices, sysinfo and CPU affinity; prints facts that
 * are the same natively and in a sandbox. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/sysinfo.h>
#include <sys/timerfd.h>
#include <unistd.h>

int main(void) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        write(p[1], "through a pipe", 14);
        char b[32] = {0};
        ssize_t n = read(p[0], b, sizeof b - 1);
        printf("pipe: %zd %s, cloexec %d\n", n, b, (fcntl(p[0], F_GETFD) & FD_CLOEXEC) != 0);
        close(p[1]);
        printf("pipe after close: read %zd\n", read(p[0], b, sizeof b));
    } else perror("pipe2");
    int fd = open("/dev/null", O_WRONLY);
    printf("/dev/null: write %zd\n", write(fd, "x", 1));
    close(fd);
    fd = open("/dev/zero", O_RDONLY);
    char z[64];
    memset(z, 1, sizeof z);
    ssize_t n = read(fd, z, sizeof z);
    int zeros = 1;
    for (int i = 0; i < 64; i++) zeros &= z[i] == 0;
    printf("/dev/zero: read %zd zeros %d\n", n, zeros);
    close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    printf("/dev/urandom: read %zd\n", read(fd, z, 16));
    close(fd);
    struct sysinfo si;
    printf("sysinfo: %d, ram > 0: %d\n", sysinfo(&si), si.totalram * si.mem_unit > 0);
    cpu_set_t set;
    printf("affinity: %d, cpus > 0: %d\n", sched_getaffinity(0, sizeof set, &set), CPU_COUNT(&set) > 0);
    int e = eventfd(3, EFD_CLOEXEC | EFD_NONBLOCK);
    uint64_t v = 4;
    write(e, &v, 8);
    v = 0;
    printf("eventfd: read %zd value %llu, again %zd\n", read(e, &v, 8), (unsigned long long)v, read(e, &v, 8));
    int tf = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    struct itimerspec its = {.it_value = {.tv_nsec = 20 * 1000 * 1000}};
    printf("timerfd: settime %d\n", timerfd_settime(tf, 0, &its, 0));
    uint64_t expirations = 0;
    printf("timerfd: read %zd expirations %llu\n", read(tf, &expirations, 8), (unsigned long long)expirations);
    return 0;
}
