/* Files the trainer writes whole or not at all (checkpoints, shards, llm.c
 * model files, the BPE vocabulary): written under a temporary name, synced,
 * renamed over the real one; a failure removes the temporary file. */
#ifndef SKIFF_TRAINER_ATOMICFILE_H
#define SKIFF_TRAINER_ATOMICFILE_H

#include "error.h"

/* fill(fd, ctx) writes the contents (0, or -1 with errno set). tmp is the
 * temporary name (created or truncated); NULL means "PATH.tmp.PID". */
int atomic_write_file(const char *path, const char *tmp, int (*fill)(int fd, void *ctx), void *ctx, skiff_err *err);

#endif
