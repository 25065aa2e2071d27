/* The squashfs readers of the FUSE server; see fuse_int.h. */
#include "fuse_int.h"

#include <errno.h>
#include <stdint.h>

int skiff_reader_open(struct skiff_reader *r, const char *image, bool for_data, skiff_err *err)
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

void skiff_reader_close(struct skiff_reader *r)
{
    if (!r->open)
        return;
    sqfs_ll_destroy(&r->ll);
    pthread_mutex_destroy(&r->lock);
    r->open = false;
}

int skiff_reader_meta_inode(struct skiff_fuse *f, fuse_ino_t ino, sqfs_inode *inode)
{
    return sqfs_ll_inode(&f->meta.ll, inode, ino) == SQFS_OK ? 0 : ENOENT;
}

sqfs_inode *skiff_reader_handle_inode(struct skiff_reader *r, fuse_ino_t ino, const struct fuse_file_info *fi,
                                      sqfs_inode *buf)
{
    if (fi && fi->fh)
        return (sqfs_inode *)(uintptr_t)fi->fh;
    return sqfs_ll_inode(&r->ll, buf, ino) == SQFS_OK ? buf : NULL;
}
