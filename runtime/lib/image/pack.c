/* An image's squashfs straight from its layers' tar streams (pack.h).
 *
 * Why libsquashfs here and mksquashfs for a tree: an import used to unpack
 * every layer onto a scratch tree and only then run mksquashfs on it, so
 * download, inflate and the tree's writing came before the first block was
 * compressed (2.1x mksquashfs alone on the same tree, doc/benchmarks.md).
 * Packing each file's data as its tar entry streams by overlaps all of it
 * with compression, and writes no tree: lazytree.c already merges layers in
 * memory by layer.c's plans and lazyskel.c writes a tree's metadata with
 * libsquashfs, so only the data path is new. */
#include "pack.h"

#include <archive.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqfs/block_processor.h>
#include <sqfs/block_writer.h>
#include <sqfs/compressor.h>
#include <sqfs/error.h>
#include <sqfs/frag_table.h>
#include <sqfs/inode.h>
#include <sqfs/io.h>
#include <sqfs/super.h>

#include "imgconfig.h"
#include "layer_int.h"
#include "lazy_int.h"
#include "sqfsout.h"
#include "squash.h"

#define PACK_BLOCK SQFS_DEFAULT_BLOCK_SIZE
/* the inode pointers the block processor fills: in chunks, so that a
 * pointer's address never moves while the processor holds it */
#define SLOT_CHUNK 4096u

struct skiff_pack {
    sqfs_file_t *file;
    sqfs_compressor_t *cmp;
    sqfs_block_writer_t *wr;
    sqfs_frag_table_t *frags;
    sqfs_block_processor_t *proc;
    sqfs_super_t super;
    struct lz_tree *tree;
    struct skiff_layer_sink sink;
    /* one inode per file written, also of files a later layer removed: the
     * processor may write to any of them until it has finished */
    sqfs_inode_generic_t ***chunks;
    size_t nchunks, nslots;
    bool in_file, finished; /* a file begun and not ended; the processor finished */
};

/* The compressors packed here: those whose images unsquashfs 4.5 and
 * squashfuse read back. Not lz4 (unsquashfs 4.5 refuses libsquashfs 1.2's
 * lz4 images: "failed to read id table block") nor lzo (Debian's
 * libsquashfs has none): mksquashfs writes those, as it writes "none". */
static const struct {
    const char *name;
    SQFS_COMPRESSOR id;
} compressors[] = {
    {"zstd", SQFS_COMP_ZSTD},
    {"gzip", SQFS_COMP_GZIP},
    {"xz", SQFS_COMP_XZ},
};

static int comp_id(const struct skiff_config *cfg)
{
    const char *c = cfg->squash_compression[0] ? cfg->squash_compression : "zstd";
    for (size_t i = 0; i < sizeof(compressors) / sizeof(compressors[0]); i++)
        if (!strcmp(c, compressors[i].name))
            return compressors[i].id;
    return -1;
}

bool skiff_pack_usable(const struct skiff_config *cfg)
{
    return !cfg->import_mksquashfs && comp_id(cfg) >= 0;
}

static int sqfs_fail(skiff_err *err, int code, const char *what)
{
    return skiff_error(err, code == SQFS_ERROR_ALLOC ? ENOMEM : EIO, "squashfs: %s (libsquashfs error %d)", what, code);
}

static sqfs_inode_generic_t **slot_new(struct skiff_pack *k, uint64_t *idx)
{
    if (k->nslots == k->nchunks * SLOT_CHUNK) {
        sqfs_inode_generic_t ***c = realloc(k->chunks, (k->nchunks + 1) * sizeof(*c));
        if (!c)
            return NULL;
        k->chunks = c;
        if (!(c[k->nchunks] = calloc(SLOT_CHUNK, sizeof(**c))))
            return NULL;
        k->nchunks++;
    }
    *idx = k->nslots++;
    return &k->chunks[*idx / SLOT_CHUNK][*idx % SLOT_CHUNK];
}

