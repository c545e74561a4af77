/* A process creates 2,000 threads over its life, 8 at a time, each doing floating-point
 * work (its FPU state starts as its creator's): more than the 255 vCPUs a VM may have at once,
 * so ended threads' vCPUs must be reused. */
#include <pthread.h>
#include <stdio.h>

static double results[8];

static void *work(void *arg) {
    long i = (long)arg;
    double x = 1.0;
    for (int k = 0; k < 1000; k++)
        x = x * 1.0001 + 0.5 / (k + 1);
    results[i % 8] = x;
    return (void *)(i + 1);
}

int main(void) {
    long sum = 0;
    for (long round = 0; round < 250; round++) {
        pthread_t t[8];
        for (long j = 0; j < 8; j++) {
            if (pthread_create(&t[j], NULL, work, (void *)(round * 8 + j)) != 0) {
                printf("pthread_create failed at thread %ld\n", round * 8 + j);
                return 1;
            }
        }
        for (int j = 0; j < 8; j++) {
            void *r;
            pthread_join(t[j], &r);
            sum += (long)r;
        }
    }
    printf("threads: 2000, sum of results: %ld, last value: %.6f\n", sum, results[7]);
    return 0;
}
