/* plugstack.conf arguments of spank_skiff.so:
 *   required /usr/local/lib/skiff/spank_skiff.so [ARG=VALUE ...]
 * pyxis's names (runtime_path, execute_entrypoint, container_scope,
 * sbatch_support, importer; use_squashfuse and use_enroot_load are accepted
 * and ignored so that a pyxis line works unchanged) plus skiff's own
 * (config, default_registry, ddp_env). Every argument: doc/admin-guide.md. */
#ifndef SKIFF_PLUGIN_ARGS_H
#define SKIFF_PLUGIN_ARGS_H

#include <stdbool.h>

#include "config.h"
#include "error.h"

/* Containers' runtime state: a root-owned base the plugin creates, with one
 * directory per user in it (never a name users could take first). */
#define SKIFF_PLUGIN_RUNTIME_DEFAULT "/run/skiff"
/* How long root waits for the user-side helper to start a container; an
 * import (or the wait for another node's import of the same image) gets
 * import_timeout on top: a first pull of a 20 GB image takes many minutes
 * and must not fail the step. */
#define SKIFF_PLUGIN_TIMEOUT_DEFAULT 300
#define SKIFF_PLUGIN_IMPORT_TIMEOUT_DEFAULT 3600

enum skiff_scope { SKIFF_SCOPE_GLOBAL, SKIFF_SCOPE_JOB };

struct skiff_plugin_args {
    char runtime_path[SKIFF_PATH_MAX];     /* root-owned base; each user gets BASE/UID */
    char block_cache_path[SKIFF_PATH_MAX]; /* "" = skiff.conf's; else a root-owned base, BASE/UID each */
    bool execute_entrypoint;               /* default false, as pyxis */
    enum skiff_scope scope;                /* default global, as pyxis */
    bool sbatch_support;                   /* default true */
    char importer[SKIFF_PATH_MAX];         /* "" = libskiff's importer */
    char config[SKIFF_PATH_MAX];           /* "" = /etc/skiff/skiff.conf when present */
    char default_registry[256];            /* "" = skiff.conf's */
    bool ddp_env;                          /* per-task torchrun env, default true */
    char helper[SKIFF_PATH_MAX];           /* "" = beside spank_skiff.so, else LIBEXECDIR/skiff */
    int timeout_s;                         /* the longest root waits for the user-side helper */
    int import_timeout_s;                  /* ... plus this while it imports an image (or waits for another's import) */
    char ignored[256];                     /* pyxis arguments accepted and ignored, for a log line */
};

/* Defaults, then each "key=value" of av. An unknown key, a missing '=', or a
 * bad value is an error naming the argument and what is accepted. */
int skiff_plugin_args_parse(struct skiff_plugin_args *a, int ac, char **av, skiff_err *err);

#endif
