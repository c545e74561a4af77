/* http_probe: GET / from 127.0.0.1:PORT (default 8080); exit 0 when the answer holds "hello".
 * scripts/bench-runsc-snapshot.sh runs it inside a gVisor sandbox (runsc exec) to see a
 * server answer where the sandbox has no interface the host can reach. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(argc > 1 ? atoi(argv[1]) : 8080)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0)
        return 1;
    const char req[] = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(s, req, sizeof req - 1) != (ssize_t)(sizeof req - 1))
        return 1;
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(s, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    return strstr(buf, "hello") ? 0 : 1;
}
