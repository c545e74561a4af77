/* files_alloc: prints, reads a file from its root filesystem, allocates and
 * frees 200 MiB in pieces several times, prints a checksum and exits 3.
 *
 * Usage: files_alloc FILE
 * Runs natively and under torpor; the test compares the two stdouts.
 * Nothing printed may depend on where it runs (no pids, no argv[0]).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOTAL (200u << 20)

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* One round: TOTAL bytes as TOTAL/piece blocks, all live at once, each filled
 * with its own pattern, checked, then all freed. Returns a checksum. */
static uint64_t round_of(size_t piece, unsigned round) {
    size_t count = TOTAL / piece;
    unsigned char **blocks = calloc(count, sizeof *blocks);
    if (!blocks) {
        printf("round %u: calloc failed\n", round);
        exit(1);
    }
    uint64_t sum = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < count; i++) {
        blocks[i] = malloc(piece);
        if (!blocks[i]) {
            printf("round %u: malloc(%zu) #%zu failed\n", round, piece, i);
            exit(1);
        }
        memset(blocks[i], (int)((i * 7 + round) & 0xff), piece);
        /* Vary a few bytes per page so pages are not all alike. */
        for (size_t off = 0; off < piece; off += 4096)
            blocks[i][off] = (unsigned char)(off >> 12) ^ (unsigned char)i;
    }
    for (size_t i = 0; i < count; i++) {
        unsigned char want = (unsigned char)((i * 7 + round) & 0xff);
        for (size_t off = 0; off < piece; off += 4096) {
            unsigned char first = (unsigned char)(off >> 12) ^ (unsigned char)i;
            if (blocks[i][off] != first || blocks[i][off + 1] != want ||
                blocks[i][off + 4095 < piece ? off + 4095 : piece - 1] != want) {
                printf("round %u: block %zu corrupt at offset %zu\n", round, i, off);
                exit(1);
            }
        }
        sum = fnv1a(sum, blocks[i], 64);
        sum = fnv1a(sum, blocks[i] + piece - 64, 64);
    }
    for (size_t i = 0; i < count; i++)
        free(blocks[i]);
    free(blocks);
    return sum;
}

int main(int argc, char **argv) {
    printf("files_alloc: hello\n");
    printf("files_alloc: %d argument(s)\n", argc - 1);
    fflush(stdout);
    if (argc < 2) {
        fprintf(stderr, "usage: files_alloc FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char buf[4096];
    size_t n, total = 0;
    printf("--- %s ---\n", argv[1]);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        fwrite(buf, 1, n, stdout);
        total += n;
    }
    fclose(f);
    printf("--- end (%zu bytes) ---\n", total);
    fflush(stdout);

    /* 4 MiB pieces come from mmap; after glibc raises its mmap threshold on
     * the first free, smaller pieces come from the brk heap. */
    static const size_t pieces[] = {4u << 20, 4u << 20, 1u << 20, 64u << 10};
    uint64_t all = 0;
    for (unsigned r = 0; r < sizeof pieces / sizeof pieces[0]; r++) {
        uint64_t s = round_of(pieces[r], r);
        printf("round %u: %zu x %zu KiB ok, checksum %016llx\n", r, TOTAL / pieces[r],
               pieces[r] >> 10, (unsigned long long)s);
        fflush(stdout);
        all ^= s;
    }
    printf("files_alloc: checksum %016llx\n", (unsigned long long)all);
    printf("files_alloc: exiting with 3\n");
    return 3;
}
