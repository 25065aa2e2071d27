/* GPT-2 on the CPU: configuration, parameter layout, forward and backward.
 * The layer kernels live in layers/ (*.h) (one header per layer style). */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "layers/attention.h"
#include "layers/crossentropy.h"
#include "layers/encoder.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/matmul.h"
#include "layers/residual.h"

const char *const gpt2_param_names[GPT2_NUM_PARAM_TENSORS] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                                              "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                              "fcprojw",  "fcprojb",  "lnfw", "lnfb"};

static const struct {
    const char *name;
    struct gpt2_config cfg;
} presets[] = {
    /*          maxT  V      Vp     L   NH  C */
    {"tiny", {64, 256, 256, 2, 4, 64}},      {"tiny-gpt2", {64, 50257, 50304, 2, 4, 64}},
    {"mini", {256, 256, 256, 4, 4, 128}},    {"small", {512, 256, 256, 6, 6, 384}},
    {"d6", {1024, 50257, 50304, 6, 6, 384}}, {"d12", {1024, 50257, 50304, 12, 12, 768}},
};

const char *gpt2_preset_names(void) { return "tiny tiny-gpt2 mini small d6 d12"; }

int gpt2_config_preset(const char *name, struct gpt2_config *cfg, skiff_err *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (!strcmp(name, presets[i].name)) {
            *cfg = presets[i].cfg;
            return 0;
        }
    }
    return skiff_error(err, 0, "unknown model '%s' (known: %s)", name, gpt2_preset_names());
}

int gpt2_config_check(const struct gpt2_config *c, skiff_err *err)
{
    if (c->max_seq_len <= 0 || c->vocab_size <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->channels <= 0)
        return skiff_error(err, 0, "model config: every size must be positive");
    /* far above any GPT-2 (or GPT-3: C 12288, L 96), and low enough that
     * gpt2_param_layout cannot overflow (every tensor < 2^47 floats): a
     * checkpoint header is read with this check */
    if (c->max_seq_len > (1 << 20) || c->padded_vocab_size > (1 << 24) || c->num_layers > (1 << 12) ||
        c->channels > (1 << 16))
        return skiff_error(err, 0,
                           "model config: T %d, Vp %d, L %d or C %d is beyond the limits "
                           "(T <= 2^20, Vp <= 2^24, L <= 2^12, C <= 2^16)",
                           c->max_seq_len, c->padded_vocab_size, c->num_layers, c->channels);
    if (c->channels % c->num_heads)
        return skiff_error(err, 0, "model config: channels %d not divisible by heads %d", c->channels, c->num_heads);
    if (c->padded_vocab_size < c->vocab_size)
        return skiff_error(err, 0, "model config: padded vocab %d < vocab %d", c->padded_vocab_size, c->vocab_size);
    return 0;
}

size_t gpt2_param_layout_tp(const struct gpt2_config *cfg, int tp, size_t sizes[GPT2_NUM_PARAM_TENSORS],
                            size_t offsets[GPT2_NUM_PARAM_TENSORS])
{
    size_t Vp = cfg->padded_vocab_size, C = cfg->channels, L = cfg->num_layers;
    size_t maxT = cfg->max_seq_len, Cl = C / (size_t)tp, F = 4 * C / (size_t)tp;
    size_t s[GPT2_NUM_PARAM_TENSORS] = {Vp * C,     maxT * C, L * C, L * C, L * 3 * Cl * C, L * 3 * Cl,
                                        L * C * Cl, L * C,    L * C, L * C, L * F * C,      L * F,
                                        L * C * F,  L * C,    C,     C};
    size_t total = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        if (sizes) sizes[i] = s[i];
        if (offsets) offsets[i] = total;
        total += s[i];
    }
    return total;
}

size_t gpt2_param_layout(const struct gpt2_config *cfg, size_t sizes[GPT2_NUM_PARAM_TENSORS],
                         size_t offsets[GPT2_NUM_PARAM_TENSORS])
{
    return gpt2_param_layout_tp(cfg, 1, sizes, offsets);
}

int gpt2_tp_sharded(int i)
{
    return i == GPT2_QKVW || i == GPT2_QKVB || i == GPT2_ATTPROJW || i == GPT2_FCW || i == GPT2_FCB ||
           i == GPT2_FCPROJW;
}

int gpt2_tp_check(const struct gpt2_config *cfg, int tp, skiff_err *err)
{
    if (tp < 1 || cfg->num_heads % tp || (4 * cfg->channels) % tp)
        return skiff_error(err, 0,
                           "--tp %d: must divide the model's heads (%d) and 4*C (%d), as each rank takes "
                           "whole heads and an equal share of the MLP",
                           tp, cfg->num_heads, 4 * cfg->channels);
    return 0;
}

/* Copies `rows` rows of `len` floats with strides sf (full) and sl (local). */
static void copy_rows(float *full, size_t sf, float *local, size_t sl, size_t rows, size_t len, int to_local)
{
    for (size_t r = 0; r < rows; r++) {
        float *f = full + r * sf, *l = local + r * sl;
        memcpy(to_local ? l : f, to_local ? f : l, len * sizeof(float));
    }
}

