/* Paths inside a container root (or an image's tree), resolved so they
 * cannot escape it.
 *
 * skiff_root_open() resolves PATH as if ROOTFD were "/": absolute symlinks and
 * ".." stay inside (openat2 RESOLVE_IN_ROOT, or a component-by-component
 * O_NOFOLLOW walk with the same semantics where openat2 is missing). Mounts
 * (container/mount.h) then target the opened fd, never the path string
 * again, so a symlink swapped in between cannot redirect them. */
#ifndef SKIFF_ROOTFS_H
#define SKIFF_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

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

#endif
