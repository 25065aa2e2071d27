/* The user's --container-* options, pyxis 0.24 names and meaning.
 *
 * Pure parsing and validation (no Slurm calls), so every rule is unit-tested
 * (tests/unit/plugin/test_options.c). The SPANK callbacks in spank_opts.c
 * forward each option here and print the error with a "skiff: " prefix.
 *
 * Slurm may call an option callback twice (command line, then the copy it
 * passes through the environment): scalars take the last value, list options
 * (mounts, env) ignore an entry they already hold. */
#ifndef SKIFF_PLUGIN_OPTIONS_H
#define SKIFF_PLUGIN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h" /* skiff_parse_bool: the boolean words */
#include "error.h"

enum skiff_name_mode {
    SKIFF_NAME_AUTO,    /* reuse the named container, create it when missing */
    SKIFF_NAME_CREATE,  /* start from a fresh copy of the image (an existing one is replaced) */
    SKIFF_NAME_EXEC,    /* the named container must exist already */
    SKIFF_NAME_NO_EXEC, /* as auto; accepted for pyxis compatibility */
};

struct skiff_opts {
    char *image;   /* --container-image */
    char **mounts; /* --container-mounts, one spec each, NULL-terminated (or NULL) */
    size_t nmounts;
    char *workdir; /* --container-workdir */
    char *name;    /* --container-name, without the mode */
    enum skiff_name_mode name_mode;
    char *save;         /* --container-save */
    int mount_home;     /* -1 unset, 0, 1 */
    int remap_root;     /* -1 unset, 0, 1 */
    int entrypoint;     /* -1 unset: the plugstack's execute_entrypoint */
    int entrypoint_log; /* -1 unset */
    int writable;       /* -1 unset: writable (pyxis's default) */
    char **env;         /* --container-env entries: NAME or NAME=VALUE */
    size_t nenv;
    int unshare_flags; /* CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS */
    bool unshare_set;
};

/* Option ids, one per flag (the --no-/--readonly forms share the id). */
enum skiff_opt_id {
    SKIFF_OPT_IMAGE,
    SKIFF_OPT_MOUNTS,
    SKIFF_OPT_WORKDIR,
    SKIFF_OPT_NAME,
    SKIFF_OPT_SAVE,
    SKIFF_OPT_MOUNT_HOME,
    SKIFF_OPT_REMAP_ROOT,
    SKIFF_OPT_ENTRYPOINT,
    SKIFF_OPT_ENTRYPOINT_LOG,
    SKIFF_OPT_WRITABLE,
    SKIFF_OPT_ENV,
    SKIFF_OPT_UNSHARE,
    SKIFF_OPT_COUNT
};

/* The flag's name without "--" ("container-image") and the suffix of its
 * environment fallbacks ("IMAGE": SKIFF_CONTAINER_IMAGE, PYXIS_CONTAINER_IMAGE). */
const char *skiff_opt_flag(enum skiff_opt_id id);
const char *skiff_opt_env_suffix(enum skiff_opt_id id);

void skiff_opts_init(struct skiff_opts *o);
void skiff_opts_free(struct skiff_opts *o);

/* Applies one option. For valued options arg is the argument; for boolean
 * pairs val is 1 (--container-x) or 0 (--no-container-x, --container-readonly)
 * and arg is ignored. On error err says what is wrong and what to write. */
int skiff_opts_set(struct skiff_opts *o, enum skiff_opt_id id, int val, const char *arg, skiff_err *err);

/* True when the option was given (so an environment fallback must not apply). */
bool skiff_opts_isset(const struct skiff_opts *o, enum skiff_opt_id id);

/* Environment fallbacks: for each option not given on the command line,
 * SKIFF_CONTAINER_<X>, else PYXIS_CONTAINER_<X>. Boolean values: conf.h's words
 * (1/0, yes/no, true/false, on/off, y/n); SKIFF_/PYXIS_CONTAINER_READONLY is the inverse of _WRITABLE.
 * get returns NULL for an unset variable. Errors name the variable. */
typedef const char *(*skiff_opts_getenv)(void *ctx, const char *name);
int skiff_opts_from_env(struct skiff_opts *o, skiff_opts_getenv get, void *ctx, skiff_err *err);

/* True when the step asks for a container at all. */
bool skiff_opts_active(const struct skiff_opts *o);

/* Checks combinations after all options are in (e.g. --container-save needs
 * something to save). */
int skiff_opts_check(const struct skiff_opts *o, skiff_err *err);

#endif
