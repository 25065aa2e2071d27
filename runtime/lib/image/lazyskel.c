/* The skeleton of a lazy image (lazy_int.h): the merged tree as a
 * squashfs written with libsquashfs, with metadata only. A regular file
 * is an extended file inode whose blocks are all "stored uncompressed"
 * and contiguous from blocks_start, which is where the file's bytes are in
 * the image's data file (its layer's start there plus its offset in the
 * layer's tar): the FUSE server reads [blocks_start, blocks_start + size)
 * of the data file. No fragments, no xattrs (the policy drops them), no
 * export table. Squashfs readers other than skiff's lazy server can list
 * the skeleton (unsquashfs -l) but not read its files.
 *
 * Why libsquashfs and not mksquashfs here: there is no tree on disk to
 * pack (the point is not to have one), and mksquashfs cannot write
 * pointers into another file; libsquashfs writes inodes, directories and
 * tables as they are given. The tree walk is ours: post-order (a
 * directory's listing needs its entries' inode references), inode numbers
 * assigned in a first walk so each directory knows its parent's. */
#include "lazy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqfs/compressor.h>
#include <sqfs/dir_writer.h>
#include <sqfs/error.h>
#include <sqfs/frag_table.h>
#include <sqfs/id_table.h>
#include <sqfs/inode.h>
#include <sqfs/io.h>
#include <sqfs/meta_writer.h>
#include <sqfs/super.h>

#include "atomicfile.h"
#include "sqfsout.h"

#define SKEL_BLOCK SQFS_DEFAULT_BLOCK_SIZE
#define NO_TABLE 0xFFFFFFFFFFFFFFFFull
#define BLK_UNCOMPRESSED (1u << 24)

struct skel {
    sqfs_meta_writer_t *im, *dm;
    sqfs_dir_writer_t *dw;
    sqfs_id_table_t *ids;
    const uint64_t *base;
    uint32_t nlayers;
    const sqfs_inode_generic_t *(*packed)(void *ctx, uint64_t off);
    void *packed_ctx;
    uint32_t next_ino;
    const char *error;
    int err_code;
};

static int fail(struct skel *s, int code, const char *what)
{
    if (!s->error) {
        s->error = what;
        s->err_code = code;
    }
    return -1;
}

/* Inode numbers in post-order: entries before their directory, the root
 * last; a node with several names once. */
static int number(struct skel *s, struct lz_node *n, uint32_t depth)
{
    if (n->ino)
        return 0;
    if (depth > SKIFF_PATH_MAX / 2)
        return fail(s, ELOOP, "the tree is too deep");
    if (S_ISDIR(n->mode)) {
        struct lz_dent *ents;
        uint32_t ne;
        if (lz_tree_sorted(n, &ents, &ne) < 0)
            return fail(s, ENOMEM, "sort a directory");
        for (uint32_t i = 0; i < ne; i++)
            if (number(s, ents[i].node, depth + 1) < 0)
                return -1;
    }
    if (s->next_ino == UINT32_MAX)
        return fail(s, EOVERFLOW, "too many inodes");
    n->ino = ++s->next_ino;
    return 0;
}

static int set_base(struct skel *s, sqfs_inode_generic_t *in, const struct lz_node *n, uint16_t type)
{
    sqfs_u16 uidx, gidx;
    if (sqfs_id_table_id_to_index(s->ids, n->uid, &uidx) || sqfs_id_table_id_to_index(s->ids, n->gid, &gidx))
        return fail(s, EOVERFLOW, "too many owner ids");
    in->base.type = type;
    in->base.mode = (sqfs_u16)n->mode;
    in->base.uid_idx = uidx;
    in->base.gid_idx = gidx;
    in->base.mod_time = n->mtime < 0 ? 0 : n->mtime > UINT32_MAX ? UINT32_MAX : (sqfs_u32)n->mtime;
    in->base.inode_number = n->ino;
    return 0;
}

static int put_inode(struct skel *s, struct lz_node *n, sqfs_inode_generic_t *in)
{
    sqfs_u64 block;
    sqfs_u32 off;
    sqfs_meta_writer_get_position(s->im, &block, &off);
    n->ref = (block << 16) | off;
    n->written = true;
    if (sqfs_meta_writer_write_inode(s->im, in))
        return fail(s, EIO, "write an inode");
    return 0;
}

/* A file whose blocks libsquashfs's block processor wrote (pack.c): its
 * inode, extended (for nlink), with the tree's owner, mode and time. */
static int write_packed(struct skel *s, struct lz_node *n)
{
    const sqfs_inode_generic_t *src = s->packed ? s->packed(s->packed_ctx, n->off) : NULL;
    if (!src)
        return fail(s, EINVAL, "a file's data is missing");
    size_t len = sizeof(*src) + src->payload_bytes_available;
    sqfs_inode_generic_t *in = malloc(len);
    if (!in)
        return fail(s, ENOMEM, "inode");
    memcpy(in, src, len);
    int rv = -1;
    if (sqfs_inode_make_extended(in)) {
        fail(s, EINVAL, "a file inode");
        goto out;
    }
    if (set_base(s, in, n, SQFS_INODE_EXT_FILE) < 0)
        goto out;
    in->data.file_ext.nlink = n->links;
    in->data.file_ext.xattr_idx = 0xFFFFFFFF;
    rv = put_inode(s, n, in);
out:
    free(in);
    return rv;
}

