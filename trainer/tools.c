/* skiff-train tokenize | sample | decode | export | tokenizer-import | plot |
 * compare. */
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "llmc.h"
#include "ckpt.h"
#include "data.h"
#include "model.h"
#include "opts.h"
#include "tokenizer.h"

/* Usage errors: the message in err, exit status 2. */
#define USAGE(...) (skiff_error(err, 0, __VA_ARGS__), 2)

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
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir) return skiff_error(err, ENAMETOOLONG, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) return skiff_error(err, errno, "mkdir %s", dir);
        *p = '/';
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return skiff_error(err, errno, "mkdir %s", dir);
    return 0;
}

/* ---- tokenize ---------------------------------------------------------------- */

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
        char path[4096];
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

/* ---- sample ------------------------------------------------------------------ */

static uint64_t srng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int load_params(const char *dir, struct train_ckpt *ck, float **out, skiff_err *err)
{
    memset(ck, 0, sizeof *ck);
    if (train_ckpt_peek(dir, ck, err) < 0) return -1;
    float *p = calloc(ck->num_params, sizeof(float));
    if (!p) return skiff_error(err, ENOMEM, "parameters of %s", dir);
    struct train_ckpt want = *ck;
    want.params = p;
    want.m = want.v = NULL;
    if (train_ckpt_load(dir, &want, err) < 0) {
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

/* The weights to sample from: rank 0's file of a skiff checkpoint, or an
 * llm.c checkpoint. */
static int sample_weights(const char *dir, const char *init_from, struct gpt2_config *cfg, float **params,
                          skiff_err *err)
{
    if (init_from) {
        int version;
        if (llmc_peek(init_from, cfg, &version, err) < 0) return -1;
        *params = malloc(gpt2_param_layout(cfg, NULL, NULL) * sizeof(float));
        if (!*params) return skiff_error(err, ENOMEM, "parameters");
        return llmc_load(init_from, cfg, *params, err);
    }
    struct train_ckpt ck;
    if (load_params(dir, &ck, params, err) < 0) return -1;
    *cfg = ck.cfg;
    return 0;
}

/* A model for contexts of up to T tokens that uses params (not a copy). */
static int sample_model(struct gpt2 *m, const struct gpt2_config *cfg, int T, float *params, skiff_err *err)
{
    if (gpt2_create(m, cfg, 1, T, err) < 0) return -1;
    free(m->params);
    m->params = params;
    return 0;
}

static void sample_model_free(struct gpt2 *m)
{
    m->params = NULL; /* borrowed */
    gpt2_destroy(m);
}

int tool_sample(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"ckpt-dir", 1, 0, 'c'},    {"prompt", 1, 0, 'p'},    {"tokens", 1, 0, 'n'},
                                       {"temperature", 1, 0, 't'}, {"seed", 1, 0, 's'},      {"model", 1, 0, 'm'},
                                       {"init-from", 1, 0, 'i'},   {"tokenizer", 1, 0, 'k'}, {0, 0, 0, 0}};
    const char *dir = NULL, *prompt = "", *model = NULL, *init_from = NULL, *tokname = NULL;
    int ntok = 200, seed = 42;
    double temp = 1.0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'c': dir = optarg; break;
        case 'i': init_from = optarg; break;
        case 'p': prompt = optarg; break;
        case 'm': model = optarg; break;
        case 'k': tokname = optarg; break;
        case 'n': rc = train_parse_int("--tokens", optarg, 1, &ntok, err); break;
        case 't': rc = train_parse_double("--temperature", optarg, 0, &temp, err); break;
        case 's': rc = train_parse_int("--seed", optarg, 0, &seed, err); break;
        default: return train_opt_error(c, argv, err), 2;
        }
        if (rc < 0) return 2;
    }
    if (optind < argc) return USAGE("unexpected argument '%s'", argv[optind]);
    if (!dir == !init_from) return USAGE("give one of --ckpt-dir DIR and --init-from FILE.bin");
    if (tokname && !tokenizer_name_ok(tokname)) return USAGE(TOKENIZER_NAME_ERROR, tokname);
    struct gpt2_config cfg;
    float *params = NULL;
    struct tokenizer tok = {0};
    struct gpt2 m = {0};
    int *ctx = NULL, rc = 1, mt = 0; /* mt: the context of the model built so far */
    double *w = NULL;
    uint16_t *ptok = NULL;
    size_t np = 0, pcap = 0;
    if (sample_weights(dir, init_from, &cfg, &params, err) < 0) goto out;
    if (model) {
        struct gpt2_config want;
        if (gpt2_config_preset(model, &want, err) < 0) {
            rc = 2;
            goto out;
        }
        if (memcmp(&want, &cfg, sizeof want)) {
            skiff_error(err, 0, "%s holds another model than --model %s", dir ? dir : init_from, model);
            goto out;
        }
    }
    if (tokenizer_open(&tok, tokname ? tokname : cfg.vocab_size == 256 ? "bytes" : "gpt2", err) < 0) goto out;
    if (tok.vocab != cfg.vocab_size) {
        skiff_error(err, 0,
                    "the %s tokenizer has a vocabulary of %d, the model %d: give the "
                    "--tokenizer its data was made with",
                    tok.name, tok.vocab, cfg.vocab_size);
        goto out;
    }
    int T = cfg.max_seq_len, V = cfg.vocab_size;
    ctx = calloc((size_t)T, sizeof *ctx);
    w = malloc((size_t)V * sizeof *w);
    if (!ctx || !w) {
        skiff_error(err, ENOMEM, "sample");
        goto out;
    }
    if (tokenizer_encode(&tok, prompt, strlen(prompt), &ptok, &np, &pcap, err) < 0) goto out;
    /* the context: EOT, then the prompt (its last T-1 tokens when longer) */
    int n = 0;
    ctx[n++] = tok.eot;
    for (size_t i = np > (size_t)T - 1 ? np - ((size_t)T - 1) : 0; i < np; i++) ctx[n++] = ptok[i];
    fputs(prompt, stdout);
    /* The forward pass costs what its T is: grow the model with the text
     * (64, 128, ... up to the context) instead of always running maxT. */
    uint64_t s = (uint64_t)seed | 1;
    for (int i = 0; i < ntok; i++) {
        if (n > mt) {
            if (mt) sample_model_free(&m);
            for (mt = T < 64 ? T : 64; mt < n;) mt = 2 * mt < T ? 2 * mt : T;
            if (sample_model(&m, &cfg, mt, params, err) < 0) goto out;
        }
        for (int j = n; j < mt; j++) ctx[j] = tok.eot; /* after n: not seen by row n-1 */
        gpt2_forward(&m, ctx, NULL);
        const float *p = m.probs_out + (size_t)(n - 1) * cfg.padded_vocab_size;
        int next = 0;
        if (temp == 0) {
            for (int v = 1; v < V; v++)
                if (p[v] > p[next]) next = v;
        } else {
            /* p^(1/temp), renormalised */
            double tot = 0;
            for (int v = 0; v < V; v++) tot += (w[v] = pow(p[v], 1.0 / temp));
            double u = (srng(&s) >> 11) * 0x1.0p-53 * tot, acc = 0;
            for (next = 0; next < V - 1; next++) {
                acc += w[next];
                if (acc > u) break;
            }
        }
        size_t len;
        const unsigned char *b = tokenizer_token(&tok, next, &len);
        if (next == tok.eot)
            putchar('\n');
        else if (b)
            fwrite(b, 1, len, stdout);
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
            n--;
        }
        ctx[n++] = next;
    }
    putchar('\n');
    rc = 0;
