/* skiff-train sample, export and compare: what is done with a trained
 * model's weights (skiff-train's checkpoints or llm.c's model files). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "policy.h"
#include "llmc.h"
#include "model.h"
#include "opts.h"
#include "tokenizer.h"
#include "tools.h"

/* ---- sample ------------------------------------------------------------------ */

static uint64_t srng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A ZeRO-3 checkpoint: every rank's file holds its shard of the weights
 * (with --tp, of its tensor-parallel rank's part; with --pp, of its
 * stage's ranges); put them together into the llm.c buffer p. */
static int load_sharded(const char *dir, const struct train_ckpt *ck, float *p, skiff_err *err)
{
    /* the shards are laid out as this build lays them out, or not read */
    int tp = ck->tp, pp = ck->pp, dp = ck->world / (tp * pp);
    size_t n = train_zero3_len(&ck->cfg, tp, dp);
    size_t first = pp > 1 ? train_pp_shard_len(&ck->cfg, tp, pp, 0, dp) : n / (size_t)dp; /* rank 0's shard */
    if (ck->num_params != n || ck->opt_len != first)
        return skiff_error(err, 0,
                           "%s: --zero 3 shards that do not match this build's layout (%zu parameters, rank 0's shard "
                           "%zu, on %d ranks, --tp %d, --pp %d; expected %zu, rank 0's shard %zu)",
                           dir, ck->num_params, ck->opt_len, ck->world, tp, ck->pp, n, first);
    size_t nl = tp > 1 ? gpt2_param_layout_tp(&ck->cfg, tp, NULL, NULL) : 0;
    float *shard = malloc(n * sizeof(float)), *local = nl ? calloc(nl, sizeof(float)) : p;
    int rc = shard && local ? 0 : skiff_error(err, ENOMEM, "parameters of %s", dir);
    for (int t = 0; t < tp && rc == 0; t++) {
        for (int i = 0; i < dp * pp && rc == 0; i++) {
            int s = i / dp, d = i % dp; /* stage s's data-parallel rank d */
            struct train_ckpt want = *ck;
            want.rank = train_layout_rank(tp, dp, s, d, t);
            want.opt_len = pp > 1 ? train_pp_shard_len(&ck->cfg, tp, pp, s, dp) : ck->opt_len;
            want.opt_off = (size_t)d * want.opt_len;
            want.params = shard;
            want.m = want.v = NULL;
            rc = train_ckpt_load(dir, &want, err);
            if (rc == 0 && want.step != ck->step)
                rc = skiff_error(err, 0, "%s: rank %d's file is at step %d, rank 0's at %d (an interrupted save)", dir,
                                 want.rank, want.step, ck->step);
            if (rc == 0 && pp > 1)
                train_pp_shard_copy(&ck->cfg, tp, pp, s, dp, d, local, shard, 1);
            else if (rc == 0)
                train_zero3_copy(&ck->cfg, tp, dp, d, local, shard, 1);
        }
        if (rc == 0 && nl) gpt2_tp_copy(&ck->cfg, tp, t, p, local, 0); /* the part into its place */
    }
    free(shard);
    if (nl) free(local);
    return rc;
}

static int load_params(const char *dir, struct train_ckpt *ck, float **out, skiff_err *err)
{
    memset(ck, 0, sizeof *ck);
    if (train_ckpt_peek(dir, ck, err) < 0) return -1;
    if (ck->zero == 3) {
        float *p = calloc(gpt2_param_layout(&ck->cfg, NULL, NULL), sizeof(float));
        if (!p) return skiff_error(err, ENOMEM, "parameters of %s", dir);
        if (load_sharded(dir, ck, p, err) < 0) {
            free(p);
            return -1;
        }
        *out = p;
        return 0;
    }
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
