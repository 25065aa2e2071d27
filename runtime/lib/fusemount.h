/* Serving a squashfs image over FUSE from inside the caller's process (a
 * thread running libsquashfuse_ll's operations), so no helper is exec'ed and
 * the mount lives exactly as long as the process that serves it. Meant for
 * the container holder, inside its user + mount namespaces. */
#ifndef SKIFF_FUSEMOUNT_H
#define SKIFF_FUSEMOUNT_H

#include <stdbool.h>

#include "error.h"

struct skiff_fuse;

/* Opens the image, mounts it read-only (nosuid, nodev) on the directory open
 * at target_fd and starts the serving thread. devfuse_fd: an open /dev/fuse
 * (kept by the caller) or -1 to open it here. Returns NULL + err on failure;
 * err->code is EACCES/EPERM/ENODEV/ENOENT when FUSE itself is unusable (the
 * caller may then fall back to extraction). The serving thread runs until the
 * process exits (the kernel aborts the connection then). own_root: present
 * files owned by uid/gid 0 as owned by the caller's euid/egid. */
struct skiff_fuse *skiff_fuse_mount_squashfs(const char *image, int target_fd, int devfuse_fd, bool own_root,
                                             skiff_err *err);

/* Extracts the image into the (empty, writable) directory at dir with
 * unsquashfs (argv, no shell). The fallback when FUSE is unavailable. */
int skiff_squash_extract(const char *image, const char *dir, skiff_err *err);

#endif