static int write_leaf(struct skel *s, struct lz_node *n)
{
    sqfs_inode_generic_t *in = NULL;
    int rv = -1;
    if (S_ISREG(n->mode) && n->layer == LZ_LAYER_PACKED)
        return write_packed(s, n);
    if (S_ISREG(n->mode)) {
        uint64_t nblocks = (n->size + SKEL_BLOCK - 1) / SKEL_BLOCK;
        if (nblocks > (1u << 26))
            return fail(s, EFBIG, "a file is too large");
        in = calloc(1, sizeof(*in) + nblocks * sizeof(sqfs_u32));
        if (!in)
            return fail(s, ENOMEM, "inode");
        if (set_base(s, in, n, SQFS_INODE_EXT_FILE) < 0)
            goto out;
        uint64_t at = n->layer == UINT32_MAX ? n->off : s->base[n->layer] + n->off;
        in->payload_bytes_available = in->payload_bytes_used = (sqfs_u32)(nblocks * sizeof(sqfs_u32));
        in->data.file_ext.blocks_start = nblocks ? at : 0;
        in->data.file_ext.file_size = n->size;
        in->data.file_ext.nlink = n->links;
        in->data.file_ext.fragment_idx = 0xFFFFFFFF;
        in->data.file_ext.fragment_offset = 0;
        in->data.file_ext.xattr_idx = 0xFFFFFFFF;
        for (uint64_t i = 0; i < nblocks; i++) {
            uint64_t left = n->size - i * SKEL_BLOCK;
            in->extra[i] = BLK_UNCOMPRESSED | (sqfs_u32)(left < SKEL_BLOCK ? left : SKEL_BLOCK);
        }
    } else if (S_ISLNK(n->mode)) {
        size_t len = strlen(n->target);
        in = calloc(1, sizeof(*in) + len + 1);
        if (!in)
            return fail(s, ENOMEM, "inode");
        if (set_base(s, in, n, SQFS_INODE_SLINK) < 0)
            goto out;
        in->payload_bytes_available = in->payload_bytes_used = (sqfs_u32)len;
        in->data.slink.nlink = n->links;
        in->data.slink.target_size = (sqfs_u32)len;
        memcpy(in->extra, n->target, len);
    } else {
        in = calloc(1, sizeof(*in));
        if (!in)
            return fail(s, ENOMEM, "inode");
        if (set_base(s, in, n, SQFS_INODE_FIFO) < 0)
            goto out;
        in->data.ipc.nlink = n->links;
    }
    rv = put_inode(s, n, in);
out:
    free(in);
    return rv;
}

static int write_node(struct skel *s, struct lz_node *n, uint32_t parent_ino)
{
    if (n->written)
        return 0;
    if (!S_ISDIR(n->mode))
        return write_leaf(s, n);
    struct lz_dent *ents;
    uint32_t ne, subdirs = 0;
    if (lz_tree_sorted(n, &ents, &ne) < 0)
        return fail(s, ENOMEM, "sort a directory");
    for (uint32_t i = 0; i < ne; i++) {
        if (write_node(s, ents[i].node, n->ino) < 0)
            return -1;
        subdirs += S_ISDIR(ents[i].node->mode) ? 1 : 0;
    }
    if (sqfs_dir_writer_begin(s->dw, 0))
        return fail(s, EIO, "write a directory");
    for (uint32_t i = 0; i < ne; i++)
        if (sqfs_dir_writer_add_entry(s->dw, ents[i].name, ents[i].node->ino, ents[i].node->ref,
                                      (sqfs_u16)ents[i].node->mode))
            return fail(s, EIO, "write a directory entry");
    if (sqfs_dir_writer_end(s->dw))
        return fail(s, EIO, "write a directory");
    sqfs_inode_generic_t *in = sqfs_dir_writer_create_inode(s->dw, 2 + subdirs, 0xFFFFFFFF, parent_ino);
    if (!in)
        return fail(s, ENOMEM, "inode");
    uint16_t type = in->base.type;
    int rv = set_base(s, in, n, type);
    if (rv == 0)
        rv = put_inode(s, n, in);
    sqfs_free(in);
    return rv;
}