static const sqfs_inode_generic_t *slot_get(void *ctx, uint64_t idx)
{
    struct skiff_pack *k = ctx;
    return idx < k->nslots ? k->chunks[idx / SLOT_CHUNK][idx % SLOT_CHUNK] : NULL;
}

static int append(struct skiff_pack *k, const void *p, size_t n, const char *entry, skiff_err *err)
{
    while (n) {
        /* (the processor takes a sqfs_u32 at a time) */
        sqfs_u32 c = n > (1u << 30) ? 1u << 30 : (sqfs_u32)n;
        int r = sqfs_block_processor_append(k->proc, p, c);
        if (r) {
            sqfs_fail(err, r, "append data");
            return skiff_err_wrap(err, "entry '%s'", entry);
        }
        p = (const char *)p + c;
        n -= c;
    }
    return 0;
}

static int append_zeros(struct skiff_pack *k, uint64_t n, const char *entry, skiff_err *err)
{
    static const char zeros[65536];
    while (n) {
        size_t c = n > sizeof(zeros) ? sizeof(zeros) : (size_t)n;
        if (append(k, zeros, c, entry, err) < 0)
            return -1;
        n -= c;
    }
    return 0;
}

/* A file's data, from a tar entry (sparse holes as zeros, which the
 * processor stores as sparse blocks) or from memory (a == NULL). */
static int pack_data(struct skiff_pack *k, struct archive *a, const void *mem, uint64_t size, const char *entry,
                     uint64_t *idx, skiff_err *err)
{
    sqfs_inode_generic_t **ip = slot_new(k, idx);
    if (!ip)
        return skiff_error(err, ENOMEM, "entry '%s'", entry);
    int r = sqfs_block_processor_begin_file(k->proc, ip, NULL, 0);
    if (r)
        return sqfs_fail(err, r, "begin a file");
    k->in_file = true;
    uint64_t at = 0;
    if (!a) {
        if (append(k, mem, size, entry, err) < 0)
            return -1;
        at = size;
    }
    while (a) {
        const void *block;
        size_t n;
        la_int64_t off;
        int ar = archive_read_data_block(a, &block, &n, &off);
        if (ar == ARCHIVE_EOF)
            break;
        if (ar < ARCHIVE_WARN)
            return skiff_error(err, archive_errno(a) > 0 ? archive_errno(a) : 0, "entry '%s': %s", entry,
                               archive_error_string(a));
        if (off < 0 || (uint64_t)off < at)
            return skiff_error(err, 0, "entry '%s': data out of order (corrupt layer)", entry);
        if (append_zeros(k, (uint64_t)off - at, entry, err) < 0 || append(k, block, n, entry, err) < 0)
            return -1;
        at = (uint64_t)off + n;
    }
    /* the size the header gives, as layer.c truncates to it */
    if (at < size && append_zeros(k, size - at, entry, err) < 0)
        return -1;
    k->in_file = false;
    if ((r = sqfs_block_processor_end_file(k->proc)))
        return sqfs_fail(err, r, "end a file");
    return 0;
}

/* The sink: a plan carried out on the tree in memory (lazytree.c, with
 * layer.c's refusals and messages), a file's data packed. */
