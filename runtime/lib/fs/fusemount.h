/* Serving a squashfs image over FUSE from a process forked by the caller
 * (no helper is exec'ed; libsquashfuse decodes, several threads serve), which
 * dies with the caller's thread, so the mount lives exactly as long as the
 * caller. Meant for the container holder, inside its user + mount
 * namespaces. */
#ifndef SKIFF_FUSEMOUNT_H
#define SKIFF_FUSEMOUNT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct skiff_fuse;
struct lz_image;

struct skiff_fuse_opts {
    int devfuse_fd; /* an open /dev/fuse, or -1 to open it here */
    /* present files owned by uid/gid 0 as owned by the caller's euid/egid */
    bool own_root;
    /* the block cache (blockcache.h): its directory, open (O_PATH will do),
     * or -1 for none; and its size per image */
    int cache_dirfd;
    uint64_t cache_bytes;
    /* a lazy image (lazy.h): image is its skeleton, file data comes from
     * its data file, missing spans are asked of the fetcher on lazy_chan
     * (the server keeps a copy; the caller closes its own), a read waits
     * at most lazy_timeout_s; NULL for a plain image */
    struct lz_image *lazy;
    int lazy_chan;
    int lazy_timeout_s;
};

/* Opens the image, mounts it read-only (nosuid, nodev) on the directory open
 * at target_fd and forks the serving process (PR_SET_PDEATHSIG: it gets
 * SIGKILL when the calling thread exits). The caller must close its own
 * copies of o->devfuse_fd and o->cache_dirfd once this returns (the server
 * has its own), or a request in flight when the server dies could wait
 * forever. Returns NULL + err on failure; err->code is
 * EACCES/EPERM/ENODEV/ENOENT when FUSE itself is unusable (the caller may
 * then fall back to extraction). */
struct skiff_fuse *skiff_fuse_mount_squashfs(const char *image, int target_fd, const struct skiff_fuse_opts *o,
                                             skiff_err *err);

/* Looks path (relative to the image's root, no symlinks followed) up in
 * the image itself, in the calling process, without a FUSE round trip:
 * 0 and its mode, or -1 when it is not there. */
int skiff_fuse_lookup(struct skiff_fuse *f, const char *path, mode_t *mode);

/* The serving process's pid. */
pid_t skiff_fuse_server_pid(const struct skiff_fuse *f);

/* Kills the serving process and reaps it (a caller about to exit, so that
 * nothing of the mount outlives it). Safe on NULL. */
void skiff_fuse_stop(struct skiff_fuse *f);

#endif
