/* threads: pthreads under a mutex and condition variables, thread-local storage, join, and a
 * detached thread; prints the same lines natively and in a sandbox. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define N 4
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long total;
static int ready;
static __thread long mine;

static void *work(void *arg) {
    long id = (long)arg;
    pthread_mutex_lock(&mu);
    while (!ready) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (long i = 0; i < 200000; i++) {
        mine += i % (id + 2);
    }
    for (int k = 0; k < 1000; k++) {
        pthread_mutex_lock(&mu);
        total += 1;
        pthread_mutex_unlock(&mu);
    }
    return (void *)mine;
}

int main(void) {
    pthread_t th[N];
    for (long i = 0; i < N; i++)
        if (pthread_create(&th[i], 0, work, (void *)i)) { perror("pthread_create"); return 1; }
    usleep(10000);
    pthread_mutex_lock(&mu);
    ready = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    long sum = 0;
    for (int i = 0; i < N; i++) {
        void *r;
        pthread_join(th[i], &r);
        printf("thread %d: %ld\n", i, (long)r);
        sum += (long)r;
    }
    printf("total %ld, sum %ld, main tls %ld\n", total, sum, mine);
    return 0;
}
