/* The squashfs FUSE server; see fusemount.h.
 *
 * Why forked, not an exec'ed squashfuse_ll: exec'ing costs an exec, its own
 * library loading and a daemonize handshake per container start; a fork of
 * the holder, which has already opened the image, costs a fork.
 *
 * Why our own FUSE glue over libsquashfuse's reading functions (instead of
 * libsquashfuse_ll's ready-made sqfs_ll_op_* handlers, which a single thread
 * could use): those handlers share one `sqfs` whose block caches are not
 * thread-safe, so they can only be served one request at a time. Then a
 * lookup waits behind every read queued before it: the holder's own setup
 * behind the command being warmed (warm.h), one task's `ls` behind another
 * task's 100 MB read. Here several readers, each an `sqfs` opened on the
 * image with its own caches and lock, serve metadata (lookup, getattr,
 * readlink, readdir, xattrs, open: one reader) and file data (read: one
 * reader per CPU, up to 4, by block) in parallel from a multithreaded loop.
 * Decoding squashfs (inodes, directories, blocks, decompression) stays
 * libsquashfuse's; the handlers below only lock, call it and reply. Inode
 * numbers are squashfs inode locations (squashfuse's
 * 64-bit scheme), the same in every reader and stateless. */
#include "fusemount.h"
#include "blockcache.h"
#include "fdio.h"
#include "spawn.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* squashfuse's headers carry their own config.h (FUSE_USE_VERSION 32) */
#include <squashfuse/config.h>
#include <squashfuse/ll.h>

/* Not in squashfuse's installed headers, but exported by libsquashfuse_ll
 * (stat.c, fuseprivate.c). */
sqfs_err sqfs_stat(sqfs *fs, sqfs_inode *inode, struct stat *st);
int sqfs_statfs(sqfs *fs, struct statvfs *st);
int sqfs_listxattr(sqfs *fs, sqfs_inode *inode, char *buf, size_t *size);
int sqfs_enoattr(void);

struct reader {
    sqfs_ll ll;
    pthread_mutex_t lock;
    bool open;
};

/* Data readers: reads go to data[(offset / block size) % ndata], so the
 * kernel's readahead windows (block-aligned when warming) are decompressed
 * in parallel, each block by one reader, whose cache then has it. */
#define MAX_DATA_READERS 4

struct skiff_fuse {
    struct reader meta, data[MAX_DATA_READERS];
    unsigned ndata;
    /* image files owned by root are presented as owned by the namespace's
     * user when root is not remapped, as an extracted image would be, so the
     * user can create mount points and write with --rw (the only ids an
     * unprivileged namespace has are the user's own) */
    bool own_root;
    bool no_xattrs; /* the image has no xattr table: ENOSYS, asked once */
    bool no_open;   /* the kernel opens files and directories without asking */
    uid_t uid;
    gid_t gid;
    struct fuse_session *se;
    pid_t server; /* the serving process */
    int fd;
    /* the persistent block cache, opened by the first read */
    int cache_dirfd;
    uint64_t cache_bytes;
    struct skiff_blockcache *bc;
};

/* the serving process's one mount, for the block cache's pthread_once */
static struct skiff_fuse *served;
static pthread_once_t bc_once = PTHREAD_ONCE_INIT;

static void open_block_cache(void)
{
    struct skiff_fuse *f = served;
    if (f->cache_dirfd < 0)
        return;
    skiff_err err;
    f->bc = skiff_blockcache_open(f->cache_dirfd, f->meta.ll.fs.fd, &f->meta.ll.fs.sb, sizeof(f->meta.ll.fs.sb),
                                  f->meta.ll.fs.sb.block_size, f->cache_bytes, &err);
    /* without it, blocks are decompressed as before */
}

/* for_data: this reader serves file data and gets the larger block caches;
 * the metadata reader never reads a data block. */
