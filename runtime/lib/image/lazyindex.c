/* The index of one gzip layer (lazy_int.h): one streaming pass, and the
 * index file.
 *
 * The pass inflates the blob with zlib, stopping at every deflate block
 * boundary (Z_BLOCK); where ~4 MiB of input or ~32 MiB of output went by
 * since the last checkpoint it takes one: the input offset, the bits of
 * its byte already used and the 32 KiB of output before it, from where
 * inflation can start again (inflatePrime + inflateSetDictionary, the
 * technique of zlib's examples/zran.c; AWS's SOCI does the same for its
 * zTOC). Inflation writes into the 32 KiB ring that is the window, so a
 * checkpoint copies nothing but the window itself. The inflated tar goes
 * to libarchive, which parses the headers (pax, GNU long names, base-256
 * numbers: libarchive's, not hand-written here); where an entry's data
 * starts is the tar stream's position when its header has been read
 * (archive_filter_bytes). Each entry is planned by layer.c's policy
 * (layer_int.h) and recorded; its data is skipped.
 *
 * The blob is hashed once (SHA-256, for the layer's digest), in the order
 * inflate consumes it; each span's check is the hash's chaining state at
 * the 64-byte boundaries around the span (sha256mid.h, lazy_int.h), read
 * on the way: so the pass hashes each byte once, not once for the digest
 * and once more per span (doc/benchmarks.md). To read the state at the
 * boundary at or before a checkpoint, the hash stays one byte behind
 * inflate (the last byte consumed is fed with the next ones); a boundary
 * after it (the span's end rounded up) is read when the hash gets there,
 * before the next checkpoint (spans are kilobytes at the least). zlib's
 * own CRC-32 of the output (perf: 13 % of the pass) is turned off
 * (inflateValidate) for ISA-L's, checked here against each member's
 * trailer with its length, as zlib would.
 *
 * The file: a 256-byte header, the windows (each deflated), the spans,
 * the entries, the strings; little-endian. It is written under a
 * temporary name and renamed only when the blob's sha256 is the layer's
 * digest. Loading checks everything: an index is input. */
#include "lazy_int.h"
#include "layer.h"
#include "layer_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "atomicfile.h"
#include "fdio.h"
#include "sha256mid.h"

#define IN_CHUNK (1u << 20)

/* ---- the pass ----------------------------------------------------------- */

struct pass {
    int fd;
    unsigned char *in;
    uint64_t read_total; /* bytes read from fd */
    uint64_t in_total;   /* bytes inflate has consumed */
    bool eof, ended;     /* fd at its end; the last member ended */
    z_stream z;
    bool zinit;
    unsigned char *ring; /* LZ_WINDOW: inflate's output, and the window */
    size_t ring_pos;
    uint64_t out_total;
    unsigned char tail[8];        /* the last bytes inflate consumed: a member's trailer at its end */
    uint32_t crc;                 /* of the member's output so far */
    uint64_t member_out;          /* out_total where the member began */
    struct skiff_sha256mid whole; /* fed up to in_total - 1 (or in_total) */
    /* a chaining state to read when the hash reaches mark (0: none): the
     * end state of span mark_end, and the start state of cur (mark_cur) */
    uint64_t mark;
    size_t mark_end;
    bool mark_cur;
    bool hashed;        /* whole is final */
    struct lz_span cur; /* the span being recorded (cend, uend open) */
    struct lz_span *spans;
    size_t nspans, cap;
    /* the index file being written: windows go out as they come */
    int out_fd;
    uint64_t out_pos;
    unsigned char *wbuf; /* a window, deflated */
    int err_code;
    char error[512];
};

