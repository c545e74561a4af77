/* cow_fork [MIB] [wait]: writes after a fork stay private to each side.
 *
 * The parent fills MIB MiB (default 64) of private anonymous memory, every word of every
 * page, with a pattern of its own, then forks a child, which writes its own pattern into
 * every 2nd page and forks a grandchild, which writes its own into every 3rd page. Once all
 * three have written (a barrier over pipes), each checks every word of every page: it must
 * see its own writes where it wrote, and what it inherited elsewhere, never a write of
 * another. Then, with "wait", the parent prints "ready" and waits for SIGUSR1 (the test
 * hibernates and wakes the sandbox, or checkpoints and restores it, meanwhile; the children
 * wait in read() on their pipes). Each then writes again (parent every 5th page, child every
 * 7th, grandchild every 11th), and after a second barrier checks again. The parent prints
 * the pages that differ for each process and phase, in a fixed order, and exits 0 if every
 * count is 0. Run without "wait", it goes straight through (natively and in torpor alike).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE_WORDS 512u

enum { PARENT, CHILD, GRANDCHILD, WHO };
static const char *const NAMES[WHO] = {"parent", "child", "grandchild"};

/* A write of every `every`-th page with `tag`; a process's memory is the base layer with
 * the layers it and its ancestors wrote since, the last that covers a page winning. */
struct layer {
    size_t every;
    uint64_t tag;
};

static uint64_t word(uint64_t tag, size_t page, size_t w) {
    return (tag * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)page << 12 | w);
}

static void write_layer(uint64_t *m, size_t pages, struct layer l) {
    for (size_t p = 0; p < pages; p += l.every)
        for (size_t w = 0; w < PAGE_WORDS; w++)
            m[p * PAGE_WORDS + w] = word(l.tag, p, w);
}

/* Pages with a word that is not what the layers `ls[0..n]` say. */
static size_t differ(const uint64_t *m, size_t pages, const struct layer *ls, int n) {
    size_t bad = 0;
    for (size_t p = 0; p < pages; p++) {
        uint64_t tag = ls[0].tag;
        for (int i = n - 1; i > 0; i--)
            if (p % ls[i].every == 0) {
                tag = ls[i].tag;
                break;
            }
        for (size_t w = 0; w < PAGE_WORDS; w++)
            if (m[p * PAGE_WORDS + w] != word(tag, p, w)) {
                bad++;
                break;
            }
    }
    return bad;
}

struct report {
    int phase, who;
    uint64_t bad;
};

static volatile sig_atomic_t go;
static void on_usr1(int s) { (void)s; go = 1; }

static void put(int fd, char c) {
    if (write(fd, &c, 1) != 1)
        _exit(10);
}

static char get(int fd) {
    char c = 0;
    if (read(fd, &c, 1) != 1)
        _exit(11);
    return c;
}

static void report(int fd, int phase, int who, size_t bad) {
    struct report r = {phase, who, bad};
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(12);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int wait_signal = argc > 2 && strcmp(argv[2], "wait") == 0;
    size_t pages = mib << 8;
    if (pages == 0)
        return 2;
    uint64_t *m = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 2;
    struct sigaction a = {0};
    a.sa_handler = on_usr1;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);
    /* rep: reports to the parent; down[0]: parent -> child, down[1]: child -> grandchild;
     * up[0]: child -> parent, up[1]: grandchild -> child. */
    int rep[2], down[2][2], up[2][2];
    if (pipe(rep) || pipe(down[0]) || pipe(down[1]) || pipe(up[0]) || pipe(up[1]))
        return 2;
    struct layer ls[4] = {{1, 0x9a7e}};
    int n = 1;
    write_layer(m, pages, ls[0]);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 3;
    }
    if (child == 0) {
        ls[n++] = (struct layer){2, 0xc41d};
        write_layer(m, pages, ls[n - 1]);
        pid_t grandchild = fork();
        if (grandchild < 0) {
            /* The parent would wait for it on the pipes forever. */
            perror("fork");
            kill(getppid(), SIGTERM);
            _exit(3);
        }
        int who = CHILD;
        int from_above = down[0][0], to_above = up[0][1];
        int from_below = up[1][0], to_below = down[1][1];
        if (grandchild == 0) {
            who = GRANDCHILD;
            ls[n++] = (struct layer){3, 0x96a4d};
            write_layer(m, pages, ls[n - 1]);
            from_above = down[1][0];
            to_above = up[1][1];
            from_below = to_below = -1;
        }
        const struct layer later[WHO] = {{5, 0}, {7, 0xc41d2}, {11, 0x96a4d2}};
        for (int phase = 1; phase <= 2; phase++) {
            if (phase == 2) {
                /* 'p': the pause is over. */
                char c = get(from_above);
                if (to_below >= 0)
                    put(to_below, c);
                ls[n++] = later[who];
                write_layer(m, pages, ls[n - 1]);
            }
            /* Barrier: written here and below, then 'c': everyone has written. */
            if (from_below >= 0)
                get(from_below);
            put(to_above, 'w');
            char c = get(from_above);
            if (to_below >= 0)
                put(to_below, c);
            report(rep[1], phase, who, differ(m, pages, ls, n));
        }
        if (who == CHILD) {
            int status = 0;
            if (waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0)
                _exit(4);
        }
        _exit(0);
    }
    close(rep[1]);
    int from_below = up[0][0], to_below = down[0][1];
    int all_private = 1;
    for (int phase = 1; phase <= 2; phase++) {
        if (phase == 2) {
            if (wait_signal) {
                printf("ready\n");
                fflush(stdout);
                while (!go)
                    pause();
            }
            put(to_below, 'p');
            ls[n++] = (struct layer){5, 0x9a7e2};
            write_layer(m, pages, ls[n - 1]);
        }
        get(from_below);
        put(to_below, 'c');
        struct report r = {phase, PARENT, differ(m, pages, ls, n)};
        uint64_t results[WHO] = {0};
        int seen[WHO] = {0};
        results[PARENT] = r.bad;
        seen[PARENT] = 1;
        for (int i = 0; i < WHO - 1; i++) {
            if (read(rep[0], &r, sizeof r) != (ssize_t)sizeof r || r.phase != phase ||
                r.who <= PARENT || r.who >= WHO)
                return 5;
            results[r.who] = r.bad;
            seen[r.who] = 1;
        }
        for (int w = 0; w < WHO; w++) {
            if (!seen[w])
                return 5;
            printf("%s, %s: %llu of %zu pages differ\n",
                   phase == 1 ? "after the forks" : "after the pause", NAMES[w],
                   (unsigned long long)results[w], pages);
            all_private &= results[w] == 0;
        }
    }
    int status = 0;
    int child_ok = waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0;
    printf("child and grandchild exited: %s\n", child_ok ? "yes" : "no");
    int ok = child_ok && all_private;
    printf("%s\n", ok ? "writes stay private to each side" : "A WRITE CROSSED");
    fflush(stdout);
    return ok ? 0 : 1;
}
