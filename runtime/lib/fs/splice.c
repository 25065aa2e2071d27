/* A read's reply from the block cache, the image and blocks decompressed
 * now (fuse_int.h): cached and uncompressed blocks are spliced into the
 * reply from their files, the rest is decompressed by a data reader and
 * stored in the block cache for the next start (blockcache.h). */
#include "fuse_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blockcache.h"

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

void skiff_fuse_cache_serve(struct skiff_fuse *f)
{
    served = f;
}

void skiff_fuse_cache_open_once(void)
{
    pthread_once(&bc_once, open_block_cache);
}

int skiff_fuse_reply_init(struct skiff_fuse_reply *rp, size_t size, size_t block_size)
{
    /* a range touches at most size / block_size + 2 blocks, and a fragment */
    rp->cap = size / block_size + 3;
    rp->bv = calloc(1, sizeof(*rp->bv) + rp->cap * sizeof(struct fuse_buf));
    rp->mem = NULL;
    rp->size = size;
    return rp->bv ? 0 : -1;
}

static struct fuse_buf *reply_piece(struct skiff_fuse_reply *rp)
{
    if (rp->bv->count >= rp->cap)
        return NULL;
    struct fuse_buf *b = &rp->bv->buf[rp->bv->count++];
    memset(b, 0, sizeof(*b));
    return b;
}

/* Where to put len bytes at offset done of the reply. */
static char *reply_mem(struct skiff_fuse_reply *rp, size_t done, size_t len)
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

void skiff_fuse_reply_free(struct skiff_fuse_reply *rp)
{
    free(rp->bv);
    free(rp->mem);
}

/* Bytes [off, off + len) of one decompressed block (data or fragment block
 * at image offset pos, squashfs size header hdr) as the reply's piece at
 * offset done: from the block cache, else decompressed by r (locked by the
 * caller) and stored there. */
static int block_piece(struct skiff_fuse *f, struct skiff_reader *r, bool frag, uint64_t pos, uint32_t hdr, size_t off,
                       size_t len, struct skiff_fuse_reply *rp, size_t done)
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

/* The walk is sqfs_read_range's
 * (squashfuse file.c: a block list fast-forwarded to start, full blocks,
 * then the tail in a fragment block); each block goes through block_piece
 * so that the block cache is asked first. */
int skiff_fuse_read_range(struct skiff_fuse *f, struct skiff_reader *r, sqfs_inode *inode, uint64_t start, size_t *size,
                          struct skiff_fuse_reply *rp)
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