static int reader_open(struct reader *r, const char *image, bool for_data, skiff_err *err)
{
    if (sqfs_open_image(&r->ll.fs, image, 0) != SQFS_OK)
        return skiff_error(err, EIO, "read squashfs image %s", image);
    /* squashfuse caches 1 data block and 3 fragment blocks; the kernel's
     * 128 KiB reads rarely line up with the image's blocks, so a read often
     * spans two and the same block is decompressed again and again (50
     * decompressions to exec a 2 MB busybox). 32 + 16 blocks (<= 6 MiB). */
    if (for_data) {
        sqfs_cache_destroy(&r->ll.fs.data_cache);
        sqfs_cache_destroy(&r->ll.fs.frag_cache);
    }
    if (for_data && (sqfs_block_cache_init(&r->ll.fs.data_cache, 32) != SQFS_OK ||
                     sqfs_block_cache_init(&r->ll.fs.frag_cache, 16) != SQFS_OK)) {
        sqfs_destroy(&r->ll.fs);
        return skiff_error(err, ENOMEM, "squashfs block cache");
    }
    if (sqfs_ll_init(&r->ll) != SQFS_OK) {
        sqfs_destroy(&r->ll.fs);
        return skiff_error(err, EIO, "read squashfs image %s", image);
    }
    pthread_mutex_init(&r->lock, NULL);
    r->open = true;
    return 0;
}

static void reader_close(struct reader *r)
{
    if (!r->open)
        return;
    sqfs_ll_destroy(&r->ll);
    pthread_mutex_destroy(&r->lock);
    r->open = false;
}

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

/* The inode behind a FUSE inode number, from the metadata reader (locked by
 * the caller); an errno value or 0. */
static int meta_inode(struct skiff_fuse *f, fuse_ino_t ino, sqfs_inode *inode)
{
    return sqfs_ll_inode(&f->meta.ll, inode, ino) == SQFS_OK ? 0 : ENOENT;
}

/* Attributes never expire: the image is immutable. */
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct skiff_fuse *f = fs_of(req);
    sqfs_inode inode;
    struct stat st;
    pthread_mutex_lock(&f->meta.lock);
    int e = meta_inode(f, ino, &inode);
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
    int rc = meta_inode(f, parent, &dir);
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
    int e = meta_inode(f, ino, &inode);
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
    int e = meta_inode(f, ino, inode);
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

/* The inode a read or readdir is for: the open's handle, or decoded again
 * by the reader r (locked by the caller) when opens are zero-message. */
static sqfs_inode *handle_inode(struct reader *r, fuse_ino_t ino, const struct fuse_file_info *fi, sqfs_inode *buf)
{
    if (fi && fi->fh)
        return (sqfs_inode *)(uintptr_t)fi->fh;
    return sqfs_ll_inode(&r->ll, buf, ino) == SQFS_OK ? buf : NULL;
}

/* A read's reply, piece by piece in file order: ranges of the block cache
 * file or of the image (uncompressed blocks), spliced into the reply by
 * libfuse with no copy through this process, and ranges of mem (blocks
 * decompressed now, holes), which has the reply's size and holds each piece
 * at its offset in the reply. */
struct reply {
    struct fuse_bufvec *bv;
    size_t cap;
    char *mem;
    size_t size;
};

static int reply_init(struct reply *rp, size_t size, size_t block_size)
{
    /* a range touches at most size / block_size + 2 blocks, and a fragment */
    rp->cap = size / block_size + 3;
    rp->bv = calloc(1, sizeof(*rp->bv) + rp->cap * sizeof(struct fuse_buf));
    rp->mem = NULL;
    rp->size = size;
    return rp->bv ? 0 : -1;
}

static struct fuse_buf *reply_piece(struct reply *rp)
{
    if (rp->bv->count >= rp->cap)
        return NULL;
    struct fuse_buf *b = &rp->bv->buf[rp->bv->count++];
    memset(b, 0, sizeof(*b));
    return b;
}

/* Where to put len bytes at offset done of the reply. */
static char *reply_mem(struct reply *rp, size_t done, size_t len)
{
    if (!rp->mem && !(rp->mem = malloc(rp->size ? rp->size : 1)))
        return NULL;
    struct fuse_buf *last = rp->bv->count ? &rp->bv->buf[rp->bv->count - 1] : NULL;
    if (last && !(last->flags & FUSE_BUF_IS_FD) && (char *)last->mem + last->size == rp->mem + done) {
        last->size += len;
    } else {
        struct fuse_buf *b = reply_piece(rp);
        if (!b)
            return NULL;
        b->mem = rp->mem + done;
        b->size = len;
    }
    return rp->mem + done;
}

static void reply_free(struct reply *rp)
{
    free(rp->bv);
    free(rp->mem);
}

/* Bytes [off, off + len) of one decompressed block (data or fragment block
 * at image offset pos, squashfs size header hdr) as the reply's piece at
 * offset done: from the block cache, else decompressed by r (locked by the
 * caller) and stored there. */
