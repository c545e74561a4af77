/* What CLONE_FS shares: threads see each other's chdir and umask; a forked child's do not
 * reach its parent. Prints facts, not paths (the native run is not chrooted). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_barrier_t go, done;
static char seen[PATH_MAX];

static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&go);      /* main has chdir'd */
    if (!getcwd(seen, sizeof seen))
        seen[0] = 0;
    umask(077);                     /* main must see it */
    if (chdir("..") != 0)           /* and this */
        perror("chdir ..");
    pthread_barrier_wait(&done);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    char start[PATH_MAX], after[PATH_MAX], now[PATH_MAX];
    mkdir("fs_share_dir", 0755);
    if (!getcwd(start, sizeof start))
        return 1;
    pthread_barrier_init(&go, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    umask(022);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    if (chdir("fs_share_dir") != 0)
        return 2;
    if (!getcwd(after, sizeof after))
        return 3;
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
    printf("thread sees main's chdir: %s\n", strcmp(seen, after) == 0 ? "yes" : "no");
    mode_t m = umask(022);
    printf("main sees thread's umask: %03o\n", m);
    if (!getcwd(now, sizeof now))
        return 4;
    printf("main sees thread's chdir: %s\n", strcmp(now, start) == 0 ? "yes" : "no");
    pid_t p = fork();
    if (p == 0) {
        umask(0);
        _exit(chdir("fs_share_dir") == 0 ? 0 : 1);
    }
    int st;
    waitpid(p, &st, 0);
    char later[PATH_MAX];
    if (!getcwd(later, sizeof later))
        return 5;
    printf("fork child's chdir reaches parent: %s\n", strcmp(later, start) == 0 ? "no" : "yes");
    m = umask(022);
    printf("fork child's umask reaches parent: %s\n", m == 022 ? "no" : "yes");
    rmdir("fs_share_dir");
    return 0;
}
