/* skiff-train tokenize | sample | plot. */
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model.h"
#include "train.h"

size_t tok_encode_bytes(const char *text, size_t len, uint16_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i]) out[n++] = (uint8_t)text[i]; /* NUL is EOT: drop it from text */
    return n;
}

/* ---- tokenize ---------------------------------------------------------------- */

struct tokbuf {
    uint16_t *t;
    size_t n, cap;
};

static int tb_reserve(struct tokbuf *b, size_t more, skiff_err *err)
{
    if (b->n + more <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 1 << 16;
    while (nc < b->n + more) nc *= 2;
    uint16_t *p = realloc(b->t, nc * sizeof *p);
    if (!p) return skiff_error(err, ENOMEM, "token buffer");
    b->t = p;
    b->cap = nc;
    return 0;
}

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

static int flush_shards(const char *prefix, const char *split, struct tokbuf *b, size_t per,
                        int *nshards, skiff_err *err)
{
    for (size_t off = 0; off < b->n; off += per) {
        size_t len = b->n - off < per ? b->n - off : per;
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_%06d.bin", prefix, split, *nshards);
        if (data_write_shard(path, b->t + off, len, err) < 0) return -1;
        printf("%s: %zu tokens\n", path, len);
        (*nshards)++;
    }
    return 0;
}

int tool_tokenize(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"out", 1, 0, 'o'}, {"val-frac", 1, 0, 'v'},
                                       {"shard-tokens", 1, 0, 's'}, {"doc-sep", 1, 0, 'd'},
                                       {0, 0, 0, 0}};
    const char *prefix = NULL, *sep = NULL;
    double val_frac = 0.1;
    long per = 100000000;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'o': prefix = optarg; break;
        case 'd': sep = optarg; break;
        case 'v':
            val_frac = strtod(optarg, &end);
            if (*end || val_frac < 0 || val_frac >= 1)
                return skiff_error(err, EINVAL, "--val-frac '%s': need 0 <= F < 1", optarg), 2;
            break;
        case 's':
            per = strtol(optarg, &end, 10);
            if (*end || per < 2 || per > INT32_MAX)
                return skiff_error(err, EINVAL, "--shard-tokens '%s': need 2..2^31-1", optarg), 2;
            break;
        default:
            return skiff_error(err, EINVAL, "tokenize: unknown option '%s'", argv[optind - 1]), 2;
        }
    }
    if (!prefix || optind >= argc)
        return skiff_error(err, EINVAL, "usage: skiff-train tokenize --out PREFIX [--val-frac F] "
                                        "[--shard-tokens N] [--doc-sep LINE] FILE..."), 2;
    /* Documents: each file, or each block between lines equal to --doc-sep
     * (fortune files use "%"). Each document starts with EOT, as GPT-2's
     * shards do. Every 1/val_frac-th document goes to val (deterministic). */
    struct tokbuf tr = {0}, va = {0};
    long ndoc = 0;
    long every = val_frac > 0 ? lround(1.0 / val_frac) : 0;
    int rc = 1;
    for (int i = optind; i < argc; i++) {
        char *text = NULL;
        size_t len = 0;
        if (read_file(argv[i], &text, &len, err) < 0) goto out;
        size_t pos = 0;
        while (pos < len) {
            size_t end = len, next = len;
            if (sep) {
                size_t sl = strlen(sep);
                for (size_t q = pos; q < len;) {
                    if (len - q >= sl && !memcmp(text + q, sep, sl) &&
                        (q + sl == len || text[q + sl] == '\n')) {
                        end = q;
                        next = q + sl + (q + sl < len);
                        break;
                    }
                    const char *nl = memchr(text + q, '\n', len - q);
                    q = nl ? (size_t)(nl - text) + 1 : len;
                }
            }
            if (end > pos) {
                struct tokbuf *b = every && ndoc % every == 0 ? &va : &tr;
                if (tb_reserve(b, end - pos + 1, err) < 0) {
                    free(text);
                    goto out;
                }
                b->t[b->n++] = SKIFF_BYTE_EOT;
                b->n += tok_encode_bytes(text + pos, end - pos, b->t + b->n);
                ndoc++;
            }
            pos = next;
        }
        free(text);
    }
    if (tr.n < 2) {
        skiff_error(err, EINVAL, "tokenize: the input holds %zu training tokens; give more text", tr.n);
        goto out;
    }
    int ns = 0;
    if (flush_shards(prefix, "train", &tr, (size_t)per, &ns, err) < 0) goto out;
    ns = 0;
    if (va.n && flush_shards(prefix, "val", &va, (size_t)per, &ns, err) < 0) goto out;
    printf("%ld documents, %zu train and %zu val tokens (byte tokenizer, vocab 256, EOT = 0)\n",
           ndoc, tr.n, va.n);
    rc = 0;
out:
    free(tr.t);
    free(va.t);
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

