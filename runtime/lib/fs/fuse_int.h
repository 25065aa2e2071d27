/* Private to the FUSE server (fs/), whose API is fusemount.h: what its
 * files share. fusemount.c mounts the image and runs the serving process;
 * fuseops.c holds the FUSE handlers; sqfsreader.c the squashfs readers they
 * decode with (libsquashfuse, one sqfs per reader, each with its own caches
 * and lock); splice.c builds a read's reply from the block cache, the image
 * and freshly decompressed blocks. The rest of libskiff includes fusemount.h
 * only. */
#ifndef SKIFF_FUSE_INT_H
#define SKIFF_FUSE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

/* squashfuse's headers carry their own config.h (FUSE_USE_VERSION 32) */
#include <squashfuse/config.h>
#include <squashfuse/ll.h>

#include "error.h"
#include "fusemount.h"

/* Not in squashfuse's installed headers, but exported by libsquashfuse_ll
 * (stat.c, fuseprivate.c). */
sqfs_err sqfs_stat(sqfs *fs, sqfs_inode *inode, struct stat *st);
int sqfs_statfs(sqfs *fs, struct statvfs *st);
int sqfs_listxattr(sqfs *fs, sqfs_inode *inode, char *buf, size_t *size);
int sqfs_enoattr(void);

struct skiff_reader {
    sqfs_ll ll;
    pthread_mutex_t lock;
    bool open;
};

/* Data readers: reads go to data[(offset / block size) % ndata], so the
 * kernel's readahead windows (block-aligned when warming) are decompressed
 * in parallel, each block by one reader, whose cache then has it. */
#define MAX_DATA_READERS 4

struct skiff_fuse {
    struct skiff_reader meta, data[MAX_DATA_READERS];
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
    /* a lazy image: its reads (lazyread.c); NULL for a plain one */
    struct skiff_lazy_srv *lazy_srv;
};

/* ---- sqfsreader.c ---- */

/* Opens a reader of image. for_data: it serves file data and gets the
 * larger block caches; the metadata reader never reads a data block. */
int skiff_reader_open(struct skiff_reader *r, const char *image, bool for_data, skiff_err *err);

/* Closes r if open. */
void skiff_reader_close(struct skiff_reader *r);

/* The inode behind a FUSE inode number, from the metadata reader (locked by
 * the caller); an errno value or 0. */
int skiff_reader_meta_inode(struct skiff_fuse *f, fuse_ino_t ino, sqfs_inode *inode);

/* The inode a read or readdir is for: the open's handle, or decoded again
 * by the reader r (locked by the caller) when opens are zero-message. */
sqfs_inode *skiff_reader_handle_inode(struct skiff_reader *r, fuse_ino_t ino, const struct fuse_file_info *fi,
                                      sqfs_inode *buf);

/* ---- splice.c ---- */

/* A read's reply, piece by piece in file order: ranges of the block cache
 * file or of the image (uncompressed blocks), spliced into the reply by
 * libfuse with no copy through this process, and ranges of mem (blocks
 * decompressed now, holes), which has the reply's size and holds each piece
 * at its offset in the reply. */
struct skiff_fuse_reply {
    struct fuse_bufvec *bv;
    size_t cap;
    char *mem;
    size_t size;
};

/* A reply of up to size bytes of an image with blocks of block_size; -1
 * when out of memory. */
int skiff_fuse_reply_init(struct skiff_fuse_reply *rp, size_t size, size_t block_size);
void skiff_fuse_reply_free(struct skiff_fuse_reply *rp);

/* Reads [start, start + *size) of a regular file into the reply with the
 * data reader r (locked by the caller), *size = bytes read (short at the
 * end of the file); -1 on a decoding error. */
int skiff_fuse_read_range(struct skiff_fuse *f, struct skiff_reader *r, sqfs_inode *inode, uint64_t start, size_t *size,
                          struct skiff_fuse_reply *rp);

/* In the serving process, before it serves: f is the mount whose block
 * cache the first read opens (skiff_fuse_cache_open_once). */
void skiff_fuse_cache_serve(struct skiff_fuse *f);

/* Opens the block cache of the served mount, once (any thread, any read). */
void skiff_fuse_cache_open_once(void);

/* ---- lazyread.c ---- */

/* Serving a lazy image (lazy.h) on f: im's data file, spans asked for on
 * chan (the fetcher's channel; f's from now), a read waiting at most
 * timeout_s. */
int skiff_lazy_serve_init(struct skiff_fuse *f, struct lz_image *im, int chan, int timeout_s, skiff_err *err);
/* Undoes skiff_lazy_serve_init (a mount that failed). */
void skiff_lazy_serve_free(struct skiff_fuse *f);
/* In the serving process, before it serves: the thread that hears the
 * fetcher and answers the reads that wait. */
void skiff_lazy_serve_start(struct skiff_fuse *f);
/* The fds the serving process keeps for it: 0 the channel, 1 the data
 * file; -1 when f is not lazy. */
int skiff_lazy_serve_fd(const struct skiff_fuse *f, int which);
/* op_read of a lazy image. */
void skiff_lazy_read(struct skiff_fuse *f, fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi);

/* ---- fuseops.c ---- */

/* The FUSE handlers (lowlevel API), userdata the struct skiff_fuse. */
extern const struct fuse_lowlevel_ops skiff_fuse_ops;

#endif
