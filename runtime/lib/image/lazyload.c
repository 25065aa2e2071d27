/* Loading a lazy index file (lazy_int.h; lazyindex.c writes them): every
 * field is checked, since an index is input (a cache the user can write,
 * a file a fuzzer made); what a loaded index says is then true of its
 * shape: spans contiguous from 0 to the layer's end, windows inside the
 * file, entries' names normalised and their data inside the layer. */
#include "lazy_int.h"
#include "layer_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "fdio.h"

int lz_error(skiff_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}

/* Where the file's bytes come from: a file or a buffer. */
struct src {
    int fd;
    const unsigned char *buf;
    uint64_t size;
};

static int src_read(const struct src *s, void *dst, size_t n, uint64_t off)
{
    if (off > s->size || n > s->size - off)
        return -1;
    if (s->buf) {
        memcpy(dst, s->buf + off, n);
        return 0;
    }
    return skiff_read_all_at(s->fd, dst, n, off);
}

static int bad(skiff_err *err, const char *what)
{
    return lz_error(err, EINVAL, "bad lazy index: %s", what);
}

/* A path as the policy leaves it: relative, no "", "." or ".." parts. */
static bool normalised(const char *p)
{
    if (!*p || *p == '/')
        return false;
    for (const char *c = p; *c;) {
        const char *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c += len;
        if (*c == '/')
            c++;
        if (end && !*c)
            return false;
    }
    return strlen(p) < SKIFF_ENTRY_PATH_MAX;
}

/* "sha256:" and 64 lowercase hex digits, as the index pass writes it,
 * into its 32 bytes. Here and not beside skiff_digest_text in digest.c:
 * the lean `skiff` binary serves lazy images through this loader and links
 * no libcrypto, which digest.o would pull in. */
