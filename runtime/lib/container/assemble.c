/* Root filesystem assembly in the holder; see container_int.h.
 *
 * The image is mounted as the lower (an in-process FUSE server, or
 * extracted into the staging tmpfs where FUSE is unusable), a tmpfs or the
 * named container's persistent upper goes over it, then come the system
 * mounts and the user's. Every destination is resolved inside the root
 * (rootfs.h), so a symlink in the image cannot point a mount outside. */
#include "container_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "fusemount.h"
#include "mount.h"
#include "mountspec.h"
#include "rootfs.h"
#include "squash.h"

/* The block cache's directory (blockcache.h), created if missing; -1 when
 * it cannot be used (the start goes on without the cache): it must be a
 * directory of ours that nobody else can write, as the runtime path. */
static int open_block_cache_dir(const char *path)
{
    skiff_err e;
    if (skiff_mkdir_p(path, 0700, &e) < 0)
        return -1;
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The host's files bound into every container (the node's own name must
 * resolve inside: gloo binds to it). */
static const char *const etc_binds[] = {"/etc/hosts", "/etc/resolv.conf", "/etc/hostname"};

/* Mount points for etc_binds that the image lacks (images exported by
 * docker usually have no /etc/resolv.conf or /etc/hostname), made as empty
 * files in a fresh upper before the overlay is mounted; through the overlay
 * each would cost a copy-up of /etc and a create at every start. Asked of
 * the image itself (no FUSE round trip), and only where its /etc is a real
 * directory, so that the upper's merges with it. */