static int block_piece(struct skiff_fuse *f, struct reader *r, bool frag, uint64_t pos, uint32_t hdr, size_t off,
                       size_t len, struct reply *rp, size_t done)
{
    bool compressed;
    uint32_t csize;
    sqfs_data_header(hdr, &compressed, &csize);
    sqfs *fs = &r->ll.fs;
    /* a block stored uncompressed is spliced from the image itself, a
     * cached one from the block cache */
    int fd = -1;
    off_t at = 0;
    if (!compressed && off + len <= csize) {
        fd = fs->fd;
        at = (off_t)(fs->offset + pos + off);
    } else if (compressed && skiff_blockcache_find(f->bc, pos, off, len, &at) == 0) {
        fd = skiff_blockcache_fd(f->bc);
    }
    if (fd >= 0) {
        struct fuse_buf *b = reply_piece(rp);
        if (!b)
            return -1;
        b->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
        b->fd = fd;
        b->pos = at;
        b->size = len;
        return 0;
    }
    struct skiff_blockcache *bc = compressed ? f->bc : NULL;
    sqfs_block *blk;
    char *dst = reply_mem(rp, done, len);
    if (!dst || sqfs_data_cache(fs, frag ? &fs->frag_cache : &fs->data_cache, (sqfs_off_t)pos, hdr, &blk) != SQFS_OK ||
        off + len > blk->size)
        return -1;
    memcpy(dst, (char *)blk->data + off, len);
    skiff_blockcache_put(bc, pos, blk->data, blk->size);
    return 0;
}

/* Reads [start, start + *size) of a regular file into the reply, *size =
 * bytes read (short at the end of the file). The walk is sqfs_read_range's
 * (squashfuse file.c: a block list fast-forwarded to start, full blocks,
 * then the tail in a fragment block); each block goes through block_piece
 * so that the block cache is asked first. */
