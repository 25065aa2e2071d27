/* pack: an image's squashfs written straight from its layers' tar
 * streams, with no tree on disk (the import's default; image.c).
 *
 * Each layer's entries are planned by layer.c's policy (the same checks,
 * whiteouts, set-id stripping, dropped devices and xattrs) and merged into
 * a tree in memory (lazytree.c, as lazy images merge them), while each
 * regular file's data goes through libsquashfs's block processor: cut into
 * blocks, compressed by worker threads (max_processors, default every CPU)
 * and appended to the output as they come. When the last layer is in, the
 * tree's metadata is written after the data (lazyskel.c).
 *
 * Memory: the tree (some 100-200 bytes an entry plus 4 bytes per data
 * block of each file: what mksquashfs also holds) and at most
 * PACK_BACKLOG blocks in flight per worker; never the files' data, whatever
 * the image's size. A file a later layer removes or replaces keeps its
 * blocks in the output (unreachable; blocks equal to earlier ones are
 * stored once), so an image whose layers rewrite big files is bigger than
 * mksquashfs of its tree would be. */
#ifndef SKIFF_PACK_H
#define SKIFF_PACK_H

#include <stdbool.h>

#include "config.h"
#include "error.h"
#include "layer.h"

/* blocks in flight per worker thread */
#define PACK_BACKLOG 8

struct skiff_pack;
struct json_t;

/* True when cfg's compression can be written this way (zstd, gzip, xz;
 * mksquashfs writes lz4, lzo and none) and import_mksquashfs is not set. */
bool skiff_pack_usable(const struct skiff_config *cfg);

/* Starts the squashfs at path (created or truncated; the caller owns its
 * name and removes it on failure). */
int skiff_pack_open(const struct skiff_config *cfg, const char *path, struct skiff_pack **out, skiff_err *err);

/* The sink the layers are streamed into, in order (layer.h). */
const struct skiff_layer_sink *skiff_pack_sink(struct skiff_pack *k);

/* Adds /.skiff (imgconfig.h) from image_config, waits for the data
 * blocks, writes the metadata and the superblock. */
int skiff_pack_finish(struct skiff_pack *k, struct json_t *image_config, void (*warn)(void *ctx, const char *msg),
                      void *warn_ctx, skiff_err *err);

/* Frees k (threads joined); the file is left as it is. */
void skiff_pack_free(struct skiff_pack *k);

#endif
