/* null_write: writes to address 0. Must die of SIGSEGV (status 139). */
#include <stdio.h>

int main(void) {
    printf("null_write: writing to NULL\n");
    fflush(stdout);
    volatile int *p = (volatile int *)0;
    *p = 42;
    printf("null_write: still alive (wrong)\n");
    return 0;
}