void gpt2_tp_copy(const struct gpt2_config *cfg, int tp, int rank, float *full, float *local, int to_local)
{
    size_t fs[GPT2_NUM_PARAM_TENSORS], fo[GPT2_NUM_PARAM_TENSORS], ls[GPT2_NUM_PARAM_TENSORS],
        lo[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_layout(cfg, fs, fo);
    gpt2_param_layout_tp(cfg, tp, ls, lo);
    size_t C = cfg->channels, L = cfg->num_layers, Cl = C / (size_t)tp, F = 4 * C / (size_t)tp, r = (size_t)rank;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        float *f = full + fo[i], *l = local + lo[i];
        switch (i) {
        case GPT2_QKVW: /* per layer and per q/k/v: this rank's heads' rows */
        case GPT2_QKVB: {
            size_t w = i == GPT2_QKVW ? C : 1;
            for (size_t k = 0; k < 3 * L; k++)
                copy_rows(f + (k * C + r * Cl) * w, 0, l + k * Cl * w, 0, 1, Cl * w, to_local);
            break;
        }
        case GPT2_FCW: /* per layer: this rank's rows */
        case GPT2_FCB: {
            size_t w = i == GPT2_FCW ? C : 1;
            copy_rows(f + r * F * w, 4 * C * w, l, F * w, L, F * w, to_local);
            break;
        }
        case GPT2_ATTPROJW: /* every output row: this rank's input columns */
            copy_rows(f + r * Cl, C, l, Cl, L * C, Cl, to_local);
            break;
        case GPT2_FCPROJW: copy_rows(f + r * F, 4 * C, l, F, L * C, F, to_local); break;
        default: copy_rows(f, 0, l, 0, 1, fs[i], to_local); break;
        }
    }
}

int gpt2_param_decays(int i)
{
    return i == GPT2_WTE || i == GPT2_WPE || i == GPT2_QKVW || i == GPT2_ATTPROJW || i == GPT2_FCW || i == GPT2_FCPROJW;
}

void gpt2_decay_mask(const struct gpt2_config *cfg, float *mask) { gpt2_decay_mask_tp(cfg, 1, mask); }

void gpt2_decay_mask_tp(const struct gpt2_config *cfg, int tp, float *mask)
{
    size_t sizes[GPT2_NUM_PARAM_TENSORS], offs[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_layout_tp(cfg, tp, sizes, offs);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++)
        for (size_t j = 0; j < sizes[i]; j++) mask[offs[i] + j] = gpt2_param_decays(i) ? 1.0f : 0.0f;
}

int gpt2_num_units(const struct gpt2_config *cfg) { return cfg->num_layers + 1; }

int gpt2_unit_slices(const struct gpt2_config *cfg, int u, struct gpt2_slice s[GPT2_UNIT_MAX_SLICES], size_t *total)
{
    return gpt2_unit_slices_tp(cfg, 1, u, s, total);
}

int gpt2_unit_slices_tp(const struct gpt2_config *cfg, int tp, int u, struct gpt2_slice s[GPT2_UNIT_MAX_SLICES],
                        size_t *total)
{
    static const int outer[] = {GPT2_WTE, GPT2_WPE, GPT2_LNFW, GPT2_LNFB};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], offs[GPT2_NUM_PARAM_TENSORS], L = (size_t)cfg->num_layers;
    gpt2_param_layout_tp(cfg, tp, sizes, offs);
    int n = 0;
    *total = 0;
    if (u == 0) {
        for (int i = 0; i < 4; i++) s[n++] = (struct gpt2_slice){outer[i], offs[outer[i]], sizes[outer[i]]};
    } else {
        for (int i = GPT2_LN1W; i <= GPT2_FCPROJB; i++)
            s[n++] = (struct gpt2_slice){i, offs[i] + (size_t)(u - 1) * (sizes[i] / L), sizes[i] / L};
    }
    for (int i = 0; i < n; i++) *total += s[i].len;
    return n;
}

void gpt2_unit_copy(const struct gpt2_config *cfg, int u, float *flat, float *unit, int to_flat)
{
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    size_t total;
    int n = gpt2_unit_slices(cfg, u, s, &total);
    for (int i = 0; i < n; i++) {
        float *f = flat + s[i].flat_off;
        memcpy(to_flat ? f : unit, to_flat ? unit : f, s[i].len * sizeof(float));
        unit += s[i].len;
    }
}

