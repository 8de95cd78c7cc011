"""An HTTP(S) server on 127.0.0.1 for the tests of images from URLs: it counts hits per path and
records the Host headers and TLS server names it sees."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

IMAGE = b"\x89PNG not really, but bytes all the same" * 10


class Helper:
    """An HTTP(S) server on 127.0.0.1 that counts hits per path and records the Host headers
    and TLS server names it sees. /img answers IMAGE, /big 5,000 bytes, /to?u=URL redirects
    there, /drip sends a byte every 0.3 s."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self.body = IMAGE  # what /img answers
        self.hits: Counter = Counter()
        self.hosts: list[str] = []
        self.server_names: list[str | None] = []
        self.stop = threading.Event()
        helper = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                helper.hits[url.path] += 1
                helper.hosts.append(self.headers.get("Host"))
                if url.path == "/to":
                    self.send_response(302)
                    self.send_header("Location", parse_qs(url.query)["u"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if url.path == "/drip":
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    for _ in range(2000):  # ten minutes of dripping if nothing stops it
                        if helper.stop.is_set():
                            return
                        try:
                            self.wfile.write(b"x")
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(0.3)
                    return
                body = {"/img": helper.body, "/big": b"x" * 5000}.get(url.path)
                self.send_response(200 if body else 404)
                body = body or b"missing"
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sock, name, context: self.server_names.append(name)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
