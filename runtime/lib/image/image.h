/* image: import container images into squashfs files, and resolve the
 * --container-image argument of the SPANK plugin to a squashfs path.
 *
 * Sources (doc/images.md): docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST],
 * docker-archive:PATH.tar, oci:DIR[:TAG], oci-archive:PATH.tar[:TAG], dir:PATH
 * (skopeo's dir layout). Layers are applied into a scratch tree under
 * cfg->temp_path with the checks in layer.h, the image config is stored at
 * /.skiff/config.json (the OCI config's "config" object) and
 * /.skiff/environment (K=V lines from Env), and the tree is packed with
 * squash.h. */
#ifndef SKIFF_IMAGE_H
#define SKIFF_IMAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "error.h"
#include "imgconfig.h" /* SKIFF_IMAGE_CONFIG_PATH, SKIFF_IMAGE_ENV_PATH */

/* How far an import's downloads are: told every few seconds while blobs
 * download (what pyxis users see of enroot: bytes, rate, time left). */
struct skiff_import_progress {
    unsigned long long done, total; /* bytes of the blobs this import downloads */
    unsigned layers_done, layers;   /* of those blobs */
    double elapsed_s;               /* since the downloads started */
    double rate;                    /* bytes per second so far */
};

/* "1.2 GB of 5.0 GB, 180 MB/s, 2 of 9 layers, 18 s left" */
void skiff_import_progress_text(const struct skiff_import_progress *p, char *out, size_t n);

struct skiff_import_opts {
    const char *arch; /* platform to pick from a manifest list (NULL: the host's) */
    bool force;       /* replace an existing output file */
    bool progress;    /* one line per layer on stderr (the CLI sets isatty(2)) */
    /* Called for each warning (device node skipped, a download retried,
     * ...); NULL: ignored. */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
    /* Told how far the downloads are, every progress_every_s seconds (0:
     * 5); NULL: not told. */
    void (*on_progress)(void *ctx, const struct skiff_import_progress *p);
    void *progress_ctx;
    double progress_every_s;
    /* skiff_now_ms() by which the import gives up (no download or retry
     * runs past it); 0: none */
    double deadline_ms;
};

/* Imports uri into out_path (NULL: the default name in the current directory,
 * see skiff_image_default_name). The written path is copied to out (outsz
 * bytes). Refuses to replace an existing file unless o->force. */
int skiff_image_import(const struct skiff_config *cfg, const char *uri, const char *out_path,
                       const struct skiff_import_opts *o, char *out, size_t outsz, skiff_err *err);

/* The enroot-style default file name for uri: IMAGE[:TAG] with ':', '/', '@'
 * turned into '+' and ".sqsh" appended (docker://nvcr.io#nvidia/cuda:12 ->
 * nvidia+cuda+12.sqsh); archives and directories use their base name. */
int skiff_image_default_name(const char *uri, char *out, size_t n, skiff_err *err);

/* What skiff_image_resolve is told and asked (all optional). */
struct skiff_resolve_opts {
    /* told when it imports (never for a cached image): the plugin shows
     * "importing URI" and "imported URI (N MB, T s)" in srun */
    void (*importing)(void *ctx, const char *uri);
    void (*imported)(void *ctx, const char *uri, unsigned long long bytes, double ms);
    /* told when another process (another node, with a shared cache) is
     * importing the same image and this one waits for it: who ("HOST pid
     * PID") and for how long it has been at it */
    void (*waiting)(void *ctx, const char *uri, const char *who, double running_s);
    void *ctx;
    /* passed on to the import: its progress, warnings (retries) */
    void (*on_progress)(void *ctx, const struct skiff_import_progress *p);
    void (*warn)(void *ctx, const char *msg);
    double progress_every_s;
    /* skiff_now_ms() by which an import (or the wait for another's) gives
     * up; 0: none */
    double deadline_ms;
    /* when not NULL: an fd holding the image (cache.h: skiff_cache_hold_image); keep it
     * open while the image is in use */
    int *hold_fd;
    /* images cache_max_size must not remove although nobody holds them
     * now (a named container's image); NULL: none */
    bool (*keep)(void *ctx, const char *sqsh_path);
    void *keep_ctx;
};

/* For the SPANK plugin: image_arg is a squashfs path (absolute, ./ or ../
 * relative: checked to be a squashfs) or an image URI, which is found in
 * the site's store (cfg->system_cache_path, read-only) or in the user's
 * cache (cfg->cache_path/images/), or imported once into the latter
 * (one importer per image, others wait; published by rename) and reused
 * later; a bare name such as "ubuntu:22.04" means docker://ubuntu:22.04
 * (as in pyxis). A tag is resolved with a manifest HEAD, or not asked
 * again within cfg->tag_ttl; when the registry cannot be reached, the
 * image last resolved for the tag is used. The squashfs path is written
 * to sqsh_path. o may be NULL. */
int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path, size_t n,
                        const struct skiff_resolve_opts *o, skiff_err *err);

/* `skiff import --system URI`: imports uri into the site's store
 * (cfg->system_cache_path, store.h) under the key skiff_image_resolve
 * looks for, unless it is there already, and notes the tag's resolution
 * there; files 0644, directories 0755. Only the store's owner may. The
 * image's path in the store is written to sqsh_path. */
int skiff_image_import_system(const struct skiff_config *cfg, const char *uri, const struct skiff_resolve_opts *o,
                              char *sqsh_path, size_t n, skiff_err *err);

#endif