/* splitmix64: small, good enough for initialisation, and the same on every
 * platform (unlike rand()). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return ((rng_next(s) >> 11) + 0.5) * 0x1.0p-53; }

static void fill_normal(float *p, size_t n, float std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = rng_uniform(s), u2 = rng_uniform(s);
        double r = sqrt(-2.0 * log(u1));
        p[i] = (float)(r * cos(2 * M_PI * u2) * std);
        if (i + 1 < n) p[i + 1] = (float)(r * sin(2 * M_PI * u2) * std);
    }
}

void gpt2_init_params(const struct gpt2_config *cfg, float *params, uint64_t seed)
{
    size_t sizes[GPT2_NUM_PARAM_TENSORS], offs[GPT2_NUM_PARAM_TENSORS];
    size_t total = gpt2_param_layout(cfg, sizes, offs);
    memset(params, 0, total * sizeof(float));
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    float resid_std = 0.02f / sqrtf(2.0f * cfg->num_layers);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        float *p = params + offs[i];
        switch (i) {
        case GPT2_WTE: /* real rows only: padded rows stay 0 and never get gradient */
            fill_normal(p, (size_t)cfg->vocab_size * cfg->channels, 0.02f, &s);
            break;
        case GPT2_WPE:
        case GPT2_QKVW:
        case GPT2_FCW: fill_normal(p, sizes[i], 0.02f, &s); break;
        case GPT2_ATTPROJW:
        case GPT2_FCPROJW: fill_normal(p, sizes[i], resid_std, &s); break;
        case GPT2_LN1W:
        case GPT2_LN2W:
        case GPT2_LNFW:
            for (size_t j = 0; j < sizes[i]; j++) p[j] = 1.0f;
            break;
        default: /* biases and LayerNorm shifts */ break;
        }
    }
}

/* ---- activations --------------------------------------------------------- */

enum {
    A_ENCODED,
    A_LN1,
    A_LN1_MEAN,
    A_LN1_RSTD,
    A_QKV,
    A_ATTY,
    A_PREATT,
    A_ATT,
    A_ATTPROJ,
    A_RESIDUAL2,
    A_LN2,
    A_LN2_MEAN,
    A_LN2_RSTD,
    A_FCH,
    A_FCH_GELU,
    A_FCPROJ,
    A_RESIDUAL3,
    A_LNF,
    A_LNF_MEAN,
    A_LNF_RSTD,
    A_LOGITS,
    A_PROBS,
    A_LOSSES,
    A_NUM
};

struct acts {
    float *p[A_NUM];
};

/* The activations of a (B,T) pass. The tensors of one block (LN1 up to
 * FCPROJ, contiguous) have one slot per layer, or with recompute one slot
 * that every layer reuses: the backward recomputes a block's forward from its
 * input (the residual stream, RESIDUAL3 of the layer below, kept for every
 * layer) just before differentiating it. */
static void act_sizes(const struct gpt2_config *c, int tp, int B, int T, int recompute, int lo, int hi, size_t s[A_NUM])
{
    /* a pipeline stage (gpt2_set_stage) keeps its own blocks [lo, hi) and
     * the head's tensors only when it is the last */
    size_t head = hi == c->num_layers;
    size_t L = recompute ? 1 : (size_t)(hi - lo), C = c->channels, NH = c->num_heads / (size_t)tp,
           Vp = head * (size_t)c->padded_vocab_size, Cl = C / (size_t)tp;
    size_t BT = (size_t)B * T;
    s[A_ENCODED] = BT * C;
    s[A_LN1] = L * BT * C;
    s[A_LN1_MEAN] = L * BT;
    s[A_LN1_RSTD] = L * BT;
    s[A_QKV] = L * BT * 3 * Cl;
    s[A_ATTY] = L * BT * Cl;
    s[A_PREATT] = L * B * NH * T * T;
    s[A_ATT] = L * B * NH * T * T;
    s[A_ATTPROJ] = L * BT * C;
    s[A_RESIDUAL2] = L * BT * C;
    s[A_LN2] = L * BT * C;
    s[A_LN2_MEAN] = L * BT;
    s[A_LN2_RSTD] = L * BT;
    s[A_FCH] = L * BT * 4 * Cl;
    s[A_FCH_GELU] = L * BT * 4 * Cl;
    s[A_FCPROJ] = L * BT * C;
    s[A_RESIDUAL3] = (size_t)(hi - lo) * BT * C;
    s[A_LNF] = head * BT * C;
    s[A_LNF_MEAN] = head * BT;
    s[A_LNF_RSTD] = head * BT;
    s[A_LOGITS] = BT * Vp;
    s[A_PROBS] = BT * Vp;
    s[A_LOSSES] = head * BT;
}

static void act_views(const struct gpt2 *m, float *base, struct acts *a)
{
    size_t s[A_NUM];
    act_sizes(&m->cfg, m->tp, m->B, m->T, m->recompute, m->layer_lo, m->layer_hi, s);
    for (int i = 0; i < A_NUM; i++) {
        a->p[i] = base;
        base += s[i];
    }
}

size_t gpt2_num_acts(const struct gpt2_config *cfg, int B, int T, int recompute)
{
    return gpt2_num_acts_tp(cfg, 1, B, T, recompute);
}

size_t gpt2_num_acts_tp(const struct gpt2_config *cfg, int tp, int B, int T, int recompute)
{
    size_t s[A_NUM], n = 0;
    act_sizes(cfg, tp, B, T, recompute, 0, cfg->num_layers, s);
    for (int i = 0; i < A_NUM; i++) n += s[i];
    return n;
}

