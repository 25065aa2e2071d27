/* Named containers: data_path/containers/NAME/ holds "image" (the absolute
 * path of its squashfs lower), upper/ and work/ (the persistent overlay
 * upper: files written in one start are seen in the next), and "node" for
 * one the plugin made (the node it belongs to: nodes may share data_path).
 *
 * Names: the CLI stores NAME as given; the plugin stores --container-name
 * NAME as NAME.NODE (NAME.NODE.jobJOBID with container_scope=job,
 * skiff_named_step_name). enroot's front end shows the latter as pyxis
 * named them, pyxis_NAME and pyxis_JOBID_NAME (skiff_named_to_enroot,
 * skiff_named_from_enroot), so scripts that clean pyxis containers up with
 * `enroot list` and `enroot remove` keep working. */
#ifndef SKIFF_NAMED_H
#define SKIFF_NAMED_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "error.h"

/* Letters, digits, '.', '_', '-', '+' (enroot's names of imported images,
 * ubuntu+22.04); not starting with '.', '-' or '+'; at most 128. */
bool skiff_name_valid(const char *name);

/* skiff_name_valid, with the rule in err (code 0) when it is not: front
 * ends report it as a usage error. */
int skiff_name_check(const char *name, skiff_err *err);

int skiff_named_dir(const struct skiff_config *cfg, const char *name, char *dir, size_t n, skiff_err *err);

/* The squashfs path a named container was created from. */
int skiff_named_image(const struct skiff_config *cfg, const char *name, char *image, size_t n, skiff_err *err);

bool skiff_named_exists(const struct skiff_config *cfg, const char *name);

/* Creates NAME from image (complete under a temporary name, then renamed
 * into place), marked as node's when node is not NULL (the plugin's). An
 * existing NAME is an error, or with exist_ok success (two steps that
 * create one name at once: the first wins, both use it). */
int skiff_named_create(const struct skiff_config *cfg, const char *name, const char *image, const char *node,
                       bool exist_ok, skiff_err *err);

/* This node's name as the plugin keys its containers: the host name up to
 * its first '.'. */
void skiff_named_this_node(char *out, size_t n);

/* The name the plugin stores --container-name=NAME under on node: NAME.NODE,
 * or NAME.NODE.jobJOBID when jobid is not 0 (container_scope=job). An error
 * when it is no valid name (too long). */
int skiff_named_step_name(const char *name, const char *node, unsigned jobid, char *out, size_t n, skiff_err *err);

/* enroot's name on node for the stored name: pyxis_NAME for NAME.NODE,
 * pyxis_JOBID_NAME for NAME.NODE.jobJOBID, the name itself otherwise.
 * 1 with it in out; 0 when the container is another node's (its "node"
 * mark), which enroot on this node does not show, or gone (removed since
 * it was listed). */
int skiff_named_to_enroot(const struct skiff_config *cfg, const char *stored, const char *node, char *out, size_t n);

/* The stored name for enroot's name ename on node, the reverse: pyxis_NAME
 * is NAME.NODE; pyxis_JOBID_NAME and pyxis_JOBID.NAME are NAME.NODE.jobJOBID
 * (or, for the first form, a global JOBID_NAME.NODE where only that one
 * exists); any other name is itself. *node_made says whether it is a
 * plugin name (to be created with node's mark). Usage errors (code 0) for
 * names that are not valid. */
int skiff_named_from_enroot(const struct skiff_config *cfg, const char *ename, const char *node, char *out, size_t n,
                            bool *node_made, skiff_err *err);

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
