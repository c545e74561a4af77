/* forkbomb: forks children that wait forever until fork fails, then prints how many it made
 * and why fork failed, and exits 0 (the sandbox's init: its exit ends the children). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    int made = 0;
    for (;;) {
        pid_t p = fork();
        if (p == 0) {
            pause();
            _exit(0);
        }
        if (p < 0) {
            printf("fork failed after %d: %s\n", made, strerror(errno));
            break;
        }
        if (++made >= 100000) {
            printf("no limit after %d\n", made);
            break;
        }
    }
    return 0;
}