int gpt2_create(struct gpt2 *m, const struct gpt2_config *cfg, int B, int T, skiff_err *err)
{
    return gpt2_create_tp(m, cfg, 1, B, T, err);
}

int gpt2_create_tp(struct gpt2 *m, const struct gpt2_config *cfg, int tp, int B, int T, skiff_err *err)
{
    memset(m, 0, sizeof *m);
    if (gpt2_config_check(cfg, err) < 0 || gpt2_tp_check(cfg, tp, err) < 0) return -1;
    if (B <= 0 || T <= 0 || T > cfg->max_seq_len)
        return skiff_error(err, 0, "batch %d x seq %d: need B >= 1 and 1 <= T <= %d", B, T, cfg->max_seq_len);
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->tp = tp;
    m->num_params = gpt2_param_layout_tp(cfg, tp, m->param_sizes, m->param_offsets);
    m->num_held = m->num_params;
    memcpy(m->held_sizes, m->param_sizes, sizeof m->held_sizes);
    memcpy(m->held_offsets, m->param_offsets, sizeof m->held_offsets);
    m->layer_lo = 0;
    m->layer_hi = cfg->num_layers;
    m->num_acts = gpt2_num_acts_tp(cfg, tp, B, T, 0);
    m->params = calloc(m->num_params, sizeof(float));
    m->grads = calloc(m->num_params, sizeof(float));
    m->acts = calloc(m->num_acts, sizeof(float));
    m->dacts = calloc(m->num_acts, sizeof(float));
    if (!m->params || !m->grads || !m->acts || !m->dacts) {
        gpt2_destroy(m);
        return skiff_error(err, ENOMEM, "allocating model (%zu params, %zu activations)", m->num_params, m->num_acts);
    }
    if (gemm_reserve(err) < 0) {
        gpt2_destroy(m);
        return -1;
    }
    struct acts a;
    act_views(m, m->acts, &a);
    m->probs_out = a.p[A_PROBS];
    m->mean_loss = -1.0f;
    return 0;
}

/* Reallocates the activations for m's recompute and stage settings. */
static int realloc_acts(struct gpt2 *m, int recompute, skiff_err *err)
{
    size_t s[A_NUM], n = 0;
    act_sizes(&m->cfg, m->tp, m->B, m->T, recompute, m->layer_lo, m->layer_hi, s);
    for (int i = 0; i < A_NUM; i++) n += s[i];
    float *a = calloc(n, sizeof(float)), *d = calloc(n, sizeof(float));
    if (!a || !d) {
        free(a);
        free(d);
        return skiff_error(err, ENOMEM, "allocating activations (%zu floats)", n);
    }
    free(m->acts);
    free(m->dacts);
    m->acts = a;
    m->dacts = d;
    m->num_acts = n;
    m->recompute = recompute;
    struct acts v;
    act_views(m, m->acts, &v);
    m->probs_out = v.p[A_PROBS];
    return 0;
}

int gpt2_recompute(struct gpt2 *m, skiff_err *err) { return m->recompute ? 0 : realloc_acts(m, 1, err); }

int gpt2_set_stage(struct gpt2 *m, int lo, int hi, skiff_err *err)
{
    if (lo < 0 || hi <= lo || hi > m->cfg.num_layers)
        return skiff_error(err, 0, "pipeline stage: blocks [%d, %d) of %d", lo, hi, m->cfg.num_layers);
    int L = m->cfg.num_layers;
    if (m->units || m->num_held != m->num_params)
        return skiff_error(err, 0, "pipeline stage: the model already holds only part of its parameters");
    /* the stage's tensors only, in pipeline.c's range order (policy.h,
     * train_stage_ranges), so its gradient is reduced as one buffer */
    size_t sizes[GPT2_NUM_PARAM_TENSORS] = {0}, offs[GPT2_NUM_PARAM_TENSORS] = {0}, n = 0;
    int order[GPT2_NUM_PARAM_TENSORS + 1], no = 0;
    if (lo == 0) {
        order[no++] = GPT2_WTE;
        order[no++] = GPT2_WPE;
    }
    for (int i = GPT2_LN1W; i <= GPT2_FCPROJB; i++) order[no++] = i;
    if (hi == L) {
        order[no++] = GPT2_LNFW;
        order[no++] = GPT2_LNFB;
        if (lo > 0) order[no++] = GPT2_WTE;
    }
    for (int k = 0; k < no; k++) {
        int i = order[k];
        int blk = i >= GPT2_LN1W && i <= GPT2_FCPROJB;
        sizes[i] = blk ? m->param_sizes[i] / (size_t)L * (size_t)(hi - lo) : m->param_sizes[i];
        offs[i] = n;
        n += sizes[i];
    }
    float *p = malloc(n * sizeof(float)), *g = calloc(n, sizeof(float));
    if (!p || !g) {
        free(p);
        free(g);
        return skiff_error(err, ENOMEM, "pipeline stage parameters and gradients (%zu floats each)", n);
    }
    for (int k = 0; k < no; k++) { /* the values, from the whole buffer */
        int i = order[k];
        size_t from = m->param_offsets[i];
        if (i >= GPT2_LN1W && i <= GPT2_FCPROJB) from += (size_t)lo * (m->param_sizes[i] / (size_t)L);
        memcpy(p + offs[i], m->params + from, sizes[i] * sizeof(float));
    }
    free(m->params);
    free(m->grads);
    m->params = p;
    m->grads = g;
    m->num_held = n;
    memcpy(m->held_sizes, sizes, sizeof sizes);
    memcpy(m->held_offsets, offs, sizeof offs);
    m->layer_lo = lo;
    m->layer_hi = hi;
    return realloc_acts(m, m->recompute, err);
}

