/* Private to lazy images (lazy.h): what the files of lazy start share.
 *
 *   lazyindex.c  the index of one gzip layer: one streaming pass records
 *                the tar entries (the extraction policy applied, layer_int.h)
 *                with the offsets of their data, zlib checkpoints and, at
 *                each span's ends, the chaining state of the blob's own
 *                SHA-256 (sha256mid.h); the index file, written and loaded
 *                (strictly: it is input)
 *   lazytree.c   the layers' entries merged into one tree in memory, the
 *                plan of each entry carried out as layer.c does on disk
 *   lazyskel.c   the tree as a metadata-only squashfs (libsquashfs): file
 *                data points into the image's data file
 *   lazyplan.c   a lazy image on disk (its directory: plan, skeleton,
 *                indexes), its data file and presence map
 *   lazyfill.c   one span: checked against the recorded states, inflated
 *                from its checkpoint, written into the data file
 *   lazyfetch.c  the span fetcher (a process of the user's): spans asked
 *                for by the FUSE server, from the registry or a local blob
 *   lazybuild.c  a lazy image made from an image source
 *
 * A span is the unit that is fetched: the compressed bytes between two
 * checkpoints, and the uncompressed bytes they inflate to. A checkpoint is
 * where inflation can start afresh: the start of a gzip member, or a
 * deflate block boundary with the 32 KiB of output before it (the window)
 * and the bits of the boundary's byte already used (zlib's
 * examples/zran.c describes the technique).
 *
 * A span's check: its compressed bytes widened to the 64-byte blocks of
 * SHA-256 around them, [cstart rounded down, cend rounded up to a multiple
 * of 64, or the blob's end), take the blob's SHA-256 from the chaining
 * state the index pass recorded at the start of that range to the one at
 * its end; a range that reaches the blob's end gives the layer's digest
 * instead. The pass hashes each byte once, for the layer's digest, and
 * records the states on the way (sha256mid.h). */
#ifndef SKIFF_LAZY_INT_H
#define SKIFF_LAZY_INT_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "digest.h"
#include "error.h"
#include "lazy.h"

#define LZ_WINDOW 32768u
/* a checkpoint every ~4 MiB of compressed input or ~32 MiB of output */
#define LZ_SPAN_IN (4u << 20)
#define LZ_SPAN_OUT (32u << 20)
/* bounds a loaded index is held to */
#define LZ_MAX_SPANS (1u << 22)
#define LZ_MAX_ENTRIES (1u << 24)
#define LZ_MAX_LAYERS 512

/* The index file (lazyindex.c writes it, lazyload.c reads it): a header,
 * the windows, the spans, the entries, the strings; little-endian.
 * Version 1 had a sha256 per span (of its exact bytes) where version 2
 * has the two chaining states: a version-1 file is refused by the loader
 * (a cached one is made again, lazybuild.c). */
#define IDX_MAGIC "SKLZIDX"
#define IDX_VERSION 2u
#define IDX_HEADER 256u
#define IDX_SPAN 112u
#define IDX_ENTRY 56u