/* The tables after the data: see lz_skel_finish (lazy_int.h). */
static int emit(struct skel *s, struct lz_tree *t, sqfs_file_t *file, sqfs_compressor_t *cmp, sqfs_super_t *super,
                sqfs_frag_table_t *frags, skiff_err *err)
{
    int rv = -1;
    s->im = sqfs_meta_writer_create(file, cmp, SQFS_META_WRITER_KEEP_IN_MEMORY);
    s->dm = sqfs_meta_writer_create(file, cmp, SQFS_META_WRITER_KEEP_IN_MEMORY);
    s->dw = s->dm ? sqfs_dir_writer_create(s->dm, 0) : NULL;
    s->ids = sqfs_id_table_create(0);
    if (!s->im || !s->dm || !s->dw || !s->ids) {
        skiff_error(err, ENOMEM, "squashfs writers");
        goto out;
    }
    struct lz_node *root = lz_tree_root(t);
    /* (the root's parent is the inode count + 1, as mksquashfs has it) */
    if (number(s, root, 0) < 0 || write_node(s, root, s->next_ino + 1) < 0) {
        skiff_error(err, s->err_code ? s->err_code : EIO, "squashfs: %s", s->error ? s->error : "write");
        goto out;
    }
    super->inode_count = s->next_ino;
    super->root_inode_ref = root->ref;
    super->export_table_start = NO_TABLE;
    super->xattr_id_table_start = NO_TABLE;
    if (sqfs_meta_writer_flush(s->im) || sqfs_meta_writer_flush(s->dm)) {
        lz_error(err, EIO, "squashfs: flush");
        goto out;
    }
    super->inode_table_start = file->get_size(file);
    if (sqfs_meta_write_write_to_file(s->im)) {
        lz_error(err, EIO, "squashfs: inode table");
        goto out;
    }
    super->directory_table_start = file->get_size(file);
    /* the kernel wants the fragment table after the directories, the ids
     * last */
    if (sqfs_meta_write_write_to_file(s->dm) || (frags && sqfs_frag_table_write(frags, file, super, cmp)) ||
        sqfs_id_table_write(s->ids, file, super, cmp)) {
        lz_error(err, EIO, "squashfs: tables");
        goto out;
    }
    super->bytes_used = file->get_size(file);
    if (sqfs_super_write(super, file)) {
        lz_error(err, EIO, "squashfs: superblock");
        goto out;
    }
    rv = 0;
out:
    if (s->dw)
        sqfs_destroy(s->dw);
    if (s->dm)
        sqfs_destroy(s->dm);
    if (s->im)
        sqfs_destroy(s->im);
    if (s->ids)
        sqfs_destroy(s->ids);
    return rv;
}

int lz_skel_finish(struct lz_tree *t, sqfs_file_t *file, sqfs_compressor_t *cmp, sqfs_super_t *super,
                   sqfs_frag_table_t *frags, const sqfs_inode_generic_t *(*packed)(void *ctx, uint64_t off),
                   void *packed_ctx, skiff_err *err)
{
    struct skel s = {.packed = packed, .packed_ctx = packed_ctx};
    return emit(&s, t, file, cmp, super, frags, err);
}

int lz_skel_write(struct lz_tree *t, const uint64_t *base, uint32_t nlayers, const char *path, skiff_err *err)
{
    struct skel s = {.base = base, .nlayers = nlayers};
    struct skiff_atomic out;
    /* libsquashfs writes the file through a descriptor of its own */
    if (skiff_atomic_begin(&out, path, NULL, 0600, SKIFF_ATOMIC_NOSYNC, err) < 0)
        return -1;
    close(out.fd);
    out.fd = -1;
    sqfs_file_t *file = skiff_sqfs_out_open(out.tmp, false);
    sqfs_compressor_config_t cc;
    sqfs_compressor_t *cmp = NULL;
    sqfs_super_t super;
    int rv = -1;
    if (!file) {
        skiff_error(err, errno ? errno : EIO, "open %s", out.tmp);
        goto out;
    }
    if (sqfs_compressor_config_init(&cc, SQFS_COMP_GZIP, SKEL_BLOCK, 0) || sqfs_compressor_create(&cc, &cmp) ||
        sqfs_super_init(&super, SKEL_BLOCK, (sqfs_u32)time(NULL), SQFS_COMP_GZIP)) {
        lz_error(err, EIO, "squashfs: gzip compressor");
        goto out;
    }
    super.flags = SQFS_FLAG_NO_FRAGMENTS | SQFS_FLAG_NO_XATTRS | SQFS_FLAG_UNCOMPRESSED_DATA;
    super.fragment_entry_count = 0;
    super.fragment_table_start = NO_TABLE;
    /* the superblock's place first; it is written again at the end */
    if (sqfs_super_write(&super, file)) {
        lz_error(err, EIO, "skeleton: superblock");
        goto out;
    }
    if (emit(&s, t, file, cmp, &super, NULL, err) < 0) {
        skiff_err_wrap(err, "skeleton");
        goto out;
    }
    rv = 0;
out:
    if (cmp)
        sqfs_destroy(cmp);
    if (file)
        sqfs_destroy(file);
    if (rv == 0 && chmod(out.tmp, 0644) < 0)
        rv = skiff_error(err, errno, "chmod %s", out.tmp);
    if (rv == 0)
        return skiff_atomic_commit(&out, err);
    skiff_atomic_abort(&out);
    return rv;
}
