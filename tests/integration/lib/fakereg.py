#!/usr/bin/python3
"""A scriptable stand-in for a registry, a mirror, a token realm or a blob
store, for the credential-scoping tests of runtime-import.sh and the
failure tests of image-scale.sh. It records every request it gets (one
JSON line when it comes: method, path, Authorization and Range headers,
how many requests are in flight; another with the status and the bytes of
body sent) so a test can show which secrets reached
which host, what was asked again, and what ran at once. One thread per
connection, as a real registry answers parallel downloads.

usage: fakereg.py PORT LOG [options]
  --bearer REALM       /v2/... needs "Bearer TOKEN"; otherwise 401 with a
                       Bearer challenge naming REALM
  --token TOKEN        what GET /token... hands out (to anyone; default tok)
  --upstream HOST:PORT forward authorised /v2/... GETs to that registry
                       (plain http); without it they get 404
  --redirect-blobs URL answer blob GETs with 307 to URL + the same path
  --big-manifest N     authorised manifest GETs get N bytes (no length)
  --big-token N        the token answer is N bytes of JSON (no length)
  --fail-blobs N       the first N blob GETs get HTTP 503 (a registry in
                       trouble, for transfer_retries)
  --blob-fault MODE    what the first GET of each blob gets (later GETs of
                       it are served well), forwarded from --upstream:
                       429:N    N answers 429 (Retry-After: 1) in a row
                       503      503 for every GET of a blob, for ever
                       reset:P  the answer cut by a TCP reset at P % of the blob
                       trunc:P  the answer ends (a clean close) at P % of the
                                blob, short of its Content-Length
                       stall:P  the answer stops at P % and nothing more comes
                                (until the client gives up on it)
                       flip     the blob's middle byte changed (digest mismatch)
  --token-uses N       with --bearer: each token the realm issues (tok-1,
                       tok-2, ...) is good for N requests, then expires (401)
  --no-digest-header   manifest answers without Docker-Content-Digest
  --blob-rate B        blob bytes sent at most B per second (a slow registry)
  --blob-delay S       each blob answer starts S seconds late
  --bind ADDR          listen on ADDR (default 127.0.0.1)
  --ignore-range       forward blob GETs without their Range header (a
                       proxy that ignores Range: the whole blob, 200)
  --corrupt-ranges [M] every 206 answer tampered with: M is middle (the
                       default: its middle byte flipped), first, last (its
                       first or last byte flipped) or shift:N (the blob's
                       bytes N later, or N earlier near its end: the right
                       length and Content-Range, the wrong bytes)
"""
import argparse
import http.client
import json
import socket
import struct
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
ap.add_argument("--fail-blobs", type=int, default=0)
ap.add_argument("--blob-fault", default="")
ap.add_argument("--token-uses", type=int, default=0)
ap.add_argument("--no-digest-header", action="store_true")
ap.add_argument("--blob-rate", type=int, default=0)
ap.add_argument("--blob-delay", type=float, default=0)
ap.add_argument("--bind", default="127.0.0.1")
ap.add_argument("--ignore-range", action="store_true")
ap.add_argument("--corrupt-ranges", nargs="?", const="middle", default="")
A = ap.parse_args()
LOCK = threading.Lock()
STATE = {"inflight": 0, "faults": {}, "tokens": {}}


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

    def record(self, status=None):
        """One line when a request comes (what it asks, how many run now,
        itself included) and one when it is answered (the status)."""
        if status is None:
            line = {"event": "begin", "method": self.command, "path": self.path,
                    "auth": self.headers.get("Authorization", ""), "range": self.headers.get("Range", ""),
                    "inflight": STATE["inflight"]}
        else:
            line = {"event": "end", "method": self.command, "path": self.path, "status": status,
                    "bytes": self.sent}
        with LOCK, open(A.log, "a") as f:
            f.write(json.dumps(line) + "\n")

    def head(self, code, headers, length):
        """The status line and headers (Content-Length: length, unless None)."""
        self.status_sent = code
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def reply(self, code, body=b"", headers=()):
        self.head(code, headers, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)
            self.sent += len(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        with LOCK:
            STATE["inflight"] += 1
        self.status_sent = None
        self.sent = 0
        self.record()
        try:
            self.serve()
        finally:
            with LOCK:
                STATE["inflight"] -= 1
            self.record(self.status_sent or 0)

    def fault(self):
        """The fault this blob GET gets, or None."""
        if not A.blob_fault or "/blobs/" not in self.path or self.command != "GET":
            return None
        kind, _, arg = A.blob_fault.partition(":")
        with LOCK:
            n = STATE["faults"].get(self.path, 0)
            STATE["faults"][self.path] = n + 1
        if kind == "503":
            return ("503", 0)
        if kind == "429":
            return ("429", 0) if n < int(arg) else None
        return (kind, int(arg or 0)) if n == 0 else None

    def body(self, data, headers, code):
        """Sends a blob's answer, cut, changed or slowed as the fault says."""
        f = self.fault()
        if f and f[0] in ("429", "503"):
            return self.reply(int(f[0]), b'{"errors":[{"code":"TOOMANYREQUESTS"}]}', [("Retry-After", "1")])
        if f and f[0] == "flip":
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        self.head(code, headers, len(data))
        cut = len(data)
        if f and f[0] in ("reset", "stall", "trunc"):
            cut = len(data) * f[1] // 100
        sent, chunk = 0, 16384
        try:
            while sent < cut:
                n = min(chunk, cut - sent)
                self.wfile.write(data[sent:sent + n])
                self.wfile.flush()
                sent += n
                self.sent = sent
                if A.blob_rate:
                    time.sleep(n / A.blob_rate)
            if f and f[0] == "stall":
                time.sleep(3600)  # the client cuts it (stall_timeout)
            if f and f[0] == "reset":
                time.sleep(0.3)  # what was sent arrives; then the reset
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
            if f and f[0] == "trunc":
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            pass

    def take_failure(self):
        """Whether this blob GET is one of the first --fail-blobs (503)."""
        with LOCK:
            if A.fail_blobs <= 0:
                return False
            A.fail_blobs -= 1
            return True

    def authorised(self):
        """Whether the request carries a good token (one use of it spent)."""
        got = self.headers.get("Authorization", "")
        if not A.token_uses:
            return got == "Bearer " + A.token
        with LOCK:
            left = STATE["tokens"].get(got[len("Bearer "):], 0) if got.startswith("Bearer ") else 0
            if left <= 0:
                return False
            STATE["tokens"][got[len("Bearer "):]] = left - 1
            return True

    def serve(self):
        if self.path.startswith("/token"):
            if A.big_token:
                return stream(self, A.big_token, "application/json")
            token = A.token
            if A.token_uses:
                with LOCK:
                    token = "tok-%d" % (len(STATE["tokens"]) + 1)
                    STATE["tokens"][token] = A.token_uses
            return self.reply(200, json.dumps({"token": token}).encode(), [("Content-Type", "application/json")])
        if not self.path.startswith("/v2/"):
            return self.reply(404)
        if A.bearer and not self.authorised():
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
        if "/blobs/" in self.path and self.take_failure():
            return self.reply(503, b'{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}')
        if A.redirect_blobs and "/blobs/" in self.path:
            return self.reply(307, headers=[("Location", A.redirect_blobs + self.path)])
        if not A.upstream:
            return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"not here"}]}')
        c = http.client.HTTPConnection(A.upstream, timeout=30)
        want = ("accept",) if A.ignore_range else ("accept", "range")
        fwd = {k: v for k, v in self.headers.items() if k.lower() in want}
        # --corrupt-ranges shift:N, a span's range (bytes=A-B): the same
        # length from N bytes on (N before, near the blob's end)
        a, _, b = fwd.get("Range", fwd.get("range", ""))[len("bytes="):].partition("-")
        shift = A.corrupt_ranges.startswith("shift:") and "/blobs/" in self.path and a and b
        if shift:
            n = int(A.corrupt_ranges[len("shift:"):])
            h = http.client.HTTPConnection(A.upstream, timeout=30)
            h.request("HEAD", self.path, headers={k: v for k, v in fwd.items() if k.lower() == "accept"})
            size = int(h.getresponse().getheader("Content-Length") or 0)
            h.close()
            d = n if int(b) + n < size else -n
            for k in [k for k in fwd if k.lower() == "range"]:
                fwd[k] = "bytes=%d-%d" % (int(a) + d, int(b) + d)
        c.request(self.command, self.path, headers=fwd)
        r = c.getresponse()
        body = r.read()
        if A.corrupt_ranges and r.status == 206 and body and not A.corrupt_ranges.startswith("shift:"):
            at = {"first": 0, "last": len(body) - 1}.get(A.corrupt_ranges, len(body) // 2)
            body = body[:at] + bytes([body[at] ^ 0x20]) + body[at + 1:]
        keep = ["content-type", "location", "content-range"]
        if not A.no_digest_header:
            keep.append("docker-content-digest")
        hdrs = [(k, v) for k, v in r.getheaders() if k.lower() in keep]
        if shift and r.status == 206:
            # (what was asked for, as if it were what came)
            total = r.getheader("Content-Range", "").rpartition("/")[2]
            hdrs = [(k, v) for k, v in hdrs if k.lower() != "content-range"]
            hdrs.append(("Content-Range", "bytes %s-%s/%s" % (a, b, total)))
        c.close()
        if self.command == "HEAD":
            return self.head(r.status, hdrs, r.getheader("Content-Length"))
        if "/blobs/" in self.path and r.status in (200, 206):
            time.sleep(A.blob_delay)
            return self.body(body, hdrs, r.status)
        self.reply(r.status, body, hdrs)


class Server(ThreadingHTTPServer):
    daemon_threads = True


Server((A.bind, A.port), H).serve_forever()
