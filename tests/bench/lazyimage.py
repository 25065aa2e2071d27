#!/usr/bin/python3
"""Pushes a large test image for tests/bench/lazy.sh straight into a registry.

usage: lazyimage.py BASE_LAYOUT TAG REGISTRY REPO:TAG RANDOM_MB ZERO_MB

The image is BASE_LAYOUT's image TAG (an OCI layout: the bench uses the
debootstrap bookworm + python3 tree that tests/bench/import.sh makes) plus
one gzip layer holding /payload/random (RANDOM_MB MiB of random bytes from
`openssl rand`), /payload/zeros (ZERO_MB MiB of zeros) and /payload/small,
pushed to REGISTRY (http://HOST:PORT) as REPO:TAG with an OCI manifest; the
config runs `python3` with no entrypoint.

Nothing is written to disk here: the tar stream is made, compressed and
uploaded as it goes (one chunked PATCH of the registry's blob upload), so a
"20 GB" image needs no 20 GB of scratch. The layer is one gzip member whose
deflate stream is made of two pieces: the random bytes at level 0 (stored
blocks: what gzip -6 makes of random data too, at the speed of a copy) and
the zeros at level 1, joined at a sync flush (a byte boundary, not the last
block) -- so the gzip header and trailer are written here (10 and 8 bytes:
RFC 1952), since Python's zlib cannot change the level within one stream.
Prints one JSON line: the compressed size of every layer and of the image.
"""
import hashlib
import http.client
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.parse
import zlib

CHUNK = 4 << 20


class Upload:
    """One blob upload: POST, a streamed PATCH, PUT with the digest."""

    def __init__(self, reg, repo):
        u = urllib.parse.urlsplit(reg)
        self.host, self.repo = u.netloc, repo

    def conn(self):
        return http.client.HTTPConnection(self.host, timeout=600)

    def call(self, method, url, want=None, what="", **kw):
        """One request on a new connection; exits unless the status is WANT."""
        c = self.conn()
        c.request(method, url, **kw)
        r = c.getresponse()
        r.read()
        if want is not None and r.status != want:
            sys.exit(f"lazyimage: {what}: HTTP {r.status}")
        return r

    def exists(self, digest):
        return self.call("HEAD", f"/v2/{self.repo}/blobs/{digest}").status == 200

    def start(self):
        r = self.call("POST", f"/v2/{self.repo}/blobs/uploads/", 202, "upload start", headers={"Content-Length": "0"})
        return r.getheader("Location")

    def send(self, chunks):
        """Streams CHUNKS (an iterable of bytes) as the blob; returns (digest, size)."""
        loc = self.start()
        h, n = hashlib.sha256(), 0

        def counted():
            nonlocal n
            for b in chunks:
                h.update(b)
                n += len(b)
                yield b

        r = self.call("PATCH", loc, 202, "upload", body=counted(), encode_chunked=True,
                      headers={"Content-Type": "application/octet-stream", "Transfer-Encoding": "chunked"})
        digest = "sha256:" + h.hexdigest()
        loc = r.getheader("Location")
        sep = "&" if "?" in loc else "?"
        self.call("PUT", f"{loc}{sep}digest={digest}", 201, "upload end", headers={"Content-Length": "0"})
        return digest, n

    def blob(self, data):
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.exists(d):
            self.send([data])
        return d, len(data)

    def manifest(self, tag, data, mtype):
        self.call("PUT", f"/v2/{self.repo}/manifests/{tag}", 201, "manifest", body=data, headers={"Content-Type": mtype})


def random_bytes(n):
    """N random bytes, in chunks, from openssl rand (faster than the kernel's here)."""
    while n > 0:
        part = min(n, 1 << 30)
        p = subprocess.Popen(["openssl", "rand", str(part)], stdout=subprocess.PIPE)
        got = 0
        while got < part:
            b = p.stdout.read(min(CHUNK, part - got))
            if not b:
                sys.exit("lazyimage: openssl rand ended early")
            got += len(b)
            yield b
        p.stdout.close()
        if p.wait() != 0:
            sys.exit("lazyimage: openssl rand failed")
        n -= part


def zeros(n):
    z = bytes(CHUNK)
    while n > 0:
        yield z[:min(n, CHUNK)]
        n -= min(n, CHUNK)


def header(name, size, typ=tarfile.REGTYPE, mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.size, ti.type, ti.mode, ti.mtime = size, typ, mode, 1700000000
    ti.uname = ti.gname = "root"
    return ti.tobuf(tarfile.GNU_FORMAT)


def pad(n):
    return bytes(-n % 512)


def payload_layer(rnd, zer, diff):
    """The gzip layer's bytes, in chunks; DIFF (a sha256) gets the tar's."""
    crc, size = 0, 0
    yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # gzip: deflate, no flags, no mtime, OS unknown
    small = b"a small file after the payload\n"
    pieces = [
        (0, [header("payload/", 0, tarfile.DIRTYPE, 0o755), header("payload/random", rnd)],
         random_bytes(rnd), [pad(rnd), header("payload/zeros", zer)]),
        (1, [], zeros(zer), [pad(zer), header("payload/small", len(small)), small, pad(len(small)), bytes(1024)]),
    ]
    for i, (level, head, body, tail) in enumerate(pieces):
        c = zlib.compressobj(level, zlib.DEFLATED, -15)
        for part in (head, body, tail):
            for b in part:
                crc = zlib.crc32(b, crc)
                size += len(b)
                diff.update(b)
                out = c.compress(b)
                if out:
                    yield out
        yield c.flush(zlib.Z_FINISH if i == len(pieces) - 1 else zlib.Z_SYNC_FLUSH)
    yield crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    base, btag, reg, ref, rnd, zer = sys.argv[1:7]
    repo, tag = ref.rsplit(":", 1)
    rnd, zer = int(rnd) << 20, int(zer) << 20
    blob = lambda d: os.path.join(base, "blobs", "sha256", d.split(":")[1])
    idx = json.load(open(os.path.join(base, "index.json")))
    desc = [m for m in idx["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == btag]
    if not desc:
        sys.exit(f"lazyimage: {base} has no image tagged {btag}")
    man = json.load(open(blob(desc[0]["digest"])))
    cfg = json.load(open(blob(man["config"]["digest"])))
    up = Upload(reg, repo)
    t0 = time.time()
    for l in man["layers"]:
        if not up.exists(l["digest"]):
            with open(blob(l["digest"]), "rb") as f:
                d, n = up.send(iter(lambda: f.read(CHUNK), b""))
            if d != l["digest"]:
                sys.exit(f"lazyimage: {blob(l['digest'])} is not its digest")
    diff = hashlib.sha256()
    d, n = up.send(payload_layer(rnd, zer, diff))
    layers = man["layers"] + [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n}]
    cfg["rootfs"]["diff_ids"] = cfg["rootfs"]["diff_ids"] + ["sha256:" + diff.hexdigest()]
    cfg["config"] = {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["python3"], "WorkingDir": "/"}
    cd, cn = up.blob(json.dumps(cfg).encode())
    m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
         "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
         "layers": layers}
    up.manifest(tag, json.dumps(m).encode(), m["mediaType"])
    print(json.dumps({"ref": ref, "layers": [l["size"] for l in layers],
                      "compressed": sum(l["size"] for l in layers), "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
