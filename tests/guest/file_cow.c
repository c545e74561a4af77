// Private file mappings (MAP_PRIVATE) and their copy-on-write, as Linux does them: a write to
// a page gives the process a copy (the file is unchanged, another process's mapping too), a
// forked child keeps the same bytes and its own copies, MADV_DONTNEED goes back to the
// file's bytes, mprotect (RELRO-style) and read(2) into a mapping copy the page, and a
// write to the file shows in the pages not yet copied. Run natively and under torpor (with
// clean pages shared through the page cache): the outputs must match.
//
// Usage: file_cow DIR (a directory, relative to the working directory, to make files in).
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define PAGES 8

static char path[256];

static void on_sigbus(int sig) {
    (void)sig;
    static const char msg[] = "SIGBUS reading the lost page\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(0);
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

// The byte at page `p` of the file.
static char file_byte(int p) {
    int fd = open(path, O_RDONLY);
    char c = 0;
    if (fd < 0 || pread(fd, &c, 1, (off_t)p * PAGE) != 1) die("pread");
    close(fd);
    return c;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    // A file of the root (the host's, in torpor): written through a private mapping only.
    snprintf(path, sizeof path, "%s/host-file", dir);
    int hfd = open(path, O_RDONLY);
    if (hfd >= 0) {
        char *h = mmap(NULL, PAGE, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, hfd, 0);
        if (h == MAP_FAILED) die("mmap host-file");
        char was = h[0];
        h[0] = 'q';
        printf("host-file: was %c, mapping %c, file %c\n", was, h[0], file_byte(0));
        munmap(h, PAGE);
        close(hfd);
    }
    snprintf(path, sizeof path, "%s/cow-data", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open");
    char buf[PAGE];
    for (int p = 0; p < PAGES; p++) {
        memset(buf, 'A' + p, PAGE);
        if (write(fd, buf, PAGE) != PAGE) die("write");
    }
    // Mapped executable once, as a loader maps a library: torpor shares the page cache of
    // such files with every private mapping of them from then on.
    void *x = mmap(NULL, PAGE, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (x == MAP_FAILED) die("mmap executable");
    munmap(x, PAGE);
    close(fd);

    // A private mapping, read first (clean pages from the file).
    fd = open(path, O_RDONLY);
    char *m = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) die("mmap");
    printf("read: %c %c %c %c\n", m[0], m[PAGE], m[2 * PAGE + 17], m[7 * PAGE + 4095]);

    // Writing page 1: the process sees its write, the file does not.
    m[PAGE] = 'x';
    m[PAGE + 1] = 'y';
    printf("after write: %c%c%c, file %c\n", m[PAGE], m[PAGE + 1], m[PAGE + 2], file_byte(1));

    // A write to the file shows in a read-only private mapping (its pages are the file's,
    // as on Linux; POSIX leaves it unspecified), not in the written copy.
    char *ro = mmap(NULL, PAGES * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
    if (ro == MAP_FAILED) die("mmap read-only");
    char ro_before = ro[2 * PAGE];
    int wfd = open(path, O_WRONLY);
    if (wfd < 0) die("open for writing");
    if (pwrite(wfd, "Z", 1, 2 * PAGE) != 1 || pwrite(wfd, "W", 1, PAGE) != 1) die("pwrite");
    close(wfd);
    printf("file written: read-only mapping %c -> %c%c, written page keeps %c\n", ro_before,
           ro[2 * PAGE], ro[PAGE], m[PAGE]);
    // So does a store through a MAP_SHARED mapping of the file.
    int sfd = open(path, O_RDWR);
    if (sfd < 0) die("open for sharing");
    char *sh = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 3 * PAGE);
    if (sh == MAP_FAILED) die("mmap shared");
    char ro3 = ro[3 * PAGE + 5];
    sh[5] = 'S';
    printf("shared store: read-only mapping %c -> %c\n", ro3, ro[3 * PAGE + 5]);
    sh[5] = 'D';
    munmap(sh, PAGE);
    close(sfd);

    // fork: the child sees the same bytes; copies stay per process.
    m[3 * PAGE] = 'p';
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        printf("child sees: %c %c %c %c\n", m[0], m[PAGE], ro[2 * PAGE], m[3 * PAGE]);
        m[0] = 'c';
        m[PAGE] = 'c';
        m[3 * PAGE] = 'c';
        printf("child wrote: %c %c %c, file %c\n", m[0], m[PAGE], m[3 * PAGE], file_byte(0));
        fflush(stdout);
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) die("waitpid");
    printf("parent keeps: %c %c %c %c\n", m[0], m[PAGE], ro[2 * PAGE], m[3 * PAGE]);
    munmap(ro, PAGES * PAGE);

    // MADV_DONTNEED: the copy is dropped, the file's bytes (as written since) come back.
    if (madvise(m + PAGE, PAGE, MADV_DONTNEED) != 0) die("madvise");
    printf("after DONTNEED: page 1 is %c%c\n", m[PAGE], m[PAGE + 1]);

    // read(2) into a page of the mapping: the kernel's write copies it too.
    int rfd = open(path, O_RDONLY);
    if (rfd < 0 || pread(rfd, m + 4 * PAGE, 3, 0) != 3) die("read into the mapping");
    close(rfd);
    printf("read(2) into page 4: %c%c%c%c, file %c\n", m[4 * PAGE], m[4 * PAGE + 1],
           m[4 * PAGE + 2], m[4 * PAGE + 3], file_byte(4));

    // RELRO-style: read-only, made writable, written, read-only again.
    char *r = mmap(NULL, 2 * PAGE, PROT_READ, MAP_PRIVATE, fd, 5 * PAGE);
    if (r == MAP_FAILED) die("mmap read-only");
    char before = r[0];
    if (mprotect(r, 2 * PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect rw");
    r[1] = '!';
    if (mprotect(r, 2 * PAGE, PROT_READ) != 0) die("mprotect r");
    printf("relro: %c%c%c, other page %c, file %c\n", before, r[1], r[2], r[PAGE],
           file_byte(5));

    // mremap moves pages (copied ones and file ones) with their bytes.
    char *n = mremap(m, PAGES * PAGE, (PAGES + 2) * PAGE, MREMAP_MAYMOVE);
    if (n == MAP_FAILED) die("mremap");
    printf("mremap: %c %c %c %c\n", n[0], n[3 * PAGE], n[4 * PAGE], n[6 * PAGE]);
    munmap(n, (PAGES + 2) * PAGE);
    munmap(r, 2 * PAGE);
    close(fd);

    // The file holds only what write(2) put there.
    printf("file: %c %c %c %c %c %c\n", file_byte(0), file_byte(1), file_byte(2), file_byte(3),
           file_byte(4), file_byte(5));

    // Truncation below the mapping: the runtime's reads of the lost page fail (EFAULT), the
    // application's are SIGBUS (its handler ends the program).
    int tfd = open(path, O_RDWR);
    if (tfd < 0) die("open for truncation");
    char *t = mmap(NULL, 3 * PAGE, PROT_READ, MAP_PRIVATE, tfd, 0);
    if (t == MAP_FAILED) die("mmap for truncation");
    printf("before truncation: %c %c\n", t[0], t[2 * PAGE]);
    if (ftruncate(tfd, PAGE) != 0) die("ftruncate");
    printf("page 0 after truncation: %c\n", t[0]);
    printf("write(2) from the lost page: %s\n", write(1, t + 2 * PAGE, 1) < 0 ? "error" : "ok?");
    printf("done\n");
    fflush(stdout);
    signal(SIGBUS, on_sigbus);
    char lost = *(volatile char *)(t + 2 * PAGE);
    printf("read the lost page: %d (no SIGBUS)\n", lost);
    return 1;
}