static inline void lz_put64(unsigned char *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline void lz_put32(unsigned char *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline uint64_t lz_get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static inline uint32_t lz_get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

enum lz_span_kind {
    LZ_SPAN_GZIP = 0, /* starts at a gzip member's header */
    LZ_SPAN_RAW = 1,  /* inside a member: window + bits */
};

struct lz_span {
    uint64_t cstart, cend; /* compressed bytes to fetch: [cstart, cend) */
    uint64_t ustart, uend; /* the layer's uncompressed bytes they give */
    uint8_t kind, bits;    /* RAW: bits of byte cstart not yet used (1..7), 0: starts at a byte */
    uint32_t wlen;         /* the window, deflated, in the index file at woff */
    uint64_t woff;
    /* the blob's SHA-256 chaining state at lz_span_wstart and at
     * lz_span_wend (unused where that is the blob's end) */
    uint32_t hstart[8], hend[8];
};

/* The range of the blob a span is fetched and checked as: its bytes
 * widened to SHA-256's 64-byte blocks, ending at the blob's end at the
 * latest (cend <= csize: the loader checks it). */
static inline uint64_t lz_span_wstart(const struct lz_span *s)
{
    return s->cstart & ~(uint64_t)63;
}

static inline uint64_t lz_span_wend(const struct lz_span *s, uint64_t csize)
{
    uint64_t pad = (64 - s->cend % 64) % 64;
    return csize - s->cend <= pad ? csize : s->cend + pad;
}

/* The entries an index keeps: skiff_entry_kind values (layer_int.h) but
 * ROOT and SKIPPED, which leave nothing to do. */
struct lz_entry {
    uint8_t kind;
    uint32_t mode, uid, gid;
    int64_t mtime;
    uint64_t size, off; /* REG: size, and where its data starts in the layer's tar */
    const char *path;   /* normalised */
    const char *target; /* HARDLINK (normalised) or SYMLINK target, else "" */
    const char *raw;    /* the name as the tar had it, for messages */
};

struct lz_index {
    char digest[SKIFF_DIGEST_LEN];
    unsigned char sha[32]; /* the digest's bytes */
    uint64_t csize, usize;
    uint32_t nspans, nentries;
    struct lz_span *spans;
    struct lz_entry *entries;
    char *strings;
    unsigned long skipped, setid, xattrs; /* what the policy did */
    int fd;                               /* open for windows (loaded with LZ_LOAD_WINDOWS) */
};

/* An error that no system call caused (its message ends in no strerror
 * text) with err->code saying what kind it is: ENOTSUP (the image cannot
 * be lazy: import it in full), EBADMSG (bytes that are not what their
 * digest says), EINVAL (a bad index or plan), EIO (data that does not
 * inflate). Returns -1. (lazyload.c) */
int lz_error(skiff_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- lazyindex.c ---- */

/* The index pass over a gzip layer read from fd (to its end; closed by
 * the call): written to out_path (atomically) only when the blob's sha256
 * is digest. Scratch: the window and buffers, a few MiB. Fails with
 * err->code ENOTSUP when the layer is not gzip or holds something a lazy
 * image cannot serve (a GNU sparse file): the caller imports in full. */
int lz_index_layer(int fd, const char *digest, unsigned flags, const char *out_path, skiff_err *err);

enum { LZ_LOAD_ENTRIES = 1, LZ_LOAD_WINDOWS = 2 };

/* Loads an index file (every field checked: it is input); what loads
 * says. lz_index_free after, also after a failure. */
int lz_index_load(const char *path, unsigned loads, struct lz_index *ix, skiff_err *err);
/* Same, from a buffer (fuzzing); never LZ_LOAD_WINDOWS. */
int lz_index_load_mem(const void *buf, size_t len, unsigned loads, struct lz_index *ix, skiff_err *err);
void lz_index_free(struct lz_index *ix);

/* The window of span s into out (LZ_WINDOW bytes): its length, -1 + err. */
int lz_index_window(const struct lz_index *ix, uint32_t s, unsigned char *out, skiff_err *err);

/* ---- lazytree.c ---- */

struct lz_tree;
struct lz_node;

/* An empty tree (the root, 0755) for an importer that is root or not (the
 * ids and modes layer.c would give). */
struct lz_tree *lz_tree_new(bool as_root, mode_t umask_now);
void lz_tree_free(struct lz_tree *t);

/* Applies layer number layer (its index's entries, in order) as layer.c
 * applies a tar: the same refusals, with the same messages. */
int lz_tree_apply(struct lz_tree *t, const struct lz_index *ix, uint32_t layer, skiff_err *err);

/* One entry (as lz_tree_apply applies it) of layer number layer; *made
 * (when not NULL) is the node it made, NULL when it made none (a
 * whiteout, a hardlink, a directory that was there). */
int lz_tree_put(struct lz_tree *t, const struct lz_entry *e, uint32_t layer, struct lz_node **made, skiff_err *err);

/* /.skiff with config.json and environment, whose data is at offset off
 * (config) and off + config_len (environment) of the data file; made
 * (when not NULL) gets the two files' nodes. */
int lz_tree_add_imgconfig(struct lz_tree *t, uint64_t off, uint64_t config_len, uint64_t env_len,
                          struct lz_node *made[2], skiff_err *err);

/* ---- lazyskel.c ---- */

/* Writes the tree as a squashfs with no data of its own at path: a
 * regular file's blocks are uncompressed and contiguous at
 * base[layer] + off of the data file (layer UINT32_MAX: extras at off). */
int lz_skel_write(struct lz_tree *t, const uint64_t *base, uint32_t nlayers, const char *path, skiff_err *err);

/* A regular file whose data is in the squashfs being written (pack.c):
 * its layer is LZ_LAYER_PACKED and its off names the file inode that
 * libsquashfs's block processor filled, found with packed(). */
#define LZ_LAYER_PACKED (UINT32_MAX - 1)

struct sqfs_file_t;
struct sqfs_compressor_t;
struct sqfs_super_t;
struct sqfs_frag_table_t;
struct sqfs_inode_generic_t;

/* The tree's metadata after the data already in file (super written at its
 * start, the data blocks after it): inode and directory tables, the
 * fragment table (when frags is not NULL), the id table, the superblock
 * again; compressed with cmp. packed(ctx, off) gives a packed file's
 * inode. */
int lz_skel_finish(struct lz_tree *t, struct sqfs_file_t *file, struct sqfs_compressor_t *cmp,
                   struct sqfs_super_t *super, struct sqfs_frag_table_t *frags,
                   const struct sqfs_inode_generic_t *(*packed)(void *ctx, uint64_t off), void *packed_ctx,
                   skiff_err *err);

/* the tree as the skeleton walks it (lazytree.c) */
struct lz_dent {
    char *name;
    struct lz_node *node;
};

struct lz_node {
    mode_t mode; /* type and permission bits */
    uint32_t uid, gid;
    int64_t mtime;
    uint64_t size, off; /* REG: size, and where its data is */
    uint32_t layer;     /* REG: its layer (UINT32_MAX: the image's own files) */
    char *target;       /* symlink */
    uint32_t links;     /* names that point at it */
    /* directories: the entries, and an open-addressing index of them */
    struct lz_dent *ents;
    uint32_t nents, cap;
    int32_t *slots;
    uint32_t nslots, used; /* used: live and deleted slots */
    /* the skeleton's (lazyskel.c) */
    uint32_t ino;
    uint64_t ref;
    bool written;
};

struct lz_node *lz_tree_root(struct lz_tree *t);
/* d's entries sorted by name (squashfs wants them so). */
int lz_tree_sorted(struct lz_node *d, struct lz_dent **ents, uint32_t *n);

/* ---- lazyplan.c ---- */

struct lz_layer {
    struct lz_index ix;
    uint64_t base;  /* where its tar starts in the data file */
    uint32_t span0; /* its first span's number among the image's */
};

/* An opened lazy image: the plan, its layers' spans, the data file and
 * the presence map (one bit per span, shared by every process that serves
 * or fills the image on this node). */
struct lz_image {
    char dir[SKIFF_PATH_MAX];
    char source[SKIFF_PATH_MAX]; /* where spans come from: docker://..., or "local" (blob_paths) */
    char key[24];                /* names its data file: the digest of what it serves */
    char **blob_paths;           /* local sources: each layer's blob */
    struct lz_layer *layers;
    uint32_t nlayers, nspans;
    uint64_t extras_len; /* bytes at the start of the data file, there from the start */
    unsigned char *extras;
    uint64_t data_size, compressed;
    int datafd, mapfd;
    int holdfd;              /* DIR/plan, share-locked while open: skiff cache prune leaves the image */
    volatile uint64_t *bits; /* the map's bitmap, mmap'ed shared */
    struct lz_map_header *hdr;
    size_t maplen;
};

/* Span number g of the image: its layer and the span in it. */
const struct lz_span *lz_image_span(const struct lz_image *im, uint32_t g, uint32_t *layer);

/* The image's prefetch list (*n spans: what earlier starts asked for,
 * in order), or NULL when it has none. (lazyplan.c) */
uint32_t *lz_prefetch_read(const struct lz_image *im, size_t *n);

/* skiff_lazy_open with the windows of every index (the fetcher's). */
struct lz_image *lz_image_open_fetch(const struct skiff_config *cfg, const char *dir, skiff_err *err);

/* Span g is in the data file: its bit, and fetched more bytes counted. */
void lz_image_set_present(struct lz_image *im, uint32_t g, uint64_t fetched);

/* ---- lazysource.c ---- */

/* Where a fetcher worker gets spans' compressed bytes: the registry (one
 * client per worker, Range requests) or the layers' local blobs; a shared
 * span store, when set, first. */
struct lz_source;
/* A worker's source; base (another worker's, or NULL) lends its registry
 * endpoints and tokens. */
int lz_source_open(const struct lz_image *im, const struct skiff_config *cfg, const struct lz_source *base,
                   struct lz_source **out, skiff_err *err);
/* stop(ctx) true: a transfer in flight gives up (the fetcher is ending). */
void lz_source_set_stop(struct lz_source *s, bool (*stop)(void *ctx), void *ctx);
/* Span g's compressed bytes, widened (*buf malloc'ed: the blob's bytes
 * [lz_span_wstart, lz_span_wend), *len of them), checked. */
int lz_source_get(struct lz_source *s, uint32_t g, unsigned char **buf, size_t *len, skiff_err *err);
void lz_source_close(struct lz_source *s);

/* 0 when buf (len bytes) is span s of index ix widened: the blob's bytes
 * [lz_span_wstart, lz_span_wend), checked against the states recorded at
 * both ends (or, at the blob's end, against the layer's digest). */
int lz_span_check(const struct lz_index *ix, const struct lz_span *s, const unsigned char *buf, size_t len);

/* ---- lazyfill.c ---- */

/* Span g from its compressed bytes, widened (clen of them, the blob's
 * [lz_span_wstart, lz_span_wend)): checked (EBADMSG when they are not the
 * blob's), inflated from its checkpoint into the data file, marked
 * present. Nothing is written before the check passed. */
int lz_fill_span(struct lz_image *im, uint32_t g, const unsigned char *cbytes, size_t clen, skiff_err *err);

#endif
