/* How a lazy image checks a fetched span (runtime/lib/image/sha256mid.h,
 * lazy_int.h): SHA-256's chaining state recorded at 64-byte boundaries of
 * the blob, and the index pass that records it while it hashes the blob
 * once for its digest.
 *  - sha256mid alone: bytes between two recorded states pass; one flipped
 *    bit, a run cut short, a run shifted by 64 bytes, a wrong offset at the
 *    message's end all fail; the digest is EVP's.
 *  - the index pass over a gzip layer built here so that its checkpoints
 *    fall where the recording is delicate (a span that starts at a
 *    multiple of 64, one byte after one, one byte before one, a span that
 *    starts inside a byte, the blob's end at a multiple of 64 or not): each
 *    state recorded is the blob's true state there, every span's widened
 *    bytes pass and the same bytes flipped, cut short or shifted do not.
 *  - an index of format 1 is refused with a message that says so; a pass
 *    that fails on a blob whose digest is right reports its own error, not
 *    a digest mismatch (the rest of the blob is hashed exactly). */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "digest.h"
#include "fdio.h"
#include "fsutil.h"
#include "layer.h"
#include "lazy_int.h"
#include "sha256mid.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)next();
}

/* the chaining state after the first off bytes of m (off a multiple of 64) */
static void state_at(const unsigned char *m, uint64_t off, uint32_t h[8])
{
    struct skiff_sha256mid s;
    skiff_sha256mid_init(&s);
    skiff_sha256mid_update(&s, m, off);
    skiff_sha256mid_state(&s, h);
}

/* ---- sha256mid ------------------------------------------------------------- */

static void midstate_cases(size_t n)
{
    unsigned char *m = malloc(n);
    cr_assert(m);
    fill_random(m, n);
    /* fed in odd pieces, the digest is EVP's */
    struct skiff_sha256mid s;
    skiff_sha256mid_init(&s);
    for (size_t at = 0, k = 1; at < n; at += k, k = k * 3 + 1)
        skiff_sha256mid_update(&s, m + at, at + k <= n ? k : n - at);
    unsigned char md[32];
    skiff_sha256mid_final(&s, md);
    char mine[SKIFF_DIGEST_LEN], evp[SKIFF_DIGEST_LEN];
    skiff_digest_text(md, mine);
    skiff_err err;
    cr_assert_eq(skiff_digest_buf(m, n, evp, &err), 0);
    cr_assert_str_eq(mine, evp);

    uint64_t a = 64 * 100, b = 64 * 1000;
    uint32_t ha[8], hb[8];
    state_at(m, a, ha);
    state_at(m, b, hb);
    unsigned char *run = m + a;
    size_t len = (size_t)(b - a);
    cr_assert_eq(skiff_sha256mid_check(ha, a, run, len, hb), 0, "the right bytes");
    size_t flips[] = {0, 1, len / 2, len - 1};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        run[flips[i]] ^= 0x10;
        cr_assert_eq(skiff_sha256mid_check(ha, a, run, len, hb), -1, "bit flipped at %zu", flips[i]);
        run[flips[i]] ^= 0x10;
    }
    cr_assert_eq(skiff_sha256mid_check(ha, a, run, len - 64, hb), -1, "64 bytes short");
    cr_assert_eq(skiff_sha256mid_check(ha, a, run, len - 1, hb), -1, "a byte short");
    cr_assert_eq(skiff_sha256mid_check(ha, a, run + 64, len, hb), -1, "shifted by 64");
    cr_assert_eq(skiff_sha256mid_check(ha, a + 1, run, len, hb), -1, "an offset not at a block");
    cr_assert_eq(skiff_sha256mid_check(hb, b, m + b, 0, hb), 0, "nothing between a state and itself");

    /* the message's end: checked against its digest */
    uint64_t e = (n - 1) & ~(uint64_t)63; /* the last block's start */
    uint32_t he[8];
    state_at(m, e, he);
    cr_assert_eq(skiff_sha256mid_check_end(ha, a, run, n - a, md), 0, "the end, from a state");
    cr_assert_eq(skiff_sha256mid_check_end(he, e, m + e, n - e, md), 0, "the last block alone");
    cr_assert_eq(skiff_sha256mid_check_end(ha, a, run, n - a - 1, md), -1, "the end cut short");
    cr_assert_eq(skiff_sha256mid_check_end(ha, a + 64, run, n - a, md), -1, "the end at another offset");
    cr_assert_eq(skiff_sha256mid_check_end(ha, a, run + 64, n - a - 64, md), -1, "the end shifted by 64");
    m[n - 1] ^= 1;
    cr_assert_eq(skiff_sha256mid_check_end(ha, a, run, n - a, md), -1, "the last bit flipped");
    m[n - 1] ^= 1;
    free(m);
}

