/* Finite-difference gradient checks for every layer and the whole model.
 * Each layer check uses the scalar L = sum(out * R) (R random, L summed in
 * double), so dL/dout = R; central differences with step h in fp32. The
 * tolerance |analytic - numeric| <= atol + rtol * max(|a|, |n|) covers fp32
 * rounding of the outputs divided by 2h. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/attention.h"
#include "layers/crossentropy.h"
#include "layers/encoder.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/matmul.h"
#include "layers/residual.h"
#include "model.h"

static uint64_t rs = 12345;
static float frand(void) /* uniform in [-1, 1) */
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
static float *rnd(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}
static float *zeros(size_t n)
{
    return calloc(n, sizeof(float));
}
static double dotd(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

typedef double (*lossfn)(void *ctx);

/* Compares grad[i] with central differences of f over x[i] for all i < n. */
static void check(const char *what, float *x, const float *grad, size_t n, lossfn f, void *ctx, float h, double atol,
                  double rtol)
{
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + h;
        double lp = f(ctx);
        x[i] = save - h;
        double lm = f(ctx);
        x[i] = save;
        double num = (lp - lm) / (2.0 * h), an = grad[i];
        double tol = atol + rtol * fmax(fabs(an), fabs(num));
        cr_assert(fabs(an - num) <= tol, "%s[%zu]: analytic %.6g vs numeric %.6g", what, i, an, num);
    }
}

enum { B = 2, T = 5, C = 8, NH = 2, OC = 6 };

/* ---- matmul ---- */
struct mm {
    float *out, *inp, *w, *b, *r;
};
static double mm_loss(void *p)
{
    struct mm *c = p;
    matmul_forward(c->out, c->inp, c->w, c->b, B * T, C, OC);
    return dotd(c->out, c->r, B * T * OC);
}
Test(gradcheck, matmul)
{
    struct mm c = {zeros(B * T * OC), rnd(B * T * C, 1), rnd(OC * C, 1), rnd(OC, 1), rnd(B * T * OC, 1)};
    float *di = zeros(B * T * C), *dw = zeros(OC * C), *db = zeros(OC);
    mm_loss(&c);
    matmul_backward(di, dw, db, c.r, c.inp, c.w, B * T, C, OC, 0);
    check("matmul dinp", c.inp, di, B * T * C, mm_loss, &c, 1e-2f, 1e-3, 1e-3);
    check("matmul dweight", c.w, dw, OC * C, mm_loss, &c, 1e-2f, 1e-3, 1e-3);
    check("matmul dbias", c.b, db, OC, mm_loss, &c, 1e-2f, 1e-3, 1e-3);
}

/* ---- layernorm ---- */
struct ln {
    float *out, *mean, *rstd, *inp, *w, *b, *r;
};
static double ln_loss(void *p)
{
    struct ln *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, B * T, C);
    return dotd(c->out, c->r, B * T * C);
}
Test(gradcheck, layernorm)
{
    struct ln c = {zeros(B * T * C), zeros(B * T), zeros(B * T),     rnd(B * T * C, 1),
                   rnd(C, 1),        rnd(C, 1),    rnd(B * T * C, 1)};
    float *di = zeros(B * T * C), *dw = zeros(C), *db = zeros(C);
    ln_loss(&c);
    layernorm_backward(di, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, B * T, C);
    check("layernorm dinp", c.inp, di, B * T * C, ln_loss, &c, 1e-2f, 2e-3, 1e-2);
    check("layernorm dweight", c.w, dw, C, ln_loss, &c, 1e-2f, 2e-3, 1e-2);
    check("layernorm dbias", c.b, db, C, ln_loss, &c, 1e-2f, 2e-3, 1e-2);
}

/* ---- attention ---- */
struct at {
    float *out, *pre, *att, *inp, *r;
};
static double at_loss(void *p)
{
    struct at *c = p;
    attention_forward(c->out, c->pre, c->att, c->inp, B, T, C, NH);
    return dotd(c->out, c->r, B * T * C);
}
Test(gradcheck, attention)
{
    struct at c = {zeros(B * T * C), zeros(B * NH * T * T), zeros(B * NH * T * T), rnd(B * T * 3 * C, 1),
                   rnd(B * T * C, 1)};
    float *di = zeros(B * T * 3 * C), *dpre = zeros(B * NH * T * T), *datt = zeros(B * NH * T * T);
    at_loss(&c);
    attention_backward(di, dpre, datt, c.r, c.inp, c.att, B, T, C, NH);
    check("attention dinp", c.inp, di, B * T * 3 * C, at_loss, &c, 1e-2f, 2e-3, 1e-2);
}

