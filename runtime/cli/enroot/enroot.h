/* skiff-enroot: enroot's command line over libskiff, for the job scripts
 * and admin tools of sites that ran pyxis + enroot (MLPerf's `enroot import
 * -o`, `enroot list`, `enroot remove -f pyxis_NAME`, `enroot exec PID`).
 * A front end only: every verb parses enroot's options and calls libskiff
 * or the skiff CLI's shared pieces (cli.h), as `skiff VERB` does.
 *
 *   main.c        the verb table, usage and usage errors (exit 2), version,
 *                 the ENROOT_* start defaults, dispatch
 *   import.c      import [-o FILE] [-a ARCH] [-f] URI
 *   containers.c  create, list, remove, export: named containers under
 *                 enroot's names (pyxis_NAME for the plugin's, named.h)
 *   run.c         start and exec
 *
 * Each verb is int enroot_VERB(int argc, char **argv) with argv[0] "PROG
 * VERB" (getopt's messages then name both), returning the exit status. */
#ifndef SKIFF_ENROOT_H
#define SKIFF_ENROOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "error.h"

/* `enroot version` prints the enroot release whose command line this
 * front end follows (config.h: SKIFF_ENROOT_COMPAT_VERSION), as scripts
 * compare it; `skiff version` is skiff's. */

int enroot_import(int argc, char **argv);
int enroot_create(int argc, char **argv);
int enroot_list(int argc, char **argv);
int enroot_remove(int argc, char **argv);
int enroot_export(int argc, char **argv);
int enroot_start(int argc, char **argv);
int enroot_exec(int argc, char **argv);

/* The program's name as it was run (skiff-enroot, or enroot where the admin
 * installed that name). */
const char *enroot_prog(void);

/* "PROG VERB: MESSAGE" and VERB's usage on stderr; returns 2. */
int enroot_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After getopt's own message: VERB's usage on stderr; returns 2. */
int enroot_bad_option(const char *verb);

/* VERB's usage on out. */
void enroot_usage(const char *verb, FILE *out);

/* "PROG: VERB: MESSAGE" on stderr; returns 1. */
int enroot_fail(const char *verb, const skiff_err *err);

/* skiff's configuration with the ENROOT_* variables that map onto it
 * (config.h); -1 after a message. */
int enroot_config(const char *verb, struct skiff_config *cfg);

/* Whether the ENROOT_name variable is set to a true word (enroot's start
 * defaults: ENROOT_REMAP_ROOT, ENROOT_ROOTFS_WRITABLE, ENROOT_MOUNT_HOME,
 * ENROOT_UNSHARE_NET/UTS, ENROOT_FORCE_OVERRIDE). */
bool enroot_env_true(const char *name);

#endif