Test(lazyverify, midstate_check_passes_the_bytes_and_nothing_else)
{
    midstate_cases(300000 + 37); /* the end inside a block */
    midstate_cases(300032);      /* the end at a block's end */
}

/* ---- a layer built for the checkpoints wanted ---------------------------- */

struct buf {
    unsigned char *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put_le(struct buf *b, uint32_t v, int bytes)
{
    unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(b, c, (size_t)bytes);
}

#define STORED 65535u       /* data bytes of a stored deflate block */
#define BLOCK (STORED + 5u) /* with its header */
#define SPAN_IN (4u << 20)  /* LZ_SPAN_IN */

/* A gzip member whose header has a name of name_len bytes (so the
 * member's length is chosen to the byte) and whose deflate stream is
 * stored blocks of STORED bytes: the pass's block boundaries are known. */
static void stored_member(struct buf *b, const unsigned char *d, size_t n, size_t name_len)
{
    const unsigned char h[10] = {0x1f, 0x8b, 8, 0x08 /* FNAME */, 0, 0, 0, 0, 0, 3};
    put(b, h, sizeof(h));
    for (size_t i = 0; i < name_len; i++)
        put(b, "n", 1);
    put(b, "", 1);
    for (size_t at = 0; at < n || at == 0; at += STORED) {
        size_t k = n - at < STORED ? n - at : STORED;
        unsigned char bh[5] = {at + k >= n ? 1 : 0, (unsigned char)k, (unsigned char)(k >> 8), (unsigned char)~k,
                               (unsigned char)(~k >> 8)};
        put(b, bh, sizeof(bh));
        put(b, d + at, k);
        if (n == 0)
            break;
    }
    put_le(b, (uint32_t)crc32(crc32(0, NULL, 0), d, (uInt)n), 4);
    put_le(b, (uint32_t)n, 4);
}

/* A gzip member of d by zlib (Huffman blocks: boundaries inside bytes),
 * its header with a name of name_len bytes. */
static void zlib_member(struct buf *b, const unsigned char *d, size_t n, int level, size_t name_len)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    cr_assert_eq(deflateInit2(&z, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    char name[64];
    memset(name, 'n', name_len);
    name[name_len] = '\0';
    gz_header gh;
    memset(&gh, 0, sizeof(gh));
    gh.os = 3;
    gh.name = (Bytef *)name;
    cr_assert_eq(deflateSetHeader(&z, &gh), Z_OK);
    size_t cap = deflateBound(&z, (uLong)n);
    unsigned char *out = malloc(cap);
    cr_assert(out);
    z.next_in = (unsigned char *)(uintptr_t)d;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    put(b, out, cap - z.avail_out);
    deflateEnd(&z);
    free(out);
}

/* The name length (0..63) that puts where + 11 + name_len + extra at
 * residue r modulo 64. */
static size_t name_for(uint64_t where, uint64_t extra, unsigned r)
{
    for (size_t n = 0; n < 64; n++)
        if ((where + 11 + n + extra) % 64 == r)
            return n;
    cr_assert_fail("no name length");
    return 0;
}

static la_ssize_t tar_write(struct archive *a, void *ctx, const void *d, size_t n)
{
    (void)a;
    put(ctx, d, n);
    return (la_ssize_t)n;
}

static void tar_file(struct archive *a, const char *name, const unsigned char *d, size_t n)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)n);
    cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK);
    cr_assert_eq(archive_write_data(a, d, n), (la_ssize_t)n);
    archive_entry_free(e);
}

struct layer {
    struct buf blob;
    char digest[SKIFF_DIGEST_LEN];
    uint64_t want[4]; /* where spans 1..4 start: RAW at 0 mod 64, RAW at 1, GZIP at 63, RAW inside a byte */
};

