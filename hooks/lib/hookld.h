/* Libraries a hook puts into the container: where a library of the host
 * (or a driver root) really is, and a dynamic linker cache that lists the
 * libraries the hooks bound, made by the image's own ldconfig. Shared by
 * the gpu and rdma hooks. */
#ifndef SKIFF_HOOKLD_H
#define SKIFF_HOOKLD_H

#include <stddef.h>

#include "error.h"

/* The host path of path inside root (symlinks may not leave root), which
 * must be a regular file, into out. */
int skiff_hook_resolve_in(const char *root, const char *path, char *out, size_t n, skiff_err *err);

/* Runs the image's own ldconfig (/sbin/ldconfig or /usr/sbin/ldconfig, so
 * that the cache has the image's glibc's format) on the image with every
 * shared library the hooks so far asked to bind in place: each line of
 * $SKIFF_MOUNTS_FILE whose target's name is lib*.so*. It runs in a child
 * with a user and mount namespace of its own (a hook holds no capability),
 * the libraries bound at their targets, SKIFF_STATE_DIR/WHO on the image's
 * /tmp, chrooted into the root: `ldconfig -X -C /tmp/ld.so.cache DIR...`
 * (the libraries' directories added to the image's ld.so.conf, the last
 * hook's first: a library of the same name in two places resolves to the
 * later hook's, then to the image's own; -X touches no link in the image).
 * Then appends a read-only bind of the result over /etc/ld.so.cache; a
 * later hook's call lists this one's libraries too, and its bind lies on
 * top. An image without /etc/ld.so.cache or ldconfig (musl, busybox) is
 * left alone; a failing ldconfig is a warning on stderr (the dynamic linker
 * still searches its default directories). who: the calling hook's name,
 * for its state directory and messages. */
int skiff_hook_update_ldcache(const char *who, skiff_err *err);

#endif
