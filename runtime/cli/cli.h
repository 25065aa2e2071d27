/* skiff CLI verbs: each verb is one file (VERB.c) with one entry point
 * int cmd_VERB(int argc, char **argv), where argv[0] is the verb's name.
 * It returns the process exit status: 0 success, 1 runtime failure,
 * 2 usage error (doc/error_handling.md). The table lives in main.c. */
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

struct skiff_container;
/* start.c: runs user_argv in the container whose namespaces join_pid
 * holds (setns join: skiff exec), forwarding signals; returns the exit
 * status (128+N for signal N). skiff start has the holder start its
 * command instead (opts.spawn). */
int cli_run_in(struct skiff_container *c, char *const *user_argv, int join_pid);
int cmd_resolve(int argc, char **argv);

/* Loads the configuration the CLI uses (file + SKIFF_* env); on failure prints
 * "skiff: MESSAGE" and returns -1. */
int cli_load_config(struct skiff_config *cfg);

/* Prints "skiff: VERB: MESSAGE" to stderr; returns 1 (the runtime-failure
 * exit status) so a verb can `return cli_fail("import", &err);`. */
int cli_fail(const char *verb, const skiff_err *err);

/* Parses the shape "VERB -C VALUE ARG" (create -n NAME IMAGE, export -o OUT
 * NAME): the one required option named long_name/short_opt and one operand.
 * Returns -1 when both were given (VALUE in *value, ARG in *arg), else the
 * exit status to return: 0 after --help, 2 after printing usage. */
int cli_opt_and_arg(int argc, char **argv, const char *long_name, char short_opt, const char *usage,
                    const char **value, const char **arg);

#endif
