/* The mount primitives the container assembly uses. Each targets an fd
 * (opened inside the root with rootfs.h, never a path string again, so a
 * symlink swapped in between cannot redirect it): open_tree +
 * mount_setattr + move_mount for binds, fsopen/fsconfig for a user's tmpfs. */
#ifndef SKIFF_MOUNT_H
#define SKIFF_MOUNT_H

#include "error.h"
#include "mountspec.h"

/* How a bind is made: one flags argument rather than a row of bools, which
 * callers passed in different orders. nosuid always; nodev unless
 * SKIFF_BIND_DEV. */
enum skiff_bind_flag {
    SKIFF_BIND_REC = 1 << 0,    /* recursive (rbind): submounts come along */
    SKIFF_BIND_RO = 1 << 1,     /* read-only */
    SKIFF_BIND_NOEXEC = 1 << 2, /* noexec */
    SKIFF_BIND_DEV = 1 << 3,    /* no nodev: device nodes stay usable */
    SKIFF_BIND_FILE = 1 << 4,   /* the destination is a file, not a directory
                                   (for callers that create it; ignored below) */
};

/* Bind-mounts the host path src onto the object open at target_fd: a detached
 * clone (open_tree), attributes set on the clone as flags (SKIFF_BIND_*) say,
 * then moved into place. */
int skiff_mount_bind(const char *src, int target_fd, unsigned flags, skiff_err *err);

/* Mounts a filesystem (tmpfs, overlay, fuse) onto the object at target_fd
 * with MS_NOSUID|MS_NODEV|extra. */
int skiff_mount_fs(const char *fstype, const char *source, int target_fd, unsigned long extra, const char *data,
                   skiff_err *err);

/* Sets nosuid, nodev and (with SKIFF_BIND_RO) read-only on the mount at
 * target_fd; on its submounts too with SKIFF_BIND_REC. */
int skiff_mount_setattr(int target_fd, unsigned flags, skiff_err *err);

/* Applies one user mount (bind or tmpfs, or the unmount of umount:DST)
 * inside the root at rootfd, creating
 * the destination as m->create says, with m's flags and propagation (a
 * tmpfs gets each option through fsconfig, so a bad one is named). Errors
 * name the spec: a missing source "source path does not exist: SRC", a
 * destination outside the root EXDEV. */
int skiff_mount_apply(int rootfd, const struct skiff_mount *m, skiff_err *err);

#endif
