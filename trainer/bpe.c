/* GPT-2's byte-level BPE: see bpe.h for the file format.
 *
 * Why this is written here rather than taken from a library: Debian packages
 * no C GPT-2 tokenizer, and the parts are small. Unicode character classes
 * come from utf8proc (the pre-split needs \p{L} and \p{N}); the pre-split
 * itself is a hand-written scanner for one fixed expression of seven
 * alternatives (a regex engine would bring its own, different idea of \s:
 * PCRE2's includes U+0085, JavaScript's does not). JSON is read with jansson.
 *
 * Merging follows the reference encoder exactly: repeatedly take the rule of
 * lowest rank among the adjacent pairs of the piece and join every
 * occurrence of it, left to right without overlap. A min-heap of
 * (rank, position) entries over a linked list of symbols does this in
 * O(n log n) for a piece of n bytes (a megabyte of spaces is one piece),
 * where rescanning the piece for every rule would be quadratic. */
#include "bpe.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "atomicfile.h"
#include "fdio.h"

#define HEADER_BYTES 32
#define MAX_MERGES (1u << 20)
#define MAX_FILE_BYTES ((size_t)64 << 20)

/* Pieces up to this many bytes are remembered: text repeats its words. */
#define CACHE_SLOTS (1u << 16)
#define CACHE_KEY 32

struct merge {
    uint32_t left, right, result;
};

struct cache_slot {
    uint64_t hash;
    uint8_t klen, nids; /* klen 0: empty */
    uint16_t ids[CACHE_KEY];
    unsigned char key[CACHE_KEY];
};

struct bpe {
    unsigned char *blob; /* the whole file image; the arrays below point into it */
    uint32_t n_vocab, n_merges, eot;
    const uint32_t *off;
    const unsigned char *text;
    const struct merge *merges;
    uint16_t byte_id[256];
    uint64_t *pairs; /* ((left << 16 | right) + 1) << 32 | rank; 0 = empty */
    size_t pair_mask;
    /* scratch of the merge loop, grown to the longest piece seen */
    int32_t *id, *next, *prev;
    uint32_t *round;
    uint64_t *heap;
    size_t wcap, hn;
    struct cache_slot *cache; /* allocated on first use */
};

static uint64_t fnv1a(const unsigned char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static size_t mix32(uint64_t k) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 24); }

static int64_t pair_rank(const struct bpe *b, uint32_t left, uint32_t right)
{
    uint64_t key = ((uint64_t)left << 16 | right) + 1;
    for (size_t i = mix32(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        uint64_t e = b->pairs[i];
        if (!e) return -1;
        if (e >> 32 == key) return (int64_t)(e & 0xffffffffu);
    }
}

/* ---- pre-split ------------------------------------------------------------ */

enum { C_L, C_N, C_S, C_O };

static int ascii_class(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return C_L;
    if (c >= '0' && c <= '9') return C_N;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return C_S;
    return C_O;
}

static int cp_class(utf8proc_int32_t cp)
{
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return C_L;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return C_N;
    case UTF8PROC_CATEGORY_ZS: return C_S;
    default: /* ECMAScript's white space beyond Zs */ return cp == 0xFEFF || cp == 0x2028 || cp == 0x2029 ? C_S : C_O;
    }
}

/* Class and length of the character at pos; an invalid UTF-8 byte is a
 * character of its own of class "other". */
static int char_at(const unsigned char *s, size_t len, size_t pos, size_t *clen)
{
    if (s[pos] < 0x80) {
        *clen = 1;
        return ascii_class(s[pos]);
    }
    utf8proc_int32_t cp;
    size_t avail = len - pos < 4 ? len - pos : 4;
    utf8proc_ssize_t r = utf8proc_iterate(s + pos, (utf8proc_ssize_t)avail, &cp);
    if (r <= 0) {
        *clen = 1;
        return C_O;
    }
    *clen = (size_t)r;
    return cp_class(cp);
}

