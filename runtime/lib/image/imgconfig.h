/* The image config inside an image: /.skiff/config.json (the OCI config's
 * "config" object) and /.skiff/environment (its Env, one K=V a line).
 * `skiff import` writes them into the tree it squashes; a container start
 * reads config.json from the mounted image. Both sides are here, so the
 * format has one owner. */
#ifndef SKIFF_IMGCONFIG_H
#define SKIFF_IMGCONFIG_H

#include "config.h"
#include "error.h"

/* Where the container engineer (and anyone else) finds the image config. */
#define SKIFF_IMAGE_CONFIG_PATH "/.skiff/config.json"
#define SKIFF_IMAGE_ENV_PATH "/.skiff/environment"

struct json_t; /* jansson's: kept out of the headers that include this one */

/* What a start needs of the config: Env, Entrypoint, Cmd (NULL-terminated,
 * owned; NULL when absent) and WorkingDir ("" when absent). */
struct skiff_image_config {
    char **env, **entrypoint, **cmd;
    char workdir[SKIFF_PATH_MAX];
};

/* Reads SKIFF_IMAGE_CONFIG_PATH from the root at rootfd into ic (zeroed by
 * the caller). An image without it gets defaults (all empty). Free with
 * skiff_imgconfig_free, also after a failure. */
int skiff_imgconfig_read(int rootfd, struct skiff_image_config *ic, skiff_err *err);
void skiff_imgconfig_free(struct skiff_image_config *ic);

/* Writes /.skiff/config.json and /.skiff/environment under the root at
 * rootfd from image_config (the whole OCI image config; its "config" object
 * is stored). Whatever the image had at /.skiff (even a symlink) is
 * replaced. Env entries that are not one K=V line are left out of
 * environment, each reported to warn (when not NULL). */
int skiff_imgconfig_write(int rootfd, struct json_t *image_config, void (*warn)(void *ctx, const char *msg),
                          void *warn_ctx, skiff_err *err);

/* What skiff_imgconfig_write writes, in memory: config.json's text and
 * environment's (malloc'ed; free both, also after a failure). A lazy
 * image's skeleton holds the same files (lazybuild.c). */
int skiff_imgconfig_render(struct json_t *image_config, void (*warn)(void *ctx, const char *msg), void *warn_ctx,
                           char **config, size_t *config_len, char **env, size_t *env_len, skiff_err *err);

#endif
