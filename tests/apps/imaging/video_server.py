"""An HTTP server converting a video to grayscale with OpenCV on every
request (FunctionBench's video_processing, for benchmarks).

    python3 video_server.py PORT

At start it writes a deterministic colour MJPG video (600 frames of 640x480)
in a fresh temporary directory, prints "ready" and serves one request at a
time (http.server.HTTPServer):

    GET /video   read the video with cv2.VideoCapture, cv2.cvtColor every
                 frame to grayscale, write it with cv2.VideoWriter (MJPG)

The answer is one line: "frames=N gray_sha256=HEX out_bytes=N out_sha256=HEX"
(the decoded grayscale frames' and the written file's checksums). Any other
path: 404. SIGTERM stops it and removes its temporary directory.
"""

import http.server
import os
import shutil
import signal
import sys
import tempfile
import urllib.parse

from textserver import TextHandler
from workloads import gray_video, make_video, sha256

FRAMES, WIDTH, HEIGHT = 600, 640, 480


class Handler(TextHandler):
    def do_GET(self):
        if urllib.parse.urlsplit(self.path).path != "/video":
            self.send_error(404)
            return
        out = os.path.join(self.server.workdir, "gray.avi")
        frames, frames_sha = gray_video(self.server.source, out)
        with open(out, "rb") as f:
            data = f.read()
        os.unlink(out)
        self.reply(f"frames={frames} gray_sha256={frames_sha} "
                   f"out_bytes={len(data)} out_sha256={sha256(data)}\n")


def main():
    port = int(sys.argv[1])
    # SIGTERM ends the server through the `finally` below, which removes the videos.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    workdir = tempfile.mkdtemp(prefix="video-server-")
    try:
        source = os.path.join(workdir, "input.avi")
        make_video(source, FRAMES, WIDTH, HEIGHT)
        server = http.server.HTTPServer(("0.0.0.0", port), Handler)
        server.workdir, server.source = workdir, source
        print("ready", flush=True)
        server.serve_forever()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