size_t bpe_presplit(const char *text, size_t len, size_t pos)
{
    const unsigned char *s = (const unsigned char *)text;
    /* 's|'t|'re|'ve|'m|'ll|'d */
    if (s[pos] == '\'' && pos + 1 < len) {
        unsigned char c = s[pos + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return pos + 2;
        if (pos + 2 < len && s[pos + 2] == (c == 'l' ? 'l' : 'e') && (c == 'r' || c == 'v' || c == 'l')) return pos + 3;
    }
    size_t l0, l;
    int cls = char_at(s, len, pos, &l0);
    size_t start = pos;
    /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a space joins the run
     * that follows it */
    if (s[pos] == ' ' && pos + 1 < len) {
        int c1 = char_at(s, len, pos + 1, &l);
        if (c1 != C_S) {
            cls = c1;
            start = pos + 1;
            l0 = l;
        }
    }
    if (cls != C_S) {
        size_t e = start + l0;
        while (e < len && char_at(s, len, e, &l) == cls) e += l;
        return e;
    }
    /* `\s+(?!\S)`: a white-space run but its last character when something
     * follows (that one joins the next word); `\s+` when the run is one
     * character */
    size_t e = pos, last = pos;
    while (e < len && char_at(s, len, e, &l) == C_S) {
        last = e;
        e += l;
    }
    return e == len || last == pos ? e : last;
}

/* ---- merging ---------------------------------------------------------------- */

static int work_reserve(struct bpe *b, size_t n, skiff_err *err)
{
    if (n <= b->wcap) return 0;
    size_t c = b->wcap ? b->wcap : 256;
    while (c < n) c *= 2;
    void *p;
    if (!(p = realloc(b->id, c * sizeof *b->id))) goto oom;
    b->id = p;
    if (!(p = realloc(b->next, c * sizeof *b->next))) goto oom;
    b->next = p;
    if (!(p = realloc(b->prev, c * sizeof *b->prev))) goto oom;
    b->prev = p;
    /* n-1 initial pairs plus at most two new ones for each of n-1 merges:
     * the heap, and one round's entries, never hold more than 3n */
    if (!(p = realloc(b->round, 3 * c * sizeof *b->round))) goto oom;
    b->round = p;
    if (!(p = realloc(b->heap, 3 * c * sizeof *b->heap))) goto oom;
    b->heap = p;
    b->wcap = c;
    return 0;
oom:
    return skiff_error(err, ENOMEM, "tokenizer: a piece of %zu bytes", n);
}

static void heap_push(struct bpe *b, uint64_t v)
{
    size_t i = b->hn++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (b->heap[up] <= v) break;
        b->heap[i] = b->heap[up];
        i = up;
    }
    b->heap[i] = v;
}

static uint64_t heap_pop(struct bpe *b)
{
    uint64_t top = b->heap[0], v = b->heap[--b->hn];
    size_t i = 0, n = b->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && b->heap[c + 1] < b->heap[c]) c++;
        if (v <= b->heap[c]) break;
        b->heap[i] = b->heap[c];
        i = c;
    }
    if (n) b->heap[i] = v;
    return top;
}

static void push_pair(struct bpe *b, int32_t p)
{
    if (p < 0 || b->next[p] < 0) return;
    int32_t q = b->next[p];
    int64_t r = pair_rank(b, (uint32_t)b->id[p], (uint32_t)b->id[q]);
    if (r >= 0) heap_push(b, (uint64_t)r << 32 | (uint32_t)p);
}

/* Merges the piece s[0..n) (n >= 2) into tokens, appended at out. Returns
 * the number of tokens. */
