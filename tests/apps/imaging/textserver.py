"""What the benchmark servers share: a request handler that answers one line of plain
text and logs nothing. Standard library only, so that importing it adds nothing to a
server's start-up."""

import http.server


class TextHandler(http.server.BaseHTTPRequestHandler):
    def reply(self, text):
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