out:
    if (mt) sample_model_free(&m);
    free(params);
    free(ctx);
    free(w);
    free(ptok);
    tokenizer_close(&tok);
    return rc;
}

/* ---- export -------------------------------------------------------------------- */

int tool_export(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"llmc", 1, 0, 'l'}, {"ckpt-dir", 1, 0, 'c'}, {"bf16", 0, 0, 'b'}, {0, 0, 0, 0}};
    const char *out = NULL, *dir = NULL;
    int version = LLMC_VERSION_FP32;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'l')
            out = optarg;
        else if (c == 'c')
            dir = optarg;
        else if (c == 'b')
            version = LLMC_VERSION_BF16;
        else
            return train_opt_error(c, argv, err), 2;
    }
    if (optind < argc) return USAGE("unexpected argument '%s'", argv[optind]);
    if (!out || !dir) return USAGE("--llmc OUT.bin and --ckpt-dir DIR are required");
    struct gpt2_config cfg;
    float *params = NULL;
    int rc = sample_weights(dir, NULL, &cfg, &params, err) < 0 || llmc_save(out, &cfg, params, version, err) < 0;
    free(params);
    if (!rc) {
        char shape[160];
        llmc_shape_str(&cfg, shape, sizeof shape);
        printf("%s: llm.c checkpoint, version %d (%s), %s\n", out, version,
               version == LLMC_VERSION_FP32 ? "fp32" : "bf16", shape);
    }
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

/* ---- plot --------------------------------------------------------------------- */

static int json_num(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    char *end;
    *out = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat);
}