static size_t merge_piece(struct bpe *b, const unsigned char *s, size_t n, uint16_t *out)
{
    int32_t *id = b->id, *next = b->next, *prev = b->prev;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_id[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    b->hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(b, (int32_t)i);
    while (b->hn) {
        /* one round: every entry of the lowest rank, in position order (the
         * heap orders equal ranks by position); pairs this round creates
         * contain its result token, so they have other ranks */
        uint32_t r = (uint32_t)(b->heap[0] >> 32);
        size_t k = 0;
        while (b->hn && (uint32_t)(b->heap[0] >> 32) == r) b->round[k++] = (uint32_t)heap_pop(b);
        const struct merge *m = &b->merges[r];
        for (size_t j = 0; j < k; j++) {
            int32_t p = (int32_t)b->round[j], q = next[p];
            /* stale entries: p was joined into its left neighbour (id -1) or
             * changed, or its right neighbour changed */
            if (id[p] != (int32_t)m->left || q < 0 || id[q] != (int32_t)m->right) continue;
            id[p] = (int32_t)m->result;
            id[q] = -1;
            next[p] = next[q];
            if (next[q] >= 0) prev[next[q]] = p;
            push_pair(b, prev[p]);
            push_pair(b, p);
        }
    }
    size_t k = 0;
    for (int32_t p = 0; p >= 0; p = next[p]) out[k++] = (uint16_t)id[p];
    return k;
}

static int encode_piece(struct bpe *b, const unsigned char *s, size_t n, uint16_t *out, size_t *k, skiff_err *err)
{
    if (n == 1) {
        out[0] = b->byte_id[s[0]];
        *k = 1;
        return 0;
    }
    struct cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_KEY) {
        if (!b->cache && !(b->cache = calloc(CACHE_SLOTS, sizeof *b->cache)))
            return skiff_error(err, ENOMEM, "tokenizer cache");
        h = fnv1a(s, n);
        slot = &b->cache[h & (CACHE_SLOTS - 1)];
        if (slot->klen == n && slot->hash == h && !memcmp(slot->key, s, n)) {
            memcpy(out, slot->ids, slot->nids * sizeof *out);
            *k = slot->nids;
            return 0;
        }
    }
    if (work_reserve(b, n, err) < 0) return -1;
    *k = merge_piece(b, s, n, out);
    if (slot) {
        slot->hash = h;
        slot->klen = (uint8_t)n;
        slot->nids = (uint8_t)*k;
        memcpy(slot->key, s, n);
        memcpy(slot->ids, out, *k * sizeof *out);
    }
    return 0;
}

int bpe_encode(struct bpe *b, const char *text, size_t len, uint16_t **out, size_t *n, size_t *cap, skiff_err *err)
{
    size_t pos = 0;
    while (pos < len) {
        size_t end = bpe_presplit(text, len, pos), m = end - pos;
        if (m > INT32_MAX) /* positions in the merge loop are int32 */
            return skiff_error(err, 0,
                               "tokenizer: a piece of %zu bytes (one word or one run of "
                               "white space) is longer than 2 GiB",
                               m);
        if (*cap - *n < m) { /* a piece gives at most one token per byte */
            size_t c = *cap ? *cap : 4096;
            while (c - *n < m) c *= 2;
            uint16_t *p = realloc(*out, c * sizeof *p);
            if (!p) return skiff_error(err, ENOMEM, "tokens");
            *out = p;
            *cap = c;
        }
        size_t k = 0;
        if (encode_piece(b, (const unsigned char *)text + pos, m, *out + *n, &k, err) < 0) return -1;
        *n += k;
        pos = end;
    }
    return 0;
}

/* ---- the compact file ---------------------------------------------------------- */

int bpe_vocab_size(const struct bpe *b) { return (int)b->n_vocab; }
int bpe_eot(const struct bpe *b) { return (int)b->eot; }

const unsigned char *bpe_token(const struct bpe *b, int id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= b->n_vocab) return NULL;
    *len = b->off[id + 1] - b->off[id];
    return b->text + b->off[id];
}

void bpe_free(struct bpe *b)
{
    if (!b) return;
    free(b->blob);
    free(b->pairs);
    free(b->id);
    free(b->next);
    free(b->prev);
    free(b->round);
    free(b->heap);
    free(b->cache);
    free(b);
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }

