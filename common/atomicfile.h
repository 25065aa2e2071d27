/* Files written whole or not at all: written under a temporary name beside
 * the real one (same directory, so the rename stays on one filesystem),
 * synced unless the caller says the contents need not survive a crash,
 * renamed over the real one; a failure removes the temporary file. Readers
 * see the old file or the new one, never a part. Every such write in skiff
 * goes through here: checkpoints, shards, model files and the vocabulary
 * (trainer), the container's state file, the hooks' identity files, cached
 * blobs, imported and exported images. */
#ifndef SKIFF_ATOMICFILE_H
#define SKIFF_ATOMICFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum skiff_atomic_flag {
    /* no fsync before the rename: for contents checked when they are read
     * (a blob against its digest) or that do not outlive a boot (runtime
     * state on a tmpfs); a crash may then leave an empty or partial file
     * under the real name */
    SKIFF_ATOMIC_NOSYNC = 1 << 0,
    /* an existing file at the real name is an error (EEXIST) instead of
     * being replaced (renameat2 RENAME_NOREPLACE) */
    SKIFF_ATOMIC_NOREPLACE = 1 << 1,
};

/* One write in progress. */
struct skiff_atomic {
    char path[4096];     /* the real name */
    char tmp[4096 + 32]; /* the temporary name: write here, by fd or by name */
    int fd;              /* open for writing on tmp; -1 after commit or abort */
    unsigned flags;      /* SKIFF_ATOMIC_* */
};

/* Starts a write of path: creates the temporary file (tmp, or when tmp is
 * NULL a new unique ".NAME.tmp.XXXXXX" beside path) with mode (the umask
 * applies), opens it in a->fd. An existing tmp is truncated. */
int skiff_atomic_begin(struct skiff_atomic *a, const char *path, const char *tmp, mode_t mode, unsigned flags,
                       skiff_err *err);

/* Ends it: syncs (unless SKIFF_ATOMIC_NOSYNC) and closes a->fd (when the
 * caller has not closed it and set it to -1, as when another program wrote
 * the file by its name), renames a->tmp onto a->path. On failure the
 * temporary file is removed; err->code is EEXIST when SKIFF_ATOMIC_NOREPLACE
 * found the real name taken. */
int skiff_atomic_commit(struct skiff_atomic *a, skiff_err *err);

/* Gives it up: closes a->fd if open, removes the temporary file. Safe after
 * a failed commit. */
void skiff_atomic_abort(struct skiff_atomic *a);

/* buf (len bytes) as the whole contents of path, created with mode. */
int skiff_atomic_write(const char *path, const void *buf, size_t len, mode_t mode, unsigned flags, skiff_err *err);

/* fill(fd, ctx) writes the contents (0, or -1 with errno set); mode 0644,
 * synced. tmp is the temporary name (created or truncated); NULL means a
 * unique one beside path. */
int skiff_atomic_write_file(const char *path, const char *tmp, int (*fill)(int fd, void *ctx), void *ctx,
                            skiff_err *err);

#ifdef __cplusplus
}
#endif

#endif
