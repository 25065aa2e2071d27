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

struct skiff_import_opts {
    const char *arch; /* platform to pick from a manifest list (NULL: the host's) */
    bool force;       /* replace an existing output file */
    bool progress;    /* one line per layer on stderr (the CLI sets isatty(2)) */
    /* Called for each warning (device node skipped, ...); NULL: ignored. */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
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

/* Told when skiff_image_resolve imports (never for a cached image): the
 * plugin shows "importing URI" and "imported URI (N MB, T s)" in srun. */
struct skiff_resolve_progress {
    void (*importing)(void *ctx, const char *uri);
    void (*imported)(void *ctx, const char *uri, unsigned long long bytes, double ms);
    void *ctx;
};

/* For the SPANK plugin: image_arg is a squashfs path (absolute, ./ or ../
 * relative: checked to be a squashfs) or an image URI, which is imported once
 * into cfg->cache_path/images/ (flock-serialised, published by rename) and
 * reused later; a bare name such as "ubuntu:22.04" means docker://ubuntu:22.04
 * (as in pyxis). The squashfs path is written to sqsh_path. progress, if
 * not NULL, hears of an import. */
int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path, size_t n,
                        const struct skiff_resolve_progress *progress, skiff_err *err);

#endif