/* Checks a file image (owned by b->blob) and builds the lookup tables. */
static int parse(struct bpe *b, size_t len, const char *name, skiff_err *err)
{
    const unsigned char *p = b->blob;
    if (len < HEADER_BYTES || memcmp(p, BPE_MAGIC, 8))
        return skiff_error(err, 0,
                           "%s: not a skiff BPE file (make one with `skiff-train "
                           "tokenizer-import`)",
                           name);
    uint32_t version = rd32(p + 8);
    b->n_vocab = rd32(p + 12);
    b->n_merges = rd32(p + 16);
    b->eot = rd32(p + 20);
    uint32_t text_bytes = rd32(p + 24);
    if (version != BPE_VERSION)
        return skiff_error(err, 0, "%s: BPE file version %u, this build reads %d", name, version, BPE_VERSION);
    if (rd32(p + 28) != 0) return skiff_error(err, 0, "%s: reserved header field is not 0", name);
    if (b->n_vocab < 257 || b->n_vocab > BPE_MAX_VOCAB)
        return skiff_error(err, 0,
                           "%s: vocabulary of %u tokens; need 257..%d (256 bytes, an "
                           "end-of-text token; shards hold 16-bit tokens)",
                           name, b->n_vocab, BPE_MAX_VOCAB);
    if (b->n_merges > MAX_MERGES || b->eot >= b->n_vocab || text_bytes > (size_t)b->n_vocab * BPE_MAX_TOKEN_BYTES)
        return skiff_error(err, 0, "%s: header out of range (%u merges, eot %u, %u text bytes)", name, b->n_merges,
                           b->eot, text_bytes);
    size_t want = HEADER_BYTES + 4 * ((size_t)b->n_vocab + 1) + pad4(text_bytes) + sizeof(struct merge) * b->n_merges;
    if (len != want)
        return skiff_error(err, 0, "%s: %zu bytes, the header describes %zu (truncated?)", name, len, want);
    b->off = (const uint32_t *)(p + HEADER_BYTES);
    b->text = p + HEADER_BYTES + 4 * ((size_t)b->n_vocab + 1);
    b->merges = (const struct merge *)(b->text + pad4(text_bytes));
    if (b->off[0] != 0 || b->off[b->n_vocab] != text_bytes)
        return skiff_error(err, 0, "%s: token offsets do not span the text", name);

    /* token bytes -> id, to find duplicates */
    size_t tslots = 1;
    while (tslots < 2 * (size_t)b->n_vocab) tslots *= 2;
    uint32_t *tab = calloc(tslots, sizeof *tab); /* id + 1; 0 = empty */
    if (!tab) return skiff_error(err, ENOMEM, "%s", name);
    int seen_byte[256] = {0};
    int rc = -1;
    for (uint32_t i = 0; i < b->n_vocab; i++) {
        uint32_t o = b->off[i], e = b->off[i + 1];
        if (e < o || e - o == 0 || e - o > BPE_MAX_TOKEN_BYTES || e > text_bytes) {
            skiff_error(err, 0, "%s: token %u has %d bytes (need 1..%d, inside the text)", name, i,
                        e < o ? -1 : (int)(e - o), BPE_MAX_TOKEN_BYTES);
            goto out;
        }
        const unsigned char *t = b->text + o;
        size_t n = e - o, s = (size_t)fnv1a(t, n) & (tslots - 1);
        for (; tab[s]; s = (s + 1) & (tslots - 1)) {
            uint32_t j = tab[s] - 1;
            if (b->off[j + 1] - b->off[j] == n && !memcmp(b->text + b->off[j], t, n)) {
                skiff_error(err, 0, "%s: tokens %u and %u have the same bytes", name, j, i);
                goto out;
            }
        }
        tab[s] = i + 1;
        if (n == 1) {
            if (i == b->eot) {
                skiff_error(err, 0, "%s: the end-of-text token %u is a one-byte token", name, i);
                goto out;
            }
            b->byte_id[t[0]] = (uint16_t)i;
            seen_byte[t[0]] = 1;
        }
    }
    for (int c = 0; c < 256; c++) {
        if (!seen_byte[c]) {
            skiff_error(err, 0,
                        "%s: no token for byte 0x%02x: such a vocabulary cannot encode "
                        "every text",
                        name, c);
            goto out;
        }
    }

    size_t pslots = 1;
    while (pslots < 2 * (size_t)b->n_merges + 2) pslots *= 2;
    b->pairs = calloc(pslots, sizeof *b->pairs);
    if (!b->pairs) {
        skiff_error(err, ENOMEM, "%s", name);
        goto out;
    }
    b->pair_mask = pslots - 1;
    for (uint32_t r = 0; r < b->n_merges; r++) {
        const struct merge *m = &b->merges[r];
        if (m->left >= b->n_vocab || m->right >= b->n_vocab || m->result >= b->n_vocab || m->left == b->eot ||
            m->right == b->eot || m->result == b->eot) {
            skiff_error(err, 0, "%s: rule %u names a token out of range or the end-of-text token", name, r);
            goto out;
        }
        size_t nl = b->off[m->left + 1] - b->off[m->left];
        size_t nr = b->off[m->right + 1] - b->off[m->right];
        const unsigned char *t = b->text + b->off[m->result];
        if (b->off[m->result + 1] - b->off[m->result] != nl + nr || memcmp(t, b->text + b->off[m->left], nl) ||
            memcmp(t + nl, b->text + b->off[m->right], nr)) {
            skiff_error(err, 0, "%s: rule %u: token %u is not tokens %u and %u joined", name, r, m->result, m->left,
                        m->right);
            goto out;
        }
        uint64_t key = ((uint64_t)m->left << 16 | m->right) + 1;
        size_t s = mix32(key) & b->pair_mask;
        for (; b->pairs[s]; s = (s + 1) & b->pair_mask) {
            if (b->pairs[s] >> 32 == key) {
                skiff_error(err, 0, "%s: rule %u repeats rule %u", name, r, (unsigned)(b->pairs[s] & 0xffffffffu));
                goto out;
            }
        }
        b->pairs[s] = key << 32 | r;
    }
    rc = 0;
out:
    free(tab);
    return rc;
}

