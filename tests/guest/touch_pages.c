/* touch_pages N: maps N MiB of anonymous memory and writes one byte per 4 KiB
 * page, so each page takes exactly one first-touch fault. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 0;
    size_t len = (size_t)mib << 20;
    if (len == 0) {
        printf("touch_pages: 0 pages\n");
        return 0;
    }
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t off = 0; off < len; off += 4096)
        p[off] = 1;
    printf("touch_pages: %zu pages\n", len / 4096);
    return 0;
}
