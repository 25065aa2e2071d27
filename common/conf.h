/* "key = value" configuration files and the one boolean vocabulary.
 *
 * A file is read line by line, each line any length: '#' starts a comment,
 * blank lines are skipped, blanks around the key and the value are dropped,
 * a value in double quotes loses them; a line with text but no '=' is an
 * error naming the file and the line. skiff.conf (runtime/lib/config.c)
 * and the bundled hooks' NAME.conf knobs (hooks/lib/hookconf.c) are read
 * through it.
 *
 * Booleans, wherever skiff reads one (skiff.conf, plugstack.conf arguments,
 * SKIFF_CONTAINER_* / PYXIS_CONTAINER_* variables, SKIFF_DDP_ENV), accept
 * the same words, in any case: yes/no, true/false, on/off, y/n, 1/0. */
#ifndef SKIFF_CONF_H
#define SKIFF_CONF_H

#include <stdbool.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One line, split in place: 1 with *key and *value pointing into line, 0
 * for a blank or comment line, -1 for a line with text but no '='. */
int skiff_conf_line(char *line, char **key, char **value);

/* Calls set(ctx, key, value, err) for each pair in the file at path, in
 * order, stopping at the first error (wrapped "PATH:LINE"). A missing file
 * is not an error unless must_exist. what names the file in the error of
 * its open ("config" gives "open config PATH: ..."), or is NULL. */
int skiff_conf_read(const char *path, const char *what, bool must_exist,
                    int (*set)(void *ctx, const char *key, const char *value, skiff_err *err), void *ctx,
                    skiff_err *err);

/* skiff_conf_read on a file's text already in memory (path names it in
 * errors): the hooks' unit tests and fuzzers reach it without files. */
int skiff_conf_parse(const char *text, const char *path,
                     int (*set)(void *ctx, const char *key, const char *value, skiff_err *err), void *ctx,
                     skiff_err *err);

/* 1 for yes/true/on/y/1, 0 for no/false/off/n/0 (any case), -1 for
 * anything else, NULL included. */
int skiff_parse_bool(const char *s);

#ifdef __cplusplus
}
#endif

#endif
