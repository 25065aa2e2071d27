/* The filesystem toolkit every part shares: paths that are never cut
 * short, directories made with their parents, bounded whole-file reads,
 * trees removed without following symlinks. libc only. Whole-or-nothing
 * writes: atomicfile.h; I/O on open fds: fdio.h. */
#ifndef SKIFF_FSUTIL_H
#define SKIFF_FSUTIL_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* snprintf into buf (n bytes) that fails with ENAMETOOLONG instead of
 * cutting the result: a path must never be truncated. */
int skiff_fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* mkdir -p: path and its missing parents, each created with mode; an
 * existing directory is fine, an existing non-directory is ENOTDIR. */
int skiff_mkdir_p(const char *path, unsigned mode, skiff_err *err);

/* The whole of the regular file at path (opened with flags added, e.g.
 * O_NOFOLLOW), at most max bytes, NUL-terminated; its length in *len if len.
 * NULL with err set (err->code ENOENT when it is missing). A FIFO or device
 * in its place is refused without waiting on it. (skiff_read_fd_small, in
 * fdio.h, for a file already open.) */
char *skiff_read_file(const char *path, int flags, size_t max, size_t *len, skiff_err *err);

/* Removes the directory entry name under dirfd, recursively, without
 * following symlinks; each directory below it is opened up (0700) before it
 * is emptied (an overlay's work dir is left mode 000). ENOENT is not an
 * error. */
int skiff_remove_tree_at(int dirfd, const char *name, skiff_err *err);

/* Empties the directory fd (which it does not close), without following
 * symlinks (an opaque whiteout in a layer). */
int skiff_clear_dir_fd(int fd, skiff_err *err);

/* Removes the tree at path, opened up as skiff_remove_tree_at does, path
 * itself included (a failed import's scratch tree, a container's state
 * directory, a named container). Run it with the credentials of the tree's
 * owner. A missing path is not an error. */
int skiff_remove_tree(const char *path, skiff_err *err);

#ifdef __cplusplus
}
#endif

#endif
