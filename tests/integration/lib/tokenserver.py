#!/usr/bin/python3
"""A minimal registry token server for tests: issues RS256 JWTs that
Distribution 2.8 ("auth: token") accepts, for users in a fixed list.

usage: tokenserver.py PORT KEY.pem CERT.pem SERVICE USER:PASSWORD
GET /token?service=S&scope=repository:NAME:pull with HTTP basic auth ->
{"token": JWT}. Signs with the openssl CLI (no Python crypto modules needed).
The certificate goes in the JWT header (x5c); the registry trusts it through
its rootcertbundle.
"""
import base64
import json
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, KEY, CERT, SERVICE, CRED = sys.argv[1:6]


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def cert_der():
    pem = open(CERT).read()
    body = "".join(l for l in pem.splitlines() if "CERTIFICATE" not in l)
    return body  # standard base64 of the DER, as x5c wants


def sign(payload):
    header = {"typ": "JWT", "alg": "RS256", "x5c": [cert_der()]}
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(payload).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing_input.encode(),
                         stdout=subprocess.PIPE, check=True).stdout
    return signing_input + "." + b64(sig)


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic ") or base64.b64decode(auth[6:]).decode() != CRED:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="token"')
            self.end_headers()
            return
        access = []
        for scope in q.get("scope", []):
            typ, name, actions = scope.split(":", 2)
            access.append({"type": typ, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        tok = sign({"iss": "skiff-test", "sub": CRED.split(":")[0], "aud": q.get("service", [SERVICE])[0],
                    "exp": now + 300, "nbf": now - 10, "iat": now, "jti": str(now), "access": access})
        body = json.dumps({"token": tok, "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer(("127.0.0.1", int(PORT)), H).serve_forever()
