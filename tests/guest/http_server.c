/* http_server PORT: a single-threaded HTTP/1.1 server.
 *
 * Answers every request with 200 and the body
 *   "hello from http_server: request N path PATH\n"
 * where N counts requests from 1. Keeps connections alive unless the client
 * sends "Connection: close" (or speaks HTTP/1.0 without keep-alive).
 * GET /quit answers, then exits 0. Uses socket, setsockopt, bind, listen,
 * accept4, poll, read, write and close.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 16384

static unsigned long served;

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Finds header NAME (case-insensitive) in the header block; copies its value. */
static int header(const char *hdrs, const char *name, char *out, size_t outlen) {
    size_t nl = strlen(name);
    for (const char *line = hdrs; line && *line;) {
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t len = strcspn(v, "\r\n");
            if (len >= outlen)
                len = outlen - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return 1;
        }
        line = strstr(line, "\r\n");
        if (line)
            line += 2;
    }
    return 0;
}

/* Serves one connection; returns 1 when a /quit request was answered. */
static int serve(int c) {
    static char buf[BUF];
    size_t have = 0;
    for (;;) {
        char *end;
        while ((end = memmem(buf, have, "\r\n\r\n", 4)) == NULL) {
            if (have == sizeof buf)
                return 0; /* request too large: drop the connection */
            struct pollfd pfd = {.fd = c, .events = POLLIN};
            int pr = poll(&pfd, 1, 30000);
            if (pr <= 0)
                return 0; /* idle keep-alive connection or error */
            ssize_t r = read(c, buf + have, sizeof buf - have);
            if (r <= 0)
                return 0;
            have += (size_t)r;
        }
        size_t hlen = (size_t)(end - buf) + 4;
        end[2] = 0; /* terminate the header block after the last CRLF */

        char method[16] = "", path[1024] = "", version[16] = "";
        if (sscanf(buf, "%15s %1023s %15s", method, path, version) != 3) {
            static const char bad[] =
                "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            write_all(c, bad, sizeof bad - 1);
            return 0;
        }
        const char *hdrs = strstr(buf, "\r\n") + 2;
        char conn[64] = "", clen[32] = "";
        int keep = strcmp(version, "HTTP/1.0") != 0;
        if (header(hdrs, "Connection", conn, sizeof conn))
            keep = strcasecmp(conn, "close") != 0 &&
                   (keep || strcasecmp(conn, "keep-alive") == 0);
        size_t body_len = header(hdrs, "Content-Length", clen, sizeof clen) ? strtoul(clen, 0, 10) : 0;
        int quit = strcmp(path, "/quit") == 0;
        if (quit)
            keep = 0;
        /* A request that takes a while (in flight when a hibernate is asked for). */
        if (strcmp(path, "/slow") == 0)
            usleep(800 * 1000);

        served++;
        char body[1200], resp[1600];
        int bl = snprintf(body, sizeof body, "hello from http_server: request %lu path %s\n", served, path);
        int rl = snprintf(resp, sizeof resp,
                          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                          "Connection: %s\r\n\r\n%s",
                          bl, keep ? "keep-alive" : "close", body);
        if (write_all(c, resp, (size_t)rl) != 0)
            return quit;
        if (!keep)
            return quit;

        /* Drop this request and its body from the buffer. */
        size_t used = hlen + body_len;
        if (used <= have) {
            memmove(buf, buf + used, have - used);
            have -= used;
        } else {
            size_t left = used - have;
            have = 0;
            while (left > 0) {
                ssize_t r = read(c, buf, left < sizeof buf ? left : sizeof buf);
                if (r <= 0)
                    return 0;
                left -= (size_t)r;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: http_server PORT\n");
        return 2;
    }
    int port = atoi(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        perror("socket");
        return 1;
    }
    int one = 1;
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        perror("setsockopt");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("bind");
        return 1;
    }
    if (listen(s, 128) != 0) {
        perror("listen");
        return 1;
    }
    printf("http_server: listening on port %d\n", port);
    fflush(stdout);
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("accept4");
            return 1;
        }
        int quit = serve(c);
        close(c);
        if (quit)
            break;
    }
    close(s);
    printf("http_server: served %lu requests\n", served);
    return 0;
}