struct bpe *bpe_load_mem(const void *data, size_t len, skiff_err *err)
{
    struct bpe *b = calloc(1, sizeof *b);
    if (!b || !(b->blob = malloc(len ? len : 1))) {
        free(b);
        skiff_error(err, ENOMEM, "tokenizer");
        return NULL;
    }
    memcpy(b->blob, data, len);
    if (parse(b, len, "BPE data", err) < 0) {
        bpe_free(b);
        return NULL;
    }
    return b;
}

struct bpe *bpe_load(const char *path, skiff_err *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        skiff_error(err, errno, "open %s", path);
        return NULL;
    }
    size_t len;
    char *data = skiff_read_fd_small(fd, path, MAX_FILE_BYTES, &len, err);
    if (!data) return NULL;
    struct bpe *b = calloc(1, sizeof *b);
    if (!b) {
        free(data);
        skiff_error(err, ENOMEM, "tokenizer");
        return NULL;
    }
    b->blob = (unsigned char *)data;
    if (parse(b, len, path, err) < 0) {
        bpe_free(b);
        return NULL;
    }
    return b;
}

/* ---- import from encoder.json + vocab.bpe ---------------------------------------- */

/* GPT-2 stores each byte as a printable character: bytes '!'..'~', 0xA1..0xAC
 * and 0xAE..0xFF as themselves, the other 68 bytes as U+0100 upwards in byte
 * order. Returns the byte of code point cp, or -1. */
static int unicode_to_byte(utf8proc_int32_t cp)
{
    static int table[256 + 68];
    static int ready;
    if (!ready) {
        int n = 0;
        for (int i = 0; i < 256 + 68; i++) table[i] = -1;
        for (int c = 0; c < 256; c++) {
            int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            table[printable ? c : 256 + n++] = c;
        }
        ready = 1;
    }
    return cp >= 0 && cp < 256 + 68 ? table[cp] : -1;
}

/* A token string of encoder.json or vocab.bpe -> its bytes (at most
 * BPE_MAX_TOKEN_BYTES). Returns the length, or -1. */
static int token_bytes(const char *s, size_t n, unsigned char *out)
{
    size_t i = 0;
    int k = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        int byte = r > 0 ? unicode_to_byte(cp) : -1;
        if (byte < 0 || k == BPE_MAX_TOKEN_BYTES) return -1;
        out[k++] = (unsigned char)byte;
        i += (size_t)r;
    }
    return k;
}

