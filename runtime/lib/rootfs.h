/* Paths inside a container root, resolved so they cannot escape it, and the
 * mount primitives the container assembly uses.
 *
 * skiff_root_open() resolves PATH as if ROOTFD were "/": absolute symlinks and
 * ".." stay inside (openat2 RESOLVE_IN_ROOT, or a component-by-component
 * O_NOFOLLOW walk with the same semantics where openat2 is missing). Mounts
 * then target the opened fd, never the path string again, so a symlink
 * swapped in between cannot redirect them. */
#ifndef SKIFF_ROOTFS_H
#define SKIFF_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "mountspec.h"

/* For tests: force the fallback walk even where openat2 works. */
void skiff_root_force_fallback(bool on);

/* Opens PATH (absolute or relative, both taken relative to rootfd) inside the
 * root. flags: O_PATH, O_RDONLY, O_DIRECTORY, O_NOFOLLOW (last component) ...;
 * O_CREAT is not supported (use skiff_root_mkdirs/skiff_root_mkfile).
 * Returns an fd (O_CLOEXEC) or -1. */
int skiff_root_open(int rootfd, const char *path, int flags, skiff_err *err);

/* Creates PATH and missing parents as directories inside the root; returns an
 * O_PATH fd to it. An existing directory is fine; an existing non-directory is
 * an error. */
int skiff_root_mkdirs(int rootfd, const char *path, mode_t mode, skiff_err *err);

/* Creates an empty regular file (parents as directories) if missing; returns
 * an O_PATH fd to it. */
int skiff_root_mkfile(int rootfd, const char *path, skiff_err *err);

/* Joins path (absolute, or relative to base) onto base, both paths inside
 * a container, lexically: "." and empty components go, ".." takes one off.
 * With clamp, ".." at the root stays there (a working directory: pyxis's
 * --container-workdir=../ from / is /); without, it is an error, EXDEV
 * ("Invalid cross-device link"), as enroot refuses a mount destination
 * that escapes. The result is absolute, in out (n bytes). */
int skiff_root_path(const char *base, const char *path, bool clamp, char *out, size_t n, skiff_err *err);

/* Reads a whole (small) file inside the root; NULL + err on failure
 * (err->code ENOENT when missing). *len gets the size. */
char *skiff_root_read(int rootfd, const char *path, size_t max, size_t *len, skiff_err *err);

/* How a bind is made: one flags argument rather than a row of bools, which
 * callers passed in different orders. nosuid always; nodev unless
 * SKIFF_BIND_DEV. */
enum skiff_bind_flag {
    SKIFF_BIND_REC = 1 << 0,    /* recursive (rbind): submounts come along */
    SKIFF_BIND_RO = 1 << 1,     /* read-only */
    SKIFF_BIND_NOEXEC = 1 << 2, /* noexec */
    SKIFF_BIND_DEV = 1 << 3,    /* no nodev: device nodes stay usable */
    SKIFF_BIND_FILE = 1 << 4,   /* the destination is a file, not a directory
                                   (for callers that create it; ignored below) */
};

/* Bind-mounts the host path src onto the object open at target_fd: a detached
 * clone (open_tree), attributes set on the clone as flags (SKIFF_BIND_*) say,
 * then moved into place. */
int skiff_mount_bind(const char *src, int target_fd, unsigned flags, skiff_err *err);

/* Mounts a filesystem (tmpfs, overlay, fuse) onto the object at target_fd
 * with MS_NOSUID|MS_NODEV|extra. */
int skiff_mount_fs(const char *fstype, const char *source, int target_fd, unsigned long extra, const char *data,
                   skiff_err *err);

/* Sets nosuid, nodev and (with SKIFF_BIND_RO) read-only on the mount at
 * target_fd; on its submounts too with SKIFF_BIND_REC. */
int skiff_mount_setattr(int target_fd, unsigned flags, skiff_err *err);

/* Applies one user mount (bind or tmpfs) inside the root at rootfd, creating
 * the destination as m->create says, with m's flags and propagation (a
 * tmpfs gets each option through fsconfig, so a bad one is named). Errors
 * name the spec: a missing source "source path does not exist: SRC", a
 * destination outside the root EXDEV. */
int skiff_mount_apply(int rootfd, const struct skiff_mount *m, skiff_err *err);

#endif