static int pass_fail(struct pass *p, int code, const char *what, const char *detail)
{
    if (!p->error[0]) {
        snprintf(p->error, sizeof(p->error), "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
        p->err_code = code;
    }
    return -1;
}

static int push_span(struct pass *p)
{
    if (p->nspans == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        struct lz_span *n = realloc(p->spans, cap * sizeof(*n));
        if (!n)
            return pass_fail(p, ENOMEM, "index: out of memory", NULL);
        p->spans = n;
        p->cap = cap;
    }
    p->spans[p->nspans++] = p->cur;
    return 0;
}

/* The state at the mark, when the hash is there. */
static void take_mark(struct pass *p)
{
    if (!p->mark || p->whole.len != p->mark)
        return;
    skiff_sha256mid_state(&p->whole, p->spans[p->mark_end].hend);
    if (p->mark_cur)
        skiff_sha256mid_state(&p->whole, p->cur.hstart);
    p->mark = 0;
}

/* Feeds the blob's next n bytes to its hash, stopping at the mark. */
static void hash_feed(struct pass *p, const unsigned char *b, size_t n)
{
    while (n) {
        size_t k = n;
        if (p->mark && p->mark - p->whole.len < k)
            k = (size_t)(p->mark - p->whole.len);
        skiff_sha256mid_update(&p->whole, b, k);
        b += k;
        n -= k;
        take_mark(p);
    }
}

/* The hash up to every byte inflate consumed (the one it keeps behind). */
static void hash_catch_up(struct pass *p)
{
    if (p->whole.len < p->in_total)
        hash_feed(p, &p->tail[7], 1);
}

/* Ends the current span at the pass's position and starts the next one
 * there: a gzip member's start (gzip) or a block boundary. */
static int checkpoint(struct pass *p, bool gzip)
{
    /* (a state to read is still ahead: a span of less than 64 bytes goes
     * on; the pass never makes one, spans being ~4 MiB) */
    if (p->mark)
        return 0;
    unsigned bits = gzip ? 0 : (unsigned)(p->z.data_type & 7);
    p->cur.cend = p->in_total;
    p->cur.uend = p->out_total;
    if (push_span(p) < 0)
        return -1;
    struct lz_span n = {.kind = gzip ? LZ_SPAN_GZIP : LZ_SPAN_RAW, .bits = (uint8_t)bits};
    n.cstart = bits ? p->in_total - 1 : p->in_total;
    n.ustart = p->out_total;
    /* The hash stands at in_total - 1 (hash_feed): its state is the one at
     * the boundary at or before that byte. The old span's end state is at
     * in_total rounded up, ahead; so is the new span's start state when
     * it starts at a boundary (no bits, in_total a multiple of 64). */
    uint64_t up = (p->in_total + 63) & ~(uint64_t)63;
    p->mark = up;
    p->mark_end = p->nspans - 1;
    p->mark_cur = lz_span_wstart(&n) == up;
    if (!p->mark_cur)
        skiff_sha256mid_state(&p->whole, n.hstart);
    if (!gzip) {
        /* the window: the ring from its write position on, oldest first */
        unsigned char win[LZ_WINDOW];
        size_t have = p->out_total < LZ_WINDOW ? (size_t)p->out_total : LZ_WINDOW;
        if (have == LZ_WINDOW) {
            memcpy(win, p->ring + p->ring_pos, LZ_WINDOW - p->ring_pos);
            memcpy(win + LZ_WINDOW - p->ring_pos, p->ring, p->ring_pos);
        } else {
            memcpy(win, p->ring, have); /* the ring has not wrapped yet */
        }
        uLongf wl = compressBound(LZ_WINDOW);
        if (compress2(p->wbuf, &wl, win, have, 1) != Z_OK)
            return pass_fail(p, ENOMEM, "index: deflate a window", NULL);
        if (skiff_write_all_at(p->out_fd, p->wbuf, wl, p->out_pos) < 0)
            return pass_fail(p, errno, "index: write", NULL);
        n.woff = p->out_pos;
        n.wlen = (uint32_t)wl;
        p->out_pos += wl;
    }
    p->cur = n;
    return 0;
}

static bool span_full(const struct pass *p)
{
    return p->in_total - p->cur.cstart >= LZ_SPAN_IN || p->out_total - p->cur.ustart >= LZ_SPAN_OUT;
}

/* The last 8 bytes inflate consumed, updated with used more from in. */
static void keep_tail(struct pass *p, const unsigned char *in, size_t used)
{
    if (used >= sizeof(p->tail)) {
        memcpy(p->tail, in + used - sizeof(p->tail), sizeof(p->tail));
    } else {
        memmove(p->tail, p->tail + used, sizeof(p->tail) - used);
        memcpy(p->tail + sizeof(p->tail) - used, in, used);
    }
}

/* More input into z (at least need bytes when the blob has them): 0, or
 * -1 on a read error. */
static int fill_input(struct pass *p, size_t need)
{
    while (!p->eof && p->z.avail_in < need) {
        if (p->z.avail_in && p->z.next_in != p->in)
            memmove(p->in, p->z.next_in, p->z.avail_in);
        p->z.next_in = p->in;
        ssize_t n = read(p->fd, p->in + p->z.avail_in, IN_CHUNK - p->z.avail_in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pass_fail(p, errno, "read the layer", NULL);
        if (n == 0) {
            p->eof = true;
            break;
        }
        p->z.avail_in += (uInt)n;
        p->read_total += (uint64_t)n;
    }
    return 0;
}

/* The next piece of the layer's tar (in the ring): its length, 0 at the
 * end of the blob, -1 on an error (p->error). */
static ssize_t produce(struct pass *p, const void **out)
{
    for (;;) {
        if (p->ended)
            return 0;
        if (fill_input(p, 1) < 0)
            return -1;
        if (p->z.avail_in == 0)
            return pass_fail(p, 0, "the layer ends inside its gzip stream (truncated blob)", NULL);
        if (p->ring_pos == LZ_WINDOW)
            p->ring_pos = 0;
        unsigned char *chunk = p->ring + p->ring_pos;
        const unsigned char *in0 = p->z.next_in;
        uInt ain = p->z.avail_in;
        p->z.next_out = chunk;
        p->z.avail_out = (uInt)(LZ_WINDOW - p->ring_pos);
        uInt aout = p->z.avail_out;
        int ret = inflate(&p->z, Z_BLOCK);
        size_t used = ain - p->z.avail_in, made = aout - p->z.avail_out;
        if (used) {
            /* the byte kept behind, and all but the last one consumed now */
            hash_catch_up(p);
            hash_feed(p, in0, used - 1);
            keep_tail(p, in0, used);
        }
        p->crc = crc32_gzip_refl(p->crc, chunk, made);
        p->in_total += used;
        p->out_total += made;
        p->ring_pos += made;
        if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR || ret == Z_STREAM_ERROR)
            return pass_fail(p, 0, "the layer is not valid gzip", p->z.msg ? p->z.msg : "inflate failed");
        if (ret == Z_STREAM_END) {
            /* the member's trailer (CRC-32, then the length mod 2^32) is
             * what inflate consumed last */
            if (lz_get32(p->tail) != p->crc)
                return pass_fail(p, 0, "the layer is not valid gzip", "incorrect data check");
            if (lz_get32(p->tail + 4) != (uint32_t)(p->out_total - p->member_out))
                return pass_fail(p, 0, "the layer is not valid gzip", "incorrect length check");
            p->crc = 0;
            p->member_out = p->out_total;
            /* a member ended: another may follow (concatenated gzip) */
            if (fill_input(p, 2) < 0)
                return -1;
            if (p->z.avail_in == 0) {
                p->ended = true;
            } else if (p->z.avail_in >= 2 && p->z.next_in[0] == 0x1f && p->z.next_in[1] == 0x8b) {
                if (inflateReset(&p->z) != Z_OK)
                    return pass_fail(p, 0, "inflate reset", NULL);
                if (span_full(p) && checkpoint(p, true) < 0)
                    return -1;
            } else {
                return pass_fail(p, ENOTSUP, "the layer has data after its gzip stream", NULL);
            }
        } else if ((p->z.data_type & 128) && !(p->z.data_type & 64) && span_full(p)) {
            if (checkpoint(p, false) < 0)
                return -1;
        }
        if (made) {
            *out = chunk;
            return (ssize_t)made;
        }
    }
}

static la_ssize_t archive_read_cb(struct archive *a, void *ud, const void **buf)
{
    struct pass *p = ud;
    ssize_t n = produce(p, buf);
    if (n < 0) {
        archive_set_error(a, p->err_code ? p->err_code : EIO, "%s", p->error);
        return -1;
    }
    return n;
}

/* The pass's error as the caller's (a read's errno has its strerror). */
static int pass_error(const struct pass *p, skiff_err *err)
{
    if (p->err_code && p->err_code != ENOTSUP)
        return skiff_error(err, p->err_code, "%s", p->error);
    return lz_error(err, p->err_code, "%s", p->error);
}

/* ---- recorded entries ---------------------------------------------------- */

struct rec {
    unsigned char *ents; /* IDX_ENTRY bytes each */
    size_t n, cap;
    char *str;
    size_t slen, scap;
    unsigned long skipped, setid, xattrs;
};

static int add_string(struct rec *r, const char *s, uint32_t *off)
{
    size_t l = strlen(s) + 1;
    if (r->slen + l > UINT32_MAX)
        return -1;
    if (r->slen + l > r->scap) {
        size_t cap = r->scap ? 2 * r->scap : 65536;
        while (cap < r->slen + l)
            cap *= 2;
        char *n = realloc(r->str, cap);
        if (!n)
            return -1;
        r->str = n;
        r->scap = cap;
    }
    memcpy(r->str + r->slen, s, l);
    *off = (uint32_t)r->slen;
    r->slen += l;
    return 0;
}

static int record(struct rec *r, const struct skiff_entry_plan *pl, uint64_t data_off, skiff_err *err)
{
    if (pl->setid_stripped)
        r->setid++;
    r->xattrs += pl->xattrs;
    if (pl->kind == SKIFF_ENTRY_ROOT)
        return 0;
    if (pl->kind == SKIFF_ENTRY_SKIPPED) {
        r->skipped++;
        return 0;
    }
    if (r->n == LZ_MAX_ENTRIES)
        return skiff_error(err, 0, "the layer has more than %u entries", LZ_MAX_ENTRIES);
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        unsigned char *n = realloc(r->ents, cap * IDX_ENTRY);
        if (!n)
            return skiff_error(err, ENOMEM, "index");
        r->ents = n;
        r->cap = cap;
    }
    unsigned char *e = r->ents + r->n * IDX_ENTRY;
    memset(e, 0, IDX_ENTRY);
    uint32_t po, to, ro;
    bool meta = pl->kind != SKIFF_ENTRY_WHITEOUT && pl->kind != SKIFF_ENTRY_OPAQUE;
    if (add_string(r, pl->path, &po) < 0 || add_string(r, pl->target, &to) < 0 || add_string(r, pl->raw, &ro) < 0)
        return skiff_error(err, ENOMEM, "index");
    e[0] = (unsigned char)pl->kind;
    lz_put32(e + 4, meta ? (uint32_t)pl->mode : 0);
    lz_put32(e + 8, meta ? (uint32_t)pl->uid : 0);
    lz_put32(e + 12, meta ? (uint32_t)pl->gid : 0);
    lz_put64(e + 16, meta ? (uint64_t)(int64_t)pl->mtime : 0);
    lz_put64(e + 24, pl->kind == SKIFF_ENTRY_REG && pl->size > 0 ? (uint64_t)pl->size : 0);
    lz_put64(e + 32, pl->kind == SKIFF_ENTRY_REG ? data_off : 0);
    lz_put32(e + 40, po);
    lz_put32(e + 44, to);
    lz_put32(e + 48, ro);
    r->n++;
    return 0;
}

