/* Mount specifications as pyxis users write them, and fstab lines (hooks).
 *
 *   SRC:DST[:FLAGS]   bind SRC (host) on DST (container); DST defaults to SRC
 *   tmpfs:DST[:FLAGS] a fresh tmpfs on DST
 * FLAGS are separated by '+' (pyxis) or ',' : ro, rw, bind, rbind, noexec,
 * x-create=dir|file|auto, private, rprivate, slave, rslave (propagation is
 * always private in the container; accepted for compatibility), and for tmpfs
 * size=N[kmg], mode=OCTAL. Every mount gets nosuid,nodev.
 *
 * fstab line (hook mounts file): "SRC DST TYPE OPTIONS [0 0]", TYPE "none" or
 * "bind" = bind mount, "tmpfs" = tmpfs; the same OPTIONS as above. */
#ifndef SKIFF_MOUNTSPEC_H
#define SKIFF_MOUNTSPEC_H

#include <stdbool.h>

#include "error.h"

enum skiff_mount_create { SKIFF_CREATE_AUTO, SKIFF_CREATE_DIR, SKIFF_CREATE_FILE, SKIFF_CREATE_NONE };

struct skiff_mount {
    char *src;       /* host path (bind), NULL for tmpfs */
    char *dst;       /* absolute path inside the container */
    bool tmpfs;
    bool readonly;
    bool recursive;  /* rbind */
    bool noexec;
    enum skiff_mount_create create;
    char *data;      /* tmpfs options (size=,mode=), or NULL */
};

/* Parses one pyxis-style spec. On error err names the spec and the problem. */
int skiff_mountspec_parse(const char *spec, struct skiff_mount *m, skiff_err *err);

/* Parses one fstab line; returns 0 with m->dst == NULL for blank/comment lines. */
int skiff_mountspec_parse_fstab(const char *line, struct skiff_mount *m, skiff_err *err);

void skiff_mount_free(struct skiff_mount *m);

#endif