/* ---- gelu, residual, encoder ---- */
struct ge {
    float *out, *inp, *r;
};
static double ge_loss(void *p)
{
    struct ge *c = p;
    gelu_forward(c->out, c->inp, B * T * C);
    return dotd(c->out, c->r, B * T * C);
}
Test(gradcheck, gelu)
{
    struct ge c = {zeros(B * T * C), rnd(B * T * C, 3), rnd(B * T * C, 1)};
    float *di = zeros(B * T * C);
    ge_loss(&c);
    gelu_backward(di, c.inp, c.r, B * T * C);
    check("gelu dinp", c.inp, di, B * T * C, ge_loss, &c, 1e-2f, 1e-3, 1e-2);
}

struct re {
    float *out, *a, *b, *r;
};
static double re_loss(void *p)
{
    struct re *c = p;
    residual_forward(c->out, c->a, c->b, B * T * C);
    return dotd(c->out, c->r, B * T * C);
}
Test(gradcheck, residual)
{
    struct re c = {zeros(B * T * C), rnd(B * T * C, 1), rnd(B * T * C, 1), rnd(B * T * C, 1)};
    float *da = zeros(B * T * C), *db = zeros(B * T * C);
    re_loss(&c);
    residual_backward(da, db, c.r, B * T * C);
    check("residual da", c.a, da, B * T * C, re_loss, &c, 1e-2f, 1e-3, 1e-3);
    check("residual db", c.b, db, B * T * C, re_loss, &c, 1e-2f, 1e-3, 1e-3);
}

enum { V = 7, VP = 8, MAXT = 6 };
struct en {
    float *out, *wte, *wpe, *r;
    int *inp;
};
static double en_loss(void *p)
{
    struct en *c = p;
    encoder_forward(c->out, c->inp, c->wte, c->wpe, B, T, C);
    return dotd(c->out, c->r, B * T * C);
}
Test(gradcheck, encoder)
{
    int inp[B * T];
    for (int i = 0; i < B * T; i++)
        inp[i] = i % 3; /* repeated tokens: accumulation */
    struct en c = {zeros(B * T * C), rnd(VP * C, 1), rnd(MAXT * C, 1), rnd(B * T * C, 1), inp};
    float *dwte = zeros(VP * C), *dwpe = zeros(MAXT * C);
    en_loss(&c);
    encoder_backward(dwte, dwpe, c.r, inp, B, T, C);
    check("encoder dwte", c.wte, dwte, VP * C, en_loss, &c, 1e-2f, 1e-3, 1e-3);
    check("encoder dwpe", c.wpe, dwpe, MAXT * C, en_loss, &c, 1e-2f, 1e-3, 1e-3);
}

/* ---- softmax + cross-entropy ---- */
struct ce {
    float *logits, *probs, *losses;
    int *tg;
};
static double ce_loss(void *p)
{
    struct ce *c = p;
    softmax_forward(c->probs, c->logits, B * T, V, VP);
    crossentropy_forward(c->losses, c->probs, c->tg, B * T, VP);
    double s = 0;
    for (int i = 0; i < B * T; i++)
        s += c->losses[i];
    return s / (B * T);
}
Test(gradcheck, crossentropy)
{
    int tg[B * T];
    for (int i = 0; i < B * T; i++)
        tg[i] = (i * 5) % V;
    struct ce c = {rnd(B * T * VP, 2), zeros(B * T * VP), zeros(B * T), tg};
    float *dl = zeros(B * T * VP), dlosses[B * T];
    for (int i = 0; i < B * T; i++)
        dlosses[i] = 1.0f / (B * T);
    ce_loss(&c);
    crossentropy_softmax_backward(dl, dlosses, c.probs, tg, B * T, V, VP);
    check("crossentropy dlogits", c.logits, dl, B * T * VP, ce_loss, &c, 1e-2f, 1e-4, 1e-2);
    for (int n = 0; n < B * T; n++)
        cr_assert_eq(dl[n * VP + V], 0.0f, "padded column gets no gradient");
}

