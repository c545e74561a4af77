/* The open/stat hot path of a file server: for ITER iterations, stat(2) a file three
 * directories deep, then open, fstat, read 4 KiB and close it; prints the median of RUNS
 * runs in ns per iteration. Run as root, or with `--user` as anyone: the cost of the
 * permission checks torpor makes as the caller (scripts/bench-permissions.sh).
 *
 *   open_stat_loop PATH [ITER] [RUNS]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: open_stat_loop PATH [ITER] [RUNS]\n");
        return 2;
    }
    const char *path = argv[1];
    long iter = argc > 2 ? atol(argv[2]) : 2000;
    int runs = argc > 3 ? atoi(argv[3]) : 7;
    if (runs < 1 || runs > 99 || iter < 1)
        return 2;
    double per[99];
    char buf[4096];
    for (int r = 0; r < runs; r++) {
        double t0 = now_ns();
        for (long i = 0; i < iter; i++) {
            struct stat st;
            if (stat(path, &st) != 0) {
                perror("stat");
                return 1;
            }
            int fd = open(path, O_RDONLY);
            if (fd < 0) {
                perror("open");
                return 1;
            }
            if (fstat(fd, &st) != 0 || read(fd, buf, sizeof buf) < 0) {
                perror("fstat/read");
                return 1;
            }
            close(fd);
        }
        per[r] = (now_ns() - t0) / iter;
    }
    qsort(per, runs, sizeof per[0], cmp);
    printf("%.0f\n", per[runs / 2]);
    return 0;
}