static void premake_etc_targets(struct skiff_fuse *fuse, const char *up)
{
    mode_t mode;
    if (skiff_fuse_lookup(fuse, "/etc", &mode) < 0 || !S_ISDIR(mode))
        return;
    cleanup_close int ufd = open(up, O_PATH | O_DIRECTORY | O_CLOEXEC);
    bool made_etc = false;
    for (size_t i = 0; ufd >= 0 && i < sizeof(etc_binds) / sizeof(etc_binds[0]); i++) {
        if (access(etc_binds[i], R_OK) != 0 || skiff_fuse_lookup(fuse, etc_binds[i], &mode) == 0)
            continue;
        if (!made_etc && mkdirat(ufd, "etc", 0755) < 0 && errno != EEXIST)
            return;
        made_etc = true;
        int fd = openat(ufd, etc_binds[i] + 1, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
}

/* lower (FUSE or extracted) + overlay on stage/root; returns rootfd */
int skiff_assemble_root(struct skiff_holder *h, skiff_err *err)
{
    char lower[SKIFF_PATH_MAX + 8], root[SKIFF_PATH_MAX + 8], data[4 * SKIFF_PATH_MAX + 64];
    if (skiff_stage_path(h, "lower", lower, sizeof(lower), err) < 0 ||
        skiff_stage_path(h, "root", root, sizeof(root), err) < 0)
        return -1;
    if (mkdir(lower, 0755) < 0 || mkdir(root, 0755) < 0)
        return skiff_error(err, errno, "create staging directories");
    cleanup_close int lowerfd = open(lower, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cleanup_close int rootdirfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lowerfd < 0 || rootdirfd < 0)
        return skiff_error(err, errno, "open staging directories");
    struct skiff_fuse_opts fo = {.devfuse_fd = h->o->fuse_fd, .own_root = geteuid() != 0, .cache_dirfd = -1};
    char cache_dir[SKIFF_PATH_MAX];
    if (h->cfg->block_cache_mb > 0 && skiff_config_block_cache(h->cfg, cache_dir, sizeof(cache_dir)) == 0) {
        fo.cache_dirfd = open_block_cache_dir(cache_dir);
        fo.cache_bytes = (uint64_t)h->cfg->block_cache_mb << 20;
    }
    fo.lazy = h->o->lazy;
    fo.lazy_chan = h->o->lazy_chan;
    fo.lazy_timeout_s = h->cfg->lazy_timeout_s;
    h->fuse = skiff_fuse_mount_squashfs(h->image, lowerfd, &fo, err);
    if (h->o->lazy && h->o->lazy_chan >= 0)
        close(h->o->lazy_chan); /* the server's copy must be the last but the fetcher's */
    if (fo.cache_dirfd >= 0)
        close(fo.cache_dirfd);
    if (h->fuse && h->o->fuse_fd >= 0)
        close(h->o->fuse_fd); /* our copy: the server's must be the last (fusemount.h) */
    if (!h->fuse) {
        int e = err->code;
        if (e != EACCES && e != EPERM && e != ENODEV && e != ENOENT && e != ENXIO)
            return skiff_err_wrap(err, "image %s", h->image);
        if (h->o->lazy)
            return skiff_err_wrap(err, "a lazy image needs FUSE (set image_mode=full to import images in full)");
        /* FUSE unusable here: extract into the staging tmpfs instead */
        skiff_err fe = *err;
        skiff_err_clear(err);
        if (skiff_squash_extract(h->image, lower, err) < 0)
            return skiff_err_wrap(err, "FUSE unavailable (%s), and the extraction fallback failed", fe.msg);
    }
    /* a named container's upper: written by its first instance, a
     * read-only layer of the others' (named.h) */
    const char *upper = h->upper[0] && h->named.writer ? h->upper : "";
    char up[SKIFF_PATH_MAX + 16], work[SKIFF_PATH_MAX + 16], lowers[2 * SKIFF_PATH_MAX + 16];
    if (h->upper[0] && !h->named.writer) {
        if ((size_t)snprintf(lowers, sizeof(lowers), "%s/upper:%s", h->upper, lower) >= sizeof(lowers))
            return skiff_error(err, ENAMETOOLONG, "overlay lower layers");
    } else
        snprintf(lowers, sizeof(lowers), "%s", lower);
    if (!*upper) {
        if (skiff_stage_path(h, "upper", up, sizeof(up), err) < 0 ||
            skiff_stage_path(h, "work", work, sizeof(work), err) < 0)
            return -1;
        if (mkdir(up, 0755) < 0 || mkdir(work, 0755) < 0)
            return skiff_error(err, errno, "create overlay directories");
        premake_etc_targets(h->fuse, up);
    } else {
        snprintf(up, sizeof(up), "%s/upper", upper);
        snprintf(work, sizeof(work), "%s/work", upper);
    }
    if ((size_t)snprintf(data, sizeof(data), "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lowers, up, work) >=
        sizeof(data))
        return skiff_error(err, ENAMETOOLONG, "overlay options");
    if (skiff_mount_fs("overlay", "overlay", rootdirfd, 0, data, err) < 0) {
        if (h->writable)
            return skiff_err_wrap(err, "writable root (overlayfs in a user namespace needs Linux >= 5.11; "
                                       "run 'skiff doctor')");
        /* read-only needs no overlay: the lower itself, as a bind */
        skiff_err_clear(err);
        if (skiff_mount_bind(lower, rootdirfd, SKIFF_BIND_RO, err) < 0)
            return skiff_err_wrap(err, "root");
    }
    int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return skiff_error(err, errno, "open %s", root);
    return rootfd;
}

/* Binds host src on dst inside the root, creating dst (a file with
 * SKIFF_BIND_FILE, else a directory) if missing. */
static int bind_at(int rootfd, const char *src, const char *dst, unsigned flags, skiff_err *err)
{
    cleanup_close int t =
        flags & SKIFF_BIND_FILE ? skiff_root_mkfile(rootfd, dst, err) : skiff_root_mkdirs(rootfd, dst, 0755, err);
    if (t < 0 || skiff_mount_bind(src, t, flags, err) < 0)
        return skiff_err_wrap(err, "mount %s", dst);
    return 0;
}

static int tmpfs_at(int rootfd, const char *dst, const char *data, unsigned long extra, skiff_err *err)
{
    cleanup_close int t = skiff_root_mkdirs(rootfd, dst, 0755, err);
    if (t < 0 || skiff_mount_fs("tmpfs", "tmpfs", t, extra, data, err) < 0)
        return skiff_err_wrap(err, "mount %s", dst);
    return 0;
}

/* /dev/shm and /dev/mqueue: the host's, or with a private IPC namespace
 * (--container-unshare=ipc) the container's own, a tmpfs and an mqueue
 * instance of that namespace (pyxis gives both). Without one, /dev/mqueue
 * is the host's if it has one, else an empty directory: an mqueue instance
 * may be mounted only by the owner of the IPC namespace. */
static int ipc_mounts(int rootfd, bool own_ipc, skiff_err *err)
{
    if (own_ipc ? tmpfs_at(rootfd, "/dev/shm", "mode=1777", MS_NOEXEC, err) < 0
                : bind_at(rootfd, "/dev/shm", "/dev/shm", SKIFF_BIND_NOEXEC, err) < 0)
        return -1;
    struct stat st;
    if (!own_ipc && stat("/dev/mqueue", &st) == 0 && S_ISDIR(st.st_mode))
        return bind_at(rootfd, "/dev/mqueue", "/dev/mqueue", SKIFF_BIND_NOEXEC, err);
    cleanup_close int t = skiff_root_mkdirs(rootfd, "/dev/mqueue", 0755, err);
    if (t < 0 || (own_ipc && skiff_mount_fs("mqueue", "mqueue", t, MS_NOEXEC, NULL, err) < 0))
        return skiff_err_wrap(err, "mount /dev/mqueue");
    return 0;
}

int skiff_assemble_system_mounts(int rootfd, int unshare_flags, skiff_err *err)
{
    if (bind_at(rootfd, "/proc", "/proc", SKIFF_BIND_REC | SKIFF_BIND_NOEXEC, err) < 0 ||
        bind_at(rootfd, "/sys", "/sys", SKIFF_BIND_REC | SKIFF_BIND_RO | SKIFF_BIND_NOEXEC, err) < 0 ||
        tmpfs_at(rootfd, "/dev", "mode=0755,size=64k", MS_NOEXEC, err) < 0)
        return -1;
    static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
    char p[32];
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++) {
        snprintf(p, sizeof(p), "/dev/%s", devs[i]);
        if (bind_at(rootfd, p, p, SKIFF_BIND_FILE | SKIFF_BIND_DEV | SKIFF_BIND_NOEXEC, err) < 0)
            return -1;
    }
    if (bind_at(rootfd, "/dev/pts", "/dev/pts", SKIFF_BIND_DEV | SKIFF_BIND_NOEXEC, err) < 0 ||
        ipc_mounts(rootfd, unshare_flags & CLONE_NEWIPC, err) < 0)
        return -1;
    cleanup_close int devfd = skiff_root_open(rootfd, "/dev", O_PATH | O_DIRECTORY, err);
    if (devfd < 0)
        return -1;
    static const char *const links[][2] = {{"pts/ptmx", "ptmx"},
                                           {"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlinkat(links[i][0], devfd, links[i][1]) < 0 && errno != EEXIST)
            return skiff_error(err, errno, "create /dev/%s", links[i][1]);
    if (tmpfs_at(rootfd, "/tmp", "mode=1777", 0, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(etc_binds) / sizeof(etc_binds[0]); i++) {
        if (access(etc_binds[i], R_OK) != 0)
            continue;
        /* A read-only image without the file (or without /etc) has no place
         * to mount it; such an image starts without it rather than failing. */
        cleanup_close int t = skiff_root_mkfile(rootfd, etc_binds[i], err);
        if (t < 0 && err->code == EROFS)
            continue;
        if (t < 0 || skiff_mount_bind(etc_binds[i], t, SKIFF_BIND_RO | SKIFF_BIND_NOEXEC, err) < 0)
            return skiff_err_wrap(err, "mount %s", etc_binds[i]);
    }
    return 0;
}

static int apply_spec_list(int rootfd, const char *const *specs, skiff_err *err)
{
    for (size_t i = 0; specs && specs[i]; i++) {
        struct skiff_mount m;
        if (skiff_mountspec_parse(specs[i], &m, err) < 0)
            return -1;
        int rc = skiff_mount_apply(rootfd, &m, err);
        skiff_mount_free(&m);
        if (rc < 0)
            return -1;
    }
    return 0;
}

int skiff_assemble_user_mounts(int rootfd, const char *home, bool root_tmpfs, const char *const *specs, skiff_err *err)
{
    if (home && bind_at(rootfd, home, home, SKIFF_BIND_REC, err) < 0)
        return skiff_err_wrap(err, "home directory");
    if (root_tmpfs && tmpfs_at(rootfd, "/root", "mode=0700", 0, err) < 0)
        return skiff_err_wrap(err, "root's home directory");
    return apply_spec_list(rootfd, specs, err);
}