struct import {
    size_t nv;
    unsigned char **tok; /* bytes of each id */
    uint32_t *len;
    uint32_t *tab; /* bytes -> id + 1 */
    size_t mask;
};

static int64_t import_find(const struct import *im, const unsigned char *t, size_t n)
{
    for (size_t s = (size_t)fnv1a(t, n) & im->mask; im->tab[s]; s = (s + 1) & im->mask) {
        uint32_t j = im->tab[s] - 1;
        if (im->len[j] == n && !memcmp(im->tok[j], t, n)) return j;
    }
    return -1;
}

static int import_vocab(struct import *im, const char *path, uint32_t *eot, skiff_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return skiff_error(err, 0, "%s: line %d: %s", path, je.line, je.text);
    int rc = -1;
    int64_t eot_id = -1;
    im->nv = json_is_object(root) ? json_object_size(root) : 0;
    if (im->nv < 257 || im->nv > BPE_MAX_VOCAB) {
        skiff_error(err, 0, "%s: want a JSON object of 257..%d tokens (token -> id)", path, BPE_MAX_VOCAB);
        goto out;
    }
    size_t slots = 1;
    while (slots < 2 * im->nv) slots *= 2;
    im->mask = slots - 1;
    im->tok = calloc(im->nv, sizeof *im->tok);
    im->len = calloc(im->nv, sizeof *im->len);
    im->tab = calloc(slots, sizeof *im->tab);
    if (!im->tok || !im->len || !im->tab) {
        skiff_error(err, ENOMEM, "%s", path);
        goto out;
    }
    const char *key;
    json_t *val;
    unsigned char buf[BPE_MAX_TOKEN_BYTES];
    json_object_foreach(root, key, val)
    {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || (size_t)id >= im->nv || im->tok[id]) {
            skiff_error(err, 0, "%s: token \"%.40s\": id %s (want each of 0..%zu once)", path, key,
                        json_is_integer(val) ? "out of range or repeated" : "is not an integer", im->nv - 1);
            goto out;
        }
        /* "<|endoftext|>" is printable ASCII: its characters are its bytes */
        int n = token_bytes(key, strlen(key), buf);
        if (!strcmp(key, "<|endoftext|>")) eot_id = id;
        if (n <= 0) {
            skiff_error(err, 0, "%s: token \"%.40s\" is not written in GPT-2's byte alphabet", path, key);
            goto out;
        }
        if (import_find(im, buf, (size_t)n) >= 0) {
            skiff_error(err, 0, "%s: token \"%.40s\" appears twice", path, key);
            goto out;
        }
        if (!(im->tok[id] = malloc((size_t)n))) {
            skiff_error(err, ENOMEM, "%s", path);
            goto out;
        }
        memcpy(im->tok[id], buf, (size_t)n);
        im->len[id] = (uint32_t)n;
        size_t s = (size_t)fnv1a(buf, (size_t)n) & im->mask;
        while (im->tab[s]) s = (s + 1) & im->mask;
        im->tab[s] = (uint32_t)id + 1;
    }
    if (eot_id < 0) {
        skiff_error(err, 0, "%s: no \"<|endoftext|>\" token", path);
        goto out;
    }
    *eot = (uint32_t)eot_id;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* vocab.bpe: "#version: 0.2", then one "left right" rule a line, by rank. */
