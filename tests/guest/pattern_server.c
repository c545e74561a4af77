/*
 * pattern_server PORT MIB [SEED [FILE]]: fills MIB MiB of anonymous memory with a known
 * pattern (with FILE, of a private mapping of FILE, created that long, made read-only once
 * filled: written pages of a read-only file mapping, like a program's relocated data), then
 * serves HTTP/1.0-style requests, one per connection:
 *   GET /verify   checks every word of the pattern: "ok WORDS" or "bad WORD_INDEX"
 *   GET /touch/K  reads K MiB of it (a chosen working set): "touched K SUM"
 *   GET /dirty/S  rewrites every S-th page with new values (S = 100 dirties 1 %; /verify
 *                 knows them): "dirtied PAGES"
 *   GET /         "hello"
 *   GET /quit     answers "bye" and exits 0
 * Used by the hibernate tests and benchmarks; runs natively too.
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static uint64_t *heap;
static size_t words;
static uint64_t seed;
/* With FILE: the pattern is read-only between requests that rewrite it. */
static int read_only;
/* How many times each 4 KiB page was rewritten by /dirty (its words carry the count). */
static unsigned char *generation;

static uint64_t pattern(size_t i) {
    return ((i * 0x9E3779B97F4A7C15ull) ^ seed) + generation[i / 512] * 0x1000193ull;
}

static void reply(int fd, const char *body) {
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     strlen(body), body);
    for (int off = 0; off < n;) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w <= 0) return;
        off += w;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT MIB [SEED]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    size_t mib = strtoull(argv[2], 0, 10);
    seed = argc > 3 ? strtoull(argv[3], 0, 0) : 0x5eed;
    words = mib * (1 << 20) / 8;
    if (argc > 4) {
        int fd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, mib << 20)) { perror(argv[4]); return 1; }
        heap = mmap(0, mib << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        close(fd);
        read_only = 1;
    } else {
        heap = mmap(0, mib << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    generation = calloc(words / 512 + 1, 1);
    if (heap == MAP_FAILED || !generation) { perror("mmap"); return 1; }
    for (size_t i = 0; i < words; i++) heap[i] = pattern(i);
    if (read_only && mprotect(heap, mib << 20, PROT_READ)) { perror("mprotect"); return 1; }

    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 128)) { perror("bind/listen"); return 1; }
    printf("pattern_server: %zu MiB ready on port %d\n", mib, port);
    fflush(stdout);
    for (;;) {
        int c = accept(s, 0, 0);
        if (c < 0) continue;
        char req[1024];
        size_t got = 0;
        while (got < sizeof req - 1) {
            ssize_t r = read(c, req + got, sizeof req - 1 - got);
            if (r <= 0) break;
            got += r;
            req[got] = 0;
            if (strstr(req, "\r\n\r\n")) break;
        }
        req[got] = 0;
        char body[128];
        if (!strncmp(req, "GET /verify", 11)) {
            size_t bad = words;
            for (size_t i = 0; i < words; i++)
                if (heap[i] != pattern(i)) { bad = i; break; }
            if (bad == words) snprintf(body, sizeof body, "ok %zu\n", words);
            else snprintf(body, sizeof body, "bad %zu\n", bad);
            reply(c, body);
        } else if (!strncmp(req, "GET /touch/", 11)) {
            size_t k = strtoull(req + 11, 0, 10);
            if (k > mib) k = mib;
            uint64_t sum = 0;
            for (size_t i = 0; i < k * (1 << 20) / 8; i += 512) sum += heap[i];
            snprintf(body, sizeof body, "touched %zu %llu\n", k, (unsigned long long)sum);
            reply(c, body);
        } else if (!strncmp(req, "GET /dirty/", 11)) {
            size_t stride = strtoull(req + 11, 0, 10), pages = 0;
            if (stride == 0) stride = 1;
            if (read_only) mprotect(heap, mib << 20, PROT_READ | PROT_WRITE);
            for (size_t p = 0; p < words / 512; p += stride, pages++) {
                generation[p]++;
                for (size_t i = p * 512; i < (p + 1) * 512; i++) heap[i] = pattern(i);
            }
            if (read_only) mprotect(heap, mib << 20, PROT_READ);
            snprintf(body, sizeof body, "dirtied %zu\n", pages);
            reply(c, body);
        } else if (!strncmp(req, "GET /quit", 9)) {
            reply(c, "bye\n");
            close(c);
            return 0;
        } else {
            reply(c, "hello\n");
        }
        close(c);
    }
}
