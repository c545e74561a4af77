/* System V IPC's views and tunables: shmctl's IPC_INFO, SHM_INFO, SHM_STAT and
 * SHM_STAT_ANY, SHM_LOCK/SHM_UNLOCK; semctl's IPC_INFO, SEM_INFO, SEM_STAT and SEM_STAT_ANY;
 * /proc/sysvipc/shm and sem; the limits in /proc/sys/kernel written by root and enforced
 * (shmmax, shmmni, shmall, sem, msgmax, msgmni), refused to another user; a segment's attach
 * count once a child that attached it has been waited for. Prints what it sees, to compare
 * with a native run in a fresh IPC namespace (ids start at 0 in both). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

union semun {
    int val;
    struct semid_ds *buf;
    unsigned short *array;
    struct seminfo *__buf;
};

static const char *err(long r) { return r < 0 ? strerrorname_np(errno) : "ok"; }

/* Writes `v` to /proc/sys/kernel/`name`: "ok" or the errno of the open or the write. */
static const char *set_tunable(const char *name, const char *v) {
    char path[64];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    int fd = open(path, O_WRONLY | O_TRUNC);
    if (fd < 0)
        return strerrorname_np(errno);
    ssize_t n = write(fd, v, strlen(v));
    int e = errno;
    close(fd);
    return n < 0 ? strerrorname_np(e) : "ok";
}

static void show_tunable(const char *name) {
    char path[64], buf[128] = "";
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("%s: %s\n", name, strerrorname_np(errno));
        return;
    }
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    printf("%s: %s", name, buf);
}

static unsigned long tunable(const char *name) {
    char path[64];
    unsigned long v = 0;
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Runs `f` in a child as user and group nobody, without capabilities. */
static void as_nobody(void (*f)(void)) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        if (setgid(NOBODY) || setuid(NOBODY))
            _exit(1);
        f();
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(p, &st, 0);
}

static int shm_a, shm_key, sem_a;

