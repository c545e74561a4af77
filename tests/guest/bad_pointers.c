/* bad_pointers: a hostile guest handing the kernel wild pointers.
 *
 * Each probe makes a raw system call (never a libc or vDSO shortcut) with a
 * pointer the kernel must not follow, and prints the result. Linux answers
 * each with EFAULT (or a short count) and so must torpor: the test compares
 * this program's stdout natively and under torpor. The process must survive.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void show(const char *what, long r) {
    if (r < 0)
        printf("%-40s -> -1 %s\n", what, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
    else
        printf("%-40s -> %ld\n", what, r);
    fflush(stdout);
}

int main(void) {
    void *const wild = (void *)(uintptr_t)0x00007e0000000000ull;   /* unmapped user address */
    void *const kernel = (void *)(uintptr_t)0xffff880000000000ull; /* kernel half */
    void *const noncanon = (void *)(uintptr_t)0x0000900000000000ull;

    int fd = open("/bin/busybox", O_RDONLY);
    if (fd < 0) {
        perror("/bin/busybox");
        return 1;
    }
    show("write(1, NULL, 16)", syscall(SYS_write, 1, NULL, 16));
    show("write(1, wild, 16)", syscall(SYS_write, 1, wild, 16));
    show("write(1, kernel, 16)", syscall(SYS_write, 1, kernel, 16));
    show("write(1, noncanonical, 16)", syscall(SYS_write, 1, noncanon, 16));
    show("read(file, NULL, 16)", syscall(SYS_read, fd, NULL, 16));
    show("read(file, kernel, 16)", syscall(SYS_read, fd, kernel, 16));
    show("openat(AT_FDCWD, NULL)", syscall(SYS_openat, AT_FDCWD, NULL, O_RDONLY));
    show("openat(AT_FDCWD, wild)", syscall(SYS_openat, AT_FDCWD, wild, O_RDONLY));
    show("uname(kernel)", syscall(SYS_uname, kernel));
    show("clock_gettime(MONOTONIC, wild)", syscall(SYS_clock_gettime, CLOCK_MONOTONIC, wild));
    show("fstat(file, NULL)", syscall(SYS_fstat, fd, NULL));
    show("getcwd(NULL, 4096)", syscall(SYS_getcwd, NULL, 4096));

    /* A page that was mapped, then unmapped. */
    char *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(gone, 'x', 4096);
    munmap(gone, 4096);
    show("write(1, unmapped page, 16)", syscall(SYS_write, 1, gone, 16));

    /* PROT_NONE and read-only pages. */
    char *none = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(none, 8192, PROT_NONE);
    show("write(1, PROT_NONE page, 16)", syscall(SYS_write, 1, none, 16));
    char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    show("read(file, PROT_READ page, 16)", syscall(SYS_read, fd, ro, 16));

    printf("bad_pointers: survived\n");
    return 0;
}