float *gpt2_stage_in(struct gpt2 *m)
{
    struct acts a;
    act_views(m, m->acts, &a);
    return a.p[A_ENCODED];
}

float *gpt2_stage_out(struct gpt2 *m)
{
    struct acts a;
    act_views(m, m->acts, &a);
    return a.p[A_RESIDUAL3] + (size_t)(m->layer_hi - m->layer_lo - 1) * m->B * m->T * m->cfg.channels;
}

float *gpt2_stage_din(struct gpt2 *m)
{
    struct acts d;
    act_views(m, m->dacts, &d);
    return d.p[A_ENCODED];
}

void gpt2_destroy(struct gpt2 *m)
{
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->dacts);
    m->params = m->grads = m->acts = m->dacts = NULL;
}

/* memset on all threads: one core alone does not saturate the memory bus. */
static void zero_floats(float *p, size_t n)
{
    const size_t chunk = (size_t)1 << 18;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n; c += chunk) memset(p + c, 0, (n - c < chunk ? n - c : chunk) * sizeof(float));
}

void gpt2_zero_grad(struct gpt2 *m) { m->grads_cleared = 1; }

void gpt2_use_units(struct gpt2 *m, const struct gpt2_units *u)
{
    free(m->params);
    free(m->grads);
    m->params = m->grads = NULL;
    m->units = u;
}

/* Where unit u's tensors are (t[i] for its tensors i; a block's: layer
 * u-1's slice): in flat (m->params or m->grads, in the held layout: a
 * pipeline stage's tensors only, the others NULL), or back to back in
 * unit. */
static void unit_view(const struct gpt2 *m, int u, float *flat, float *unit, float *t[GPT2_NUM_PARAM_TENSORS])
{
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    size_t total, L = (size_t)m->cfg.num_layers;
    int n = gpt2_unit_slices_tp(&m->cfg, m->tp, u, s, &total);
    for (int i = 0; i < n; i++) {
        int k = s[i].tensor;
        if (unit) {
            t[k] = unit;
            unit += s[i].len;
        } else { /* the held layout, which says where layer u-1's slice is (from layer_lo on) */
            t[k] = m->held_sizes[k]
                       ? flat + m->held_offsets[k] + (u ? (size_t)(u - 1 - m->layer_lo) * (m->param_sizes[k] / L) : 0)
                       : NULL;
        }
    }
}

/* Unit u's parameters for this pass (gathered under ZeRO-3). */
static void params_of(struct gpt2 *m, int u, int backward, float *t[GPT2_NUM_PARAM_TENSORS])
{
    float *unit = m->units ? m->units->gather(m->units->ctx, u, backward) : NULL;
    unit_view(m, u, m->params, unit, t);
}

static void release(struct gpt2 *m, int u)
{
    if (m->units) m->units->release(m->units->ctx, u);
}

/* Unit u's gradients; under ZeRO-3 a fresh buffer whose tensors that the
 * backward only adds to (LayerNorms, wpe) start from zero. */
static void grads_of(struct gpt2 *m, int u, float *t[GPT2_NUM_PARAM_TENSORS])
{
    float *unit = m->units ? m->units->grad(m->units->ctx, u) : NULL;
    unit_view(m, u, m->grads, unit, t);
    if (!unit) return;
    static const int added[] = {GPT2_WPE, GPT2_LN1W, GPT2_LN1B, GPT2_LN2W, GPT2_LN2B, GPT2_LNFW, GPT2_LNFB};
    struct gpt2_slice s[GPT2_UNIT_MAX_SLICES];
    size_t total;
    int n = gpt2_unit_slices_tp(&m->cfg, m->tp, u, s, &total);
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof added / sizeof added[0]; k++)
            if (s[i].tensor == added[k]) memset(t[s[i].tensor], 0, s[i].len * sizeof(float));
}

static void grad_done(struct gpt2 *m, int u)
{
    if (m->units) m->units->grad_done(m->units->ctx, u);
}

/* Megatron's sum over the tensor-parallel ranks (a no-op with one). */
static void tp_sum(struct gpt2 *m, float *buf, size_t n)
{
    if (m->tp > 1) m->tp_allreduce(m->tp_ctx, buf, n);
}

