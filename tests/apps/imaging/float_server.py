"""An HTTP server running FunctionBench's float_operation on every request.

    python3 float_server.py PORT

Prints "ready" once listening and serves one request at a time
(http.server.HTTPServer):

    GET /float?n=N   for i in range(N): math.sin(i), math.cos(i), math.sqrt(i)
                     (N defaults to 1000000, at most 100000000)

The answer is one line: "n=N sum=S" where S is the sum of
sin(i) + cos(i) + sqrt(i) over the loop, printed with repr (so a native and a
sandboxed run can be compared exactly). Any other path, or a bad N: 404/400.
"""

import http.server
import math
import sys
import urllib.parse

from textserver import TextHandler

MAX_N = 100_000_000


def float_operations(n):
    total = 0.0
    for i in range(n):
        sin_i = math.sin(i)
        cos_i = math.cos(i)
        sqrt_i = math.sqrt(i)
        total += sin_i + cos_i + sqrt_i
    return total


class Handler(TextHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/float":
            self.send_error(404)
            return
        try:
            n = int(urllib.parse.parse_qs(url.query).get("n", ["1000000"])[0])
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_N:
            self.send_error(400, f"n must be an integer from 0 to {MAX_N}")
            return
        self.reply(f"n={n} sum={float_operations(n)!r}\n")


def main():
    port = int(sys.argv[1])
    server = http.server.HTTPServer(("0.0.0.0", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
