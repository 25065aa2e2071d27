/* Whole-buffer reads and writes on file descriptors (pipes between the
 * plugin, the container holder and their children; checkpoint files).
 * Nothing here needs more than libc, so every binary can link it (the lean
 * `skiff` has no libarchive). Paths and trees: fsutil.h. */
#ifndef SKIFF_FDIO_H
#define SKIFF_FDIO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes all n bytes, retrying on EINTR. 0, or -1 with errno set. */
int skiff_write_all(int fd, const void *buf, size_t n);

/* Reads exactly n bytes, retrying on EINTR. 0, or -1 with errno set
 * (EPROTO when the other end closed before n bytes came). */
int skiff_read_all(int fd, void *buf, size_t n);

/* The same at offset off of a file (pread/pwrite): 0, or -1 with errno
 * set (EPROTO: the file ends before n bytes). */
int skiff_read_all_at(int fd, void *buf, size_t n, uint64_t off);
int skiff_write_all_at(int fd, const void *buf, size_t n, uint64_t off);

/* fd, a regular file open for writing, emptied; one that is already empty
 * is left alone. On ext4 a truncation to size 0 arms auto_da_alloc (for
 * editors that rewrite a file in place): the file's last close() then queues
 * the writeback of every page written since, itself. For a new 900 MB
 * squashfs that close took 0.22 s (strace -T), and each downloaded blob's
 * the same in its thread. 0, or -1 with errno set. */
int skiff_fd_empty(int fd);

/* Reads the whole of fd, a regular file of at most max bytes (named path in
 * errors), into a new NUL-terminated buffer; its length in *len if len. NULL
 * with err set on failure. For small metadata files (JSON, config). */
char *skiff_read_fd_small(int fd, const char *path, size_t max, size_t *len, skiff_err *err);

/* Opens path (O_RDONLY | O_CLOEXEC | extra) when it is a regular file,
 * without blocking on anything else: the open is O_NONBLOCK (a FIFO with
 * no writer would wait forever), then fstat; a FIFO, socket, device or
 * directory is refused at once with an error naming path (a user's image
 * path, a named container's record). The fd it returns blocks again. */
int skiff_open_regular(const char *path, int extra, skiff_err *err);

/* Closes every fd from 3 up except the n in keep (negative ones ignored),
 * with close_range over the gaps: no /proc scan. */
void skiff_close_fds_except(const int *keep, size_t n);

#ifdef __cplusplus
}
#endif

#endif
