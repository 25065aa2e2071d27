/* What a bundled hook reads besides its environment: its admin's knobs in
 * NAME.conf beside it (the runtime passes hooks no environment of the
 * admin's, doc/hooks.md), and the image's own environment
 * (SKIFF_ROOTFS/.skiff/environment, one K=V a line, written by `skiff
 * import`), which enroot's hooks read as ENROOT_ENVIRON. The parsers take
 * text, so the unit tests and the fuzzers reach them without files. */
#ifndef SKIFF_HOOKCONF_H
#define SKIFF_HOOKCONF_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

enum skiff_knob_type {
    SKIFF_KNOB_PATH, /* an absolute path, into char[size] */
    SKIFF_KNOB_BOOL, /* a boolean (skiff_parse_bool: yes/no, true/false, ...), into bool */
    SKIFF_KNOB_WORD, /* one word without blanks, into char[size]; check, when set, says whether it is valid */
};

struct skiff_knob {
    const char *key;
    enum skiff_knob_type type;
    void *value;
    size_t size;                     /* of value, for PATH and WORD */
    bool (*check)(const char *word); /* WORD only; NULL: any word */
    const char *expect;              /* WORD: what the error says a valid value is */
};

/* Parses the text of a "key = value" file (common/conf.h's reader: '#'
 * starts a comment, blank lines are skipped, quotes are dropped) into the
 * knobs (NULL-key terminated). A line without '=', an unknown key or a bad
 * value is an error that names path and the line, and lists the keys.
 * Values are set as they are read: the caller sets the defaults before. */
int skiff_hook_conf_parse(const char *text, const char *path, const struct skiff_knob *knobs, skiff_err *err);

/* Reads SELF.conf (self: the hook's absolute path) with
 * skiff_hook_conf_parse; no such file leaves the defaults. */
int skiff_hook_conf_load(const char *self, const struct skiff_knob *knobs, skiff_err *err);

/* An image environment file's text: the value of the last "NAME=..." line
 * copied into buf (n bytes; a longer value is cut), returned; NULL when no
 * line sets NAME. Lines are split at '\n'; a trailing '\r' is not part of
 * the value. */
const char *skiff_envtext_get(const char *text, const char *name, char *buf, size_t n);

/* Calls cb for every "PREFIX...=VALUE" line of the text, in order (name and
 * value NUL-terminated copies, valid during the call). */
int skiff_envtext_each(const char *text, const char *prefix, int (*cb)(void *ctx, const char *name, const char *value),
                       void *ctx);

/* A getter (ddp_env.h's shape) over an image environment file's text
 * (ctx): the value of name, valid until the next call, at most 8 KiB. */
const char *skiff_envtext_getter(void *ctx, const char *name);

/* A driver root knob as the hooks use it: trailing slashes dropped ("/"
 * stays); an empty ldcache becomes DRIVER_ROOT/etc/ld.so.cache. */
void skiff_hook_driver_root(char *driver_root, char *ldcache, size_t ldcache_size);

/* Reads the image's environment file (SKIFF_ROOTFS/.skiff/environment,
 * resolved inside the root) into a malloc'ed string; an image without one
 * gets "" (not an error). NULL + err when SKIFF_ROOTFS is unset or the file
 * cannot be read. */
char *skiff_image_env_read(skiff_err *err);

#endif
