/* cow_threads: a fork from a process whose other threads are running and blocked in a read.
 *
 * Thread W writes a counter into the first word of every page of a 16 MiB array, round after
 * round; thread R waits in read() on a pipe into a 64 KiB buffer filled with 'a'. Then the
 * main thread forks. The child takes the first word of every page of the array, waits
 * 200 ms, and counts the pages that changed since (writes after its fork must not reach it);
 * it checks that the buffer still holds 'a', and once the parent says so (R's read has
 * completed by then, into the parent's buffer), again. The parent writes 64 KiB of 'b' into
 * the pipe, waits for R, checks that its buffer holds them, stops W and waits for the child.
 * Prints one line each, and exits 0 when all hold.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define ARRAY (16u << 20)
#define BUF (64u << 10)

static volatile uint64_t *array;
static char *buf;
static int data[2];
static volatile int stop;

static void *writer(void *arg) {
    (void)arg;
    for (uint64_t round = 1; !stop; round++)
        for (size_t p = 0; p < ARRAY / PAGE && !stop; p++)
            array[p * (PAGE / 8)] = round;
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    size_t got = 0;
    while (got < BUF) {
        ssize_t n = read(data[0], buf + got, BUF - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return (void *)(uintptr_t)got;
}

static int all(const char *b, char c) {
    for (size_t i = 0; i < BUF; i++)
        if (b[i] != c)
            return 0;
    return 1;
}

int main(void) {
    array = mmap(NULL, ARRAY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    buf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (array == MAP_FAILED || buf == MAP_FAILED)
        return 2;
    memset((void *)array, 0, ARRAY);
    memset(buf, 'a', BUF);
    int go[2];
    if (pipe(data) || pipe(go))
        return 2;
    pthread_t w, r;
    if (pthread_create(&w, NULL, writer, NULL) || pthread_create(&r, NULL, reader, NULL))
        return 2;
    usleep(100000); /* W is writing, R is waiting in read() */
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        close(go[1]);
        size_t pages = ARRAY / PAGE, changed = 0;
        uint64_t *seen = malloc(pages * sizeof *seen);
        if (!seen)
            _exit(2);
        for (size_t p = 0; p < pages; p++)
            seen[p] = array[p * (PAGE / 8)];
        usleep(200000);
        for (size_t p = 0; p < pages; p++)
            changed += seen[p] != array[p * (PAGE / 8)];
        int before = all(buf, 'a');
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(2);
        int after = all(buf, 'a');
        printf("child: pages changed after the fork: %zu\n", changed);
        printf("child: buffer as before the fork: %s, after the parent's read: %s\n",
               before ? "yes" : "no", after ? "yes" : "no");
        fflush(stdout);
        _exit(changed == 0 && before && after ? 0 : 1);
    }
    close(go[0]);
    char b[BUF];
    memset(b, 'b', BUF);
    if (write(data[1], b, BUF) != (ssize_t)BUF)
        return 2;
    void *got;
    pthread_join(r, &got);
    int read_ok = (uintptr_t)got == BUF && all(buf, 'b');
    stop = 1;
    pthread_join(w, NULL);
    if (write(go[1], "x", 1) != 1)
        return 2;
    int st;
    waitpid(pid, &st, 0);
    int child_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("parent: its read after the fork landed in its buffer: %s\n", read_ok ? "yes" : "no");
    printf("child exited 0: %s\n", child_ok ? "yes" : "no");
    return read_ok && child_ok ? 0 : 1;
}
