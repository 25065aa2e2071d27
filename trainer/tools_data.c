/* skiff-train tokenize, decode and tokenizer-import: text to token shards
 * and back, and GPT-2's vocabulary into the tokenizer's file. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpe.h"
#include "clock.h"
#include "data.h"
#include "fsutil.h"
#include "opts.h"
#include "tokenizer.h"
#include "tools.h"

/* A text to tokenize, whole: any size, and read as a stream, so a pipe
 * (`<(zcat dict.gz)`) works too; common's skiff_read_file reads bounded
 * regular files only. */
static int read_file(const char *path, char **out, size_t *len, skiff_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f) return skiff_error(err, errno, "open %s", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return skiff_error(err, buf ? EIO : ENOMEM, "reading %s", path);
    }
    *out = buf;
    *len = n;
    return 0;
}

/* mkdir -p of the directory part of path ("d/x" -> d; "x" -> nothing). */
static int mkdir_parents(const char *path, skiff_err *err)
{
    char dir[4096];
    if (skiff_fmt_path(dir, sizeof dir, err, "%s", path) < 0) return -1;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    return skiff_mkdir_p(dir, 0755, err);
}

/* ---- tokenize ---------------------------------------------------------------- */

/* The name part of a path: "a/b.txt" -> "b.txt", "a/b/" -> "b". */
static void base_name(const char *path, char *out, size_t len)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/') s--;
    snprintf(out, len, "%.*s", (int)(n - s), path + s);
}

/* --out names a directory (it ends in '/' or is one): the shards go into it,
 * named after what was tokenized: the one input file (without its last
 * extension), or the directory the inputs share ("fortunes" for
 * /usr/share/games/fortunes/{art,science}), or "tokens" when they share
 * none. Anything else is a prefix, as before. */
static int out_prefix(const char *out, char **files, int nfiles, char *prefix, size_t len, skiff_err *err)
{
    struct stat st;
    size_t ol = strlen(out);
    int is_dir = ol && (out[ol - 1] == '/' || (stat(out, &st) == 0 && S_ISDIR(st.st_mode)));
    if (!is_dir) return skiff_fmt_path(prefix, len, err, "%s", out);
    char name[256] = "", dir[4096];
    if (nfiles == 1) {
        base_name(files[0], name, sizeof name);
        char *dot = strrchr(name, '.');
        if (dot && dot != name) *dot = '\0';
    } else {
        /* the directory of the first file, if every file is directly in it */
        const char *slash = strrchr(files[0], '/');
        size_t dl = slash ? (size_t)(slash - files[0]) : 0;
        int shared = 1;
        for (int i = 1; i < nfiles && shared; i++) {
            const char *s2 = strrchr(files[i], '/');
            shared = (s2 ? (size_t)(s2 - files[i]) : 0) == dl && !strncmp(files[i], files[0], dl);
        }
        if (shared && dl > 0) {
            snprintf(dir, sizeof dir, "%.*s", (int)dl, files[0]);
            base_name(dir, name, sizeof name);
        } else if (shared) {
            char cwd[4096];
            if (getcwd(cwd, sizeof cwd)) base_name(cwd, name, sizeof name);
        }
    }
    if (!name[0] || !strcmp(name, "/") || !strcmp(name, ".") || !strcmp(name, ".."))
        snprintf(name, sizeof name, "tokens");
    return skiff_fmt_path(prefix, len, err, "%.*s/%s", (int)(out[ol - 1] == '/' ? ol - 1 : ol), out, name);
}

struct tokbuf {
    uint16_t *t;
    size_t n, cap;
};

static int tb_append(struct tokbuf *b, const uint16_t *t, size_t n, skiff_err *err)
{
    if (b->cap - b->n < n) {
        size_t c = b->cap ? b->cap : 1 << 16;
        while (c - b->n < n) c *= 2;
        uint16_t *p = realloc(b->t, c * sizeof *p);
        if (!p) return skiff_error(err, ENOMEM, "token buffer");
        b->t = p;
        b->cap = c;
    }
    memcpy(b->t + b->n, t, n * sizeof *t);
    b->n += n;
    return 0;
}

static int flush_shards(const char *prefix, const char *split, const uint16_t *t, size_t n, size_t per, skiff_err *err)
{
    int nshards = 0;
    for (size_t off = 0; off < n; off += per) {
        size_t len = n - off < per ? n - off : per;
        char path[4096 + 32]; /* prefix: at most 4095 */
        snprintf(path, sizeof path, "%s_%s_%06d.bin", prefix, split, nshards);
        if (data_write_shard(path, t + off, len, err) < 0) return -1;
        printf("%s: %zu tokens\n", path, len);
        nshards++;
    }
    return 0;
}