/* ---- the index file ------------------------------------------------------ */

static int write_tail(struct pass *p, struct rec *r, const char *digest, skiff_err *err)
{
    uint64_t spans_off = p->out_pos;
    unsigned char rec[IDX_SPAN];
    for (size_t i = 0; i < p->nspans; i++) {
        const struct lz_span *s = &p->spans[i];
        memset(rec, 0, sizeof(rec));
        lz_put64(rec, s->cstart);
        lz_put64(rec + 8, s->cend);
        lz_put64(rec + 16, s->ustart);
        lz_put64(rec + 24, s->uend);
        lz_put64(rec + 32, s->woff);
        lz_put32(rec + 40, s->wlen);
        rec[44] = s->kind;
        rec[45] = s->bits;
        for (int k = 0; k < 8; k++) {
            lz_put32(rec + 48 + 4 * k, s->hstart[k]);
            lz_put32(rec + 80 + 4 * k, s->hend[k]);
        }
        if (skiff_write_all_at(p->out_fd, rec, sizeof(rec), p->out_pos) < 0)
            return skiff_error(err, errno, "write the index");
        p->out_pos += sizeof(rec);
    }
    uint64_t entries_off = p->out_pos;
    if (r->n && skiff_write_all_at(p->out_fd, r->ents, r->n * IDX_ENTRY, p->out_pos) < 0)
        return skiff_error(err, errno, "write the index");
    p->out_pos += r->n * IDX_ENTRY;
    uint64_t strings_off = p->out_pos;
    if (r->slen && skiff_write_all_at(p->out_fd, r->str, r->slen, p->out_pos) < 0)
        return skiff_error(err, errno, "write the index");
    p->out_pos += r->slen;
    unsigned char h[IDX_HEADER];
    memset(h, 0, sizeof(h));
    memcpy(h, IDX_MAGIC, 8);
    lz_put32(h + 8, IDX_VERSION);
    snprintf((char *)h + 16, SKIFF_DIGEST_LEN, "%s", digest);
    lz_put64(h + 88, p->read_total);
    lz_put64(h + 96, p->out_total);
    lz_put32(h + 104, (uint32_t)p->nspans);
    lz_put32(h + 108, (uint32_t)r->n);
    lz_put64(h + 112, spans_off);
    lz_put64(h + 120, entries_off);
    lz_put64(h + 128, strings_off);
    lz_put64(h + 136, r->slen);
    lz_put64(h + 144, r->skipped);
    lz_put64(h + 152, r->setid);
    lz_put64(h + 160, r->xattrs);
    lz_put64(h + 168, p->out_pos);
    if (skiff_write_all_at(p->out_fd, h, sizeof(h), 0) < 0)
        return skiff_error(err, errno, "write the index");
    return 0;
}