static int pack_entry(void *ctx, struct archive *a, const struct skiff_entry_plan *p, struct skiff_layer_stats *st,
                      skiff_err *err)
{
    struct skiff_pack *k = ctx;
    if (p->kind == SKIFF_ENTRY_ROOT)
        return 0;
    if (p->kind == SKIFF_ENTRY_SKIPPED) {
        st->devices_skipped++;
        return 0;
    }
    bool meta = p->kind != SKIFF_ENTRY_WHITEOUT && p->kind != SKIFF_ENTRY_OPAQUE;
    if (meta) {
        st->setid_stripped += p->setid_stripped ? 1 : 0;
        st->xattrs_dropped += p->xattrs;
    }
    bool reg = p->kind == SKIFF_ENTRY_REG;
    struct lz_entry e = {
        .kind = (uint8_t)p->kind,
        .mode = meta ? (uint32_t)p->mode : 0,
        .uid = meta ? (uint32_t)p->uid : 0,
        .gid = meta ? (uint32_t)p->gid : 0,
        .mtime = meta ? (int64_t)p->mtime : 0,
        .size = reg && p->size > 0 ? (uint64_t)p->size : 0,
        .path = p->path,
        .target = p->kind == SKIFF_ENTRY_HARDLINK || p->kind == SKIFF_ENTRY_SYMLINK ? p->target : "",
        .raw = p->raw,
    };
    struct lz_node *made;
    if (lz_tree_put(k->tree, &e, 0, &made, err) < 0)
        return -1;
    if (reg && made) {
        uint64_t idx;
        if (pack_data(k, a, NULL, e.size, p->raw, &idx, err) < 0)
            return -1;
        made->layer = LZ_LAYER_PACKED;
        made->off = idx;
    }
    if (meta)
        st->entries++;
    return 0;
}

int skiff_pack_open(const struct skiff_config *cfg, const char *path, struct skiff_pack **out, skiff_err *err)
{
    *out = NULL;
    int id = comp_id(cfg);
    if (id < 0)
        return skiff_error(err, EINVAL, "squashfs: compression %s is written by mksquashfs only",
                           cfg->squash_compression);
    struct skiff_pack *k = calloc(1, sizeof(*k));
    if (!k)
        return skiff_error(err, ENOMEM, "squashfs writer");
    k->sink.entry = pack_entry;
    k->sink.ctx = k;
    mode_t um = umask(0);
    umask(um);
    k->tree = lz_tree_new(geteuid() == 0, um);
    if (!k->tree) {
        skiff_error(err, ENOMEM, "squashfs writer");
        goto fail;
    }
    k->file = skiff_sqfs_out_open(path, true);
    if (!k->file) {
        skiff_error(err, errno ? errno : EIO, "open %s", path);
        goto fail;
    }
    sqfs_compressor_config_t cc;
    int r = sqfs_compressor_config_init(&cc, (SQFS_COMPRESSOR)id, PACK_BLOCK, 0);
    int lvl = skiff_squash_level(cfg);
    if (!r && lvl)
        cc.level = (sqfs_u32)lvl;
    if (r || (r = sqfs_compressor_create(&cc, &k->cmp))) {
        skiff_error(err, EINVAL, "squashfs: %s compressor (level %d): libsquashfs error %d", cfg->squash_compression,
                    lvl, r);
        goto fail;
    }
    if (sqfs_super_init(&k->super, PACK_BLOCK, (sqfs_u32)time(NULL), (SQFS_COMPRESSOR)id)) {
        skiff_error(err, EINVAL, "squashfs: superblock");
        goto fail;
    }
    k->super.flags = SQFS_FLAG_NO_XATTRS;
    /* the superblock's place and the compressor's options first; the data
     * follows, the superblock is written again at the end */
    if (sqfs_super_write(&k->super, k->file)) {
        skiff_error(err, EIO, "squashfs: write %s", path);
        goto fail;
    }
    int ow = k->cmp->write_options(k->cmp, k->file);
    if (ow < 0) {
        skiff_error(err, EIO, "squashfs: write %s", path);
        goto fail;
    }
    if (ow > 0)
        k->super.flags |= SQFS_FLAG_COMPRESSOR_OPTIONS;
    long cpus = cfg->max_processors > 0 ? cfg->max_processors : sysconf(_SC_NPROCESSORS_ONLN);
    unsigned workers = cpus < 1 ? 1 : cpus > 64 ? 64 : (unsigned)cpus;
    k->wr = sqfs_block_writer_create(k->file, 4096, 0);
    k->frags = sqfs_frag_table_create(0);
    if (!k->wr || !k->frags) {
        skiff_error(err, ENOMEM, "squashfs writer");
        goto fail;
    }
    k->proc = sqfs_block_processor_create(PACK_BLOCK, k->cmp, workers, PACK_BACKLOG * workers, k->wr, k->frags);
    if (!k->proc) {
        skiff_error(err, ENOMEM, "squashfs: %u compression threads", workers);
        goto fail;
    }
    *out = k;
    return 0;
fail:
    skiff_pack_free(k);
    return -1;
}