/* The documents of one file: the whole file, or the blocks between lines
 * equal to sep. Calls doc() for each non-empty one. */
static int for_each_doc(const char *text, size_t len, const char *sep,
                        int (*doc)(void *ctx, const char *s, size_t n, skiff_err *err), void *ctx, skiff_err *err)
{
    size_t pos = 0, sl = sep ? strlen(sep) : 0;
    while (pos < len) {
        size_t end = len, next = len;
        for (size_t q = pos; sep && q < len;) {
            if (len - q >= sl && !memcmp(text + q, sep, sl) && (q + sl == len || text[q + sl] == '\n')) {
                end = q;
                next = q + sl + (q + sl < len);
                break;
            }
            const char *nl = memchr(text + q, '\n', len - q);
            q = nl ? (size_t)(nl - text) + 1 : len;
        }
        if (end > pos && doc(ctx, text + pos, end - pos, err) < 0) return -1;
        pos = next;
    }
    return 0;
}

struct tokenize_run {
    struct tokenizer tok;
    struct tokbuf all; /* every document, each starting with EOT */
    size_t *starts;    /* where each document starts in all */
    size_t ndoc, cap_doc;
    double encode_s;
};

static int add_doc(void *ctx, const char *s, size_t n, skiff_err *err)
{
    struct tokenize_run *r = ctx;
    if (r->ndoc == r->cap_doc) {
        size_t c = r->cap_doc ? 2 * r->cap_doc : 1024;
        size_t *p = realloc(r->starts, c * sizeof *p);
        if (!p) return skiff_error(err, ENOMEM, "document list");
        r->starts = p;
        r->cap_doc = c;
    }
    r->starts[r->ndoc++] = r->all.n;
    uint16_t eot = (uint16_t)r->tok.eot;
    if (tb_append(&r->all, &eot, 1, err) < 0) return -1;
    double t0 = skiff_now_s();
    int rc = tokenizer_encode(&r->tok, s, n, &r->all.t, &r->all.n, &r->all.cap, err);
    r->encode_s += skiff_now_s() - t0;
    return rc;
}

int tool_tokenize(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"out", 1, 0, 'o'},     {"val-frac", 1, 0, 'v'},  {"shard-tokens", 1, 0, 's'},
                                       {"doc-sep", 1, 0, 'd'}, {"tokenizer", 1, 0, 't'}, {0, 0, 0, 0}};
    const char *prefix = NULL, *sep = NULL, *tokname = "bytes";
    double val_frac = 0.1;
    int per = 100000000;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'o': prefix = optarg; break;
        case 'd': sep = optarg; break;
        case 't': tokname = optarg; break;
        case 'v':
            if (train_parse_double("--val-frac", optarg, 0, &val_frac, err) < 0) return 2;
            if (val_frac > 0.5) return USAGE("--val-frac %s: need 0 <= F <= 0.5", optarg);
            break;
        case 's':
            if (train_parse_int("--shard-tokens", optarg, 2, &per, err) < 0) return 2;
            break;
        default: return train_opt_error(c, argv, err), 2;
        }
    }
    if (!prefix) return USAGE("--out PREFIX is required");
    if (!tokenizer_name_ok(tokname)) return USAGE(TOKENIZER_NAME_ERROR, tokname);
    if (optind >= argc) return USAGE("give at least one text FILE");
    char out_path[4096];
    if (out_prefix(prefix, argv + optind, argc - optind, out_path, sizeof out_path, err) < 0) return 1;
    prefix = out_path;
    struct tokenize_run r = {0};
    struct tokbuf tr = {0}, va = {0};
    int rc = 1;
    if (tokenizer_open(&r.tok, tokname, err) < 0) return 1;
    if (mkdir_parents(prefix, err) < 0) goto out;
    /* Every document starts with EOT, as GPT-2's shards do. */
    for (int i = optind; i < argc; i++) {
        char *text = NULL;
        size_t len = 0;
        if (read_file(argv[i], &text, &len, err) < 0) goto out;
        int fr = for_each_doc(text, len, sep, add_doc, &r, err);
        free(text);
        if (fr < 0) goto out;
    }
    /* Every round(1/F)-th document goes to val (deterministic). With fewer
     * documents than that (one file, say), a document split cannot give
     * both parts: the last F of the tokens goes to val instead. */
    long every = val_frac > 0 ? lround(1.0 / val_frac) : 0;
    int by_tokens = every && r.ndoc < (size_t)every;
    const uint16_t *trp = r.all.t, *vap = NULL;
    size_t trn = r.all.n, van = 0;
    if (by_tokens) {
        size_t nval = (size_t)llround((double)r.all.n * val_frac);
        if (nval >= 1 && r.all.n - nval >= 2) {
            uint16_t eot = (uint16_t)r.tok.eot;
            trn = r.all.n - nval;
            if (tb_append(&va, &eot, 1, err) < 0 || tb_append(&va, r.all.t + trn, nval, err) < 0) goto out;
            vap = va.t;
            van = va.n;
        }
    } else if (every) {
        for (size_t d = 0; d < r.ndoc; d++) {
            size_t s = r.starts[d], e = d + 1 < r.ndoc ? r.starts[d + 1] : r.all.n;
            if (tb_append(d % (size_t)every == 0 ? &va : &tr, r.all.t + s, e - s, err) < 0) goto out;
        }
        trp = tr.t, trn = tr.n, vap = va.t, van = va.n;
    }
    if (trn < 2) {
        skiff_error(err, 0, "the input holds %zu training tokens; give more text", trn);
        goto out;
    }
    if (flush_shards(prefix, "train", trp, trn, (size_t)per, err) < 0) goto out;
    if (van && flush_shards(prefix, "val", vap, van, (size_t)per, err) < 0) goto out;
    printf("%zu documents, %zu train and %zu val tokens (%s tokenizer, vocab %d, EOT = %d)%s\n", r.ndoc, trn, van,
           r.tok.name, r.tok.vocab, r.tok.eot,
           by_tokens && van ? "; split by tokens: fewer documents than a document split needs" : "");
    if (r.tok.bpe && r.encode_s > 0)
        printf("encoded %zu tokens in %.3f s: %.0f tokens/s\n", r.all.n - r.ndoc, r.encode_s,
               (double)(r.all.n - r.ndoc) / r.encode_s);
    rc = 0;
