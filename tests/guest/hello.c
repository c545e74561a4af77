/* hello: the smallest guest. Built static (must run) and dynamic (torpor must
 * refuse it with a "dynamic" error until dynamic ELF support lands). */
#include <stdio.h>

int main(int argc, char **argv) {
    printf("hello from a guest, %d argument(s)\n", argc - 1);
    for (int i = 1; i < argc; i++)
        printf("arg %d: %s\n", i, argv[i]);
    return 0;
}
