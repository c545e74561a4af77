/*
 * sandbox_limits PORT: probes what a sandbox must refuse or report, printing one line each:
 *   - two unknown syscalls (lookup_dcookie, gone from Linux 6.9, and a number no kernel has),
 *     each called twice: ENOSYS;
 *   - a TCP connect to 127.0.0.1:PORT, a host listener outside the sandbox: refused.
 * Natively the connect succeeds (that is the point of comparing).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    for (int i = 0; i < 2; i++) {
        long r = syscall(212, 0, 0, 0); /* lookup_dcookie */
        printf("lookup_dcookie: %ld %s\n", r, r < 0 ? strerror(errno) : "ok");
        r = syscall(1000);
        printf("syscall 1000: %ld %s\n", r, r < 0 ? strerror(errno) : "ok");
    }
    if (argc > 1) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        int r = connect(s, (struct sockaddr *)&a, sizeof a);
        printf("connect to host port: %s\n", r == 0 ? "connected" : strerror(errno));
    }
    return 0;
}
