/* The start request: what to start, defined once for every front end.
 *
 * The `skiff` CLI fills one from its flags and hands it to
 * skiff_container_start. The SPANK plugin's options fill one
 * (plugin/options.c); root adds the step (who, where, which state) and
 * writes it for its user-side helper with skiff_start_request_encode; the
 * helper reads it back with skiff_start_request_decode and hands it to
 * skiff_container_start as it came. Every verb of the helper (start, save,
 * remove, sweep, release, resolve) reads the same request; each uses the
 * fields it needs.
 *
 * Adding a field: declare it in the struct, and list it in
 * SKIFF_START_REQUEST_FIELDS when it must travel to the helper (most do;
 * the last group, how this process runs the start, never does). The
 * encoder, the strict decoder and its fuzz target (tests/fuzz/fuzz_records.c)
 * follow the list. */
#ifndef SKIFF_REQUEST_H
#define SKIFF_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "error.h"
#include "records.h"

struct lz_image;

/* --container-name's modes (pyxis 0.24). */
enum skiff_name_mode {
    SKIFF_NAME_AUTO,    /* reuse the named container, create it when missing */
    SKIFF_NAME_CREATE,  /* start from a fresh copy of the image (an existing one is replaced) */
    SKIFF_NAME_EXEC,    /* the named container must exist already */
    SKIFF_NAME_NO_EXEC, /* as auto; accepted for pyxis compatibility */
};

struct skiff_start_request {
    /* ---- what to start ---- */
    const char *image;             /* a squashfs path; from the plugin the image as the user gave it
                                      (a reference the helper resolves); NULL: name's image */
    const char *name;              /* named container (persistent upper) as stored, or NULL */
    const char *const *mounts;     /* pyxis-style "SRC:DST[:FLAGS]", NULL-terminated, or NULL */
    const char *const *env;        /* the user's: NAME=VALUE sets, a bare NAME keeps the caller's
                                      value over the image's (pyxis); see env.h */
    const char *env_file;          /* NAME=VALUE lines for the container's environment, as enroot's
                                      start --env-file (# comments, blank lines); read as the user */
    const char *workdir;           /* NULL: the image's WorkingDir, else "/" */
    bool writable;                 /* overlay over a tmpfs upper (implied by name) */
    bool remap_root;               /* map the user to uid/gid 0 in the container */
    bool mount_home;               /* bind the user's home directory (from passwd) */
    bool use_entrypoint;           /* prepend the image's Entrypoint (skiff_container_argv) */
    const char *const *command;    /* the command the caller will run (NULL: the image's); only
                                     used to warm its executable while setting up (warm.h) */
    int unshare_flags;             /* extra namespaces: CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS */
    const char *const *hook_env;   /* K=V passed to hooks (the plugin passes SLURM_*), or NULL */
    const char *const *locale_env; /* the caller's LANG / LC_* as K=V (the plugin passes the
                                    job's): a locale the image lacks becomes C.UTF-8 in the
                                    container env, unless the image sets the variable */
    const char *state_key;         /* unique key for runtime state (plugin: node.job.step); NULL = auto */
    const char *const *enroot_env; /* with cfg->enroot_compat (enrootsite.c): the environment
                                      enroot would have had (the CLI's own, the job's under the
                                      plugin): ${VAR} of environ.d and mounts.d, hooks.d's
                                      environment; and $VAR passwords of enroot's credentials
                                      file (the plugin's helper); NULL: none */

    /* ---- the step around it (the plugin's helper) ---- */
    const char *cwd;          /* the step's working directory: relative paths start here */
    const char *node;         /* this node's name, for messages and running-container keys */
    const char *name_given;   /* --container-name as the user wrote it (without the mode) */
    int name_mode;            /* an enum skiff_name_mode */
    const char *importer;     /* the plugstack's importer program, or NULL */
    bool temp_name;           /* name exists only to keep the upper for --container-save */
    int timeout_s;            /* root's deadline for the helper, seconds (0: none given) */
    int import_timeout_s;     /* ... and for an image's import (or the wait for another's), seconds (0: none) */
    const char *save;         /* --container-save: the squashfs file to write (absolute) */
    const char *sweep_suffix; /* sweep: remove the named containers whose name ends in it */

