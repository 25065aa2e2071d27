/* Shards, the window order across ranks, the LR schedule, checkpoints. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "policy.h"
#include "scratch.h"

SCRATCH_SUITE(data, "skiff-train-test");

static void write_seq(const char *name, size_t n, uint16_t base)
{
    uint16_t *t = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)((base + i) % 200);
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    skiff_err err;
    cr_assert_eq(data_write_shard(p, t, n, &err), 0, "%s", err.msg);
    free(t);
}

Test(data, ranks_disjoint_and_cover_the_epoch)
{
    write_seq("a.bin", 1001, 0);
    write_seq("b.bin", 501, 50);
    char g[128];
    snprintf(g, sizeof g, "%s/*.bin", dir);
    struct data_loader l;
    skiff_err err;
    cr_assert_eq(data_loader_open(&l, g, 1, 10, 256, 5, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(l.num_windows, 100 + 50);
    /* 3 ranks, B=1, K=1: step s rank r reads window s*3 + r */
    int seen[150] = {0}, in[10], tg[10];
    for (uint64_t w = 0; w < 150; w++) {
        cr_assert_eq(data_loader_batch(&l, w, in, tg, &err), 0);
        for (int t = 0; t < 9; t++)
            cr_assert_eq(tg[t], in[t + 1], "targets are inputs shifted");
        seen[l.perm[w]]++;
    }
    for (int i = 0; i < 150; i++)
        cr_assert_eq(seen[i], 1, "window %d seen %d times", i, seen[i]);
    /* seeded: the same seed gives the same order, another seed another */
    struct data_loader l2, l3;
    data_loader_open(&l2, g, 1, 10, 256, 5, 1, &err);
    data_loader_open(&l3, g, 1, 10, 256, 6, 1, &err);
    int a[10], b[10], c[10];
    data_loader_batch(&l, 7, a, tg, &err);
    data_loader_batch(&l2, 7, b, tg, &err);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    int differ = 0;
    for (uint64_t w = 0; w < 20; w++) {
        data_loader_batch(&l, w, a, tg, &err);
        data_loader_batch(&l3, w, c, tg, &err);
        differ += memcmp(a, c, sizeof a) != 0;
    }
    cr_assert(differ > 0);
    data_loader_close(&l);
    data_loader_close(&l2);
    data_loader_close(&l3);
}

Test(data, bad_shards_are_refused_clearly)
{
    char p[128], g[128];
    snprintf(p, sizeof p, "%s/bad.bin", dir);
    FILE *f = fopen(p, "w");
    fputs("hello", f);
    fclose(f);
    struct data_loader l;
    skiff_err err;
    cr_assert_eq(data_loader_open(&l, p, 1, 4, 256, 1, 1, &err), -1);
    cr_assert(strstr(err.msg, "shorter than the 1024-byte shard header"), "%s", err.msg);
    write_seq("big.bin", 100, 150); /* tokens up to 199 */
    snprintf(g, sizeof g, "%s/big.bin", dir);
    cr_assert_eq(data_loader_open(&l, g, 1, 4, 180, 1, 1, &err), -1);
    cr_assert(strstr(err.msg, "outside the model's vocabulary"), "%s", err.msg);
    snprintf(g, sizeof g, "%s/nothing*.bin", dir);
    cr_assert_eq(data_loader_open(&l, g, 1, 4, 256, 1, 1, &err), -1);
    cr_assert(strstr(err.msg, "no shard matches"), "%s", err.msg);
}

Test(schedule, warmup_then_cosine)
{
    struct train_opts o;
    train_opts_defaults(&o);
    o.lr = 1.0f;
    o.lr_min_frac = 0.1f;
    o.steps = 110;
    o.warmup = 10;
    cr_assert_float_eq(train_lr(&o, 0), 0.1, 1e-6);
    cr_assert_float_eq(train_lr(&o, 9), 1.0, 1e-6);
    cr_assert_float_eq(train_lr(&o, 60), 0.55, 1e-6);
    cr_assert_float_eq(train_lr(&o, 110), 0.1, 1e-6);
    for (int s = 10; s < 110; s++)
        cr_assert(train_lr(&o, s + 1) <= train_lr(&o, s));
}