static bool digest_bytes(const char *d, unsigned char md[32])
{
    if (strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
        return false;
    for (int i = 0; i < 64; i++) {
        char c = d[7 + i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return false;
        md[i / 2] = (unsigned char)(i % 2 ? md[i / 2] | v : v << 4);
    }
    return true;
}

static int load(const struct src *s, unsigned loads, struct lz_index *ix, skiff_err *err)
{
    unsigned char h[IDX_HEADER];
    if (src_read(s, h, sizeof(h), 0) < 0 || memcmp(h, IDX_MAGIC, 8) != 0)
        return bad(err, "not an index file");
    uint32_t version = lz_get32(h + 8);
    if (version == 1)
        return lz_error(err, EINVAL,
                        "lazy index of format 1, made by an older skiff (this one reads format %u): "
                        "make the lazy image again",
                        IDX_VERSION);
    if (version != IDX_VERSION)
        return bad(err, "unknown version");
    if (memchr(h + 16, '\0', SKIFF_DIGEST_LEN) == NULL)
        return bad(err, "digest");
    memcpy(ix->digest, h + 16, SKIFF_DIGEST_LEN);
    if (!digest_bytes(ix->digest, ix->sha))
        return bad(err, "digest");
    ix->csize = lz_get64(h + 88);
    ix->usize = lz_get64(h + 96);
    ix->nspans = lz_get32(h + 104);
    ix->nentries = lz_get32(h + 108);
    uint64_t spans_off = lz_get64(h + 112), entries_off = lz_get64(h + 120), strings_off = lz_get64(h + 128),
             slen = lz_get64(h + 136), end = lz_get64(h + 168);
    ix->skipped = (unsigned long)lz_get64(h + 144);
    ix->setid = (unsigned long)lz_get64(h + 152);
    ix->xattrs = (unsigned long)lz_get64(h + 160);
    if (ix->nspans == 0 || ix->nspans > LZ_MAX_SPANS || ix->nentries > LZ_MAX_ENTRIES || end != s->size ||
        spans_off < IDX_HEADER || entries_off != spans_off + (uint64_t)ix->nspans * IDX_SPAN ||
        strings_off != entries_off + (uint64_t)ix->nentries * IDX_ENTRY || slen > UINT32_MAX ||
        strings_off + slen != end)
        return bad(err, "section sizes");
    ix->spans = calloc(ix->nspans, sizeof(*ix->spans));
    unsigned char *raw = malloc((size_t)ix->nspans * IDX_SPAN);
    if (!ix->spans || !raw) {
        free(raw);
        return skiff_error(err, ENOMEM, "lazy index");
    }
    if (src_read(s, raw, (size_t)ix->nspans * IDX_SPAN, spans_off) < 0) {
        free(raw);
        return bad(err, "spans");
    }
    for (uint32_t i = 0; i < ix->nspans; i++) {
        const unsigned char *r = raw + (size_t)i * IDX_SPAN;
        struct lz_span *sp = &ix->spans[i];
        sp->cstart = lz_get64(r);
        sp->cend = lz_get64(r + 8);
        sp->ustart = lz_get64(r + 16);
        sp->uend = lz_get64(r + 24);
        sp->woff = lz_get64(r + 32);
        sp->wlen = lz_get32(r + 40);
        sp->kind = r[44];
        sp->bits = r[45];
        for (int k = 0; k < 8; k++) {
            sp->hstart[k] = lz_get32(r + 48 + 4 * k);
            sp->hend[k] = lz_get32(r + 80 + 4 * k);
        }
        uint64_t prev_uend = i ? ix->spans[i - 1].uend : 0;
        bool ok = sp->ustart == prev_uend && sp->uend >= sp->ustart && sp->cstart < sp->cend && sp->cend <= ix->csize &&
                  (i == 0 || sp->cstart >= ix->spans[i - 1].cstart) && sp->bits < 8;
        if (sp->kind == LZ_SPAN_GZIP)
            ok = ok && sp->bits == 0 && sp->wlen == 0;
        else if (sp->kind == LZ_SPAN_RAW)
            ok = ok && i > 0 && sp->wlen > 0 && sp->woff >= IDX_HEADER && sp->woff <= spans_off &&
                 sp->wlen <= spans_off - sp->woff;
        else
            ok = false;
        if (i == 0)
            ok = ok && sp->kind == LZ_SPAN_GZIP && sp->cstart == 0;
        if (!ok) {
            free(raw);
            return bad(err, "a span");
        }
    }
    free(raw);
    if (ix->spans[ix->nspans - 1].uend != ix->usize || ix->spans[ix->nspans - 1].cend != ix->csize)
        return bad(err, "the last span");
    if (!(loads & LZ_LOAD_ENTRIES))
        return 0;
    ix->strings = malloc(slen + 1);
    raw = malloc((size_t)ix->nentries * IDX_ENTRY + 1);
    ix->entries = calloc(ix->nentries ? ix->nentries : 1, sizeof(*ix->entries));
    if (!ix->strings || !raw || !ix->entries) {
        free(raw);
        return skiff_error(err, ENOMEM, "lazy index");
    }
    if (src_read(s, ix->strings, slen, strings_off) < 0 ||
        src_read(s, raw, (size_t)ix->nentries * IDX_ENTRY, entries_off) < 0) {
        free(raw);
        return bad(err, "entries");
    }
    ix->strings[slen] = '\0';
    int rv = 0;
    for (uint32_t i = 0; i < ix->nentries && rv == 0; i++) {
        const unsigned char *r = raw + (size_t)i * IDX_ENTRY;
        struct lz_entry *e = &ix->entries[i];
        e->kind = r[0];
        e->mode = lz_get32(r + 4);
        e->uid = lz_get32(r + 8);
        e->gid = lz_get32(r + 12);
        e->mtime = (int64_t)lz_get64(r + 16);
        e->size = lz_get64(r + 24);
        e->off = lz_get64(r + 32);
        uint32_t po = lz_get32(r + 40), to = lz_get32(r + 44), ro = lz_get32(r + 48);
        /* every string ends inside the table (it ends with a NUL) */
        if (po >= slen || to >= slen || ro >= slen || !slen || ix->strings[slen - 1] != '\0') {
            rv = bad(err, "an entry's name");
            break;
        }
        e->path = ix->strings + po;
        e->target = ix->strings + to;
        e->raw = ix->strings + ro;
        bool ok = normalised(e->path) && (e->mode & ~07777u) == 0 && strlen(e->target) < SKIFF_ENTRY_PATH_MAX;
        switch (e->kind) {
        case SKIFF_ENTRY_REG:
            ok = ok && e->off <= ix->usize && e->size <= ix->usize - e->off && !(e->mode & (S_ISUID | S_ISGID));
            break;
        case SKIFF_ENTRY_HARDLINK:
            ok = ok && normalised(e->target);
            break;
        case SKIFF_ENTRY_SYMLINK:
            ok = ok && e->target[0];
            break;
        case SKIFF_ENTRY_FIFO:
            ok = ok && !(e->mode & (S_ISUID | S_ISGID));
            break;
        case SKIFF_ENTRY_WHITEOUT: {
            const char *slash = strrchr(e->path, '/');
            const char *base = slash ? slash + 1 : e->path;
            ok = ok && !strncmp(base, ".wh.", 4) && base[4] && strcmp(base + 4, ".") && strcmp(base + 4, "..");
            break;
        }
        case SKIFF_ENTRY_DIR:
        case SKIFF_ENTRY_OPAQUE:
            break;
        default:
            ok = false;
        }
        if (!ok)
            rv = bad(err, "an entry");
    }
    free(raw);
    return rv;
}

int lz_index_load(const char *path, unsigned loads, struct lz_index *ix, skiff_err *err)
{
    memset(ix, 0, sizeof(*ix));
    ix->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return skiff_error(err, e, "open %s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lz_error(err, EINVAL, "%s is not a regular file", path);
    }
    struct src s = {.fd = fd, .size = (uint64_t)st.st_size};
    if (load(&s, loads, ix, err) < 0) {
        close(fd);
        return skiff_err_wrap(err, "%s", path);
    }
    if (loads & LZ_LOAD_WINDOWS)
        ix->fd = fd;
    else
        close(fd);
    return 0;
}

int lz_index_load_mem(const void *buf, size_t len, unsigned loads, struct lz_index *ix, skiff_err *err)
{
    memset(ix, 0, sizeof(*ix));
    ix->fd = -1;
    struct src s = {.fd = -1, .buf = buf, .size = len};
    return load(&s, loads & ~(unsigned)LZ_LOAD_WINDOWS, ix, err);
}

void lz_index_free(struct lz_index *ix)
{
    free(ix->spans);
    free(ix->entries);
    free(ix->strings);
    if (ix->fd >= 0)
        close(ix->fd);
    memset(ix, 0, sizeof(*ix));
    ix->fd = -1;
}

int lz_index_window(const struct lz_index *ix, uint32_t s, unsigned char *out, skiff_err *err)
{
    const struct lz_span *sp = &ix->spans[s];
    if (sp->kind != LZ_SPAN_RAW)
        return 0;
    unsigned char *z = malloc(sp->wlen);
    if (!z)
        return skiff_error(err, ENOMEM, "lazy index window");
    if (ix->fd < 0 || skiff_read_all_at(ix->fd, z, sp->wlen, sp->woff) < 0) {
        free(z);
        return skiff_error(err, errno ? errno : EIO, "read a window of the lazy index of %s", ix->digest);
    }
    uLongf n = LZ_WINDOW;
    int zr = uncompress(out, &n, z, sp->wlen);
    free(z);
    if (zr != Z_OK || (n != LZ_WINDOW && sp->ustart >= LZ_WINDOW) || n > sp->ustart)
        return lz_error(err, EINVAL, "bad lazy index of %s: a window", ix->digest);
    return (int)n;
}