/* ---- whole model ---- */
struct whole {
    struct gpt2 *m;
    int *in, *tg;
};
static double whole_loss(void *p)
{
    struct whole *w = p;
    return gpt2_forward(w->m, w->in, w->tg);
}
Test(gradcheck, whole_model)
{
    struct gpt2_config cfg = {
        .max_seq_len = 8, .vocab_size = 11, .padded_vocab_size = 16, .num_layers = 2, .num_heads = 2, .channels = 8};
    struct gpt2 m;
    skiff_err err;
    cr_assert_eq(gpt2_create(&m, &cfg, 2, 6, &err), 0, "%s", err.msg);
    gpt2_init_params(&cfg, m.params, 7);
    /* larger weights than GPT-2's init so every path carries signal */
    for (size_t i = 0; i < m.num_params; i++)
        m.params[i] += frand() * 0.2f;
    int in[12], tg[12];
    for (int i = 0; i < 12; i++) {
        in[i] = (i * 7 + 3) % 11;
        tg[i] = (i * 5 + 1) % 11;
    }
    struct whole w = {&m, in, tg};
    gpt2_forward(&m, in, tg);
    gpt2_zero_grad(&m);
    gpt2_backward(&m, 1.0f);
    float *g = malloc(m.num_params * sizeof(float));
    memcpy(g, m.grads, m.num_params * sizeof(float));
    for (int t = 0; t < GPT2_NUM_PARAM_TENSORS; t++) {
        /* a few elements of every tensor (real vocabulary rows for wte) */
        size_t n = t == GPT2_WTE ? (size_t)cfg.vocab_size * cfg.channels : m.param_sizes[t];
        for (int k = 0; k < 6; k++) {
            size_t i = m.param_offsets[t] + (size_t)((k * 2654435761u) % n);
            char what[64];
            snprintf(what, sizeof what, "model %s", gpt2_param_names[t]);
            check(what, m.params + i, g + i, 1, whole_loss, &w, 1e-2f, 3e-4, 3e-2);
        }
    }
    free(g);
    gpt2_destroy(&m);
}

/* Activation recomputation changes where a block's activations live, not
 * their values: the loss, the gradient and the probabilities are the same
 * bits as without it over two accumulated passes (three layers, so the top,
 * middle and bottom slot cases all run), in less activation memory. */
/* Two models of three layers (B 2, T 8) with the same perturbed weights. */
static const struct gpt2_config cfg3 = {
    .max_seq_len = 8, .vocab_size = 11, .padded_vocab_size = 16, .num_layers = 3, .num_heads = 2, .channels = 8};
static void two_models(struct gpt2 *a, struct gpt2 *b)
{
    skiff_err err;
    cr_assert_eq(gpt2_create(a, &cfg3, 2, 8, &err), 0, "%s", err.msg);
    cr_assert_eq(gpt2_create(b, &cfg3, 2, 8, &err), 0, "%s", err.msg);
    gpt2_init_params(&cfg3, a->params, 3);
    for (size_t i = 0; i < a->num_params; i++)
        a->params[i] += frand() * 0.2f;
    memcpy(b->params, a->params, a->num_params * sizeof(float));
}

Test(gradcheck, recompute_gives_the_same_bits_in_less_memory)
{
    const struct gpt2_config cfg = cfg3;
    struct gpt2 a, b;
    skiff_err err;
    two_models(&a, &b);
    cr_assert_eq(gpt2_recompute(&b, &err), 0, "%s", err.msg);
    cr_assert_lt(b.num_acts, a.num_acts);
    cr_assert_eq(b.num_acts, gpt2_num_acts(&cfg, 2, 8, 1));
    int in[16], tg[16];
    gpt2_zero_grad(&a);
    gpt2_zero_grad(&b);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 16; i++) {
            in[i] = (i * 7 + 3 + pass) % 11;
            tg[i] = (i * 5 + 1 + pass) % 11;
        }
        float la = gpt2_forward(&a, in, tg), lb = gpt2_forward(&b, in, tg);
        cr_assert(memcmp(&la, &lb, sizeof la) == 0, "pass %d: loss %.9g vs %.9g", pass, la, lb);
        gpt2_backward(&a, 0.5f);
        gpt2_backward(&b, 0.5f);
    }
    for (size_t i = 0; i < a.num_params; i++)
        cr_assert(memcmp(&a.grads[i], &b.grads[i], 4) == 0, "grad %zu: %.9g vs %.9g", i, a.grads[i], b.grads[i]);
    cr_assert(memcmp(a.probs_out, b.probs_out, (size_t)2 * 8 * 16 * sizeof(float)) == 0);
    gpt2_destroy(&a);
    gpt2_destroy(&b);
}

/* ZeRO-3's units (model.h): a model whose parameters live in per-unit
 * buffers, handed out by the hooks one unit at a time, gives the same loss
 * and gradient bits as the one buffer, one pass at a time; the hooks are
 * called in the order the device's collectives rely on (each unit gathered
 * before use and released, the gradient of each block final before the
 * block below starts, the root's last). */
