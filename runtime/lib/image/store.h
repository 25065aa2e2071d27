/* store: the site's read-only image store (cfg->system_cache_path), on a
 * filesystem every node mounts. An admin (or a service account) fills it
 * with `skiff import --system REF`; every user's resolve asks it before
 * the user's own cache (image.h, skiff_image_resolve). Its layout and keys
 * are the cache's (cache.h): images/<key>.sqsh published by rename, tags/
 * records for tag_ttl and the offline fallback.
 *
 * Trust: the store belongs to the owner of its top directory. A user's
 * process uses an image from it only when the directory, images/ and the
 * file are owned by that owner and writable by nobody else, and the file
 * is a whole squashfs image; anything else in its place is refused with
 * an error, never used and never skipped silently. */
#ifndef SKIFF_STORE_H
#define SKIFF_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* Checks the store at root for a reader: 0 with *owner its owner's uid,
 * -1 when root or root/images is not a directory owned by one user and
 * writable by nobody else (err says which and what to do; err->code
 * ENOENT when root does not exist). */
int skiff_store_check_root(const char *root, uid_t *owner, skiff_err *err);

/* Checks an image of the store, open in fd (the file at path): owned by
 * owner, a regular file writable by nobody else, a whole squashfs image.
 * -1 with err naming the file, why it is refused and what the store's
 * owner should do. */
int skiff_store_check_image(int fd, const char *path, uid_t owner, skiff_err *err);

/* Checks that the calling user may fill the store at root: it is theirs
 * (created 0755 when missing, with images/ and tags/). */
int skiff_store_prepare(const char *root, skiff_err *err);

#endif