const struct skiff_layer_sink *skiff_pack_sink(struct skiff_pack *k)
{
    return &k->sink;
}

int skiff_pack_finish(struct skiff_pack *k, struct json_t *image_config, void (*warn)(void *ctx, const char *msg),
                      void *warn_ctx, skiff_err *err)
{
    char *cfg_text = NULL, *env_text = NULL;
    size_t cfg_len = 0, env_len = 0;
    struct lz_node *made[2] = {NULL, NULL};
    int rv = -1;
    if (skiff_imgconfig_render(image_config, warn, warn_ctx, &cfg_text, &cfg_len, &env_text, &env_len, err) < 0 ||
        lz_tree_add_imgconfig(k->tree, 0, cfg_len, env_len, made, err) < 0)
        goto out;
    const char *texts[2] = {cfg_text, env_text};
    size_t lens[2] = {cfg_len, env_len};
    for (int i = 0; i < 2; i++) {
        uint64_t idx;
        if (pack_data(k, NULL, texts[i], lens[i], i ? SKIFF_IMAGE_ENV_PATH : SKIFF_IMAGE_CONFIG_PATH, &idx, err) < 0)
            goto out;
        made[i]->layer = LZ_LAYER_PACKED;
        made[i]->off = idx;
    }
    int r = sqfs_block_processor_finish(k->proc);
    k->finished = true;
    if (r) {
        sqfs_fail(err, r, "data blocks");
        goto out;
    }
    if ((rv = lz_skel_finish(k->tree, k->file, k->cmp, &k->super, k->frags, slot_get, k, err)) < 0)
        goto out;
    /* padded to 4 KiB as mksquashfs pads: a loop device drops a partial
     * last sector */
    sqfs_u64 size = k->file->get_size(k->file);
    if (size % 4096 && k->file->truncate(k->file, (size + 4095) / 4096 * 4096))
        rv = skiff_error(err, EIO, "squashfs: pad the image");
    else if (skiff_sqfs_out_flush(k->file, err) < 0) /* the writer thread's last chunks */
        rv = -1;
out:
    free(cfg_text);
    free(env_text);
    return rv;
}

void skiff_pack_free(struct skiff_pack *k)
{
    if (!k)
        return;
    /* the processor first: its threads may still write the inodes. After a
     * failure, its file is ended and the blocks in flight (at most the
     * backlog) drained into the doomed output first: destroyed with a file
     * open, libsquashfs 1.2 leaks that file's blocks. */
    if (k->proc && !k->finished) {
        if (k->in_file)
            sqfs_block_processor_end_file(k->proc);
        sqfs_block_processor_finish(k->proc);
    }
    if (k->proc)
        sqfs_destroy(k->proc);
    for (size_t i = 0; i < k->nslots; i++)
        sqfs_free(k->chunks[i / SLOT_CHUNK][i % SLOT_CHUNK]);
    for (size_t c = 0; c < k->nchunks; c++)
        free(k->chunks[c]);
    free(k->chunks);
    if (k->frags)
        sqfs_destroy(k->frags);
    if (k->wr)
        sqfs_destroy(k->wr);
    if (k->cmp)
        sqfs_destroy(k->cmp);
    if (k->file)
        sqfs_destroy(k->file);
    lz_tree_free(k->tree);
    free(k);
}