struct unit_host {
    struct gpt2_config cfg;
    float *flat, *grads; /* the one buffer's weights; the units' gradients put back */
    float *buf[8], *gbuf[8];
    int live[8], log[64], nlog;
};

static float *uh_gather(void *ctx, int u, int backward)
{
    struct unit_host *h = ctx;
    cr_assert(!h->live[u], "unit %d gathered twice", u);
    h->live[u] = 1;
    h->log[h->nlog++] = (backward ? 100 : 0) + u;
    gpt2_unit_copy(&h->cfg, u, h->flat, h->buf[u], 0);
    return h->buf[u];
}
static void uh_release(void *ctx, int u)
{
    struct unit_host *h = ctx;
    cr_assert(h->live[u], "unit %d released but not gathered", u);
    h->live[u] = 0;
}
static float *uh_grad(void *ctx, int u)
{
    struct unit_host *h = ctx;
    size_t total;
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    gpt2_unit_slices(&h->cfg, u, s, &total);
    for (size_t i = 0; i < total; i++)
        h->gbuf[u][i] = NAN; /* the model must write every element */
    return h->gbuf[u];
}
static void uh_grad_done(void *ctx, int u)
{
    struct unit_host *h = ctx;
    h->log[h->nlog++] = 200 + u;
    gpt2_unit_copy(&h->cfg, u, h->grads, h->gbuf[u], 1);
}

Test(gradcheck, units_give_the_same_bits_as_the_one_buffer)
{
    const struct gpt2_config cfg = cfg3;
    struct gpt2 a, b;
    two_models(&a, &b);
    struct unit_host h = {.cfg = cfg, .flat = a.params, .grads = calloc(a.num_params, sizeof(float))};
    size_t covered = 0;
    for (int u = 0; u < gpt2_num_units(&cfg); u++) {
        size_t total;
        struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
        gpt2_unit_slices(&cfg, u, s, &total);
        covered += total;
        h.buf[u] = malloc(total * sizeof(float));
        h.gbuf[u] = malloc(total * sizeof(float));
    }
    cr_assert_eq(covered, a.num_params, "the units hold every parameter once");
    struct gpt2_units units = {&h, uh_gather, uh_release, uh_grad, uh_grad_done};
    gpt2_use_units(&b, &units);
    int in[16], tg[16];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 16; i++) {
            in[i] = (i * 7 + 3 + pass) % 11;
            tg[i] = (i * 5 + 1 + pass) % 11;
        }
        h.nlog = 0;
        gpt2_zero_grad(&a);
        float la = gpt2_forward(&a, in, tg), lb = gpt2_forward(&b, in, tg);
        cr_assert(memcmp(&la, &lb, sizeof la) == 0, "pass %d: loss %.9g vs %.9g", pass, la, lb);
        gpt2_backward(&a, 0.5f);
        gpt2_backward(&b, 0.5f);
        for (size_t i = 0; i < a.num_params; i++)
            cr_assert(memcmp(&a.grads[i], &h.grads[i], 4) == 0, "pass %d grad %zu: %.9g vs %.9g", pass, i, a.grads[i],
                      h.grads[i]);
        /* forward: root, blocks up; backward: root, then each block's
         * gather followed by its gradient, top down; the root's gradient last */
        static const int want[] = {0, 1, 2, 3, 100, 103, 203, 102, 202, 101, 201, 200};
        cr_assert_eq(h.nlog, 12);
        for (int i = 0; i < 12; i++)
            cr_assert_eq(h.log[i], want[i], "hook call %d: %d, want %d", i, h.log[i], want[i]);
        for (int u = 0; u < 4; u++)
            cr_assert(!h.live[u], "unit %d still gathered after the backward", u);
    }
    for (int u = 0; u < 4; u++) {
        free(h.buf[u]);
        free(h.gbuf[u]);
    }
    free(h.grads);
    gpt2_destroy(&a);
    gpt2_destroy(&b);
}

/* Tensor parallelism (gpt2_create_tp): two ranks, each in its own thread
 * with half the heads and half the MLP, summing over a barrier where
 * Megatron all-reduces, give the whole model's loss, and their gradients put
 * back together (gpt2_tp_copy) are the whole model's; the replicated
 * tensors' gradients are the same bits on both ranks. */
struct tp_sim {
    pthread_barrier_t bar;
    float *bufs[2];
    struct gpt2 m[2];
    const int *in, *tg;
    float loss[2];
};
struct tp_rank {
    struct tp_sim *s;
    int r;
};

