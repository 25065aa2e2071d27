#!/usr/bin/python3
"""What a lazy image's data files hold (runtime-lazy.sh): exits 0 and
prints a summary when nothing but the image's own files (config.json and
environment, at the data file's start) was written and no span is marked
present in any map; 1, saying what, otherwise.

usage: lazydata.py LAZY_IMAGE_DIR LAZY_PATH"""
import glob
import json
import struct
import sys

image, lazy_path = sys.argv[1:3]
plan = json.load(open(image + "/plan"))
own = (plan["config_len"] + plan["environment_len"] + 4095) // 4096 * 4096
datas = glob.glob("%s/%s.*.data" % (lazy_path, plan["key"]))
if not datas:
    sys.exit("no data file of key %s under %s" % (plan["key"], lazy_path))
for path in datas:
    with open(path, "rb") as f:
        f.seek(own)
        at = own
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            if b.count(0) != len(b):
                i = next(k for k, c in enumerate(b) if c)
                sys.exit("%s: a non-zero byte at %d" % (path, at + i))
            at += len(b)
    with open(path[: -len(".data")] + ".map", "rb") as m:
        present = struct.unpack_from("<I", m.read(80), 72)[0]
    if present:
        sys.exit("%s: %d span(s) marked present" % (path, present))
print("%d data file(s), no byte past the image's own %d, no span present" % (len(datas), own))