int tool_sample(int argc, char **argv, skiff_err *err)
{
    static const struct option lo[] = {{"ckpt-dir", 1, 0, 'c'}, {"prompt", 1, 0, 'p'},
                                       {"tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'},
                                       {"seed", 1, 0, 's'}, {"model", 1, 0, 'm'}, {0, 0, 0, 0}};
    const char *dir = NULL, *prompt = "", *model = NULL;
    long ntok = 200;
    double temp = 1.0;
    uint64_t seed = 42;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'c': dir = optarg; break;
        case 'p': prompt = optarg; break;
        case 'm': model = optarg; break;
        case 'n':
            ntok = strtol(optarg, &end, 10);
            if (*end || ntok < 1) return skiff_error(err, EINVAL, "--tokens '%s'", optarg), 2;
            break;
        case 't':
            temp = strtod(optarg, &end);
            if (*end || !(temp >= 0)) return skiff_error(err, EINVAL, "--temperature '%s'", optarg), 2;
            break;
        case 's': seed = strtoull(optarg, NULL, 10) | 1; break;
        default:
            return skiff_error(err, EINVAL, "sample: unknown option '%s'", argv[optind - 1]), 2;
        }
    }
    if (!dir) return skiff_error(err, EINVAL, "usage: skiff-train sample --ckpt-dir DIR [--prompt TEXT] "
                                              "[--tokens N] [--temperature X] [--seed S]"), 2;
    struct train_ckpt ck = {.rank = 0};
    if (train_ckpt_peek(dir, &ck, err) < 0) return 1;
    if (model) {
        struct gpt2_config want;
        if (gpt2_config_preset(model, &want, err) < 0) return 2;
        if (memcmp(&want, &ck.cfg, sizeof want))
            return skiff_error(err, EINVAL, "%s holds another model than --model %s", dir, model), 1;
    }
    if (ck.cfg.vocab_size != 256)
        return skiff_error(err, EINVAL, "sample decodes the byte tokenizer only (vocab 256); this "
                                        "checkpoint has vocab %d", ck.cfg.vocab_size), 1;
    int T = ck.cfg.max_seq_len;
    struct gpt2 m;
    if (gpt2_create(&m, &ck.cfg, 1, T, err) < 0) return 1;
    float *params = calloc(ck.num_params, sizeof(float));
    int *ctx = calloc((size_t)T, sizeof(int));
    int rc = 1;
    if (!params || !ctx) {
        skiff_error(err, ENOMEM, "sample");
        goto out;
    }
    struct train_ckpt want = ck;
    want.params = params; /* parameters only: m and v stay on disk */
    want.m = want.v = NULL;
    if (train_ckpt_load(dir, &want, err) < 0) goto out;
    memcpy(m.params, params, m.num_params * sizeof(float));
    size_t plen = strlen(prompt);
    int n = 0;
    ctx[n++] = SKIFF_BYTE_EOT;
    fputs(prompt, stdout);
    for (size_t i = 0; i < plen; i++) {
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
            n--;
        }
        ctx[n++] = (uint8_t)prompt[i];
    }
    uint64_t s = seed;
    for (long i = 0; i < ntok; i++) {
        gpt2_forward(&m, ctx, NULL);
        const float *p = m.probs_out + (size_t)(n - 1) * ck.cfg.padded_vocab_size;
        int next = 0;
        if (temp == 0) {
            for (int v = 1; v < 256; v++)
                if (p[v] > p[next]) next = v;
        } else {
            /* p^(1/temp), renormalised */
            double tot = 0, w[256];
            for (int v = 0; v < 256; v++) tot += (w[v] = pow(p[v], 1.0 / temp));
            double u = (srng(&s) >> 11) * 0x1.0p-53 * tot, acc = 0;
            for (next = 0; next < 255; next++) {
                acc += w[next];
                if (acc > u) break;
            }
        }
        putchar(next == SKIFF_BYTE_EOT ? '\n' : next);
        if (n == T) {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
            n--;
        }
        ctx[n++] = next;
    }
    putchar('\n');
    rc = 0;
out:
    free(params);
    free(ctx);
    gpt2_destroy(&m);
    return rc;
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
    if (argc != 3)
        return skiff_error(err, EINVAL, "usage: skiff-train plot LOG.jsonl OUT.png"), 2;
    const char *log = argv[1], *png = argv[2];
    FILE *f = fopen(log, "re");
    if (!f) return skiff_error(err, errno, "open %s", log), 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", png, (int)getpid());
    if (strchr(tmp, '"') || strchr(tmp, '\n')) {
        fclose(f);
        return skiff_error(err, EINVAL, "%s: quotes and newlines are not allowed in the name", png), 2;
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
        if (ntrain == 0) return skiff_error(err, EINVAL, "%s: no step records with a loss", log), 1;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            return skiff_error(err, ENOENT, "plot: gnuplot not found (install Debian package "
                                            "gnuplot-nox)"), 1;
        return skiff_error(err, 0, "plot: gnuplot failed (status %d)", st), 1;
    }
    if (rename(tmp, png) < 0) {
        int e = errno;
        unlink(tmp);
        return skiff_error(err, e, "rename to %s", png), 1;
    }
    return 0;
}

/* ---- compare ------------------------------------------------------------------ */

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

int tool_compare(int argc, char **argv, skiff_err *err)
{
    double tol = 0;
    if (argc == 5 && !strcmp(argv[3], "--tol")) {
        char *end;
        tol = strtod(argv[4], &end);
        if (*end || !(tol >= 0)) return skiff_error(err, EINVAL, "--tol '%s'", argv[4]), 2;
    } else if (argc != 3) {
        return skiff_error(err, EINVAL, "usage: skiff-train compare CKPT_DIR_A CKPT_DIR_B [--tol X]"), 2;
    }
    struct train_ckpt a, b;
    float *pa = NULL, *pb = NULL;
    int rc = 1;
    if (load_params(argv[1], &a, &pa, err) < 0 || load_params(argv[2], &b, &pb, err) < 0) goto out;
    if (memcmp(&a.cfg, &b.cfg, sizeof a.cfg)) {
        skiff_error(err, EINVAL, "%s and %s hold different models", argv[1], argv[2]);
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
    printf("params %zu, differing %zu, max abs diff %.3g (at %zu), max |param| %.3g, steps %d/%d\n",
           n, ndiff, maxd, at, maxv, a.step, b.step);
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
