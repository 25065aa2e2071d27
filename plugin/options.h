/* The user's --container-* options, pyxis 0.24 names and meaning. They
 * fill a start request (runtime/lib/container/request.h) directly: the
 * step adds who and where it runs (plugin/start.c) and sends it to the
 * helper as it is.
 *
 * Every option is one row of options.c's table: its flags, environment
 * fallbacks, usage text and the request field it sets. The SPANK option
 * table (spank_opts.c) and the environment fallbacks are made from it, so
 * a new option is one row there (and its field in request.h).
 *
 * Pure parsing and validation (no Slurm calls), so every rule is
 * unit-tested (tests/unit/plugin/test_options.c). Slurm may call an option
 * callback twice (command line, then the copy it passes through the
 * environment): scalars take the last value, list options (mounts, env)
 * ignore an entry they already hold. */
#ifndef SKIFF_PLUGIN_OPTIONS_H
#define SKIFF_PLUGIN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h" /* skiff_parse_bool: the boolean words */
#include "error.h"
#include "request.h"

struct skiff_opts {
    /* What the options ask for. The strings and lists of the fields the
     * options set belong to this struct (skiff_opts_free); the step sets
     * the others (name, cwd, node, ...) with its own. */
    struct skiff_start_request req;
    uint64_t given; /* one bit per option of options.c's table that was given */
    uint64_t on;    /* and for a boolean, whether it was given true */
};

/* One flag of the SPANK option table: each option has one, a boolean two
 * (--container-x and --no-container-x, or --container-readonly). */
struct skiff_opt_flag {
    const char *name; /* without "--" */
    const char *arginfo;
    const char *usage;
    bool has_arg;
};

/* The i-th flag in *f: 0, or -1 past the last one. */
int skiff_opts_flag(size_t i, struct skiff_opt_flag *f);

void skiff_opts_init(struct skiff_opts *o);
void skiff_opts_free(struct skiff_opts *o);

/* Applies one flag as srun got it: its name without "--"
 * ("container-image", "no-container-mount-home", "container-readonly")
 * and its argument (ignored for a boolean). On error err says what is
 * wrong and what to write. */
int skiff_opts_set(struct skiff_opts *o, const char *flag, const char *arg, skiff_err *err);

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

/* On the node, once the options are in: what was not given takes the
 * plugstack's default (--container-entrypoint: execute_entrypoint), and
 * the paths the user wrote relative to the step's working directory cwd
 * (--container-save, ./SRC of --container-mounts) become absolute. */
int skiff_opts_finish(struct skiff_opts *o, bool execute_entrypoint, const char *cwd, skiff_err *err);

/* Adds one --container-mounts entry of the plugin's own (the batch
 * script), unchecked. */
int skiff_opts_add_mount(struct skiff_opts *o, const char *spec, skiff_err *err);

/* The options given that shape a container only as it starts, as
 * "--container-mounts, --container-readonly" in out (n bytes); their count. */
size_t skiff_opts_start_only(const struct skiff_opts *o, char *out, size_t n);

#endif
