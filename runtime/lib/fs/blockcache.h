/* A per-user cache of decompressed squashfs blocks that outlives the
 * container: the FUSE server (splice.c) looks a data or fragment block up
 * here before decompressing it, and stores what it decompresses. Each start
 * of a container gets a fresh FUSE mount whose page cache is empty, so
 * without it every start decompresses the command, its libraries and
 * everything else it reads again (busybox: 2 MB of zstd, ~3 ms of CPU here).
 *
 * One file per image in the cache directory (block_cache_path), named by the
 * image's device and inode and checked against its size, mtime, ctime,
 * superblock and the boot id before use: a changed or re-imported image gets
 * a new cache. Blocks are keyed by their offset in the image. The file holds
 * a header, an open-addressed index and at most max_bytes of block slots;
 * when it is full, nothing more is stored. Creating one removes the least
 * recently used caches of other images until those left fit in max_bytes
 * (so the directory holds at most twice that).
 *
 * Several servers (containers of one image, tasks of several steps) share a
 * file: a slot is taken with an atomic counter, an index entry with a
 * compare-and-swap of its key, and its value (slot and size) is stored
 * after the data is written, so a reader sees either no entry or a complete
 * block. A server killed halfway leaves an entry without a value: a miss.
 *
 * The cache is only a speed-up: every failure (no space, a foreign or
 * corrupt file) makes it a miss, never an error of the container. */
#ifndef SKIFF_BLOCKCACHE_H
#define SKIFF_BLOCKCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct skiff_blockcache;

/* Opens or creates the cache of the image open at image_fd in the directory
 * open at dirfd (which must be the caller's own, not writable by others).
 * sb/sb_len: the image's superblock; block_size: its block size. */
struct skiff_blockcache *skiff_blockcache_open(int dirfd, int image_fd, const void *sb, size_t sb_len,
                                               uint32_t block_size, uint64_t max_bytes, skiff_err *err);

/* Where bytes [off, off + len) of the block at image offset pos are: *at
 * in the file skiff_blockcache_fd() (for pread, or splice into a reply).
 * Returns 0, or -1 when the block (or that range of it) is not cached. */
int skiff_blockcache_find(struct skiff_blockcache *c, uint64_t pos, size_t off, size_t len, off_t *at);
int skiff_blockcache_fd(const struct skiff_blockcache *c);

/* Stores the decompressed block at image offset pos (size <= block size).
 * Best effort: a full cache or a failed write stores nothing. */
void skiff_blockcache_put(struct skiff_blockcache *c, uint64_t pos, const void *data, size_t size);

void skiff_blockcache_close(struct skiff_blockcache *c);

#endif