out:
    tokenizer_close(&r.tok);
    free(r.all.t);
    free(r.starts);
    free(tr.t);
    free(va.t);
    return rc;
}

/* ---- decode ---------------------------------------------------------------------- */

int tool_decode(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"tokenizer", 1, 0, 't'}, {0, 0, 0, 0}};
    const char *tokname = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 't')
            tokname = optarg;
        else
            return train_opt_error(c, argv, err), 2;
    }
    if (optind >= argc) return USAGE("give at least one SHARD.bin");
    if (tokname && !tokenizer_name_ok(tokname)) return USAGE(TOKENIZER_NAME_ERROR, tokname);
    int rc = 1;
    struct tokenizer tok = {0};
    for (int i = optind; i < argc; i++) {
        struct data_shard_map sm;
        if (data_shard_map(argv[i], &sm, err) < 0) goto out;
        if (!tok.vocab) {
            /* default: bytes for byte shards, GPT-2 when a token is past 255 */
            const char *name = tokname;
            for (size_t j = 0; !name && j < sm.ntok; j++)
                if (sm.tokens[j] > 255) name = "gpt2";
            if (tokenizer_open(&tok, name ? name : "bytes", err) < 0) {
                data_shard_unmap(&sm);
                goto out;
            }
        }
        for (size_t j = 0; j < sm.ntok; j++) {
            size_t n;
            const unsigned char *s = tokenizer_token(&tok, sm.tokens[j], &n);
            if (!s) {
                skiff_error(err, 0, "%s: token %u at %zu is outside the %s vocabulary of %d", argv[i], sm.tokens[j], j,
                            tok.name, tok.vocab);
                data_shard_unmap(&sm);
                goto out;
            }
            if (sm.tokens[j] == tok.eot)
                fputs("<|endoftext|>", stdout);
            else
                fwrite(s, 1, n, stdout);
        }
        data_shard_unmap(&sm);
    }
    if (fflush(stdout) != 0) {
        skiff_error(err, errno, "write");
        goto out;
    }
    rc = 0;
out:
    tokenizer_close(&tok);
    return rc;
}

/* ---- tokenizer-import -------------------------------------------------------------- */

int tool_tokenizer_import(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"encoder", 1, 0, 'e'}, {"merges", 1, 0, 'm'}, {"out", 1, 0, 'o'}, {0, 0, 0, 0}};
    const char *enc = NULL, *merges = NULL, *out = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'e')
            enc = optarg;
        else if (c == 'm')
            merges = optarg;
        else if (c == 'o')
            out = optarg;
        else
            return train_opt_error(c, argv, err), 2;
    }
    if (optind < argc) return USAGE("unexpected argument '%s'", argv[optind]);
    if (!enc || !merges || !out) return USAGE("--encoder encoder.json, --merges vocab.bpe and --out FILE are required");
    if (mkdir_parents(out, err) < 0 || bpe_import(enc, merges, out, err) < 0) return 1;
    struct bpe *b = bpe_load(out, err);
    if (!b) return 1;
    printf("%s: %d tokens, end-of-text %d\n", out, bpe_vocab_size(b), bpe_eot(b));
    bpe_free(b);
    return 0;
}
