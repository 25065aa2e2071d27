/* In-process squashfuse server; see fusemount.h.
 *
 * Why in-process: exec'ing squashfuse_ll costs an exec, its own library
 * loading and a daemonize handshake per container start; serving from a
 * thread of the holder costs one mount(2) and a thread. The operations
 * themselves are libsquashfuse_ll's, not re-implemented here. */
#include "fusemount.h"
#include "spawn.h"

#include <errno.h>
#include <float.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

/* squashfuse's headers carry their own config.h (FUSE_USE_VERSION 32) */
#include <squashfuse/config.h>
#include <squashfuse/ll.h>

/* Not in squashfuse's installed headers, but exported by libsquashfuse
 * (stat.c): fills a struct stat from a squashfs inode. */
sqfs_err sqfs_stat(sqfs *fs, sqfs_inode *inode, struct stat *st);

/* The library's sqfs_ll first, so its operations (which take the session's
 * userdata as a sqfs_ll *) work unchanged; then what our own getattr and
 * lookup add: image files owned by root are presented as owned by the
 * namespace's user when root is not remapped, as an extracted image would
 * be, so the user can create mount points and write with --rw (the only ids
 * an unprivileged namespace has are the user's own). */
struct skiff_ll {
    sqfs_ll ll;
    bool own_root;
    uid_t uid;
    gid_t gid;
};

struct skiff_fuse {
    struct skiff_ll *ll;
    struct fuse_session *se;
    pthread_t thread;
    int fd;
};

static void fix_owner(const struct skiff_ll *s, struct stat *st)
{
    if (!s->own_root)
        return;
    if (st->st_uid == 0)
        st->st_uid = s->uid;
    if (st->st_gid == 0)
        st->st_gid = s->gid;
}

/* getattr and lookup: the library's behaviour (attributes never expire: the
 * image is immutable) plus fix_owner. */
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    sqfs_ll_i lli;
    struct stat st;
    if (sqfs_ll_iget(req, &lli, ino)) /* it replied with the error */
        return;
    if (sqfs_stat(&lli.ll->fs, &lli.inode, &st)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    st.st_ino = ino;
    fix_owner((const struct skiff_ll *)lli.ll, &st);
    fuse_reply_attr(req, &st, DBL_MAX);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    sqfs_ll_i lli;
    if (sqfs_ll_iget(req, &lli, parent))
        return;
    if (!S_ISDIR(lli.inode.base.mode)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    sqfs_name namebuf;
    sqfs_dir_entry entry;
    bool found = false;
    sqfs_dentry_init(&entry, namebuf);
    if (sqfs_dir_lookup(&lli.ll->fs, &lli.inode, name, strlen(name), &entry, &found)) {
        fuse_reply_err(req, EIO);
        return;
    }
    if (!found) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    sqfs_inode inode;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    if (sqfs_inode_get(&lli.ll->fs, &inode, sqfs_dentry_inode(&entry)) ||
        sqfs_stat(&lli.ll->fs, &inode, &e.attr)) {
        fuse_reply_err(req, EIO);
        return;
    }
    e.attr_timeout = e.entry_timeout = DBL_MAX;
    e.ino = lli.ll->ino_register(lli.ll, &entry);
    e.attr.st_ino = e.ino;
    fix_owner((const struct skiff_ll *)lli.ll, &e.attr);
    fuse_reply_entry(req, &e);
}

static void *serve(void *arg)
{
    struct skiff_fuse *f = arg;
    fuse_session_loop(f->se);
    return NULL;
}

static int check_magic(const char *image, skiff_err *err)
{
    char magic[4];
    cleanup_close int fd = open(image, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open image %s", image);
    if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "hsqs", 4) != 0)
        return skiff_error(err, EINVAL, "%s is not a squashfs image (import it first: skiff import)", image);
    return 0;
}