/* gnuplot (Debian gnuplot-nox) draws the PNG: exec'd from an argv array,
 * the script and the data on its stdin, output to a temporary file renamed
 * when gnuplot succeeded. */
int tool_plot(int argc, char **argv, skiff_err *err)
{
    if (argc != 3) return USAGE("want LOG.jsonl and OUT.png");
    const char *log = argv[1], *png = argv[2];
    FILE *f = fopen(log, "re");
    if (!f) return skiff_error(err, errno, "open %s", log), 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", png, (int)getpid());
    if (strchr(tmp, '"') || strchr(tmp, '\n')) {
        fclose(f);
        return USAGE("%s: quotes and newlines are not allowed in the name", png);
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fclose(f);
        return skiff_error(err, errno, "pipe"), 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fclose(f);
        close(pfd[0]);
        close(pfd[1]);
        return skiff_error(err, errno, "fork"), 1;
    }
    if (pid == 0) {
        dup2(pfd[0], 0);
        char prog[] = "gnuplot";
        char *const av[] = {prog, NULL};
        execvp("gnuplot", av);
        _exit(127);
    }
    close(pfd[0]);
    FILE *g = fdopen(pfd[1], "w");
    if (!g) {
        close(pfd[1]);
        fclose(f);
        waitpid(pid, NULL, 0);
        return skiff_error(err, errno, "fdopen"), 1;
    }
    signal(SIGPIPE, SIG_IGN);
    fprintf(g, "set terminal png size 900,540\nset output \"%s\"\n", tmp);
    fprintf(g, "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n"
               "set title 'skiff-train loss'\n");
    char line[4096];
    int nval = 0, ntrain = 0;
    fputs("$train << EOD\n", g);
    while (fgets(line, sizeof line, f)) {
        double s, l;
        if (json_num(line, "step", &s) && json_num(line, "loss", &l)) {
            fprintf(g, "%g %g\n", s, l);
            ntrain++;
        }
    }
    fputs("EOD\n$val << EOD\n", g);
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        double s, l;
        if (json_num(line, "step", &s) && json_num(line, "val_loss", &l)) {
            fprintf(g, "%g %g\n", s, l);
            nval++;
        }
    }
    fputs("EOD\n", g);
    fclose(f);
    if (ntrain == 0)
        fputs("exit status 3\n", g);
    else if (nval)
        fputs("plot $train with lines title 'train', $val with linespoints title 'val'\n", g);
    else
        fputs("plot $train with lines title 'train'\n", g);
    fclose(g);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        unlink(tmp);
        if (ntrain == 0) return skiff_error(err, 0, "%s: no step records with a loss", log), 1;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            return skiff_error(err, 0, "gnuplot not found (install Debian package gnuplot-nox)"), 1;
        return skiff_error(err, 0, "gnuplot failed (status %d)", st), 1;
    }
    if (rename(tmp, png) < 0) {
        int e = errno;
        unlink(tmp);
        return skiff_error(err, e, "rename to %s", png), 1;
    }
    return 0;
}

/* ---- compare ------------------------------------------------------------------ */

int tool_compare(int argc, char **argv, skiff_err *err)
{
    double tol = 0;
    if (argc == 5 && !strcmp(argv[3], "--tol")) {
        if (train_parse_double("--tol", argv[4], 0, &tol, err) < 0) return 2;
    } else if (argc != 3) {
        return USAGE("want CKPT_DIR_A CKPT_DIR_B [--tol X]");
    }
    struct train_ckpt a, b;
    float *pa = NULL, *pb = NULL;
    int rc = 1;
    if (load_params(argv[1], &a, &pa, err) < 0 || load_params(argv[2], &b, &pb, err) < 0) goto out;
    if (memcmp(&a.cfg, &b.cfg, sizeof a.cfg)) {
        skiff_error(err, 0, "%s and %s hold different models", argv[1], argv[2]);
        goto out;
    }
    size_t n = gpt2_param_layout(&a.cfg, NULL, NULL);
    double maxd = 0, maxv = 0;
    size_t at = 0, ndiff = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)pa[i] - pb[i]);
        if (pa[i] != pb[i]) ndiff++;
        if (d > maxd) {
            maxd = d;
            at = i;
        }
        if (fabs(pa[i]) > maxv) maxv = fabs(pa[i]);
    }
    printf("params %zu, differing %zu, max abs diff %.3g (at %zu), max |param| %.3g, steps %d/%d\n", n, ndiff, maxd, at,
           maxv, a.step, b.step);
    if (maxd > tol) {
        skiff_error(err, 0, "parameters differ by %.3g > --tol %g", maxd, tol);
        goto out;
    }
    rc = 0;
out:
    free(pa);
    free(pb);
    return rc;
}