/* A row-parallel layer: out = inp @ weight^T summed over the ranks, then the
 * (replicated) bias, added once after the sum as Megatron does. */
static void row_parallel_forward(struct gpt2 *m, float *out, const float *inp, const float *weight, const float *bias,
                                 int N, int C, int OC)
{
    if (m->tp == 1) {
        matmul_forward(out, inp, weight, bias, N, C, OC);
        return;
    }
    matmul_forward(out, inp, weight, NULL, N, C, OC);
    tp_sum(m, out, (size_t)N * OC);
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

/* Transformer block l's forward, from its input (the embeddings or the
 * residual stream of block l-1) to RESIDUAL3 of l. With tensor parallelism
 * the attention runs this rank's heads (Cl = C/tp channels of Q, K, V) and
 * the MLP its F = 4C/tp hidden units; the two row-parallel outputs are
 * summed over the ranks, so the residual stream is whole on every rank. */
static void block_forward(struct gpt2 *m, const struct acts *a, int l, float *const w[GPT2_NUM_PARAM_TENSORS])
{
    int B = m->B, T = m->T, C = m->cfg.channels, BT = B * T;
    int Cl = C / m->tp, NH = m->cfg.num_heads / m->tp, F = 4 * C / m->tp;
    /* bc: this layer's slot of the block's C-wide tensors (lc: of the
     * Cl-wide ones); rc: its residual stream */
    int s = l - m->layer_lo; /* the slot within the stage's blocks */
    size_t bc = (size_t)(m->recompute ? 0 : s) * BT * C, rc = (size_t)s * BT * C, lbt = bc / C, lc = lbt * Cl;
    const float *residual = s == 0 ? a->p[A_ENCODED] : a->p[A_RESIDUAL3] + rc - (size_t)BT * C;
    float *ln1 = a->p[A_LN1] + bc, *qkv = a->p[A_QKV] + 3 * lc, *atty = a->p[A_ATTY] + lc;
    float *preatt = a->p[A_PREATT] + lbt * NH * T;
    float *att = a->p[A_ATT] + lbt * NH * T;
    float *attproj = a->p[A_ATTPROJ] + bc, *res2 = a->p[A_RESIDUAL2] + bc;
    float *ln2 = a->p[A_LN2] + bc, *fch = a->p[A_FCH] + 4 * lc;
    float *fchg = a->p[A_FCH_GELU] + 4 * lc, *fcproj = a->p[A_FCPROJ] + bc;
    float *res3 = a->p[A_RESIDUAL3] + rc;
    layernorm_forward(ln1, a->p[A_LN1_MEAN] + lbt, a->p[A_LN1_RSTD] + lbt, residual, w[GPT2_LN1W], w[GPT2_LN1B], BT, C);
    matmul_forward(qkv, ln1, w[GPT2_QKVW], w[GPT2_QKVB], BT, C, 3 * Cl);
    attention_forward(atty, preatt, att, qkv, B, T, Cl, NH);
    row_parallel_forward(m, attproj, atty, w[GPT2_ATTPROJW], w[GPT2_ATTPROJB], BT, Cl, C);
    residual_forward(res2, residual, attproj, (size_t)BT * C);
    layernorm_forward(ln2, a->p[A_LN2_MEAN] + lbt, a->p[A_LN2_RSTD] + lbt, res2, w[GPT2_LN2W], w[GPT2_LN2B], BT, C);
    matmul_forward(fch, ln2, w[GPT2_FCW], w[GPT2_FCB], BT, C, F);
    gelu_forward(fchg, fch, (size_t)BT * F);
    row_parallel_forward(m, fcproj, fchg, w[GPT2_FCPROJW], w[GPT2_FCPROJB], BT, F, C);
    residual_forward(res3, res2, fcproj, (size_t)BT * C);
}

float gpt2_forward(struct gpt2 *m, const int *inputs, const int *targets)
{
    const struct gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, L = c->num_layers;
    int V = c->vocab_size, Vp = c->padded_vocab_size, BT = B * T;
    struct acts a;
    act_views(m, m->acts, &a);
    m->inputs = inputs;
    m->targets = targets;

    float *w0[GPT2_NUM_PARAM_TENSORS] = {0}, *w[GPT2_NUM_PARAM_TENSORS] = {0};
    params_of(m, 0, 0, w0);
    /* a later pipeline stage finds its input in gpt2_stage_in */
    if (m->layer_lo == 0) encoder_forward(a.p[A_ENCODED], inputs, w0[GPT2_WTE], w0[GPT2_WPE], B, T, C);
    for (int l = m->layer_lo; l < m->layer_hi; l++) {
        params_of(m, 1 + l, 0, w);
        block_forward(m, &a, l, w);
        release(m, 1 + l);
    }
    if (m->layer_hi < L) { /* an earlier stage: its output is gpt2_stage_out */
        release(m, 0);
        m->mean_loss = -1.0f;
        return -1.0f;
    }
    const float *last = a.p[A_RESIDUAL3] + (size_t)(L - 1 - m->layer_lo) * BT * C;
    layernorm_forward(a.p[A_LNF], a.p[A_LNF_MEAN], a.p[A_LNF_RSTD], last, w0[GPT2_LNFW], w0[GPT2_LNFB], BT, C);
    matmul_forward(a.p[A_LOGITS], a.p[A_LNF], w0[GPT2_WTE], NULL, BT, C, Vp);
    softmax_forward(a.p[A_PROBS], a.p[A_LOGITS], BT, V, Vp);
    release(m, 0);
    if (!targets) {
        m->mean_loss = -1.0f;
        return -1.0f;
    }
    crossentropy_forward(a.p[A_LOSSES], a.p[A_PROBS], targets, BT, Vp);
    /* summed in double, in order: the logged loss is reproducible */
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += a.p[A_LOSSES][i];
    m->mean_loss = (float)(sum / BT);
    return m->mean_loss;
}

/* Reports the per-layer slice of tensor i as final. */
static void ready(struct gpt2 *m, int i, int l)
{
    if (!m->grad_ready) return;
    size_t per = m->param_sizes[i];
    size_t lo = m->held_offsets[i];
    if (l >= 0) {
        per /= (size_t)m->cfg.num_layers;
        lo += (size_t)(l - m->layer_lo) * per;
    }
    m->grad_ready(m->grad_ready_ctx, lo, lo + per);
}

void gpt2_backward(struct gpt2 *m, float loss_scale)
{
    const struct gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, L = c->num_layers, NH = c->num_heads / m->tp;
    int V = c->vocab_size, Vp = c->padded_vocab_size, BT = B * T;
    struct acts a, d;
    act_views(m, m->acts, &a);
    act_views(m, m->dacts, &d);
    /* the layers accumulate into their input gradients; the probabilities'
     * gradient is never formed (the softmax and the loss are differentiated
     * together) and the losses' is written below, so stop before them */
    zero_floats(m->dacts, (size_t)(d.p[A_PROBS] - m->dacts));
    /* after gpt2_zero_grad the weight matrices' gradients (and the biases
     * of the fully connected layers) are written by matmul_backward; the
     * small tensors that are only ever added to are zeroed here */
    int ow = m->grads_cleared || m->units; /* units: grads_of zeroes per unit */
    m->grads_cleared = 0;
    if (ow && !m->units) {
        static const int added[] = {GPT2_WPE, GPT2_LN1W, GPT2_LN1B, GPT2_LN2W, GPT2_LN2B, GPT2_LNFW, GPT2_LNFB};
        for (size_t i = 0; i < sizeof added / sizeof added[0]; i++)
            memset(m->grads + m->held_offsets[added[i]], 0, m->held_sizes[added[i]] * sizeof(float));
        /* without the head the embedding's gradient is only added to */
        if (m->layer_hi < L) memset(m->grads + m->held_offsets[GPT2_WTE], 0, m->held_sizes[GPT2_WTE] * sizeof(float));
    }
    float *w0[GPT2_NUM_PARAM_TENSORS] = {0}, *g0[GPT2_NUM_PARAM_TENSORS] = {0};
    float *w[GPT2_NUM_PARAM_TENSORS] = {0}, *g[GPT2_NUM_PARAM_TENSORS] = {0};
    params_of(m, 0, 1, w0);
    grads_of(m, 0, g0);

    int lo = m->layer_lo, hi = m->layer_hi;
    float *dlast = d.p[A_RESIDUAL3] + (size_t)(hi - 1 - lo) * BT * C;
    if (hi < L) { /* an earlier pipeline stage: the next stage's gradient, scaled there */
        memcpy(dlast, m->stage_dout, (size_t)BT * C * sizeof(float));
    } else {
        float dl = loss_scale / BT;
        for (int i = 0; i < BT; i++) d.p[A_LOSSES][i] = dl;
        crossentropy_softmax_backward(d.p[A_LOGITS], d.p[A_LOSSES], a.p[A_PROBS], m->targets, BT, V, Vp);
        matmul_backward(d.p[A_LNF], g0[GPT2_WTE], NULL, d.p[A_LOGITS], a.p[A_LNF], w0[GPT2_WTE], BT, C, Vp, ow);
        const float *last = a.p[A_RESIDUAL3] + (size_t)(L - 1 - lo) * BT * C;
        layernorm_backward(dlast, g0[GPT2_LNFW], g0[GPT2_LNFB], d.p[A_LNF], last, w0[GPT2_LNFW], a.p[A_LNF_MEAN],
                           a.p[A_LNF_RSTD], BT, C);
        ready(m, GPT2_LNFW, -1);
        ready(m, GPT2_LNFB, -1);
    }

    int Cl = C / m->tp, F = 4 * C / m->tp;
    for (int l = hi - 1; l >= lo; l--) {
        /* bc: the layer's slot of the block's C-wide tensors (0 with
         * recompute, whose forward is redone here into that slot, the same
         * bits as before), lc: of the Cl-wide ones (this rank's heads and
         * hidden units); rc: its residual stream */
        int s = l - lo; /* the slot within the stage's blocks */
        size_t bc = (size_t)(m->recompute ? 0 : s) * BT * C, rc = (size_t)s * BT * C, lbt = bc / C, lc = lbt * Cl;
        params_of(m, 1 + l, 1, w);
        grads_of(m, 1 + l, g);
        if (m->recompute && l < hi - 1) { /* the slot still holds hi-1's from the forward */
            block_forward(m, &a, l, w);
            /* the slot's gradients start from zero for every layer */
            zero_floats(d.p[A_LN1], (size_t)(d.p[A_RESIDUAL3] - d.p[A_LN1]));
        }
        const float *residual = s == 0 ? a.p[A_ENCODED] : a.p[A_RESIDUAL3] + rc - (size_t)BT * C;
        float *dresidual = s == 0 ? d.p[A_ENCODED] : d.p[A_RESIDUAL3] + rc - (size_t)BT * C;
        size_t att_off = lbt * NH * T;
        /* dres3 flows into res2 and fcproj */
        residual_backward(d.p[A_RESIDUAL2] + bc, d.p[A_FCPROJ] + bc, d.p[A_RESIDUAL3] + rc, (size_t)BT * C);
        matmul_backward(d.p[A_FCH_GELU] + 4 * lc, g[GPT2_FCPROJW], g[GPT2_FCPROJB], d.p[A_FCPROJ] + bc,
                        a.p[A_FCH_GELU] + 4 * lc, w[GPT2_FCPROJW], BT, F, C, ow);
        ready(m, GPT2_FCPROJB, l);
        ready(m, GPT2_FCPROJW, l);
        gelu_backward(d.p[A_FCH] + 4 * lc, a.p[A_FCH] + 4 * lc, d.p[A_FCH_GELU] + 4 * lc, (size_t)BT * F);
        matmul_backward(d.p[A_LN2] + bc, g[GPT2_FCW], g[GPT2_FCB], d.p[A_FCH] + 4 * lc, a.p[A_LN2] + bc, w[GPT2_FCW],
                        BT, C, F, ow);
        ready(m, GPT2_FCB, l);
        ready(m, GPT2_FCW, l);
        /* the column-parallel layer's input gradient: each rank has its
         * hidden units' share */
        tp_sum(m, d.p[A_LN2] + bc, (size_t)BT * C);
        layernorm_backward(d.p[A_RESIDUAL2] + bc, g[GPT2_LN2W], g[GPT2_LN2B], d.p[A_LN2] + bc, a.p[A_RESIDUAL2] + bc,
                           w[GPT2_LN2W], a.p[A_LN2_MEAN] + lbt, a.p[A_LN2_RSTD] + lbt, BT, C);
        ready(m, GPT2_LN2B, l);
        ready(m, GPT2_LN2W, l);
        residual_backward(dresidual, d.p[A_ATTPROJ] + bc, d.p[A_RESIDUAL2] + bc, (size_t)BT * C);
        matmul_backward(d.p[A_ATTY] + lc, g[GPT2_ATTPROJW], g[GPT2_ATTPROJB], d.p[A_ATTPROJ] + bc, a.p[A_ATTY] + lc,
                        w[GPT2_ATTPROJW], BT, Cl, C, ow);
        ready(m, GPT2_ATTPROJB, l);
        ready(m, GPT2_ATTPROJW, l);
        attention_backward(d.p[A_QKV] + 3 * lc, d.p[A_PREATT] + att_off, d.p[A_ATT] + att_off, d.p[A_ATTY] + lc,
                           a.p[A_QKV] + 3 * lc, a.p[A_ATT] + att_off, B, T, Cl, NH);
        matmul_backward(d.p[A_LN1] + bc, g[GPT2_QKVW], g[GPT2_QKVB], d.p[A_QKV] + 3 * lc, a.p[A_LN1] + bc, w[GPT2_QKVW],
                        BT, C, 3 * Cl, ow);
        ready(m, GPT2_QKVB, l);
        ready(m, GPT2_QKVW, l);
        tp_sum(m, d.p[A_LN1] + bc, (size_t)BT * C); /* this rank's heads' share */
        layernorm_backward(dresidual, g[GPT2_LN1W], g[GPT2_LN1B], d.p[A_LN1] + bc, residual, w[GPT2_LN1W],
                           a.p[A_LN1_MEAN] + lbt, a.p[A_LN1_RSTD] + lbt, BT, C);
        ready(m, GPT2_LN1B, l);
        ready(m, GPT2_LN1W, l);
        release(m, 1 + l);
        grad_done(m, 1 + l);
    }
    if (lo == 0) { /* else d(input) is in gpt2_stage_din for the previous stage */
        encoder_backward(g0[GPT2_WTE], g0[GPT2_WPE], d.p[A_ENCODED], m->inputs, B, T, C);
        ready(m, GPT2_WPE, -1);
        ready(m, GPT2_WTE, -1);
    }
    release(m, 0);
    grad_done(m, 0);
}
