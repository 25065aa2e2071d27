/* The FUSE handlers of the squashfs server (fuse_int.h): each locks a
 * reader, asks libsquashfuse, unlocks and replies. The image is immutable:
 * attributes and entries never expire, opens are zero-message where the
 * kernel allows (FUSE_CAP_NO_OPEN_SUPPORT), anything that would write is
 * EROFS. */
#include "fuse_int.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct skiff_fuse *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void fix_owner(const struct skiff_fuse *f, struct stat *st)
{
    if (!f->own_root)
        return;
    if (st->st_uid == 0)
        st->st_uid = f->uid;
    if (st->st_gid == 0)
        st->st_gid = f->gid;
}

/* Attributes never expire: the image is immutable. */
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct skiff_fuse *f = fs_of(req);
    sqfs_inode inode;
    struct stat st;
    pthread_mutex_lock(&f->meta.lock);
    int e = skiff_reader_meta_inode(f, ino, &inode);
    if (!e && sqfs_stat(&f->meta.ll.fs, &inode, &st) != SQFS_OK)
        e = ENOENT;
    pthread_mutex_unlock(&f->meta.lock);
    if (e) {
        fuse_reply_err(req, e);
        return;
    }
    st.st_ino = ino;
    fix_owner(f, &st);
    fuse_reply_attr(req, &st, DBL_MAX);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct skiff_fuse *f = fs_of(req);
    sqfs_inode dir, inode;
    sqfs_name namebuf;
    sqfs_dir_entry entry;
    struct fuse_entry_param e;
    bool found = false;
    memset(&e, 0, sizeof(e));
    sqfs_dentry_init(&entry, namebuf);
    pthread_mutex_lock(&f->meta.lock);
    int rc = skiff_reader_meta_inode(f, parent, &dir);
    if (!rc && !S_ISDIR(dir.base.mode))
        rc = ENOTDIR;
    if (!rc && sqfs_dir_lookup(&f->meta.ll.fs, &dir, name, strlen(name), &entry, &found) != SQFS_OK)
        rc = EIO;
    if (!rc && !found)
        rc = ENOENT;
    if (!rc && (sqfs_inode_get(&f->meta.ll.fs, &inode, sqfs_dentry_inode(&entry)) != SQFS_OK ||
                sqfs_stat(&f->meta.ll.fs, &inode, &e.attr) != SQFS_OK))
        rc = EIO;
    if (!rc)
        e.ino = f->meta.ll.ino_register(&f->meta.ll, &entry);
    pthread_mutex_unlock(&f->meta.lock);
    if (rc) {
        fuse_reply_err(req, rc);
        return;
    }
    e.attr_timeout = e.entry_timeout = DBL_MAX;
    e.attr.st_ino = e.ino;
    fix_owner(f, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    struct skiff_fuse *f = fs_of(req);
    pthread_mutex_lock(&f->meta.lock);
    f->meta.ll.ino_forget(&f->meta.ll, ino, nlookup);
    pthread_mutex_unlock(&f->meta.lock);
    fuse_reply_none(req);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct skiff_fuse *f = fs_of(req);
    sqfs_inode inode;
    char *dst = NULL;
    size_t size = 0;
    pthread_mutex_lock(&f->meta.lock);
    int e = skiff_reader_meta_inode(f, ino, &inode);
    if (!e && !S_ISLNK(inode.base.mode))
        e = EINVAL;
    if (!e && sqfs_readlink(&f->meta.ll.fs, &inode, NULL, &size) != SQFS_OK)
        e = EIO;
    if (!e && !(dst = malloc(size + 1)))
        e = ENOMEM;
    if (!e && sqfs_readlink(&f->meta.ll.fs, &inode, dst, &size) != SQFS_OK)
        e = EIO;
    pthread_mutex_unlock(&f->meta.lock);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_readlink(req, dst);
    free(dst);
}

/* open and opendir: where the kernel can open by itself (zero-message
 * opens, FUSE_CAP_NO_OPEN_SUPPORT), ENOSYS says so once, and no open or
 * release reaches us again: an exec, a library load or a config read costs
 * no round trip to this process. Otherwise the inode, decoded once, is the
 * handle. */