/* The layer: a tar of a random file, a file of 16 letters and another
 * random file, in five gzip members laid out so that the pass makes the
 * spans of struct layer, and so that the blob's length is end_mod modulo
 * 64. */
static void make_layer(struct layer *l, unsigned end_mod, int level, size_t name4)
{
    rng = 0x9e3779b97f4a7c15ull;
    const size_t nrand = 192 * (size_t)STORED, ntext = 10u << 20, nrand2 = 5u << 20;
    unsigned char *rnd = malloc(nrand + nrand2), *text = malloc(ntext);
    cr_assert(rnd && text);
    fill_random(rnd, nrand + nrand2);
    for (size_t i = 0; i < ntext; i++)
        text[i] = (unsigned char)('a' + (next() & 15));
    struct buf tar = {0};
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_set_bytes_in_last_block(a, 1);
    cr_assert_eq(archive_write_open(a, &tar, NULL, tar_write, NULL), ARCHIVE_OK);
    tar_file(a, "random", rnd, nrand);
    tar_file(a, "text", text, ntext);
    tar_file(a, "random2", rnd + nrand, nrand2);
    cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    free(rnd);
    free(text);

    struct buf *b = &l->blob;
    memset(b, 0, sizeof(*b));
    size_t at = 0;
    /* member 1, 70 blocks: a checkpoint after block 64 (the first past
     * 4 MiB), at 0 mod 64 */
    size_t n1 = name_for(0, 64 * BLOCK, 0);
    l->want[0] = 11 + n1 + 64 * (uint64_t)BLOCK;
    stored_member(b, tar.p + at, 70 * (size_t)STORED, n1);
    at += 70 * (size_t)STORED;
    /* member 2, 60 blocks: a checkpoint after its block 58, at 1 mod 64 */
    size_t n2 = name_for(b->len, 58 * BLOCK, 1);
    l->want[1] = b->len + 11 + n2 + 58 * (uint64_t)BLOCK;
    cr_assert_geq(l->want[1] - l->want[0], SPAN_IN);
    cr_assert_lt(l->want[1] - BLOCK - l->want[0], SPAN_IN);
    stored_member(b, tar.p + at, 60 * (size_t)STORED, n2);
    at += 60 * (size_t)STORED;
    /* member 3, 62 blocks: its last block crosses 4 MiB, so the checkpoint
     * is the next member's start, at 63 mod 64 */
    size_t n3 = name_for(b->len, 62 * BLOCK + 8, 63);
    l->want[2] = b->len + 11 + n3 + 62 * (uint64_t)BLOCK + 8;
    cr_assert_geq(l->want[2] - l->want[1], SPAN_IN);
    cr_assert_lt(l->want[2] - 8 - BLOCK - l->want[1], SPAN_IN);
    stored_member(b, tar.p + at, 62 * (size_t)STORED, n3);
    at += 62 * (size_t)STORED;
    cr_assert_eq(b->len, l->want[2]);
    /* member 4: the letters, by zlib (a checkpoint inside a byte, where it
     * falls); member 5: the rest, stored (a checkpoint at a block's end),
     * its name making the blob's length end_mod modulo 64 */
    zlib_member(b, tar.p + at, ntext, level, name4);
    at += ntext;
    size_t rest = tar.len - at, blocks = (rest + STORED - 1) / STORED;
    stored_member(b, tar.p + at, rest, name_for(b->len, 5 * blocks + rest + 8, end_mod));
    cr_assert_eq(b->len % 64, end_mod);
    free(tar.p);
    skiff_err err;
    cr_assert_eq(skiff_digest_buf(b->p, b->len, l->digest, &err), 0);
}

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/skiff-test-lazyverify.XXXXXX");
    cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
    skiff_err err;
    skiff_remove_tree(dir, &err);
}