static void nobody_looks(void) {
    struct shmid_ds ds;
    printf("nobody: IPC_STAT: %s\n", err(shmctl(shm_a, IPC_STAT, &ds)));
    printf("nobody: SHM_STAT 0: %s\n", err(shmctl(0, SHM_STAT, &ds)));
    int r = shmctl(0, SHM_STAT_ANY, &ds);
    printf("nobody: SHM_STAT_ANY 0: %s, is the id %d\n", err(r), r == shm_a);
    printf("nobody: SHM_LOCK: %s\n", err(shmctl(shm_a, SHM_LOCK, NULL)));
    printf("nobody: IPC_RMID: %s\n", err(shmctl(shm_a, IPC_RMID, NULL)));
    printf("nobody: shmget(key, 0400): %s\n", err(shmget(0x5151, 100, 0400)));
    printf("nobody: shmget(key, 0): %s\n", err(shmget(0x5151, 100, 0)));
    struct semid_ds sds;
    union semun arg = {.buf = &sds};
    printf("nobody: SEM_STAT 0: %s\n", err(semctl(0, 0, SEM_STAT, arg)));
    r = semctl(0, 0, SEM_STAT_ANY, arg);
    printf("nobody: SEM_STAT_ANY 0: %s, is the id %d\n", err(r), r == sem_a);
    printf("nobody: open shmmax for writing: %s\n", set_tunable("shmmax", "1"));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* 1. Segments: ids, IPC_INFO, SHM_INFO, the stat commands. */
    shm_a = shmget(IPC_PRIVATE, 10000, IPC_CREAT | 0600);
    shm_key = shmget(0x5151, 5000, IPC_CREAT | 0640);
    printf("shmget: %d %d\n", shm_a, shm_key);
    char *p = shmat(shm_a, NULL, 0);
    memset(p, 1, 5000); /* two pages resident */
    struct shminfo si;
    int r = shmctl(0, IPC_INFO, (struct shmid_ds *)&si);
    printf("IPC_INFO: %d shmmin %lu shmmni %lu\n", r, si.shmmin, si.shmmni);
    int same = si.shmmax == tunable("shmmax");
    printf("shmmax as in /proc: %d\n", same);
    same = si.shmall == tunable("shmall");
    printf("shmall as in /proc: %d\n", same);
    struct shm_info sinfo;
    r = shmctl(0, SHM_INFO, (struct shmid_ds *)&sinfo);
    printf("SHM_INFO: %d used %d tot %lu rss %lu swp %lu\n", r, sinfo.used_ids, sinfo.shm_tot,
           sinfo.shm_rss, sinfo.shm_swp);
    struct shmid_ds ds;
    r = shmctl(1, SHM_STAT, &ds);
    printf("SHM_STAT 1: is the id %d, segsz %zu mode %o\n", r == shm_key, (size_t)ds.shm_segsz,
           ds.shm_perm.mode);
    printf("SHM_STAT 2: %s\n", err(shmctl(2, SHM_STAT, &ds)));
    printf("IPC_STAT of index 1's id + 32768: %s\n", err(shmctl(shm_key + 32768, IPC_STAT, &ds)));

    /* 2. SHM_LOCK and SHM_UNLOCK. */
    printf("SHM_LOCK: %s\n", err(shmctl(shm_a, SHM_LOCK, NULL)));
    shmctl(shm_a, IPC_STAT, &ds);
    printf("mode %o\n", ds.shm_perm.mode);
    printf("SHM_UNLOCK: %s\n", err(shmctl(shm_a, SHM_UNLOCK, NULL)));
    shmctl(shm_a, IPC_STAT, &ds);
    printf("mode %o\n", ds.shm_perm.mode);

    /* 3. A child attaches and exits: once waited for, it is no longer counted. */
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        char *q = shmat(shm_key, NULL, 0);
        _exit(q == (void *)-1);
    }
    int st;
    waitpid(c, &st, 0);
    shmctl(shm_key, IPC_STAT, &ds);
    printf("child attached and exited: status %d, nattch %lu\n", st, (unsigned long)ds.shm_nattch);

    /* 4. Semaphore sets: ids, IPC_INFO, SEM_INFO, the stat commands. */
    sem_a = semget(IPC_PRIVATE, 3, IPC_CREAT | 0600);
    int sem_b = semget(0x5152, 2, IPC_CREAT | 0644);
    printf("semget: %d %d\n", sem_a, sem_b);
    struct seminfo mi;
    union semun arg = {.__buf = &mi};
    r = semctl(0, 0, IPC_INFO, arg);
    printf("IPC_INFO: %d semmsl %d semmns %d semopm %d semmni %d semvmx %d semusz %d semaem %d\n",
           r, mi.semmsl, mi.semmns, mi.semopm, mi.semmni, mi.semvmx, mi.semusz, mi.semaem);
    r = semctl(0, 0, SEM_INFO, arg);
    printf("SEM_INFO: %d semusz %d semaem %d\n", r, mi.semusz, mi.semaem);
    struct semid_ds sds;
    arg.buf = &sds;
    r = semctl(1, 0, SEM_STAT, arg);
    printf("SEM_STAT 1: is the id %d, nsems %lu\n", r == sem_b, (unsigned long)sds.sem_nsems);
    printf("SEM_STAT 5: %s\n", err(semctl(5, 0, SEM_STAT, arg)));

    /* 5. /proc/sysvipc. */
    char line[512];
    FILE *f = fopen("/proc/sysvipc/shm", "r");
    printf("/proc/sysvipc/shm: %s\n", f ? "ok" : strerrorname_np(errno));
    while (f && fgets(line, sizeof line, f)) {
        int key, id, nattch, uid;
        unsigned mode;
        unsigned long size;
        if (sscanf(line, "%d %d %o %lu %*d %*d %d %d", &key, &id, &mode, &size, &nattch, &uid) == 6)
            printf("  key %d id %d mode %o size %lu nattch %d uid %d\n", key, id, mode, size,
                   nattch, uid);
    }
    if (f)
        fclose(f);
    f = fopen("/proc/sysvipc/sem", "r");
    printf("/proc/sysvipc/sem: %s\n", f ? "ok" : strerrorname_np(errno));
    while (f && fgets(line, sizeof line, f)) {
        int key, id, nsems, uid;
        unsigned mode;
        if (sscanf(line, "%d %d %o %d %d", &key, &id, &mode, &nsems, &uid) == 5)
            printf("  key %d id %d mode %o nsems %d uid %d\n", key, id, mode, nsems, uid);
    }
    if (f)
        fclose(f);

    /* 6. Another user's view. */
    as_nobody(nobody_looks);

    /* 7. The tunables, written by root and enforced. */
    show_tunable("sem");
    show_tunable("msgmnb");
    printf("shmmax = 8192: %s\n", set_tunable("shmmax", "8192\n"));
    show_tunable("shmmax");
    printf("shmget(8193): %s\n", err(shmget(IPC_PRIVATE, 8193, IPC_CREAT | 0600)));
    int small = shmget(IPC_PRIVATE, 8192, IPC_CREAT | 0600);
    printf("shmget(8192): %s\n", err(small));
    shmctl(small, IPC_RMID, NULL);
    printf("shmmax = -1: %s\n", set_tunable("shmmax", "-1"));
    printf("shmmax = abc: %s\n", set_tunable("shmmax", "abc"));
    printf("shmmni = 40000: %s\n", set_tunable("shmmni", "40000"));
    printf("shmmni = 2: %s\n", set_tunable("shmmni", "2"));
    printf("shmget, 2 of 2: %s\n", err(shmget(IPC_PRIVATE, 100, IPC_CREAT | 0600)));
    printf("shmmni = 4096: %s\n", set_tunable("shmmni", "4096"));
    printf("shmall = 4: %s\n", set_tunable("shmall", "4"));
    printf("shmget past shmall: %s\n", err(shmget(IPC_PRIVATE, 100, IPC_CREAT | 0600)));
    printf("sem = 2 5 1 40000: %s\n", set_tunable("sem", "2 5 1 40000"));
    printf("sem = 2 6 1: %s\n", set_tunable("sem", "2 6 1"));
    show_tunable("sem");
    printf("semget(3): %s\n", err(semget(IPC_PRIVATE, 3, IPC_CREAT | 0600)));
    printf("semget(2) past semmns: %s\n", err(semget(IPC_PRIVATE, 2, IPC_CREAT | 0600)));
    struct sembuf two[2] = {{0, 1, 0}, {1, 1, 0}};
    printf("semop of 2 past semopm: %s\n", err(semop(sem_b, two, 2)));
    printf("msgmax = 100: %s\n", set_tunable("msgmax", "100"));
    int q = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    struct {
        long type;
        char text[200];
    } m = {1, ""};
    printf("msgsnd(101): %s\n", err(msgsnd(q, &m, 101, IPC_NOWAIT)));
    printf("msgsnd(100): %s\n", err(msgsnd(q, &m, 100, IPC_NOWAIT)));
    printf("msgmni = 1: %s\n", set_tunable("msgmni", "1"));
    printf("msgget, 1 of 1: %s\n", err(msgget(IPC_PRIVATE, IPC_CREAT | 0600)));
    msgctl(q, IPC_RMID, NULL);

    shmdt(p);
    shmctl(shm_a, IPC_RMID, NULL);
    shmctl(shm_key, IPC_RMID, NULL);
    semctl(sem_a, 0, IPC_RMID);
    semctl(sem_b, 0, IPC_RMID);
    printf("done\n");
    return 0;
}