static void open_common(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, bool want_dir)
{
    struct skiff_fuse *f = fs_of(req);
    if (f->no_open) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    if (!want_dir && (fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    sqfs_inode *inode = malloc(sizeof(*inode));
    if (!inode) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_mutex_lock(&f->meta.lock);
    int e = skiff_reader_meta_inode(f, ino, inode);
    pthread_mutex_unlock(&f->meta.lock);
    if (!e && want_dir && !S_ISDIR(inode->base.mode))
        e = ENOTDIR;
    if (!e && !want_dir && !S_ISREG(inode->base.mode))
        e = EISDIR;
    if (e) {
        free(inode);
        fuse_reply_err(req, e);
        return;
    }
    fi->fh = (uintptr_t)inode;
    fi->keep_cache = 1; /* immutable: what is cached stays valid across opens */
    fuse_reply_open(req, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    open_common(req, ino, fi, false);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    open_common(req, ino, fi, true);
}

/* A buffer for a reply of up to size bytes, or NULL after answering ENOMEM. */
static char *reply_buf(fuse_req_t req, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        fuse_reply_err(req, ENOMEM);
    return buf;
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    free((sqfs_inode *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct skiff_fuse *f = fs_of(req);
    if (f->lazy_srv) {
        skiff_lazy_read(f, req, ino, size, off, fi);
        return;
    }
    skiff_fuse_cache_open_once();
    struct skiff_fuse_reply rp;
    if (skiff_fuse_reply_init(&rp, size, f->meta.ll.fs.sb.block_size) < 0) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct skiff_reader *r = &f->data[(uint64_t)off / f->meta.ll.fs.sb.block_size % f->ndata];
    sqfs_inode ibuf, *inode;
    pthread_mutex_lock(&r->lock);
    int e = (inode = skiff_reader_handle_inode(r, ino, fi, &ibuf))
                ? skiff_fuse_read_range(f, r, inode, (uint64_t)off, &size, &rp)
                : -1;
    pthread_mutex_unlock(&r->lock);
    if (e < 0)
        fuse_reply_err(req, EIO);
    else if (rp.bv->count == 0)
        fuse_reply_buf(req, NULL, 0);
    else
        fuse_reply_data(req, rp.bv, 0);
    skiff_fuse_reply_free(&rp);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct skiff_fuse *f = fs_of(req);
    char *buf = reply_buf(req, size);
    if (!buf)
        return;
    size_t used = 0;
    int e = 0;
    sqfs_dir dir;
    sqfs_name namebuf;
    sqfs_dir_entry entry;
    sqfs_err derr = SQFS_OK;
    struct stat st;
    memset(&st, 0, sizeof(st));
    sqfs_dentry_init(&entry, namebuf);
    sqfs_inode ibuf, *inode;
    pthread_mutex_lock(&f->meta.lock);
    if (!(inode = skiff_reader_handle_inode(&f->meta, ino, fi, &ibuf)))
        e = ENOENT;
    else if (!S_ISDIR(inode->base.mode))
        e = ENOTDIR;
    else if (sqfs_dir_open(&f->meta.ll.fs, inode, &dir, off) != SQFS_OK)
        e = EINVAL;
    while (!e && sqfs_dir_next(&f->meta.ll.fs, &dir, &entry, &derr)) {
        st.st_ino = f->meta.ll.ino_fuse_num(&f->meta.ll, &entry);
        st.st_mode = sqfs_dentry_mode(&entry);
        size_t esize = fuse_add_direntry(req, buf + used, size - used, sqfs_dentry_name(&entry), &st,
                                         (off_t)sqfs_dentry_next_offset(&entry));
        if (esize > size - used)
            break; /* the next call starts from this entry */
        used += esize;
    }
    if (!e && derr != SQFS_OK)
        e = EIO;
    pthread_mutex_unlock(&f->meta.lock);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct skiff_fuse *f = fs_of(req);
    struct statvfs st;
    int e = sqfs_statfs(&f->meta.ll.fs, &st); /* superblock only: no lock */
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_statfs(req, &st);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct skiff_fuse *f = fs_of(req);
    if (f->no_xattrs) {
        /* the kernel stops asking this mount (exec asks for
         * security.capability each time) */
        fuse_reply_err(req, ENOSYS);
        return;
    }
    sqfs_inode inode;
    char *buf = reply_buf(req, size);
    size_t real = size;
    if (!buf)
        return;
    pthread_mutex_lock(&f->meta.lock);
    int e = skiff_reader_meta_inode(f, ino, &inode);
    if (!e && sqfs_xattr_lookup(&f->meta.ll.fs, &inode, name, size ? buf : NULL, &real) != SQFS_OK)
        e = EIO;
    pthread_mutex_unlock(&f->meta.lock);
    if (!e && real == 0)
        e = sqfs_enoattr();
    if (!e && size && size < real)
        e = ERANGE;
    if (e)
        fuse_reply_err(req, e);
    else if (size == 0)
        fuse_reply_xattr(req, real);
    else
        fuse_reply_buf(req, buf, real);
    free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct skiff_fuse *f = fs_of(req);
    if (f->no_xattrs) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    sqfs_inode inode;
    char *buf = size ? malloc(size) : NULL;
    if (size && !buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_mutex_lock(&f->meta.lock);
    int e = skiff_reader_meta_inode(f, ino, &inode);
    if (!e)
        e = sqfs_listxattr(&f->meta.ll.fs, &inode, buf, &size);
    pthread_mutex_unlock(&f->meta.lock);
    if (e)
        fuse_reply_err(req, e < 0 ? -e : e);
    else if (buf)
        fuse_reply_buf(req, buf, size);
    else
        fuse_reply_xattr(req, size);
    free(buf);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    fuse_reply_err(req, EROFS);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct skiff_fuse *f = userdata;
    /* both or neither: read and readdir then find their inode by number */
    f->no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT);
    /* a symlink's target is asked once (the warm resolves the command's, the
     * exec then finds it cached) */
    if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
        conn->want |= FUSE_CAP_CACHE_SYMLINKS;
    /* Readahead requests go to the kernel's background queue; at most one
     * per data reader is handed to us at once, so worker threads stay free
     * for the metadata requests queued after them. */
    conn->max_background = f->ndata;
    conn->congestion_threshold = f->ndata;
    /* cached blocks go from the block cache file to the kernel by splice */
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
}

const struct fuse_lowlevel_ops skiff_fuse_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_release,
    .statfs = op_statfs,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .create = op_create,
};