/* The tar inside the gzip stream: every header planned and recorded, the
 * data skipped (inflated all the same: the spans and the digest need it). */
static int walk_tar(struct pass *p, struct rec *r, unsigned flags, skiff_err *err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return skiff_error(err, ENOMEM, "archive_read_new");
    archive_read_support_format_tar(a);
    int rv = -1;
    struct skiff_entry_plan *pl = malloc(sizeof(*pl));
    if (!pl) {
        skiff_error(err, ENOMEM, "index");
        goto out;
    }
    if (archive_read_open(a, p, NULL, archive_read_cb, NULL) != ARCHIVE_OK) {
        if (p->error[0])
            pass_error(p, err);
        else
            skiff_error(err, 0, "not a tar archive: %s", archive_error_string(a));
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int h = archive_read_next_header(a, &e);
        if (h == ARCHIVE_EOF)
            break;
        if (h < ARCHIVE_WARN) {
            if (p->error[0])
                pass_error(p, err);
            else
                skiff_error(err, 0, "%s (truncated or corrupt layer)", archive_error_string(a));
            goto out;
        }
        if (archive_entry_sparse_count(e) > 0) {
            lz_error(err, ENOTSUP, "entry '%s' is a sparse file, which a lazy image cannot serve",
                     archive_entry_pathname(e) ? archive_entry_pathname(e) : "?");
            goto out;
        }
        /* the header is read: the tar stream stands where the data starts */
        la_int64_t data_off = archive_filter_bytes(a, 0);
        if (skiff_layer_plan_entry(e, flags, pl, err) < 0 || record(r, pl, (uint64_t)data_off, err) < 0)
            goto out;
        if (archive_read_data_skip(a) < ARCHIVE_WARN) {
            if (p->error[0])
                pass_error(p, err);
            else
                skiff_error(err, 0, "%s (truncated or corrupt layer)", archive_error_string(a));
            goto out;
        }
    }
    rv = 0;
out:
    free(pl);
    archive_read_free(a);
    return rv;
}

