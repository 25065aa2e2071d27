/* cache: the per-user cache under cfg->cache_path.
 *   blobs/sha256/<hex>      compressed layer blobs from registries, by digest
 *   images/<key>.sqsh       images imported for the SPANK plugin
 *   images/<key>.lock       flock(2) lock serialising imports of one key
 * Directories are created 0700: the cache is private to its user. */
#ifndef SKIFF_CACHE_H
#define SKIFF_CACHE_H

#include <stddef.h>

#include "config.h"
#include "error.h"

/* mkdir -p of cache_path/sub (0700). */
int skiff_cache_dir(const struct skiff_config *cfg, const char *sub, char *out, size_t n, skiff_err *err);

/* Path of blob digest in the cache (whether it exists or not). */
int skiff_cache_blob_path(const struct skiff_config *cfg, const char *digest, char *out, size_t n, skiff_err *err);

/* Takes an exclusive flock on path (created 0600); returns the fd, which
 * releases the lock when closed. */
int skiff_cache_lock(const char *path, skiff_err *err);

#endif