/* The index pass over bytes (a file, like a local blob), into path. */
static int index_bytes(const unsigned char *p, size_t n, const char *digest, const char *path, skiff_err *err)
{
    char blob[128];
    snprintf(blob, sizeof(blob), "%s/blob", dir);
    int fd = open(blob, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(skiff_write_all(fd, p, n), 0);
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    skiff_err_clear(err);
    return lz_index_layer(fd, digest, SKIFF_LAYER_WHITEOUTS, path, err);
}

/* end_mod: the blob's length modulo 64; at_block: span 4 starts inside
 * the byte just before a multiple of 64 (the state at its start is then a
 * block before the one at the checkpoint), else where zlib puts it. */
static void span_cases(unsigned end_mod, bool at_block)
{
    struct layer l;
    char idx[128];
    snprintf(idx, sizeof(idx), "%s/layer.idx", dir);
    skiff_err err;
    struct lz_index ix;
    /* where the checkpoint inside member 4 falls is zlib's: the level that
     * puts it inside a byte (7 in 8 do); then, for at_block, member 4's
     * name moves it (the deflate stream stays the same) */
    static const int levels[] = {6, 5, 4, 7, 3, 8, 2, 9, 1};
    for (size_t i = 0, name4 = 0;; i++) {
        cr_assert_lt(i, 2 * sizeof(levels) / sizeof(levels[0]), "no checkpoint inside a byte where wanted");
        make_layer(&l, end_mod, levels[i / 2], name4);
        cr_assert_eq(index_bytes(l.blob.p, l.blob.len, l.digest, idx, &err), 0, "%s", err.msg);
        cr_assert_eq(lz_index_load(idx, LZ_LOAD_ENTRIES, &ix, &err), 0, "%s", err.msg);
        bool inside = ix.nspans == 6 && ix.spans[4].bits != 0;
        if (inside && (!at_block || ix.spans[4].cstart % 64 == 63))
            break;
        /* the next try: this level with the name that moves the byte to
         * 63 mod 64, or the next level */
        name4 = inside && i % 2 == 0 ? (size_t)(63 - ix.spans[4].cstart % 64) : 0;
        if (!name4 && i % 2 == 0)
            i++;
        lz_index_free(&ix);
        free(l.blob.p);
    }
    const unsigned char *blob = l.blob.p;
    uint64_t csize = l.blob.len;
    cr_assert_eq(ix.csize, csize);
    cr_assert_eq(ix.nentries, 3);

    /* the spans wanted, where wanted */
    cr_assert_eq(ix.nspans, 6, "%u spans", ix.nspans);
    cr_assert(ix.spans[1].kind == LZ_SPAN_RAW && ix.spans[1].bits == 0 && ix.spans[1].cstart == l.want[0]);
    cr_assert(ix.spans[2].kind == LZ_SPAN_RAW && ix.spans[2].bits == 0 && ix.spans[2].cstart == l.want[1]);
    cr_assert(ix.spans[3].kind == LZ_SPAN_GZIP && ix.spans[3].cstart == l.want[2]);
    cr_assert(ix.spans[4].kind == LZ_SPAN_RAW && ix.spans[4].bits != 0, "a span inside a byte (bits %u)",
              ix.spans[4].bits);
    cr_assert_eq(ix.spans[1].cstart % 64, 0);
    cr_assert_eq(ix.spans[2].cstart % 64, 1);
    cr_assert_eq(ix.spans[3].cstart % 64, 63);
    cr_assert(ix.spans[5].kind == LZ_SPAN_RAW && ix.spans[5].bits == 0 && ix.spans[5].cend == csize);
    cr_assert_lt(lz_span_wend(&ix.spans[4], csize), csize, "span 4 has an end state");

    unsigned char *copy = malloc(csize);
    cr_assert(copy);
    memcpy(copy, blob, csize);
    for (uint32_t i = 0; i < ix.nspans; i++) {
        const struct lz_span *s = &ix.spans[i];
        uint64_t from = lz_span_wstart(s), to = lz_span_wend(s, csize);
        cr_assert(from % 64 == 0 && from <= s->cstart && s->cend <= to && to <= csize, "span %u", i);
        cr_assert(to == csize || to % 64 == 0, "span %u", i);
        uint32_t h[8];
        state_at(blob, from, h);
        cr_assert_arr_eq(h, s->hstart, sizeof(h), "span %u: the state at its start", i);
        if (to < csize) {
            state_at(blob, to, h);
            cr_assert_arr_eq(h, s->hend, sizeof(h), "span %u: the state at its end", i);
        }
        size_t len = (size_t)(to - from);
        unsigned char *run = copy + from;
        cr_assert_eq(lz_span_check(&ix, s, run, len), 0, "span %u: the blob's bytes", i);
        size_t flips[] = {0, (size_t)(s->cstart - from), len / 2, len - 1};
        for (size_t k = 0; k < sizeof(flips) / sizeof(flips[0]); k++) {
            run[flips[k]] ^= 0x80;
            cr_assert_eq(lz_span_check(&ix, s, run, len), -1, "span %u: a bit flipped at %zu", i, flips[k]);
            run[flips[k]] ^= 0x80;
        }
        cr_assert_eq(lz_span_check(&ix, s, run, len - 1), -1, "span %u: a byte short", i);
        cr_assert_eq(lz_span_check(&ix, s, run, len - 64), -1, "span %u: 64 bytes short", i);
        if (to + 64 <= csize)
            cr_assert_eq(lz_span_check(&ix, s, run + 64, len), -1, "span %u: shifted by 64", i);
        if (from >= 64)
            cr_assert_eq(lz_span_check(&ix, s, run - 64, len), -1, "span %u: shifted back by 64", i);
    }
    /* the span of another layer's index (same shape, another digest) */
    ix.sha[0] ^= 1;
    const struct lz_span *last = &ix.spans[ix.nspans - 1];
    cr_assert_eq(lz_span_check(&ix, last, copy + lz_span_wstart(last), csize - lz_span_wstart(last)), -1);
    free(copy);
    lz_index_free(&ix);
    free(l.blob.p);
}

Test(lazyverify, index_pass_records_the_states_and_spans_check, .init = setup, .fini = teardown)
{
    span_cases(37, true);
}

Test(lazyverify, blob_ending_at_a_block_boundary, .init = setup, .fini = teardown)
{
    span_cases(0, false);
}

Test(lazyverify, format_1_is_refused_with_a_reason, .init = setup, .fini = teardown)
{
    struct buf b = {0};
    static const unsigned char empty[1024];
    stored_member(&b, empty, sizeof(empty), 0); /* an empty tar */
    char digest[SKIFF_DIGEST_LEN], idx[128];
    skiff_err err;
    cr_assert_eq(skiff_digest_buf(b.p, b.len, digest, &err), 0);
    snprintf(idx, sizeof(idx), "%s/layer.idx", dir);
    cr_assert_eq(index_bytes(b.p, b.len, digest, idx, &err), 0, "%s", err.msg);
    int fd = open(idx, O_RDWR | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    unsigned char v[4];
    lz_put32(v, 1);
    cr_assert_eq(pwrite(fd, v, 4, 8), 4);
    struct lz_index ix;
    cr_assert_eq(lz_index_load(idx, 0, &ix, &err), -1);
    cr_assert(strstr(err.msg, "format 1, made by an older skiff"), "%s", err.msg);
    lz_index_free(&ix);
    lz_put32(v, 3);
    cr_assert_eq(pwrite(fd, v, 4, 8), 4);
    cr_assert_eq(lz_index_load(idx, 0, &ix, &err), -1);
    cr_assert(strstr(err.msg, "unknown version"), "%s", err.msg);
    lz_index_free(&ix);
    close(fd);
    free(b.p);
}

/* A blob that is what its digest says but not a tar: the pass stops early
 * and hashes the rest of the blob to see whether it was the layer; it was,
 * so the error is the pass's own. */
Test(lazyverify, a_failed_pass_over_the_right_blob_is_no_digest_mismatch, .init = setup, .fini = teardown)
{
    const size_t n = 3u << 20;
    unsigned char *junk = malloc(n);
    cr_assert(junk);
    fill_random(junk, n);
    struct buf b = {0};
    zlib_member(&b, junk, n, 6, 0);
    char digest[SKIFF_DIGEST_LEN], idx[128];
    skiff_err err;
    cr_assert_eq(skiff_digest_buf(b.p, b.len, digest, &err), 0);
    snprintf(idx, sizeof(idx), "%s/layer.idx", dir);
    cr_assert_eq(index_bytes(b.p, b.len, digest, idx, &err), -1);
    cr_assert(!strstr(err.msg, "digest mismatch"), "%s", err.msg);
    /* and one byte of it changed: that is what is reported */
    b.p[b.len / 2] ^= 1;
    cr_assert_eq(index_bytes(b.p, b.len, digest, idx, &err), -1);
    cr_assert(strstr(err.msg, "digest mismatch"), "%s", err.msg);
    cr_assert_eq(access(idx, F_OK), -1, "no index left behind");
    free(junk);
    free(b.p);
}