static int import_merges(const struct import *im, const char *path, struct merge **out, uint32_t *count, skiff_err *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skiff_error(err, errno, "open %s", path);
    size_t len;
    cleanup_free char *data = skiff_read_fd_small(fd, path, MAX_FILE_BYTES, &len, err);
    if (!data) return -1;
    size_t cap = 0, n = 0, lineno = 0;
    struct merge *m = NULL;
    unsigned char a[BPE_MAX_TOKEN_BYTES], b[BPE_MAX_TOKEN_BYTES], ab[2 * BPE_MAX_TOKEN_BYTES];
    for (char *line = data, *nl; line < data + len; line = nl + 1) {
        nl = memchr(line, '\n', (size_t)(data + len - line));
        if (!nl) nl = data + len;
        lineno++;
        size_t ll = (size_t)(nl - line);
        if (ll && line[ll - 1] == '\r') ll--;
        if (!ll || (lineno == 1 && line[0] == '#')) continue;
        char *sp = memchr(line, ' ', ll);
        int na = sp ? token_bytes(line, (size_t)(sp - line), a) : -1;
        int nb = sp ? token_bytes(sp + 1, ll - (size_t)(sp + 1 - line), b) : -1;
        if (na <= 0 || nb <= 0) {
            free(m);
            return skiff_error(err, 0,
                               "%s:%zu: want two tokens of GPT-2's byte alphabet "
                               "separated by one space",
                               path, lineno);
        }
        memcpy(ab, a, (size_t)na);
        memcpy(ab + na, b, (size_t)nb);
        int64_t l = import_find(im, a, (size_t)na), r = import_find(im, b, (size_t)nb);
        int64_t res = import_find(im, ab, (size_t)(na + nb));
        if (l < 0 || r < 0 || res < 0) {
            free(m);
            return skiff_error(err, 0,
                               "%s:%zu: the rule names a token that is not in the "
                               "vocabulary (%s)",
                               path, lineno,
                               l < 0   ? "left"
                               : r < 0 ? "right"
                                       : "joined");
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            struct merge *p = cap <= MAX_MERGES ? realloc(m, cap * sizeof *m) : NULL;
            if (!p) {
                free(m);
                return skiff_error(err, ENOMEM, "%s: rules", path);
            }
            m = p;
        }
        m[n++] = (struct merge){(uint32_t)l, (uint32_t)r, (uint32_t)res};
    }
    *out = m;
    *count = (uint32_t)n;
    return 0;
}

struct image {
    const unsigned char *p;
    size_t len;
};

static int fill_image(int fd, void *ctx)
{
    const struct image *im = ctx;
    return skiff_write_all(fd, im->p, im->len);
}

static int write_compact(const struct import *im, uint32_t eot, const struct merge *m, uint32_t nm,
                         const char *out_path, skiff_err *err)
{
    size_t text = 0;
    for (size_t i = 0; i < im->nv; i++) text += im->len[i];
    size_t size = HEADER_BYTES + 4 * (im->nv + 1) + pad4(text) + sizeof *m * nm;
    unsigned char *img = calloc(1, size);
    if (!img) return skiff_error(err, ENOMEM, "tokenizer file");
    memcpy(img, BPE_MAGIC, 8);
    uint32_t h[5] = {BPE_VERSION, (uint32_t)im->nv, nm, eot, (uint32_t)text};
    memcpy(img + 8, h, sizeof h);
    uint32_t *off = (uint32_t *)(img + HEADER_BYTES);
    unsigned char *t = img + HEADER_BYTES + 4 * (im->nv + 1);
    uint32_t o = 0;
    for (size_t i = 0; i < im->nv; i++) {
        off[i] = o;
        memcpy(t + o, im->tok[i], im->len[i]);
        o += im->len[i];
    }
    off[im->nv] = o;
    if (nm) memcpy(t + pad4(text), m, sizeof *m * nm); /* m is NULL without rules */
    /* check what we wrote with the loader before publishing it */
    struct bpe *b = bpe_load_mem(img, size, err);
    if (!b) {
        free(img);
        return skiff_err_wrap(err, "the converted tokenizer does not check out");
    }
    bpe_free(b);
    struct image image = {img, size};
    int rc = skiff_atomic_write_file(out_path, NULL, fill_image, &image, err);
    free(img);
    return rc;
}

int bpe_import(const char *encoder_json, const char *merges_txt, const char *out_path, skiff_err *err)
{
    struct import im = {0};
    struct merge *m = NULL;
    uint32_t eot = 0, nm = 0;
    int rc = -1;
    if (import_vocab(&im, encoder_json, &eot, err) < 0 || import_merges(&im, merges_txt, &m, &nm, err) < 0 ||
        write_compact(&im, eot, m, nm, out_path, err) < 0)
        goto out;
    rc = 0;
out:
    for (size_t i = 0; im.tok && i < im.nv; i++) free(im.tok[i]);
    free(im.tok);
    free(im.len);
    free(im.tab);
    free(m);
    return rc;
}
