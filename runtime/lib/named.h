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

int skiff_named_create(const struct skiff_config *cfg, const char *name, const char *image, skiff_err *err);

/* Calls fn for each container (sorted by name). */
int skiff_named_list(const struct skiff_config *cfg, void (*fn)(const char *name, const char *image, void *arg),
                     void *arg, skiff_err *err);

/* Takes the container's lock (flock on NAME/lock), held by the holder for
 * the container's life: one start, export or remove at a time. Returns the
 * fd (O_CLOEXEC) or -1 with "is in use" when another holds it. */
int skiff_named_lock(const struct skiff_config *cfg, const char *name, skiff_err *err);

/* Removes a tree without following symlinks (directories are made writable
 * first). Run it with the credentials of the tree's owner. */
int skiff_rm_tree(const char *path, skiff_err *err);

int skiff_named_remove(const struct skiff_config *cfg, const char *name, skiff_err *err);

#endif