    /* ---- how this process runs the start (never encoded) ---- */
    bool no_warm;                /* do not warm the command (SKIFF_NO_WARM=1 in the CLI) */
    const char *extra_hooks_dir; /* the user's hooks, run with cfg->hooks_dir's (the CLI's
                                    $SKIFF_HOOKS_DIR; doc/hooks.md), or NULL */
    const char *enroot_user_dir; /* the user's enroot configuration directory, whose environ.d,
                                    mounts.d, hooks.d apply after the site's (the CLI's
                                    enroot_config_path), or NULL (the plugin) */
    int fuse_fd;                 /* an open /dev/fuse fd (root may pass one), or -1 to open it */
    int hook_timeout_s;          /* per hook; 0 = 60 s */
    bool die_with_parent;        /* holder gets SIGKILL when the starting thread dies */
    bool trace;                  /* print phase timestamps (CLOCK_MONOTONIC ms) to stderr */
    /* The holder starts the command itself (Entrypoint/Cmd/command as
     * skiff_container_argv chooses, its environment as skiff_env_compose
     * makes it over default_env) as a child of the caller (CLONE_PARENT),
     * with the caller's stdio and signal mask: already in the namespaces, it
     * needs no join. Its pid is c->command; the caller waits for it. The CLI
     * uses this; the plugin joins per task instead. */
    bool spawn;
    const char *const *default_env;
    /* The caller is a child subreaper (PR_SET_CHILD_SUBREAPER) whose only
     * children are this container's processes: the container's orphans and
     * the holder's FUSE server come to it, so stop kills and reaps its
     * children instead of scanning /proc for the container's mount namespace
     * (which it still does when `skiff exec` joined, see mark_joined). */
    bool subreaper;
    /* A lazy image (image/lazy.h): image (or the named container's) is a
     * lazy image's directory, lazy the image opened for serving, lazy_chan
     * the channel to its fetcher (container.h's skiff_lazy_run_begin sets
     * both). */
    struct lz_image *lazy;
    int lazy_chan;

    void *decoded; /* the lists skiff_start_request_decode allocated (skiff_start_request_free) */
};

/* The fields that travel, one line each: X(field, KIND) with KIND one of
 * STR (const char *), BOOL, INT (int, >= 0) or LIST (const char *const *).
 * The record's key is the field's name. request.c checks each field's type
 * against its KIND at compile time. */
#define SKIFF_START_REQUEST_FIELDS(X)                                                                                  \
    X(image, STR)                                                                                                      \
    X(name, STR)                                                                                                       \
    X(mounts, LIST)                                                                                                    \
    X(env, LIST)                                                                                                       \
    X(env_file, STR)                                                                                                   \
    X(workdir, STR)                                                                                                    \
    X(writable, BOOL)                                                                                                  \
    X(remap_root, BOOL)                                                                                                \
    X(mount_home, BOOL)                                                                                                \
    X(use_entrypoint, BOOL)                                                                                            \
    X(command, LIST)                                                                                                   \
    X(unshare_flags, INT)                                                                                              \
    X(hook_env, LIST)                                                                                                  \
    X(locale_env, LIST)                                                                                                \
    X(state_key, STR)                                                                                                  \
    X(enroot_env, LIST)                                                                                                \
    X(cwd, STR)                                                                                                        \
    X(node, STR)                                                                                                       \
    X(name_given, STR)                                                                                                 \
    X(name_mode, INT)                                                                                                  \
    X(importer, STR)                                                                                                   \
    X(temp_name, BOOL)                                                                                                 \
    X(timeout_s, INT)                                                                                                  \
    X(import_timeout_s, INT)                                                                                           \
    X(save, STR)                                                                                                       \
    X(sweep_suffix, STR)

/* The records of an encoded request (records.h). */
enum skiff_request_tag {
    SKIFF_REQ_CONFIG = 'c', /* "key=value": one setting of the configuration (skiff_config_entry) */
    SKIFF_REQ_FIELD = 'o',  /* "key=value": one field above; a LIST's key once per entry, in order */
};

/* Bounds the decoder holds a request to (root wrote it; the helper still
 * trusts nothing it cannot check). */
#define SKIFF_REQUEST_MAX (16u << 20)   /* bytes */
#define SKIFF_REQUEST_LIST_MAX 4096     /* entries per list */
#define SKIFF_REQUEST_TIMEOUT_MAX 86400 /* timeout_s, import_timeout_s */

/* Defaults: everything off, fuse_fd = lazy_chan = -1, use_entrypoint = true. */
void skiff_start_request_init(struct skiff_start_request *r);

/* Appends cfg (when not NULL: every entry of skiff_config_entry) and every
 * field of r that is set (a string or list that is not NULL; every BOOL
 * and INT) to b. */
int skiff_start_request_encode(const struct skiff_config *cfg, const struct skiff_start_request *r,
                               struct skiff_recbuf *b, skiff_err *err);

/* Reads what encode wrote: cfg over skiff_config_load's defaults, r over
 * skiff_start_request_init's. Strict: an unknown tag or key, a field given
 * twice, a malformed BOOL or INT, a list longer than SKIFF_REQUEST_LIST_MAX,
 * a name_mode, unshare_flags, timeout_s or import_timeout_s out of range are errors. Strings
 * point into data, which must outlive r; free r with
 * skiff_start_request_free whatever this returns. */
int skiff_start_request_decode(const char *data, size_t len, struct skiff_config *cfg, struct skiff_start_request *r,
                               skiff_err *err);

/* Frees what skiff_start_request_decode allocated (nothing otherwise). */
void skiff_start_request_free(struct skiff_start_request *r);

#endif
