#!/usr/bin/python3
"""Lists a tree for the lazy differential test (runtime-lazy.sh): one line
per entry, sorted, with what a container sees of it: type, mode, owner,
link count, size, sha256 of a file's bytes, a symlink's target, the mtime
of files and symlinks from the layers (that of a directory, a FIFO or the
image's own /.skiff files is when the import made them), and the
extended attributes (names and values). Two trees that list the same are
the same to anything that runs in them.

usage: treelist.py DIR
"""
import hashlib
import os
import stat
import sys


def xattrs(p):
    try:
        names = sorted(os.listxattr(p, follow_symlinks=False))
    except OSError as e:
        return "xattrs:%s" % e.strerror
    return ",".join("%s=%s" % (n, os.getxattr(p, n, follow_symlinks=False).hex()) for n in names)


def main(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files) + ([] if d != root else ["."]):
            p = os.path.join(d, name) if name != "." else root
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            f = [rel, "%o" % st.st_mode, "%d:%d" % (st.st_uid, st.st_gid)]
            if stat.S_ISDIR(kind):
                f.append("dir")
            else:
                f += ["n%d" % st.st_nlink, "s%d" % st.st_size]
                if (stat.S_ISREG(kind) or stat.S_ISLNK(kind)) and not rel.startswith(".skiff/"):
                    f.append("t%d" % int(st.st_mtime))
            if stat.S_ISREG(kind):
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                f.append(h.hexdigest())
            elif stat.S_ISLNK(kind):
                f.append("-> " + os.readlink(p))
            f.append(xattrs(p))
            out.append(" ".join(f))
    sys.stdout.write("\n".join(sorted(out)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