static int tp_sim_allreduce(void *ctx, float *buf, size_t n)
{
    struct tp_rank *k = ctx;
    struct tp_sim *s = k->s;
    s->bufs[k->r] = buf;
    float *sum = malloc(n * sizeof(float));
    pthread_barrier_wait(&s->bar);
    for (size_t i = 0; i < n; i++)
        sum[i] = s->bufs[0][i] + s->bufs[1][i]; /* the same order on both */
    pthread_barrier_wait(&s->bar);
    memcpy(buf, sum, n * sizeof(float));
    free(sum);
    return 0;
}

static void *tp_sim_rank(void *arg)
{
    struct tp_rank *k = arg;
    struct gpt2 *m = &k->s->m[k->r];
    gpt2_zero_grad(m);
    k->s->loss[k->r] = gpt2_forward(m, k->s->in, k->s->tg);
    gpt2_backward(m, 1.0f);
    return NULL;
}

Test(gradcheck, tensor_parallel_ranks_equal_the_whole_model)
{
    struct gpt2_config cfg = {
        .max_seq_len = 8, .vocab_size = 11, .padded_vocab_size = 16, .num_layers = 2, .num_heads = 4, .channels = 16};
    skiff_err err;
    cr_assert_neq(gpt2_tp_check(&cfg, 3, &err), 0, "--tp 3 does not divide 4 heads");
    cr_assert(strstr(err.msg, "--tp 3"), "%s", err.msg);
    struct gpt2 whole;
    cr_assert_eq(gpt2_create(&whole, &cfg, 2, 8, &err), 0, "%s", err.msg);
    gpt2_init_params(&cfg, whole.params, 5);
    for (size_t i = 0; i < whole.num_params; i++)
        whole.params[i] += frand() * 0.2f;
    int in[16], tg[16];
    for (int i = 0; i < 16; i++) {
        in[i] = (i * 7 + 3) % 11;
        tg[i] = (i * 5 + 1) % 11;
    }
    gpt2_zero_grad(&whole);
    float lw = gpt2_forward(&whole, in, tg);
    gpt2_backward(&whole, 1.0f);

    struct tp_sim s = {.in = in, .tg = tg};
    struct tp_rank k[2] = {{&s, 0}, {&s, 1}};
    pthread_barrier_init(&s.bar, NULL, 2);
    float *back = calloc(whole.num_params, sizeof(float)), *gback = calloc(whole.num_params, sizeof(float));
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(gpt2_create_tp(&s.m[r], &cfg, 2, 2, 8, &err), 0, "%s", err.msg);
        cr_assert_lt(s.m[r].num_params, whole.num_params);
        cr_assert_eq(s.m[r].num_params, gpt2_param_layout_tp(&cfg, 2, NULL, NULL));
        s.m[r].tp_allreduce = tp_sim_allreduce;
        s.m[r].tp_ctx = &k[r];
        gpt2_tp_copy(&cfg, 2, r, whole.params, s.m[r].params, 1);
        gpt2_tp_copy(&cfg, 2, r, back, s.m[r].params, 0);
    }
    cr_assert(memcmp(back, whole.params, whole.num_params * sizeof(float)) == 0,
              "the two ranks' parts put back together are the whole weights");
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&th[r], NULL, tp_sim_rank, &k[r]);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    cr_assert(memcmp(&s.loss[0], &s.loss[1], sizeof(float)) == 0, "both ranks have the same loss");
    cr_assert_float_eq(s.loss[0], lw, 1e-5f * lw, "loss %.9g vs the whole model's %.9g", s.loss[0], lw);
    for (int r = 0; r < 2; r++)
        gpt2_tp_copy(&cfg, 2, r, gback, s.m[r].grads, 0);
    for (size_t i = 0; i < whole.num_params; i++)
        cr_assert(fabsf(gback[i] - whole.grads[i]) <= 1e-5f + 1e-4f * fabsf(whole.grads[i]), "grad %zu: %.9g vs %.9g",
                  i, gback[i], whole.grads[i]);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++)
        if (!gpt2_tp_sharded(i))
            cr_assert(memcmp(s.m[0].grads + s.m[0].param_offsets[i], s.m[1].grads + s.m[1].param_offsets[i],
                             s.m[0].param_sizes[i] * sizeof(float)) == 0,
                      "replicated tensor %s: the same gradient bits on both ranks", gpt2_param_names[i]);
    for (int r = 0; r < 2; r++)
        gpt2_destroy(&s.m[r]);
    gpt2_destroy(&whole);
    free(back);
    free(gback);
    pthread_barrier_destroy(&s.bar);
}