static int read_range(struct skiff_fuse *f, struct reader *r, sqfs_inode *inode, uint64_t start, size_t *size,
                      struct reply *rp)
{
    sqfs *fs = &r->ll.fs;
    uint64_t fsize = inode->xtra.reg.file_size;
    size_t bs = fs->sb.block_size;
    if (!S_ISREG(inode->base.mode) || start > fsize)
        return -1;
    size_t want = *size < fsize - start ? *size : (size_t)(fsize - start), done = 0;
    sqfs_blocklist bl;
    if (want && sqfs_blockidx_blocklist(fs, inode, &bl, (sqfs_off_t)start) != SQFS_OK)
        return -1;
    while (done < want) {
        uint64_t at = start + done;
        size_t in = (size_t)(at % bs), take;
        if (bl.remain == 0) {
            struct squashfs_fragment_entry fe;
            uint64_t tail = fsize % bs;
            if (inode->xtra.reg.frag_idx == SQUASHFS_INVALID_FRAG || in >= tail ||
                sqfs_frag_entry(fs, &fe, inode->xtra.reg.frag_idx) != SQFS_OK)
                return -1;
            take = want - done < tail - in ? want - done : (size_t)(tail - in);
            if (block_piece(f, r, true, fe.start_block, fe.size, inode->xtra.reg.frag_off + in, take, rp, done) < 0)
                return -1;
            done += take;
            break;
        }
        if (sqfs_blocklist_next(&bl) != SQFS_OK)
            return -1;
        if (bl.pos + bs <= at)
            continue;
        uint64_t bsize = fsize - bl.pos < bs ? fsize - bl.pos : bs;
        take = want - done < bsize - in ? want - done : (size_t)(bsize - in);
        if (bl.input_size == 0) { /* a hole */
            char *dst = reply_mem(rp, done, take);
            if (!dst)
                return -1;
            memset(dst, 0, take);
        } else if (block_piece(f, r, false, bl.block, bl.header, in, take, rp, done) < 0) {
            return -1;
        }
        done += take;
    }
    *size = done;
    return 0;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct skiff_fuse *f = fs_of(req);
    pthread_once(&bc_once, open_block_cache);
    struct reply rp;
    if (reply_init(&rp, size, f->meta.ll.fs.sb.block_size) < 0) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct reader *r = &f->data[(uint64_t)off / f->meta.ll.fs.sb.block_size % f->ndata];
    sqfs_inode ibuf, *inode;
    pthread_mutex_lock(&r->lock);
    int e = (inode = handle_inode(r, ino, fi, &ibuf)) ? read_range(f, r, inode, (uint64_t)off, &size, &rp) : -1;
    pthread_mutex_unlock(&r->lock);
    if (e < 0)
        fuse_reply_err(req, EIO);
    else if (rp.bv->count == 0)
        fuse_reply_buf(req, NULL, 0);
    else
        fuse_reply_data(req, rp.bv, 0);
    reply_free(&rp);
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
    if (!(inode = handle_inode(&f->meta, ino, fi, &ibuf)))
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
    int e = meta_inode(f, ino, &inode);
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
    int e = meta_inode(f, ino, &inode);
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

/* The server keeps stdio, /dev/fuse, its readers' image files and the block
 * cache directory; anything else of the caller's (a pipe its parent reads to
 * EOF, a lock) is closed. */
static void keep_only_server_fds(const struct skiff_fuse *f)
{
    int keep[3 + MAX_DATA_READERS];
    size_t n = 0;
    keep[n++] = f->fd;
    keep[n++] = f->meta.ll.fs.fd;
    keep[n++] = f->cache_dirfd;
    for (unsigned i = 0; i < f->ndata; i++)
        keep[n++] = f->data[i].ll.fs.fd;
    skiff_close_fds_except(keep, n);
}

/* One serving thread: take a request off /dev/fuse, handle it, again,
 * until the mount goes away. The handlers never wait on this mount, so a
 * fixed set of threads cannot deadlock. */
static void *serve_thread(void *arg)
{
    struct fuse_session *se = arg;
    struct fuse_buf buf = {.mem = NULL};
    while (!fuse_session_exited(se)) {
        int n = fuse_session_receive_buf(se, &buf);
        if (n == -EINTR || n == -EAGAIN)
            continue;
        if (n <= 0)
            break; /* -ENODEV: unmounted */
        fuse_session_process_buf(se, &buf);
    }
    free(buf.mem);
    return NULL;
}

/* The calling thread and one more per data reader serve. Not libfuse's
 * fuse_session_loop_mt: its main thread only waits while workers, started on
 * demand, serve (five threads per start here, each a clone and a stack to
 * map), and a container start cannot wait for a pool to warm up. Requests
 * beyond the threads queue in the kernel: at most ndata reads are in
 * flight at once anyway (max_background), so one thread is always left
 * for the lookups setup waits on. */
static void serve(struct skiff_fuse *f)
{
    /* the first request is INIT, which the caller's mount waits for: it is
     * answered before the other threads are made */
    struct fuse_buf buf = {.mem = NULL};
    int got = fuse_session_receive_buf(f->se, &buf);
    if (got > 0)
        fuse_session_process_buf(f->se, &buf);
    free(buf.mem);
    if (got <= 0 && got != -EINTR && got != -EAGAIN)
        return;
    pthread_t t[MAX_DATA_READERS];
    unsigned n = 0;
    for (; n < f->ndata; n++)
        if (pthread_create(&t[n], NULL, serve_thread, f->se) != 0)
            break;
    serve_thread(f->se);
    /* the mount is gone: the others see it too */
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static int check_magic(const char *image, skiff_err *err)
{
    char magic[4];
    cleanup_close int fd = open(image, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open image %s", image);
    if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "hsqs", 4) != 0)
        return skiff_error(err, 0, "%s is not a squashfs image (import it first: skiff import)", image);
    return 0;
}

struct skiff_fuse *skiff_fuse_mount_squashfs(const char *image, int target_fd, const struct skiff_fuse_opts *o,
                                             skiff_err *err)
{
    if (check_magic(image, err) < 0)
        return NULL;
    struct skiff_fuse *f = calloc(1, sizeof(*f));
    if (!f) {
        skiff_error(err, ENOMEM, "fuse");
        return NULL;
    }
    f->cache_dirfd = -1;
    f->fd = o->devfuse_fd >= 0 ? fcntl(o->devfuse_fd, F_DUPFD_CLOEXEC, 3) : open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (f->fd < 0) {
        skiff_error(err, errno, "open /dev/fuse (run 'skiff doctor')");
        free(f);
        return NULL;
    }
    f->own_root = o->own_root;
    f->cache_bytes = o->cache_bytes;
    f->uid = geteuid();
    f->gid = getegid();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    f->ndata = cpus < 1 ? 1 : cpus > MAX_DATA_READERS ? MAX_DATA_READERS : (unsigned)cpus;
    if (reader_open(&f->meta, image, false, err) < 0)
        goto fail;
    for (unsigned i = 0; i < f->ndata; i++)
        if (reader_open(&f->data[i], image, true, err) < 0)
            goto fail;
    f->no_xattrs = (uint64_t)f->meta.ll.fs.sb.xattr_id_table_start == UINT64_MAX; /* SQUASHFS_INVALID_BLK */
    char target[64], opts[160];
    snprintf(target, sizeof(target), "/proc/self/fd/%d", target_fd);
    snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=%u,group_id=%u,default_permissions", f->fd,
             (unsigned)geteuid(), (unsigned)getegid());
    if (mount("squashfuse", target, "fuse.squashfuse", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0) {
        skiff_error(err, errno, "mount squashfs with FUSE");
        goto fail;
    }
    static const struct fuse_lowlevel_ops ops = {
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
    char arg0[] = "skiff";
    char *argv[] = {arg0, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, argv);
    f->se = fuse_session_new(&args, &ops, sizeof(ops), f);
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
    /* The server is a process of its own, not threads of the caller: a FUSE
     * request waits for its answer even through SIGKILL once the server has
     * read it, so a caller thread caught in a request to its own server when
     * the process is killed would wait forever, holding the /dev/fuse fd that
     * would abort the connection. Served from another process, the caller's
     * requests are answered or fail when that process dies. */
    pid_t parent = getpid();
    f->server = fork();
    if (f->server < 0) {
        skiff_error(err, errno, "start the FUSE server");
        goto fail_mounted;
    }
    if (f->server == 0) {
        /* dies with the caller's thread, even by SIGKILL */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        prctl(PR_SET_NAME, "skiff-fuse", 0, 0, 0); /* in top, perf */
        if (getppid() == parent) {
            if (o->cache_dirfd >= 0 && o->cache_bytes)
                f->cache_dirfd = fcntl(o->cache_dirfd, F_DUPFD_CLOEXEC, 3);
            served = f;
            keep_only_server_fds(f);
            /* squashfuse allocates a block-sized buffer (128 KiB) per block
             * it reads, and we one per request: at glibc's default threshold
             * each is a fresh mmap, page-faulted in 4 KiB at a time and
             * unmapped again. Served from the heap instead, the pages are
             * faulted once and reused. This process only serves. */
            mallopt(M_MMAP_THRESHOLD, 8 << 20);
            mallopt(M_TRIM_THRESHOLD, 32 << 20);
            serve(f);
        }
        _exit(0);
    }
    /* the server's copy is the connection's last: when it exits, every
     * request to the mount fails instead of waiting; the data readers are
     * the server's too (the caller keeps the metadata reader's copy, for
     * skiff_fuse_lookup) */
    close(f->fd);
    f->fd = -1;
    for (unsigned i = 0; i < f->ndata; i++)
        reader_close(&f->data[i]);
    return f;
fail_mounted:
    umount2(target, MNT_DETACH);
fail:
    if (f->se)
        fuse_session_destroy(f->se); /* closes f->fd */
    else if (f->fd >= 0)
        close(f->fd);
    reader_close(&f->meta);
    for (unsigned i = 0; i < f->ndata; i++)
        reader_close(&f->data[i]);
    free(f);
    return NULL;
}

int skiff_fuse_lookup(struct skiff_fuse *f, const char *path, mode_t *mode)
{
    if (!f || !f->meta.open)
        return -1;
    sqfs_inode inode;
    bool found = false;
    sqfs *fs = &f->meta.ll.fs;
    if (sqfs_inode_get(fs, &inode, sqfs_inode_root(fs)) != SQFS_OK ||
        sqfs_lookup_path(fs, &inode, path, &found) != SQFS_OK || !found)
        return -1;
    *mode = inode.base.mode;
    return 0;
}

pid_t skiff_fuse_server_pid(const struct skiff_fuse *f)
{
    return f ? f->server : 0;
}

void skiff_fuse_stop(struct skiff_fuse *f)
{
    if (!f || f->server <= 0)
        return;
    kill(f->server, SIGKILL);
    while (waitpid(f->server, NULL, 0) < 0 && errno == EINTR)
        ;
    f->server = 0;
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
