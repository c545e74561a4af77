"""An HTTP server resizing a picture with Pillow on every request (a
FunctionBench-style image workload for benchmarks).

    python3 resize_server.py PORT

At start it generates a deterministic 2400x1800 picture and keeps it in
memory as a JPEG of about 2.6 MB; then it prints "ready" and serves, one
request at a time (http.server.HTTPServer, not the threading one):

    GET /resize?size=small   decode the JPEG, LANCZOS resize to 160x120
    GET /resize?size=large   decode the JPEG, LANCZOS resize to 1200x900

each re-encoded as a JPEG (quality 85). The answer is one line of text:
"size=WxH bytes=N sha256=HEX" of the encoded result. Any other path: 404.
"""

import http.server
import io
import sys
import urllib.parse

from PIL import Image

from textserver import TextHandler
from workloads import make_image, sha256

SIZES = {"small": (160, 120), "large": (1200, 900)}


def make_source():
    buf = io.BytesIO()
    make_image(2400, 1800, noise=0.16).save(buf, "JPEG", quality=95)
    return buf.getvalue()


SOURCE = make_source()


def resize(size):
    img = Image.open(io.BytesIO(SOURCE))
    out = img.resize(SIZES[size], Image.LANCZOS)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=85)
    data = buf.getvalue()
    return f"size={out.size[0]}x{out.size[1]} bytes={len(data)} sha256={sha256(data)}\n"


class Handler(TextHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        size = query.get("size", ["small"])[0]
        if url.path != "/resize" or size not in SIZES:
            self.send_error(404)
            return
        self.reply(resize(size))


def main():
    port = int(sys.argv[1])
    server = http.server.HTTPServer(("0.0.0.0", port), Handler)
    print(f"ready source_bytes={len(SOURCE)}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
