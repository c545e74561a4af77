/* Memory shared between processes: MAP_SHARED anonymous memory across fork, process-shared
 * mutexes and semaphores (futexes on shared memory), POSIX shared memory (/dev/shm), shared
 * file mappings coherent with read/write, System V shared memory, and the errors (EACCES for
 * a writable shared map of a read-only descriptor, SIGBUS past the end of the file). Prints
 * only what is the same natively and in torpor. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 20000

static void wait_child(pid_t p) {
    int st;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        printf("child failed: %x\n", st);
}

static sigjmp_buf jb;
static void on_bus(int sig) { siglongjmp(jb, sig); }

struct counter {
    pthread_mutex_t lock;
    long value;
    sem_t ping, pong;
};

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);

    /* 1. Anonymous shared memory across fork, both ways. */
    char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    strcpy(m, "parent");
    pid_t c = fork();
    if (c == 0) {
        printf("child sees: %s\n", m);
        strcpy(m + 4096 * 100, "from the child");
        _exit(0);
    }
    wait_child(c);
    printf("parent sees: %s\n", m + 4096 * 100);
    /* A private mapping stays private. */
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    strcpy(p, "private");
    c = fork();
    if (c == 0) {
        strcpy(p, "changed");
        _exit(0);
    }
    wait_child(c);
    printf("private stays: %s\n", p);

    /* 2. A process-shared mutex: two processes add ROUNDS each. */
    struct counter *k = mmap(NULL, sizeof *k, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&k->lock, &ma);
    sem_init(&k->ping, 1, 0);
    sem_init(&k->pong, 1, 0);
    c = fork();
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&k->lock);
        long v = k->value;
        if (i % 1000 == 0)
            sched_yield();
        k->value = v + 1;
        pthread_mutex_unlock(&k->lock);
    }
    if (c == 0)
        _exit(0);
    wait_child(c);
    printf("mutex counter: %ld\n", k->value);

    /* 3. Semaphores: 200 ping-pongs between processes (each wait sleeps on a futex). */
    c = fork();
    if (c == 0) {
        for (int i = 0; i < 200; i++) {
            sem_wait(&k->ping);
            k->value++;
            sem_post(&k->pong);
        }
        _exit(0);
    }
    for (int i = 0; i < 200; i++) {
        sem_post(&k->ping);
        sem_wait(&k->pong);
    }
    wait_child(c);
    printf("ping-pong counter: %ld\n", k->value);

    /* 4. POSIX shared memory: the child maps the object on its own. */
    shm_unlink("/torpor-shm-test");
    int fd = shm_open("/torpor-shm-test", O_CREAT | O_EXCL | O_RDWR, 0600);
    printf("shm_open: %s\n", fd >= 0 ? "ok" : strerrorname_np(errno));
    ftruncate(fd, 8192);
    char *s = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    c = fork();
    if (c == 0) {
        int f2 = shm_open("/torpor-shm-test", O_RDWR, 0);
        char *s2 = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, f2, 0);
        strcpy(s2 + 5000, "posix shm from the child");
        _exit(0);
    }
    wait_child(c);
    printf("posix shm: %s\n", s + 5000);
    char buf[64] = {0};
    pread(fd, buf, 24, 5000);
    printf("read() sees the mapping: %s\n", buf);
    pwrite(fd, "written by pwrite", 18, 100);
    printf("the mapping sees write(): %s\n", s + 100);
    struct stat st;
    fstat(fd, &st);
    printf("size: %ld\n", (long)st.st_size);
    munmap(s, 8192);
    close(fd);
    printf("shm_unlink: %d\n", shm_unlink("/torpor-shm-test"));

    /* 5. Errors. */
    int ro = open("/etc/passwd", O_RDONLY);
    if (ro < 0)
        ro = open("/bin/shared_memory", O_RDONLY);
    errno = 0;
    void *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
    printf("writable shared map of a read-only fd: %s\n", w == MAP_FAILED ? strerrorname_np(errno) : "mapped");
    char *r = mmap(NULL, 4096, PROT_READ, MAP_SHARED, ro, 0);
    printf("read-only shared map: %s\n", r == MAP_FAILED ? strerrorname_np(errno) : "mapped");
    errno = 0;
    printf("mprotect to write: %s\n", mprotect(r, 4096, PROT_READ | PROT_WRITE) == 0 ? "ok" : strerrorname_np(errno));
    close(ro);

    char path[] = "/tmp/torpor-shm-fileXXXXXX";
    fd = mkstemp(path);
    ftruncate(fd, 100);
    char *f = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    f[10] = 'x';
    signal(SIGBUS, on_bus);
    int sig = sigsetjmp(jb, 1);
    if (sig == 0) {
        volatile char v = f[2 * 4096];
        (void)v;
        printf("past the end: no signal\n");
    } else {
        printf("past the end: signal %d\n", sig);
    }
    pread(fd, buf, 1, 10);
    printf("file byte: %c\n", buf[0]);
    unlink(path);

    /* 6. System V shared memory. */
    int id = shmget(IPC_PRIVATE, 10000, IPC_CREAT | 0600);
    printf("shmget: %s\n", id >= 0 ? "ok" : strerrorname_np(errno));
    char *sv = shmat(id, NULL, 0);
    printf("shmat: %s\n", sv == (void *)-1 ? strerrorname_np(errno) : "ok");
    struct shmid_ds ds;
    shmctl(id, IPC_STAT, &ds);
    printf("segsz: %zu nattch: %lu\n", (size_t)ds.shm_segsz, (unsigned long)ds.shm_nattch);
    c = fork();
    if (c == 0) {
        strcpy(sv + 9000, "sysv from the child");
        shmdt(sv);
        _exit(0);
    }
    wait_child(c);
    printf("sysv: %s\n", sv + 9000);
    char *sv2 = shmat(id, NULL, SHM_RDONLY);
    printf("second attach sees: %s\n", sv2 + 9000);
    shmctl(id, IPC_STAT, &ds);
    printf("nattch: %lu\n", (unsigned long)ds.shm_nattch);
    shmdt(sv2);
    printf("IPC_RMID: %d\n", shmctl(id, IPC_RMID, NULL));
    printf("still attached: %s\n", sv + 9000);
    shmdt(sv);
    errno = 0;
    printf("shmat after removal: %s\n", shmat(id, NULL, 0) == (void *)-1 ? strerrorname_np(errno) : "ok");
    errno = 0;
    printf("shmget(bad size): %s\n", shmget(IPC_PRIVATE, 0, IPC_CREAT | 0600) < 0 ? strerrorname_np(errno) : "ok");
    int key_id = shmget(0x7470, 4096, IPC_CREAT | IPC_EXCL | 0600);
    errno = 0;
    printf("shmget(existing key, IPC_EXCL): %s\n", shmget(0x7470, 4096, IPC_CREAT | IPC_EXCL | 0600) < 0 ? strerrorname_np(errno) : "ok");
    printf("shmget(existing key): %d\n", shmget(0x7470, 4096, 0) == key_id);
    shmctl(key_id, IPC_RMID, NULL);

    /* 7. System V semaphores between processes. */
    union semun {
        int val;
        struct semid_ds *buf;
        unsigned short *array;
    } arg;
    int sem = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
    printf("semget: %s\n", sem >= 0 ? "ok" : strerrorname_np(errno));
    struct semid_ds sds;
    arg.buf = &sds;
    semctl(sem, 0, IPC_STAT, arg);
    printf("nsems: %lu\n", (unsigned long)sds.sem_nsems);
    arg.val = 0;
    semctl(sem, 0, SETVAL, arg);
    struct sembuf take = {0, -1, 0}, give = {0, 1, 0}, nowait = {1, -1, IPC_NOWAIT};
    errno = 0;
    printf("IPC_NOWAIT on 0: %s\n", semop(sem, &nowait, 1) < 0 ? strerrorname_np(errno) : "ok");
    struct timespec ts = {0, 20000000};
    errno = 0;
    printf("semtimedop timeout: %s\n", semtimedop(sem, &take, 1, &ts) < 0 ? strerrorname_np(errno) : "ok");
    c = fork();
    if (c == 0) {
        /* Blocks until the parent gives. */
        if (semop(sem, &take, 1) != 0)
            _exit(1);
        struct sembuf undo = {1, 5, SEM_UNDO};
        semop(sem, &undo, 1);
        _exit(semctl(sem, 1, GETVAL) == 5 ? 0 : 2);
    }
    usleep(20000);
    semop(sem, &give, 1);
    wait_child(c);
    printf("after the child: sem0=%d sem1=%d (SEM_UNDO)\n", semctl(sem, 0, GETVAL), semctl(sem, 1, GETVAL));
    unsigned short all[2] = {3, 4};
    arg.array = all;
    semctl(sem, 0, SETALL, arg);
    unsigned short got[2] = {0, 0};
    arg.array = got;
    semctl(sem, 0, GETALL, arg);
    printf("GETALL: %u %u\n", got[0], got[1]);
    struct sembuf both[2] = {{0, -3, 0}, {1, -5, IPC_NOWAIT}};
    errno = 0;
    printf("atomic failure: %s sem0=%d\n", semop(sem, both, 2) < 0 ? strerrorname_np(errno) : "ok", semctl(sem, 0, GETVAL));
    c = fork();
    if (c == 0) {
        struct sembuf wait0 = {0, -10, 0};
        int r = semop(sem, &wait0, 1);
        _exit(r < 0 && errno == EIDRM ? 0 : 3);
    }
    usleep(20000);
    printf("IPC_RMID: %d\n", semctl(sem, 0, IPC_RMID));
    wait_child(c);
    errno = 0;
    printf("semop after removal: %s\n", semop(sem, &give, 1) < 0 ? strerrorname_np(errno) : "ok");
    printf("done\n");
    return 0;
}
