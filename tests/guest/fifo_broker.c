/* fifo_broker: a blocking open of a FIFO that the runtime opens through its file broker (the
 * FIFO belongs to another user, mode 0600: only the broker's capabilities open it) must not
 * hold up the sandbox's other file calls. One thread opens /data/fifo for reading, no writer
 * ever comes; the main thread then opens /data/private (also the broker's to open) and ends.
 * Prints what each saw. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *opener(void *arg) {
    (void)arg;
    int fd = open("/data/fifo", O_RDONLY);
    printf("fifo open: %s\n", fd >= 0 ? "ok" : "error");
    fflush(stdout);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, opener, NULL);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int fd = open("/data/private", O_RDONLY);
    char b[8] = {0};
    if (fd >= 0) read(fd, b, sizeof b - 1);
    printf("private: %s\n", fd >= 0 ? b : "error");
    fflush(stdout);
    _exit(0);
}