/* After a failure: when the blob is not the layer (its digest differs),
 * that is the cause to report, as a full import reports it. */
static void check_whole(struct pass *p, const char *digest, skiff_err *err)
{
    /* the rest of the blob: the byte kept behind, what was read and not
     * consumed, what was not read */
    p->mark = 0;
    hash_catch_up(p);
    if (p->z.next_in && p->z.avail_in)
        hash_feed(p, p->z.next_in, p->z.avail_in);
    for (;;) {
        ssize_t n = read(p->fd, p->in, IN_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return; /* the error at hand stays */
        if (n == 0)
            break;
        hash_feed(p, p->in, (size_t)n);
    }
    unsigned char md[32];
    char got[SKIFF_DIGEST_LEN];
    skiff_sha256mid_final(&p->whole, md);
    skiff_digest_text(md, got);
    if (strcmp(got, digest) != 0)
        lz_error(err, EBADMSG, "digest mismatch: expected %s, got %s (corrupt or tampered blob)", digest, got);
}

int lz_index_layer(int fd, const char *digest, unsigned flags, const char *out_path, skiff_err *err)
{
    struct pass p;
    memset(&p, 0, sizeof(p));
    p.fd = fd;
    p.out_fd = -1;
    struct rec r;
    memset(&r, 0, sizeof(r));
    struct skiff_atomic out;
    bool begun = false;
    int rv = -1;
    p.in = malloc(IN_CHUNK);
    p.ring = malloc(LZ_WINDOW);
    p.wbuf = malloc(compressBound(LZ_WINDOW));
    if (!p.in || !p.ring || !p.wbuf) {
        skiff_error(err, ENOMEM, "index");
        goto out;
    }
    skiff_sha256mid_init(&p.whole);
    skiff_sha256mid_state(&p.whole, p.cur.hstart);
    if (skiff_atomic_begin(&out, out_path, NULL, 0600, SKIFF_ATOMIC_NOSYNC, err) < 0)
        goto out;
    begun = true;
    p.out_fd = out.fd;
    p.out_pos = IDX_HEADER;
    p.z.next_in = p.in;
    /* 16 + 15: a gzip stream (header and trailer checked), nothing else */
    if (inflateInit2(&p.z, 31) != Z_OK) {
        skiff_error(err, ENOMEM, "inflateInit");
        goto out;
    }
    p.zinit = true;
    /* no CRC-32 by zlib: ISA-L's, in produce() */
    if (inflateValidate(&p.z, 0) != Z_OK) {
        skiff_error(err, 0, "inflateValidate");
        goto out;
    }
    if (fill_input(&p, 2) < 0) {
        pass_error(&p, err);
        goto out;
    }
    if (p.z.avail_in < 2 || p.z.next_in[0] != 0x1f || p.z.next_in[1] != 0x8b) {
        lz_error(err, ENOTSUP, "the layer is not gzip-compressed");
        goto out;
    }
    p.cur.kind = LZ_SPAN_GZIP;
    if (walk_tar(&p, &r, flags, err) < 0)
        goto out;
    /* past the tar's end: the rest of the blob, for the spans and the digest */
    const void *ignore;
    ssize_t n;
    while ((n = produce(&p, &ignore)) > 0)
        ;
    if (n < 0) {
        pass_error(&p, err);
        goto out;
    }
    while (!p.eof) { /* (the stream ended: anything after it was refused) */
        if (fill_input(&p, IN_CHUNK) < 0) {
            pass_error(&p, err);
            goto out;
        }
        if (p.z.avail_in) {
            lz_error(err, ENOTSUP, "the layer has data after its gzip stream");
            goto out;
        }
    }
    /* every byte consumed, none after: the blob's digest */
    hash_catch_up(&p);
    unsigned char md[32];
    char got[SKIFF_DIGEST_LEN];
    skiff_sha256mid_final(&p.whole, md);
    p.hashed = true;
    skiff_digest_text(md, got);
    if (digest && strcmp(got, digest) != 0) {
        lz_error(err, EBADMSG, "digest mismatch: expected %s, got %s (corrupt or tampered blob)", digest, got);
        goto out;
    }
    p.cur.cend = p.in_total;
    p.cur.uend = p.out_total;
    if (push_span(&p) < 0) {
        pass_error(&p, err);
        goto out;
    }
    if (p.nspans > LZ_MAX_SPANS) {
        lz_error(err, ENOTSUP, "the layer needs more than %u spans", LZ_MAX_SPANS);
        goto out;
    }
    if (write_tail(&p, &r, digest ? digest : got, err) < 0)
        goto out;
    out.fd = p.out_fd;
    p.out_fd = -1;
    begun = false;
    if (skiff_atomic_commit(&out, err) < 0)
        goto out;
    rv = 0;
out:
    if (rv < 0 && digest && !p.hashed && err->code != ENOTSUP && p.in)
        check_whole(&p, digest, err);
    if (begun)
        skiff_atomic_abort(&out);
    if (p.zinit)
        inflateEnd(&p.z);
    free(p.in);
    free(p.ring);
    free(p.wbuf);
    free(p.spans);
    free(r.ents);
    free(r.str);
    close(fd);
    return rv;
}
