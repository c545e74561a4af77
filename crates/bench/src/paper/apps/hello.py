# Python hello-world for `torpor-bench paper`: a single-threaded http.server.
import http.server
import sys


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from python\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
http.server.HTTPServer(("0.0.0.0", port), Hello).serve_forever()
