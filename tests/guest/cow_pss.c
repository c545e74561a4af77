/* cow_pss: /proc/self/smaps after a fork that shares memory copy-on-write.
 *
 * The parent writes every page of a 16 MiB private anonymous mapping, forks a child that
 * waits on a pipe, and reads the mapping's Rss, Pss, Shared_Dirty and Private_Dirty from
 * /proc/self/smaps: every page is mapped by both, so Linux reports Rss 16384 kB, Pss
 * 8192 kB (a page divided by its mapcount), all of it Shared_Dirty. The child then writes
 * half of the pages (copies of its own) and says so; the parent reads again (Pss 12288 kB:
 * 8 MiB its own alone, 8 MiB still shared). Prints the four figures of each reading.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (16u << 20)

/* The smaps fields of the VMA starting at `at`, in kB. */
static void show(const char *when, void *at) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) {
        perror("smaps");
        exit(2);
    }
    char line[512], want[32];
    snprintf(want, sizeof want, "%lx-", (unsigned long)at);
    int in = 0;
    long rss = -1, pss = -1, sd = -1, pd = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) == 0) {
            in = 1;
            continue;
        }
        if (!in)
            continue;
        long v;
        if (sscanf(line, "Rss: %ld kB", &v) == 1)
            rss = v;
        else if (sscanf(line, "Pss: %ld kB", &v) == 1)
            pss = v;
        else if (sscanf(line, "Shared_Dirty: %ld kB", &v) == 1)
            sd = v;
        else if (sscanf(line, "Private_Dirty: %ld kB", &v) == 1)
            pd = v;
        else if (strncmp(line, "VmFlags:", 8) == 0)
            break;
    }
    fclose(f);
    printf("%s: Rss %ld Pss %ld Shared_Dirty %ld Private_Dirty %ld\n", when, rss, pss, sd, pd);
}

int main(void) {
    char *m = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 2;
    memset(m, 0x5a, SIZE);
    int go[2], done[2];
    if (pipe(go) || pipe(done))
        return 2;
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(3);
        for (size_t i = 0; i < SIZE / 2; i += 4096)
            m[i] = 1;
        /* One system call before the answer: torpor gives back the frame a copy replaced at
         * the commit after the next one (the process's stub may map it until then). */
        (void)getppid();
        if (write(done[1], "x", 1) != 1)
            _exit(3);
        if (read(go[0], &c, 1) < 0)
            _exit(3);
        _exit(0);
    }
    close(go[0]);
    show("after the fork", m);
    char c;
    if (write(go[1], "x", 1) != 1 || read(done[0], &c, 1) != 1)
        return 2;
    show("after the child wrote half", m);
    close(go[1]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
