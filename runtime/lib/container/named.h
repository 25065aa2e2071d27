/* Named containers: data_path/containers/NAME/ holds "image" (the absolute
 * path of its squashfs lower), upper/ and work/ (the persistent overlay
 * upper: files written in one start are seen in the next). */
#ifndef SKIFF_NAMED_H
#define SKIFF_NAMED_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "error.h"

/* Letters, digits, '.', '_', '-'; not starting with '.' or '-'; at most 128. */
bool skiff_name_valid(const char *name);

/* skiff_name_valid, with the rule in err (code 0) when it is not: front
 * ends report it as a usage error. */
int skiff_name_check(const char *name, skiff_err *err);

int skiff_named_dir(const struct skiff_config *cfg, const char *name, char *dir, size_t n, skiff_err *err);

/* The squashfs path a named container was created from. */
int skiff_named_image(const struct skiff_config *cfg, const char *name, char *image, size_t n, skiff_err *err);

bool skiff_named_exists(const struct skiff_config *cfg, const char *name);

/* Creates NAME from image (complete under a temporary name, then renamed
 * into place). An existing NAME is an error, or with exist_ok success (two
 * steps that create one name at once: the first wins, both use it). */
int skiff_named_create(const struct skiff_config *cfg, const char *name, const char *image, bool exist_ok,
                       skiff_err *err);

/* Calls fn for each container (sorted by name). */
int skiff_named_list(const struct skiff_config *cfg, void (*fn)(const char *name, const char *image, void *arg),
                     void *arg, skiff_err *err);

/* Whether a named container keeps the image at path (ctx: the struct
 * skiff_config): the `keep` of cache pruning, which leaves such images
 * alone. A containers directory that cannot be read keeps nothing. */
bool skiff_named_keeps_image(void *ctx, const char *path);

/* How one running container uses NAME, held for its life by two flocks in
 * NAME/: "users" (shared by every instance, exclusive for a removal) and
 * "lock" (exclusive: the writer). The first instance (nobody else using
 * NAME) is the writer: its overlay writes to NAME's persistent upper. An
 * instance started while others use NAME is a reader: NAME's upper is a
 * read-only layer of it, under a private upper whose changes are not kept
 * (overlayfs cannot share one upper between two mounts). */
struct skiff_named_use {
    int users, lock; /* fds holding the flocks, or -1 */
    bool writer;
};

/* Takes NAME for an instance; writer = false asks for a reader in any case
 * (export). Fails with EBUSY only while NAME is being removed. */
int skiff_named_acquire(const struct skiff_config *cfg, const char *name, bool writer, struct skiff_named_use *u,
                        skiff_err *err);
void skiff_named_release(struct skiff_named_use *u);

int skiff_named_remove(const struct skiff_config *cfg, const char *name, skiff_err *err);

#endif
