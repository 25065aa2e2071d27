/* layer: apply one layer tarball (plain, gzip or zstd: libarchive detects
 * which) onto a tree, safely.
 *
 * Every entry is placed relative to rootfd with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS) (fallback: a component walk with O_NOFOLLOW), so an
 * entry with "..", a path through a symlink, or a hardlink to something
 * outside the tree is refused with an error naming the entry. OCI whiteouts
 * (.wh.NAME, .wh..wh..opq) remove what lower layers left. Device nodes are
 * skipped (counted), setuid/setgid bits are stripped and extended attributes
 * (security.capability included) are dropped, so nothing in an image can grant
 * privileges. */
#ifndef SKIFF_LAYER_H
#define SKIFF_LAYER_H

#include <stdbool.h>

#include "digest.h"
#include "error.h"

enum {
    SKIFF_LAYER_WHITEOUTS = 1 << 0, /* interpret .wh. entries (image layers) */
    SKIFF_LAYER_OWNERS = 1 << 1,    /* chown entries to their uid/gid (only as root) */
};

struct skiff_layer_stats {
    unsigned long entries;
    unsigned long devices_skipped;
    unsigned long setid_stripped;
    unsigned long xattrs_dropped;
    unsigned long long bytes_in; /* bytes of the (compressed) blob read */
};

/* Applies the tarball at path onto the directory rootfd. When digest is not
 * NULL, the blob's sha256 is computed while it is read and must equal it
 * (else the layer is refused with err->code EBADMSG; the caller discards the
 * tree). */
int skiff_layer_apply(int rootfd, const char *path, const char *digest, unsigned flags, struct skiff_layer_stats *st,
                      skiff_err *err);

/* Same, reading the blob from blobfd (closed by the call); path names it in
 * messages. */
int skiff_layer_apply_fd(int rootfd, int blobfd, const char *path, const char *digest, unsigned flags,
                         struct skiff_layer_stats *st, skiff_err *err);

/* Same, for a blob still being written (downloaded): at the end of what is
 * there, wait_more(ctx, bytes read so far) blocks until more is written and
 * returns 1, or returns 0 (complete) or -1 (the download failed). */
int skiff_layer_apply_stream(int rootfd, int blobfd, const char *path, const char *digest, unsigned flags,
                             int (*wait_more)(void *ctx, unsigned long long have), void *wait_ctx,
                             struct skiff_layer_stats *st, skiff_err *err);

struct archive;
struct skiff_entry_plan;

/* Where a layer's planned entries (layer_int.h: the policy's plan of each
 * entry) go instead of a tree on disk: entry is called with each plan (ROOT
 * and SKIPPED included), the archive positioned at the entry's data; it
 * counts into st what skiff_layer_apply counts. (pack.h is one.) */
struct skiff_layer_sink {
    int (*entry)(void *ctx, struct archive *a, const struct skiff_entry_plan *p, struct skiff_layer_stats *st,
                 skiff_err *err);
    void *ctx;
};

/* skiff_layer_apply_stream with the plans handed to sink. */
int skiff_layer_sink_stream(const struct skiff_layer_sink *sink, int blobfd, const char *path, const char *digest,
                            unsigned flags, int (*wait_more)(void *ctx, unsigned long long have), void *wait_ctx,
                            struct skiff_layer_stats *st, skiff_err *err);

#endif
