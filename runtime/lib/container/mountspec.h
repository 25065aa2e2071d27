/* Mount specifications as pyxis users write them, and fstab lines (hooks,
 * enroot's mounts.d).
 *
 *   SRC:DST[:FLAGS]   bind SRC (host) on DST (container); SRC alone: DST = SRC
 *   tmpfs:DST[:FLAGS] a fresh tmpfs on DST
 *   umount:DST        unmount what the image, a default mount or an earlier
 *                     spec put on DST (pyxis: umount:/root under
 *                     --container-mount-home); an error when nothing is
 *                     mounted there, unless nofail
 * SRC is an absolute host path. DST is a path inside the container:
 * absolute, or relative to its root when it starts with '.' ("./x",
 * "../x": pyxis's rule; "mnt" alone is refused, as pyxis refuses it). One
 * whose ".." would leave the root is refused when it is mounted (EXDEV, as
 * enroot does), not here. FLAGS
 * are separated by '+' (pyxis) or ',': ro, rw, bind, rbind (the default,
 * as pyxis and enroot give it), noexec, exec,
 * nosuid, nodev, defaults, x-create=dir|file|auto|none, the propagation
 * types private, rprivate, slave, rslave, shared, rshared, unbindable,
 * runbindable, nofail (a missing source, or nothing to unmount, is skipped),
 * silent (accepted, as enroot does), and for tmpfs every other word is a
 * tmpfs option passed to the kernel as it is (size=, mode=, nr_inodes=,
 * huge=, uid=, gid=, ...). Every mount gets nosuid,nodev (suid and dev are
 * refused).
 *
 * fstab line (hook mounts file, mounts.d): "SRC DST [TYPE [OPTIONS [0 0]]]",
 * TYPE "none" or "bind" = bind mount (the default), "tmpfs" = tmpfs; the same
 * OPTIONS as above, and x-detach (enroot's umount: "none DST none x-detach").
 * DST may be relative to the container's root in any form (enroot's rule). */
#ifndef SKIFF_MOUNTSPEC_H
#define SKIFF_MOUNTSPEC_H

#include <stdbool.h>

#include "error.h"

enum skiff_mount_create { SKIFF_CREATE_AUTO, SKIFF_CREATE_DIR, SKIFF_CREATE_FILE, SKIFF_CREATE_NONE };

struct skiff_mount {
    char *src; /* host path (bind), NULL for tmpfs */
    char *dst; /* path inside the container (relative: from its root) */
    bool tmpfs;
    bool readonly;
    bool recursive; /* rbind: the default of SRC:DST specs; fstab lines say it */
    bool noexec;
    enum skiff_mount_create create;
    char *data;                /* tmpfs options, comma-separated, or NULL */
    unsigned long propagation; /* MS_PRIVATE, MS_SLAVE, MS_SHARED, MS_UNBINDABLE, or 0 */
    bool propagation_rec;      /* the r... form: the mount's submounts too */
    bool detach;               /* umount:DST / x-detach: unmount what is on dst (src NULL) */
    bool nofail;               /* a missing source, or nothing on dst to unmount, is skipped */
};

/* Parses one pyxis-style spec. On error err names the spec and the problem. */
int skiff_mountspec_parse(const char *spec, struct skiff_mount *m, skiff_err *err);

/* Parses one fstab line; returns 0 with m->dst == NULL for blank/comment lines. */
int skiff_mountspec_parse_fstab(const char *line, struct skiff_mount *m, skiff_err *err);

void skiff_mount_free(struct skiff_mount *m);

#endif
