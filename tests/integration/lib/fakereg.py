#!/usr/bin/python3
"""A scriptable stand-in for a registry, a mirror, a token realm or a blob
store, for the credential-scoping tests of runtime-import.sh. It records
every request it gets (one JSON line: path and Authorization header) so a
test can show which secrets reached which host.

usage: fakereg.py PORT LOG [options]
  --bearer REALM       /v2/... needs "Bearer TOKEN"; otherwise 401 with a
                       Bearer challenge naming REALM
  --token TOKEN        what GET /token... hands out (to anyone; default tok)
  --upstream HOST:PORT forward authorised /v2/... GETs to that registry
                       (plain http); without it they get 404
  --redirect-blobs URL answer blob GETs with 307 to URL + the same path
  --big-manifest N     authorised manifest GETs get N bytes (no length)
  --big-token N        the token answer is N bytes of JSON (no length)
  --ignore-range       forward blob GETs without their Range header (a
                       proxy that ignores Range: the whole blob, 200)
  --corrupt-ranges     flip a byte in the middle of every 206 answer
  --token-ttl S        each token the realm hands out expires S seconds
                       later: a request with it then gets 401
  --delay S            wait S seconds before answering a blob request
"""
import argparse
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("log")
ap.add_argument("--bearer")
ap.add_argument("--token", default="tok")
ap.add_argument("--upstream")
ap.add_argument("--redirect-blobs")
ap.add_argument("--big-manifest", type=int, default=0)
ap.add_argument("--big-token", type=int, default=0)
ap.add_argument("--ignore-range", action="store_true")
ap.add_argument("--corrupt-ranges", action="store_true")
ap.add_argument("--token-ttl", type=float, default=0)
ap.add_argument("--delay", type=float, default=0)
A = ap.parse_args()
ISSUED = {}  # --token-ttl: token -> when it was handed out
LOCK = threading.Lock()


def new_token():
    if not A.token_ttl:
        return A.token
    with LOCK:
        t = "%s-%d" % (A.token, len(ISSUED))
        ISSUED[t] = time.monotonic()
    return t


def token_ok(auth):
    if not A.token_ttl:
        return auth == "Bearer " + A.token
    with LOCK:
        t = ISSUED.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None
    return t is not None and time.monotonic() - t < A.token_ttl


def stream(h, n, ctype):
    """n bytes with no Content-Length: the client has to cap what it reads."""
    h.protocol_version = "HTTP/1.0"
    h.send_response(200)
    h.send_header("Content-Type", ctype)
    h.send_header("Connection", "close")
    h.end_headers()
    chunk = b" " * 65536
    try:
        while n > 0:
            h.wfile.write(chunk[:n])
            n -= 65536
    except (BrokenPipeError, ConnectionResetError):
        pass


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def record(self):
        with open(A.log, "a") as f:
            f.write(json.dumps({"path": self.path, "auth": self.headers.get("Authorization", "")}) + "\n")

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self.record()
        if self.path.startswith("/token"):
            if A.big_token:
                return stream(self, A.big_token, "application/json")
            return self.reply(200, json.dumps({"token": new_token()}).encode(), [("Content-Type", "application/json")])
        if not self.path.startswith("/v2/"):
            return self.reply(404)
        if A.bearer and not token_ok(self.headers.get("Authorization", "")):
            parts = self.path.split("/")
            name = "/".join(parts[2:-2]) if len(parts) > 4 else ""
            ch = 'Bearer realm="%s",service="fake"' % A.bearer
            if name:
                ch += ',scope="repository:%s:pull"' % name
            return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', [("WWW-Authenticate", ch)])
        if self.path == "/v2/":
            return self.reply(200, b"{}")
        if A.big_manifest and "/manifests/" in self.path:
            return stream(self, A.big_manifest, "application/vnd.oci.image.manifest.v1+json")
        if A.redirect_blobs and "/blobs/" in self.path:
            return self.reply(307, headers=[("Location", A.redirect_blobs + self.path)])
        if not A.upstream:
            return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"not here"}]}')
        if A.delay and "/blobs/" in self.path:
            time.sleep(A.delay)
        c = http.client.HTTPConnection(A.upstream, timeout=30)
        want = ("accept",) if A.ignore_range else ("accept", "range")
        fwd = {k: v for k, v in self.headers.items() if k.lower() in want}
        c.request(self.command, self.path, headers=fwd)
        r = c.getresponse()
        body = r.read()
        if A.corrupt_ranges and r.status == 206 and body:
            body = body[: len(body) // 2] + bytes([body[len(body) // 2] ^ 0x20]) + body[len(body) // 2 + 1:]
        keep = ("content-type", "docker-content-digest", "location", "content-range")
        self.reply(r.status, body, [(k, v) for k, v in r.getheaders() if k.lower() in keep])
        c.close()

    do_HEAD = do_GET


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up early (a probe, a stopped transfer) is not news


Server(("127.0.0.1", A.port), H).serve_forever()
