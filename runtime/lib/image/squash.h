/* squash: build a squashfs image from a directory tree.
 *
 * The image is written under a temporary name beside out_path and renamed onto
 * it only when complete, so a reader never sees a partial file and a failure
 * leaves nothing behind. Compression comes from cfg->squash_compression and
 * cfg->squash_level (0 = skiff's default for that compressor, see
 * doc/images.md). */
#ifndef SKIFF_SQUASH_H
#define SKIFF_SQUASH_H

#include <stdbool.h>

#include "config.h"
#include "error.h"

/* Builds out_path from the tree at dir (atomic: the temporary file tmp,
 * or a unique name beside out_path when tmp is NULL, then a rename). An
 * existing out_path is replaced; callers that must not overwrite check
 * first. When the caller is not root, every file in the image is owned by
 * root (uid 0), as unprivileged containers map the user to root anyway. */
int skiff_squash_from_dir(const struct skiff_config *cfg, const char *dir, const char *out_path, const char *tmp,
                          skiff_err *err);

/* Same, but writes exactly to tmp_path (no rename): for callers that publish
 * the file themselves (the image cache). */
int skiff_squash_build(const struct skiff_config *cfg, const char *dir, const char *tmp_path, skiff_err *err);

/* The compression level an import uses for cfg's squash_compression:
 * squash_level, else skiff's default (zstd: 1); 0 for the compressor's own
 * default (and for lz4 and none, which take none). */
int skiff_squash_level(const struct skiff_config *cfg);

/* 0 when image can be opened and starts with the squashfs magic, else -1
 * with err saying which (and, when it is not an image, how to make one). */
int skiff_squash_check(const char *image, skiff_err *err);

/* Extracts the image into the (empty, writable) directory at dir with
 * unsquashfs (argv, no shell). The container's fallback when FUSE is
 * unavailable (container/assemble.c). */
int skiff_squash_extract(const char *image, const char *dir, skiff_err *err);

/* 0 when the open file fd (named name in errors) is a whole squashfs 4.0
 * image: its superblock (magic, version, block size) makes sense and the
 * bytes it says it uses are all there (a file cut short by a copy or a
 * full disk is refused); else -1 with err saying what is wrong. */
int skiff_squash_check_fd(int fd, const char *name, skiff_err *err);

/* True when the file at path starts with the squashfs magic ("hsqs"). */
bool skiff_squash_is_image(const char *path);

/* A squashfs file named by a local path (absolute, ./ or ../): its real
 * path into sqsh_path, or an error saying what is wrong with it. */
int skiff_squash_resolve_path(const char *arg, char *sqsh_path, size_t n, skiff_err *err);

#endif
