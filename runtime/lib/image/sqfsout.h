/* The file libsquashfs writes an image into (pack.c, lazyskel.c): a
 * sqfs_file_t of skiff's own, for two reasons that sqfs_open_file cannot
 * serve.
 * - It opens by name and truncates a file that exists, and the temporary
 *   file skiff_atomic_begin made exists: on ext4 that made the image's
 *   close write it back (skiff_fd_empty, fdio.h). This one truncates only
 *   a file that has bytes.
 * - libsquashfs's block processor writes each compressed block from the
 *   thread that appends the data, which is also the thread that parses the
 *   layers' tar streams: the write()'s copy into the page cache and ext4's
 *   per-page work held up the parsing of the next file. With a writer
 *   thread, writes are copied into a few large buffers and written from
 *   there, in order. */
#ifndef SKIFF_SQFSOUT_H
#define SKIFF_SQFSOUT_H

#include <stdbool.h>

#include "error.h"

struct sqfs_file_t;

/* path opened for writing, created (0644, less the umask) or emptied, as
 * sqfs_open_file(SQFS_FILE_OPEN_OVERWRITE) does, without truncating a file
 * that is already empty; with writer, its writes go through a thread of
 * their own. NULL with errno set on failure. Destroyed with sqfs_destroy,
 * which waits for the writes and closes the file: call skiff_sqfs_out_flush
 * first to learn whether they all succeeded. */
struct sqfs_file_t *skiff_sqfs_out_open(const char *path, bool writer);

/* Waits until every write so far is in the file; 0, or -1 with err set
 * (the first write that failed). */
int skiff_sqfs_out_flush(struct sqfs_file_t *f, skiff_err *err);

#endif
