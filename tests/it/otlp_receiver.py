#!/usr/bin/env python3
# A small OTLP/HTTP receiver for tests/it/trace*.sh.
#
#   otlp_receiver.py DIR PORT ok     answers every POST with 200 {} and keeps
#                                    it: DIR/req-N.json (the body) and
#                                    DIR/req-N.hdr (its headers, one
#                                    "name: value" line each, names lowercase),
#                                    each written whole (renamed into place)
#   otlp_receiver.py DIR PORT hang   accepts every connection and never
#                                    answers (a collector that hangs)
#
# It listens on 0.0.0.0:PORT, so that handler containers reach it through
# the Docker bridge's gateway, and writes DIR/ready once it listens.
import http.server
import os
import socket
import sys
import threading
import time

out, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
count = 0
lock = threading.Lock()


def keep(name, data):
    tmp = os.path.join(out, "." + name)
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, os.path.join(out, name))


def read_body(h):
    if h.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return h.rfile.read(int(h.headers.get("Content-Length", "0")))
    body = b""
    while True:
        size = int(h.rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return body
        body += h.rfile.read(size)
        h.rfile.readline()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global count
        body = read_body(self)
        with lock:
            count += 1
            n = count
        hdr = "".join("%s: %s\n" % (k.lower(), v) for k, v in self.headers.items())
        keep("req-%d.hdr" % n, hdr.encode())
        keep("req-%d.json" % n, body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


if mode == "ok":
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    open(os.path.join(out, "ready"), "w").close()
    srv.serve_forever()
else:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    open(os.path.join(out, "ready"), "w").close()
    held = []
    while True:
        c, _ = s.accept()
        held.append(c)  # read nothing, answer nothing
        with open(os.path.join(out, "accepted"), "a") as f:
            f.write("1\n")
