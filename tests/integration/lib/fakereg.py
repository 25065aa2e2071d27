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
  --fail-blobs N       the first N blob GETs get HTTP 503 (a registry in
                       trouble, for transfer_retries)
"""
import argparse
import http.client
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

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
A = ap.parse_args()


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
        self.wfile.write(body)

    def do_GET(self):
        self.record()
        if self.path.startswith("/token"):
            if A.big_token:
                return stream(self, A.big_token, "application/json")
            return self.reply(200, json.dumps({"token": A.token}).encode(), [("Content-Type", "application/json")])
        if not self.path.startswith("/v2/"):
            return self.reply(404)
        if A.bearer and self.headers.get("Authorization", "") != "Bearer " + A.token:
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
        if A.fail_blobs > 0 and "/blobs/" in self.path:
            A.fail_blobs -= 1
            return self.reply(503, b'{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}')
        if A.redirect_blobs and "/blobs/" in self.path:
            return self.reply(307, headers=[("Location", A.redirect_blobs + self.path)])
        if not A.upstream:
            return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"not here"}]}')
        c = http.client.HTTPConnection(A.upstream, timeout=30)
        fwd = {k: v for k, v in self.headers.items() if k.lower() == "accept"}
        c.request("GET", self.path, headers=fwd)
        r = c.getresponse()
        body = r.read()
        keep = ("content-type", "docker-content-digest", "location")
        self.reply(r.status, body, [(k, v) for k, v in r.getheaders() if k.lower() in keep])
        c.close()


HTTPServer(("127.0.0.1", A.port), H).serve_forever()