struct skiff_fuse *skiff_fuse_mount_squashfs(const char *image, int target_fd, int devfuse_fd, bool own_root,
                                             skiff_err *err)
{
    if (check_magic(image, err) < 0)
        return NULL;
    struct skiff_fuse *f = calloc(1, sizeof(*f));
    if (!f) {
        skiff_error(err, ENOMEM, "fuse");
        return NULL;
    }
    f->fd = devfuse_fd >= 0 ? fcntl(devfuse_fd, F_DUPFD_CLOEXEC, 3) : open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (f->fd < 0) {
        skiff_error(err, errno, "open /dev/fuse (run 'skiff doctor')");
        free(f);
        return NULL;
    }
    f->ll = calloc(1, sizeof(*f->ll));
    if (!f->ll) {
        skiff_error(err, ENOMEM, "fuse");
        goto fail;
    }
    f->ll->own_root = own_root;
    f->ll->uid = geteuid();
    f->ll->gid = getegid();
    if (sqfs_open_image(&f->ll->ll.fs, image, 0) != SQFS_OK) {
        skiff_error(err, EIO, "read squashfs image %s", image);
        free(f->ll);
        f->ll = NULL;
        goto fail;
    }
    /* squashfuse caches 1 data block and 3 fragment blocks; the kernel's
     * 128 KiB reads rarely line up with the image's blocks, so a read often
     * spans two and the same block is decompressed again and again (50
     * decompressions to exec a 2 MB busybox). 32 + 16 blocks (<= 6 MiB). */
    sqfs_cache_destroy(&f->ll->ll.fs.data_cache);
    sqfs_cache_destroy(&f->ll->ll.fs.frag_cache);
    if (sqfs_block_cache_init(&f->ll->ll.fs.data_cache, 32) != SQFS_OK ||
        sqfs_block_cache_init(&f->ll->ll.fs.frag_cache, 16) != SQFS_OK) {
        skiff_error(err, ENOMEM, "squashfs block cache");
        free(f->ll);
        f->ll = NULL;
        goto fail;
    }
    if (sqfs_ll_init(&f->ll->ll) != SQFS_OK) {
        skiff_error(err, EIO, "read squashfs image %s", image);
        sqfs_destroy(&f->ll->ll.fs);
        free(f->ll);
        f->ll = NULL;
        goto fail;
    }
    char target[64], opts[160];
    snprintf(target, sizeof(target), "/proc/self/fd/%d", target_fd);
    snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=%u,group_id=%u,default_permissions", f->fd,
             (unsigned)geteuid(), (unsigned)getegid());
    if (mount("squashfuse", target, "fuse.squashfuse", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0) {
        skiff_error(err, errno, "mount squashfs with FUSE");
        goto fail;
    }
    static const struct fuse_lowlevel_ops ops = {
        .lookup = op_lookup,
        .forget = sqfs_ll_op_forget,
        .getattr = op_getattr,
        .readlink = sqfs_ll_op_readlink,
        .open = sqfs_ll_op_open,
        .read = sqfs_ll_op_read,
        .release = sqfs_ll_op_release,
        .opendir = sqfs_ll_op_opendir,
        .readdir = sqfs_ll_op_readdir,
        .releasedir = sqfs_ll_op_releasedir,
        .statfs = stfs_ll_op_statfs,
        .getxattr = sqfs_ll_op_getxattr,
        .listxattr = sqfs_ll_op_listxattr,
        .create = sqfs_ll_op_create,
    };
    char arg0[] = "skiff";
    char *argv[] = {arg0, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, argv);
    f->se = fuse_session_new(&args, &ops, sizeof(ops), f->ll);
    if (!f->se) {
        skiff_error(err, EIO, "create FUSE session");
        goto fail_mounted;
    }
    /* "/dev/fd/N": libfuse takes the already-mounted fd instead of mounting */
    char fdpath[32];
    snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", f->fd);
    if (fuse_session_mount(f->se, fdpath) != 0) {
        skiff_error(err, EIO, "attach FUSE session");
        goto fail_mounted;
    }
    int rc = pthread_create(&f->thread, NULL, serve, f);
    if (rc != 0) {
        skiff_error(err, rc, "start FUSE thread");
        goto fail_mounted;
    }
    return f;
fail_mounted:
    umount2(target, MNT_DETACH);
fail:
    if (f->se)
        fuse_session_destroy(f->se); /* closes f->fd */
    else if (f->fd >= 0)
        close(f->fd);
    if (f->ll) {
        sqfs_ll_destroy(&f->ll->ll);
        free(f->ll);
    }
    free(f);
    return NULL;
}

int skiff_squash_extract(const char *image, const char *dir, skiff_err *err)
{
    if (check_magic(image, err) < 0)
        return -1;
    const char *argv[] = {"unsquashfs", "-quiet", "-no-progress", "-no-xattrs", "-force", "-d", dir, image, NULL};
    const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct skiff_spawn_result r;
    if (skiff_spawn(argv, envp, -1, 0, 0, &r, err) < 0)
        return skiff_err_wrap(err, "extract %s", image);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 127)
            return skiff_error(err, ENOENT, "extract %s: unsquashfs not found (install squashfs-tools)", image);
        char how[64];
        skiff_spawn_describe(&r, 0, how, sizeof(how));
        return skiff_error(err, 0, "extract %s: unsquashfs failed (%s): %s", image, how, r.err_tail);
    }
    return 0;
}
