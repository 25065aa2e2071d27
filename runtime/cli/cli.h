/* skiff CLI verbs: each verb is one file (VERB.c) with one entry point
 * int cmd_VERB(int argc, char **argv), where argv[0] is "skiff VERB" (so
 * getopt's messages name the program and the verb). It returns the process
 * exit status: 0 success, 1 runtime failure, 2 usage error
 * (doc/error_handling.md). The table, with each verb's usage, lives in
 * verbs.c; `skiff VERB --help` never reaches the verb. */
#ifndef SKIFF_CLI_H
#define SKIFF_CLI_H

#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"

int cmd_import(int argc, char **argv);
int cmd_start(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_remove(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_cache(int argc, char **argv);

struct skiff_container;
struct skiff_start_request;
/* start.c: runs user_argv in the container whose namespaces join_pid
 * holds (setns join: skiff exec), its env plus extra_env (K=V, or NULL),
 * forwarding signals; returns the exit status (128+N for signal N). skiff
 * start has the holder start its command instead (opts.spawn). */
int cli_run_in(struct skiff_container *c, char *const *user_argv, int join_pid, const char *const *extra_env);

/* start.c: the start request every CLI start begins from (dies with us,
 * SKIFF_TRACE, SKIFF_NO_WARM, SKIFF_HOOK_TIMEOUT, the user's
 * SKIFF_HOOKS_DIR). */
void cli_start_request_init(struct skiff_start_request *o);

/* start.c: starts the container o describes (image or name, mounts, env,
 * command set by the caller), the holder spawning the command; waits for
 * it, forwarding signals, stops the container. Returns the command's exit
 * status (1 when the start failed, after "skiff: MESSAGE"). shown_name
 * names the container in the notice for a busy named one (NULL: o->name). */
int cli_start(const struct skiff_config *cfg, struct skiff_start_request *o, const char *shown_name);

/* exec.c: runs argv in the running container that process pid is in (a
 * CLI's, or a step's under plugin_runtime_path), with extra_env added;
 * returns its exit status. */
int cli_exec(const struct skiff_config *cfg, pid_t pid, char *const *argv, const char *const *extra_env);
int cmd_resolve(int argc, char **argv);
int cmd_fetch(int argc, char **argv);

/* The whole CLI after main(): `skiff --help`, the verb table's --help, and
 * dispatch to cmd_VERB. Returns the exit status. */
int cli_main(int argc, char **argv);

/* The i-th verb's name in the table, NULL past the end. */
const char *cli_verb_name(size_t i);

/* Loads the configuration the CLI uses (file + SKIFF_* env); on failure prints
 * "skiff: MESSAGE" and returns -1. */
int cli_load_config(struct skiff_config *cfg);

/* The path of the program called name beside this one (bin/skiff-import
 * beside bin/skiff) into out: 0, or -1. */
int cli_sibling(const char *name, char *out, size_t n);

/* Prints "skiff: VERB: MESSAGE" to stderr; returns 1 (the runtime-failure
 * exit status) so a verb can `return cli_fail("import", &err);`. */
int cli_fail(const char *verb, const skiff_err *err);

/* Prints VERB's usage from the verb table (synopsis, summary, options) to out. */
void cli_usage(const char *verb, FILE *out);

/* A usage error: prints "skiff VERB: MESSAGE" and VERB's synopsis to
 * stderr, returns 2 (`return cli_usage_error("start", "...")`). MESSAGE
 * says what is wrong with the arguments; no strerror text. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After getopt printed its own message ("skiff VERB: unrecognized option
 * '--x'"): VERB's synopsis to stderr; returns 2. */
int cli_bad_option(const char *verb);

/* A front end's usage functions (the skiff CLI's above, skiff-enroot's). */
struct cli_front {
    void (*usage)(const char *verb, FILE *out);
    int (*usage_error)(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    int (*bad_option)(const char *verb);
};

/* import.c: import's command line, the same for `skiff import` and `enroot
 * import` ([-o FILE] [-a ARCH] [-f] URI): fills *output and o's arch and
 * force, returns the URI; or NULL with *rc the exit status (0 after
 * --help, 2 after a usage error said through f). system: where --system
 * (skiff's store) is noted, lazy: where --lazy (a lazy image, lazy.h) is;
 * either NULL for a front end that has none. */
struct skiff_import_opts;
const char *cli_import_args(int argc, char **argv, const struct cli_front *f, struct skiff_import_opts *o,
                            const char **output, bool *system, bool *lazy, int *rc);

/* Parses the shape "VERB -C VALUE ARG" (create -n NAME IMAGE, export -o OUT
 * NAME): the one required option named long_name/short_opt and one operand
 * (named operand in errors).
 * Returns -1 when both were given (VALUE in *value, ARG in *arg), else the
 * exit status to return: 0 after --help, 2 after a usage error. */
int cli_opt_and_arg(int argc, char **argv, const char *verb, const char *long_name, char short_opt, const char *operand,
                    const char **value, const char **arg);

#endif
