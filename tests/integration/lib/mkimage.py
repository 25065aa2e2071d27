#!/usr/bin/python3
"""Builds small OCI image layouts for skiff's import tests, offline.

usage: mkimage.py LAYOUT RECIPE [RECIPE...]
       mkimage.py LAYOUT --from-tar TAG FILE.tar gzip|zstd|none
         (one-layer image of an existing tar, for the benchmark)
       mkimage.py LAYOUT --from-tars TAG gzip|zstd|none FILE.tar [FILE.tar...]
         (one layer per tar, in order: the benchmark's large image)

Each recipe adds one tag to the OCI layout LAYOUT (created if missing):
  busybox      one gzip layer: busybox-static and its applets, /etc files,
               a setuid-root file, a hardlink, a fifo, a char device
  busybox-node busybox plus an empty /etc/hostname (the mount target the
               plugin binds the node's over), tagged "busybox"
  busybox-ep   busybox-node whose Entrypoint runs its arguments ("$@"), as
               NVIDIA's images' entrypoint script does, tagged "busybox-ep"
  multilayer   three layers: whiteouts (.wh.x), an opaque dir (.wh..wh..opq),
               a hardlink, symlinks, a file replaced by a directory
  zstd         busybox with zstd-compressed layers
  multi        an image index: linux/amd64 and linux/arm64 (/arch differs)
  evil-dotdot  a layer entry ../escape
  evil-symlink an absolute symlink out of the rootfs, then a file through it
  evil-hardlink a hardlink to ../../etc/passwd
  truncated    a gzip layer cut in the middle (digest matches the cut blob)
  multimember  busybox in a gzip layer of two concatenated members (valid gzip)
  lazy-smoke   busybox-node plus a layer with /payload/random: $LAZY_PAYLOAD_MB
               (default 64) MB of random bytes, for the lazy start's tests
  longnames    four layers: pax (long and non-ASCII names, a long symlink
               target), GNU (long names and link targets), files of 0-513
               bytes and of 10 MB random and 70 MB repetitive data (they
               cross the lazy index's checkpoints), hardlinks across layers
               and one whose first name is replaced
  badcrc       a gzip layer whose CRC is wrong (digest matches the bad blob)
  baddigest    a layer whose blob does not match its digest
Written for tests only: tar entries are built with Python's tarfile so the
hostile ones can be made exactly.
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

BUSYBOX = "/bin/busybox"


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Layout:
    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        ip = os.path.join(path, "index.json")
        if os.path.exists(ip):
            with open(ip) as f:
                self.index = json.load(f)
        else:
            self.index = {"schemaVersion": 2, "manifests": []}

    def blob(self, data, digest=None):
        d = digest or sha(data)
        with open(os.path.join(self.path, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(data)
        return d

    def tag(self, name, desc):
        desc = dict(desc)
        desc["annotations"] = {"org.opencontainers.image.ref.name": name}
        self.index["manifests"] = [m for m in self.index["manifests"]
                                   if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != name]
        self.index["manifests"].append(desc)
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump(self.index, f)


class Tar:
    def __init__(self, fmt=tarfile.PAX_FORMAT):
        self.buf = io.BytesIO()
        self.tf = tarfile.open(fileobj=self.buf, mode="w", format=fmt)

    def add(self, name, kind="file", data=b"", mode=0o644, link="", uid=0, gid=0, dev=(0, 0)):
        ti = tarfile.TarInfo(name)
        ti.mode, ti.uid, ti.gid, ti.mtime = (0o755 if kind == "dir" and mode == 0o644 else mode), uid, gid, 1700000000
        if kind == "file":
            ti.size = len(data)
            self.tf.addfile(ti, io.BytesIO(data))
            return
        ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                   "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}[kind]
        ti.linkname = link
        ti.devmajor, ti.devminor = dev
        self.tf.addfile(ti)

    def bytes(self):
        self.tf.close()
        return self.buf.getvalue()


def compress(data, how):
    if how == "gzip":
        # gzip -6, as docker and skopeo write layers (speed of import matters, not of this)
        out = subprocess.run(["gzip", "-n", "-6", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout
        return out, "application/vnd.oci.image.layer.v1.tar+gzip"
    if how == "zstd":
        out = subprocess.run(["zstd", "-q", "-c", "-3", "-T0"], input=data, stdout=subprocess.PIPE, check=True).stdout
        return out, "application/vnd.oci.image.layer.v1.tar+zstd"
    return data, "application/vnd.oci.image.layer.v1.tar"


def image(lay, layers, how="gzip", arch="amd64", config_extra=None, corrupt=None):
    """Writes layers (list of tar bytes) + config + manifest; returns the manifest descriptor."""
    descs, diff_ids = [], []
    for i, raw in enumerate(layers):
        data, mt = compress(raw, how)
        if corrupt == "truncate" and i == len(layers) - 1:
            data = data[: len(data) // 2]
        if corrupt == "members" and how == "gzip":
            cut = len(raw) // 3
            data = compress(raw[:cut], how)[0] + compress(raw[cut:], how)[0]
        if corrupt == "crc" and how == "gzip":
            data = data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]  # the trailer's CRC32
        digest = sha(data)
        if corrupt == "digest" and i == len(layers) - 1:
            lay.blob(data[:-1] + bytes([data[-1] ^ 1]), digest)
        else:
            lay.blob(data)
        descs.append({"mediaType": mt, "digest": digest, "size": len(data)})
        diff_ids.append(sha(raw))
    cfg = {"architecture": arch, "os": "linux",
           "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "SKIFF_TEST=hello world"],
                      "WorkingDir": "/work", "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"],
                      "User": "0:0"},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    if config_extra:
        cfg["config"].update(config_extra)
    cb = json.dumps(cfg).encode()
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": lay.blob(cb), "size": len(cb)},
           "layers": descs}
    mb = json.dumps(man).encode()
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": lay.blob(mb), "size": len(mb),
            "platform": {"architecture": arch, "os": "linux"}}


def busybox_tar(extra=None):
    t = Tar()
    for d in ["bin", "etc", "tmp", "work", "usr", "usr/bin", "dev"]:
        t.add(d + "/", "dir", mode=0o1777 if d == "tmp" else 0o755)
    with open(BUSYBOX, "rb") as f:
        t.add("bin/busybox", data=f.read(), mode=0o755)
    applets = subprocess.run([BUSYBOX, "--list"], stdout=subprocess.PIPE, check=True, text=True).stdout.split()
    for a in applets:
        if a != "busybox":
            t.add("bin/" + a, "symlink", link="busybox")
    t.add("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    t.add("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n")
    t.add("etc/hosts", data=b"127.0.0.1 localhost\n")
    t.add("etc/resolv.conf", data=b"")
    t.add("usr/bin/suid-tool", data=b"#!/bin/sh\necho suid\n", mode=0o4755)
    t.add("usr/bin/sgid-tool", data=b"#!/bin/sh\necho sgid\n", mode=0o2755)
    t.add("usr/bin/hard-busybox", "hardlink", link="bin/busybox")
    t.add("dev/fifo", "fifo", mode=0o600)
    t.add("dev/null", "chr", mode=0o666, dev=(1, 3))
    if extra:
        extra(t)
    return t.bytes()


def longnames_layers():
    long_dir = "d" * 120 + "/" + "e" * 90
    l1 = Tar()
    l1.add(long_dir + "/", "dir")
    l1.add(long_dir + "/" + "f" * 150, data=b"a file with a name over 255 bytes of path\n")
    l1.add("unicode-\u00e9t\u00e9-\u6587\u4ef6", data="caf\u00e9\n".encode())
    l1.add("long-link", "symlink", link="/" + "t" * 300)
    for n in (0, 1, 511, 512, 513):
        l1.add("size-%d" % n, data=bytes((i * 7) & 0xFF for i in range(n)))
    l1.add("random-10m", data=os.urandom(10 << 20))
    l1.add("keep", data=b"first version\n")
    l2 = Tar(tarfile.GNU_FORMAT)
    l2.add("gnu/", "dir")
    l2.add("gnu/" + "g" * 200, data=b"gnu long name\n")
    l2.add("gnu/hard-" + "h" * 150, "hardlink", link="gnu/" + "g" * 200)
    l2.add("gnu/to-layer1", "hardlink", link="random-10m")
    l2.add("gnu/sym", "symlink", link="../" + "s" * 250)
    l2.add("keep-link", "hardlink", link="keep")
    l3 = Tar()
    l3.add("keep", data=b"second version: keep-link keeps the first\n")
    l3.add("text-70m", data=b"".join(b"line %08d of a repetitive file\n" % i for i in range(70 << 15)))
    l4 = Tar()
    l4.add("after-big", data=b"after the big file\n", mode=0o640, uid=1234, gid=5678)
    return [l1.bytes(), l2.bytes(), l3.bytes(), l4.bytes()]


def recipe(lay, name):
    if name == "lazy-smoke":
        p = Tar()
        p.add("payload/", "dir")
        p.add("payload/random", data=os.urandom(int(os.environ.get("LAZY_PAYLOAD_MB", "64")) << 20))
        p.add("payload/small", data=b"a small file after the payload\n")
        lay.tag(name, image(lay, [busybox_tar(lambda t: t.add("etc/hostname", data=b"")), p.bytes()]))
    elif name == "longnames":
        lay.tag(name, image(lay, [busybox_tar()] + longnames_layers()))
    elif name == "busybox":
        lay.tag(name, image(lay, [busybox_tar()]))
    elif name == "busybox-node":
        lay.tag("busybox", image(lay, [busybox_tar(lambda t: t.add("etc/hostname", data=b""))]))
    elif name == "busybox-ep":
        lay.tag(name, image(lay, [busybox_tar(lambda t: t.add("etc/hostname", data=b""))],
                            config_extra={"Entrypoint": ["/bin/sh", "-c", 'export ENTRYPOINT_RAN=yes; exec "$@"', "entrypoint"],
                                          "Cmd": ["/bin/sh"]}))
    elif name == "zstd":
        lay.tag(name, image(lay, [busybox_tar()], how="zstd"))
    elif name == "multilayer":
        l1 = Tar()
        for d in ["a/", "o/", "o/sub/", "r/"]:
            l1.add(d, "dir")
        l1.add("a/x", data=b"x from layer 1\n")
        l1.add("a/y", data=b"y from layer 1\n")
        l1.add("o/old", data=b"old\n")
        l1.add("o/sub/deep", data=b"deep\n")
        l1.add("del", data=b"deleted later\n")
        l1.add("r/file", data=b"becomes a dir\n")
        l1.add("abs-link", "symlink", link="/a/y")
        l2 = Tar()
        l2.add("a/.wh.x", data=b"")
        l2.add("o/", "dir")
        l2.add("o/.wh..wh..opq", data=b"")
        l2.add("o/new", data=b"new\n")
        l2.add(".wh.del", data=b"")
        l2.add("r/.wh.file", data=b"")
        l2.add("r/file/", "dir")
        l2.add("r/file/inner", data=b"inner\n")
        l2.add("hl", "hardlink", link="a/y")
        l2.add("rel-link", "symlink", link="a/y")
        l3 = Tar()
        l3.add("a/z", data=b"z from layer 3\n")
        l3.add("a/y", data=b"y from layer 3\n")
        lay.tag(name, image(lay, [busybox_tar(), l1.bytes(), l2.bytes(), l3.bytes()]))
    elif name == "multi":
        ms = []
        for arch in ["amd64", "arm64"]:
            l = Tar()
            l.add("arch", data=(arch + "\n").encode())
            ms.append(image(lay, [busybox_tar(), l.bytes()], arch=arch))
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": ms}
        ib = json.dumps(idx).encode()
        lay.tag(name, {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": lay.blob(ib), "size": len(ib)})
    elif name == "evil-dotdot":
        t = Tar()
        t.add("ok", data=b"fine\n")
        t.add("../escape", data=b"escaped\n")
        lay.tag(name, image(lay, [t.bytes()]))
    elif name == "evil-symlink":
        t = Tar()
        t.add("etcl", "symlink", link="/tmp/skiff-evil-target")
        t.add("etcl/pwned", data=b"written through a symlink\n")
        lay.tag(name, image(lay, [t.bytes()]))
    elif name == "evil-hardlink":
        t = Tar()
        t.add("pw", "hardlink", link="../../../../../../etc/passwd")
        lay.tag(name, image(lay, [t.bytes()]))
    elif name == "truncated":
        lay.tag(name, image(lay, [busybox_tar()], corrupt="truncate"))
    elif name == "multimember":
        lay.tag(name, image(lay, [busybox_tar(lambda t: t.add("two-members", data=b"yes\n"))], corrupt="members"))
    elif name == "badcrc":
        lay.tag(name, image(lay, [busybox_tar(lambda t: t.add("badcrc", data=b"x"))], corrupt="crc"))
    elif name == "baddigest":
        # A layer of its own: corrupting a shared blob would break the other tags.
        lay.tag(name, image(lay, [busybox_tar(lambda t: t.add("baddigest", data=b"x"))], corrupt="digest"))
    else:
        sys.exit("mkimage.py: unknown recipe " + name)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    lay = Layout(sys.argv[1])
    if sys.argv[2] == "--from-tar":
        tag, path, how = sys.argv[3:6]
        with open(path, "rb") as f:
            raw = f.read()
        lay.tag(tag, image(lay, [raw], how=how))
        return
    if sys.argv[2] == "--from-tars":
        tag, how, paths = sys.argv[3], sys.argv[4], sys.argv[5:]
        raws = []
        for path in paths:
            with open(path, "rb") as f:
                raws.append(f.read())
        lay.tag(tag, image(lay, raws, how=how))
        return
    for r in sys.argv[2:]:
        recipe(lay, r)


if __name__ == "__main__":
    main()
