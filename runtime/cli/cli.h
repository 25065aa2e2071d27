/* skiff CLI verbs: each verb is one file (VERB.c) with one entry point
 * int cmd_VERB(int argc, char **argv), where argv[0] is "skiff VERB" (so
 * getopt's messages name the program and the verb). It returns the process
 * exit status: 0 success, 1 runtime failure, 2 usage error
 * (doc/error_handling.md). The table, with each verb's usage, lives in
 * verbs.c; `skiff VERB --help` never reaches the verb. */
#ifndef SKIFF_CLI_H
#define SKIFF_CLI_H

#include <stdio.h>

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
/* start.c: runs user_argv in the container whose namespaces join_pid
 * holds (setns join: skiff exec), forwarding signals; returns the exit
 * status (128+N for signal N). skiff start has the holder start its
 * command instead (opts.spawn). */
int cli_run_in(struct skiff_container *c, char *const *user_argv, int join_pid);
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

/* Parses the shape "VERB -C VALUE ARG" (create -n NAME IMAGE, export -o OUT
 * NAME): the one required option named long_name/short_opt and one operand
 * (named operand in errors).
 * Returns -1 when both were given (VALUE in *value, ARG in *arg), else the
 * exit status to return: 0 after --help, 2 after a usage error. */
int cli_opt_and_arg(int argc, char **argv, const char *verb, const char *long_name, char short_opt, const char *operand,
                    const char **value, const char **arg);

#endif
