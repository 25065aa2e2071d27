/* lazy: images started before they are there. A lazy image is the index
 * of each of an image's gzip layers (tar entries, zlib checkpoints, the
 * chaining state of the layer's SHA-256 around each compressed span
 * between two checkpoints) and a metadata-only squashfs of the merged
 * tree (the skeleton) whose file data points into a per-user, per-node
 * sparse data file. The FUSE server
 * (fs/) answers metadata from the skeleton and reads data from the data
 * file, asking the span fetcher (a process of the user's, outside the
 * container's namespaces) for any span not there yet: it fetches the
 * span's compressed bytes (HTTP Range from the registry, or a local blob),
 * checks them against the recorded states, inflates them from their
 * checkpoint and writes them into the data file. doc/lazy.md has the whole story.
 *
 * On disk, a lazy image is a directory (published by rename):
 *   plan        the layers (digest, sizes, where each starts in the data
 *               file), the image's own files (/.skiff), the source
 *   root.sqsh   the skeleton
 *   layer-N.idx each layer's index (lazyindex.c)
 * and on each node, under lazy_path: KEY.NODE.data (sparse) and KEY.NODE.map
 * (one bit per span present, and counters), shared by every container of
 * the image there. */
#ifndef SKIFF_LAZY_H
#define SKIFF_LAZY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"

/* True when path is a lazy image's directory (it has a plan). */
bool skiff_lazy_is_image(const char *path);

struct skiff_lazy_build_opts {
    bool progress; /* lines on stderr (the CLI, on a terminal) */
    /* ENOTSUP when the layers are smaller than this in all (compressed):
     * image_mode=auto's lazy_min_size */
    unsigned long long min_bytes;
    /* CLOCK_MONOTONIC ms by which its registry requests end (0: none): the
     * resolve's, so that a lazy attempt keeps the step's import_timeout */
    double deadline_ms;
};

/* Makes the lazy image of uri (a registry image or an OCI layout, skopeo
 * dir or archive whose layers are gzip) at out_dir: indexes each layer
 * (one streaming pass; nothing of the blob is kept), merges them, writes
 * the skeleton; published by rename. err->code ENOTSUP: the image cannot
 * be started lazily (a layer that is not gzip, a sparse file in one, a
 * registry that ignores Range): the caller imports it in full. */
int skiff_lazy_build(const struct skiff_config *cfg, const char *uri, const char *out_dir,
                     const struct skiff_lazy_build_opts *o, skiff_err *err);

struct skiff_resolve_opts;

/* skiff_image_resolve's part (resolve.c), under its import lock for the image's
 * key, when no squashfs of it is cached: per image_mode, the lazy image
 * IMAGES/KEY.lazy of a registry image (made if missing; full import when
 * it cannot be one, or when image_mode=auto and it is smaller than
 * lazy_min_size). uri is what progress lines show; fetch, when not NULL,
 * is the same image pinned by the manifest digest the caller resolved (its
 * key), so that the tag is not asked for again and a tag moved meanwhile
 * cannot put another image under this key. 1 with its path in out, 0 to
 * import in full, -1 on an error. *announced: o's importing was called (a
 * full import after it does not say so again). */
int skiff_lazy_resolve(const struct skiff_config *cfg, const char *uri, const char *fetch, const char *images,
                       const char *key, char *out, size_t n, const struct skiff_resolve_opts *o, bool *announced,
                       skiff_err *err);

/* ---- serving (the FUSE server, fs/, and the fetcher) ---- */

struct lz_image;

/* Opens the lazy image at dir for serving on this node: the plan, every
 * layer's spans, and the data file and map under the lazy path (made if
 * missing, 0700; a map from another boot is reset: its data may not have
 * reached the disk). NULL + err on failure. */
struct lz_image *skiff_lazy_open(const struct skiff_config *cfg, const char *dir, skiff_err *err);
void skiff_lazy_close(struct lz_image *im);

/* The skeleton's path. */
const char *skiff_lazy_skeleton(const struct lz_image *im, char *buf, size_t n);

/* The data file (open read-write) and its spans: the span that holds byte
 * off of the data file, or -1 for bytes that are there from the start
 * (the image's own files) or past the end. */
int skiff_lazy_data_fd(const struct lz_image *im);
int64_t skiff_lazy_span_at(const struct lz_image *im, uint64_t off);
/* The first data file byte after span g. */
uint64_t skiff_lazy_span_end(const struct lz_image *im, uint32_t g);
bool skiff_lazy_present(const struct lz_image *im, uint32_t g);
uint32_t skiff_lazy_nspans(const struct lz_image *im);

/* Counters of the map (this node, every container of the image): bytes
 * fetched from the source so far, of compressed in all. */
void skiff_lazy_counters(const struct lz_image *im, uint64_t *fetched, uint64_t *compressed, uint32_t *present);

/* What the FUSE server and the fetcher say to each other: SOCK_SEQPACKET
 * messages of this struct. The server asks for a span (NEED); the fetcher
 * answers every NEED with DONE once the span's bit is set, or with
 * FAILED (err, text: why) when it could not be fetched. */
enum { SKIFF_LAZY_NEED = 1, SKIFF_LAZY_DONE = 2, SKIFF_LAZY_FAILED = 3 };
struct skiff_lazy_msg {
    uint32_t type;
    uint32_t span;
    int32_t err;
    char text[244];
};

/* The fetcher: serves the span requests coming on chan until it closes
 * (every server of the container gone); prefetches what earlier starts
 * read and, with lazy_complete, the rest. Runs as the user, outside the
 * container's namespaces. */
int skiff_lazy_fetch_main(const struct skiff_config *cfg, const char *dir, int chan, skiff_err *err);

/* Whether the fetcher would have nothing to do until a read misses (a hot
 * node): some of the image's data on the node, every span of the prefetch
 * list there, and no lazy_complete left to do. The front end then makes
 * it only on the first NEED. */
bool skiff_lazy_fetcher_idle(const struct skiff_config *cfg, const struct lz_image *im);

#endif