Test(data, checkpoint_roundtrip_and_refusals)
{
    struct gpt2_config cfg;
    skiff_err err;
    gpt2_config_preset("tiny", &cfg, &err);
    size_t n = gpt2_param_layout(&cfg, NULL, NULL);
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)i, m[i] = 1, v[i] = 2;
    struct train_ckpt c = {.cfg = cfg,
                           .world = 2,
                           .rank = 0,
                           .zero = 0,
                           .step = 7,
                           .data_pos = 99,
                           .num_params = n,
                           .opt_off = 0,
                           .opt_len = n,
                           .params = p,
                           .m = m,
                           .v = v};
    cr_assert_eq(train_ckpt_save(dir, &c, &err), 0, "%s", err.msg);
    float *q = calloc(n, 4), *qm = calloc(n, 4), *qv = calloc(n, 4);
    struct train_ckpt w = c;
    w.params = q;
    w.m = qm;
    w.v = qv;
    w.step = 0;
    cr_assert_eq(train_ckpt_load(dir, &w, &err), 0, "%s", err.msg);
    cr_assert_eq(w.step, 7);
    cr_assert_eq(w.data_pos, 99u);
    cr_assert(memcmp(p, q, n * 4) == 0 && memcmp(v, qv, n * 4) == 0);
    w.world = 3;
    cr_assert_eq(train_ckpt_load(dir, &w, &err), -1);
    cr_assert(strstr(err.msg, "saved with WORLD_SIZE=2, this run has 3"), "%s", err.msg);
    w.world = 2;
    w.cfg.num_layers = 3;
    cr_assert_eq(train_ckpt_load(dir, &w, &err), -1);
    cr_assert(strstr(err.msg, "checkpoint of another model"), "%s", err.msg);
    free(p);
    free(m);
    free(v);
    free(q);
    free(qm);
    free(qv);
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s/.rank-0.ckpt.tmp", dir);
    cr_assert_neq(access(tmp, F_OK), 0, "temporary file left behind");
}

/* Found by tests/fuzz/fuzz_ckpt.c: peek and load believed the header's
 * parameter count and config apart, so a checkpoint of 300 parameters for
 * a 120576-parameter model made `skiff-train compare` read past its buffer
 * (SIGSEGV), and a count beyond the file's end passed peek. */
Test(data, checkpoint_header_must_match_model_and_file)
{
    struct gpt2_config cfg = {64, 256, 256, 2, 4, 64};
    skiff_err err;
    float p[300] = {0};
    struct train_ckpt c = {.cfg = cfg, .world = 1, .rank = 0, .num_params = 300, .params = p};
    cr_assert_eq(train_ckpt_save(dir, &c, &err), 0, "%s", err.msg);
    struct train_ckpt peek = {.rank = 0};
    cr_assert_eq(train_ckpt_peek(dir, &peek, &err), -1, "a 300-parameter checkpoint of a larger model passed");
    cr_assert(strstr(err.msg, "corrupt checkpoint: 300 parameters (the model has 120576,"), "%s", err.msg);

    cfg = (struct gpt2_config){4, 8, 8, 1, 1, 4}; /* 300 parameters */
    c.cfg = cfg;
    cr_assert_eq(train_ckpt_save(dir, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(train_ckpt_peek(dir, &peek, &err), 0, "%s", err.msg);
    char path[128];
    snprintf(path, sizeof path, "%s/rank-0.ckpt", dir);
    cr_assert_eq(truncate(path, 256 + 200 * 4), 0);
    cr_assert_eq(train_ckpt_peek(dir, &peek, &err), -1, "a truncated checkpoint passed peek");
    cr_assert(strstr(err.msg, "corrupt checkpoint"), "%s", err.msg);

    cfg.channels = 1 << 20; /* a layout that would overflow */
    cr_assert_eq(gpt2_config_check(&cfg, &err), -1);
    cr_assert(strstr(err.msg, "beyond the limits"), "%s", err.msg);
}

Test(model, presets_and_layout)
{
    struct gpt2_config cfg;
    skiff_err err;
    cr_assert_eq(gpt2_config_preset("tiny", &cfg, &err), 0);
    size_t sizes[16], offs[16];
    size_t n = gpt2_param_layout(&cfg, sizes, offs);
    cr_assert(n < 1000000, "tiny has %zu params", n);
    cr_assert_eq(offs[GPT2_WPE], sizes[GPT2_WTE]);
    cr_assert_eq(offs[GPT2_LNFB] + sizes[GPT2_LNFB], n);
    cr_assert_eq(gpt2_config_preset("d12", &cfg, &err), 0);
    n = gpt2_param_layout(&cfg, NULL, NULL);
    cr_assert(n > 124000000 && n < 125000000, "d12 has %zu params", n);
    cr_assert_eq(gpt2_config_preset("nope", &cfg, &err), -1);
    cr_assert(strstr(err.msg, "known: tiny"), "%s", err.msg);
    cr_assert(gpt2_param_decays(GPT2_QKVW) && !gpt2_param_decays(GPT2_QKVB) && !gpt2_param_decays(GPT2_LN1W));
}
