/* gpu_tool budget: what one training step of the CUDA path should cost on an
 * H100, from an analytic model -- no GPU involved, and no measurement.
 *
 * For every kernel (and cuBLASLt call) of one step -- forward, backward,
 * gradient norm, AdamW -- the model counts the bytes it must move through
 * device memory and the FLOPs it does, for a given model and batch (default
 * GPT-2 124M, B=64, T=1024, bf16, one GPU), and prints:
 *   - registers, spill bytes and shared memory of the kernel from ptxas
 *     (the `-Xptxas -v` logs the build leaves next to the objects), plus the
 *     dynamic shared memory the launcher asks for;
 *   - bytes, FLOPs, the roofline time max(bytes / 3.35 TB/s, FLOPs / 989
 *     TFLOP/s) and which bound it hits;
 *   - an estimate: the same with the efficiencies assumed per kind of kernel
 *     (struct eff below, stated in doc/trainer-cuda.md), plus a gap per launch.
 * Totals: the roofline floor of the step, the estimate, tokens/s, and the
 * device memory the model allocates (cuda_gpt2_memory_plan).
 *
 * --design v0 models the kernels as they were before issue 17 (per-key-tile
 * dQ partials, scalar memory-bound kernels, two-pass LayerNorm backward,
 * separate GELU-backward and bias-gradient kernels), so the two can be
 * compared. --check FILE fails (exit 1) when a kernel of the step spills or
 * when the estimate or the floor exceeds the baseline in FILE by more than
 * 0.5%; --write-baseline FILE records the current figures.
 *
 * The estimate is also printed as a range: every assumed efficiency 25%
 * lower and 4 us per launch, to every one 15% higher (at most the peak) and
 * 1 us per launch, with the assumptions listed. --calibrate FILE reads the
 * per-op GPU times `gpu_tool bench --ops FILE` measured (same model, batch,
 * sequence and precision) and prints, beside the estimate, a calibrated
 * step: the measured time of every op the table has, the estimate of the
 * rest, with the efficiency each measured op reached. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_model.h"
#include "model.h"
#include "policy.h"

#define H100_BW 3.35e12   /* bytes/s, H100 SXM HBM3 */
#define H100_PEAK 989e12  /* FLOP/s, bf16 dense tensor cores */
#define LAUNCH_GAP_S 2e-6 /* assumed idle time between two dependent launches */

/* Efficiencies assumed for the estimate (fractions of the peaks above). */
enum kind { K_GEMM, K_ATT_FWD, K_ATT_BWD, K_ATT_WMMA, K_VEC, K_SCALAR, K_SERIAL, K_TINY, NKIND };
static const struct {
    const char *name;
    double flops, bw;
} eff[NKIND] = {
    [K_GEMM] = {"cuBLASLt", 0.70, 0.80},        [K_ATT_FWD] = {"mma.sync fwd", 0.35, 0.80},
    [K_ATT_BWD] = {"mma.sync bwd", 0.25, 0.80}, [K_ATT_WMMA] = {"WMMA+smem", 0.12, 0.60},
    [K_VEC] = {"16-byte", 1.00, 0.85},          [K_SCALAR] = {"scalar", 1.00, 0.55},
    [K_SERIAL] = {"serial", 1.00, 0.20},        [K_TINY] = {"tiny", 1.00, 0.50},
};

struct op {
    char name[48];
    const char *kernel; /* mangled-name stem for the ptxas join, NULL for cuBLASLt / memset */
    const char *targ;   /* a template argument that must appear too ("Li64E"), or NULL */
    double bytes, flops;
    int calls; /* per step */
    enum kind kind;
    size_t dyn_smem;
    double measured_s; /* per step, from --calibrate; < 0: not measured */
};

struct ptx {
    char name[256];
    int regs, stack, spill_st, spill_ld, smem;
};

struct budget {
    struct op ops[128];
    int nops;
    struct ptx *ptx;
    int nptx;
    /* shapes */
    double B, T, C, L, NH, HS, V, Vp, N, e, nparams;
    int prec;
    const char *type_mangled; /* "13__nv_bfloat16", "6__half" or "f" */
};

static struct op *add(struct budget *b, const char *name, const char *kernel, const char *targ, double bytes,
                      double flops, int calls, enum kind kind)
{
    if (b->nops == (int)(sizeof b->ops / sizeof b->ops[0])) return &b->ops[b->nops - 1];
    struct op *o = &b->ops[b->nops++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->kernel = kernel, o->targ = targ, o->bytes = bytes, o->flops = flops, o->calls = calls, o->kind = kind;
    o->measured_s = -1;
    return o;
}

/* ---- the step, as the code is now ----------------------------------------- */

/* Causal tile pairs of 64x64 (both kernels' loops run whole tiles). */
static double tile_pairs(double T)
{
    double nt = ceil(T / 64);
    return nt * (nt + 1) / 2;
}

static void gemm(struct budget *b, const char *name, double M, double K, double Nout, int calls, double extra)
{
    /* inputs, weights, output in the storage type; extra: fp32 read-modify-write etc. */
    add(b, name, NULL, NULL, (M * K + K * Nout + M * Nout) * b->e + extra, 2 * M * K * Nout, calls, K_GEMM);
}

static void model_now(struct budget *b)
{
    double N = b->N, C = b->C, L = b->L, e = b->e, NC = N * C, Vp = b->Vp, NH = b->NH, HS = b->HS, f = 4;
    int Li = (int)L;
    double pairs = tile_pairs(b->T) * b->B * NH, tile = 2 * 64 * 64 * HS; /* FLOPs of one 64x64xHS matmul */
    double stats = 2 * N * f;
    /* forward */
    add(b, "embedding fwd", "encoder_forward_kernel", NULL, 2 * NC * e + b->T * C * e + N * 4, 0, 1, K_VEC);
    add(b, "layernorm fwd (ln1 of layer 0)", "residual_layernorm_forward_vec_kernel", NULL, 2 * NC * e + stats, 0, 1,
        K_VEC);
    gemm(b, "qkv fwd (+bias)", N, C, 3 * C, Li, 0);
    add(b, "attention fwd", "attention_forward_kernel", NULL, 4 * NC * e + N * NH * f, 2 * pairs * tile, Li, K_ATT_FWD);
    gemm(b, "attproj fwd (+bias)", N, C, C, Li, 0);
    add(b, "residual + layernorm fwd", "residual_layernorm_forward_vec_kernel", NULL, 4 * NC * e + stats, 0, 2 * Li,
        K_VEC);
    gemm(b, "fc fwd (+bias, GELU, aux)", N, C, 4 * C, Li, N * 4 * C * e);
    gemm(b, "fcproj fwd (+bias)", N, 4 * C, C, Li, 0);
    gemm(b, "classifier fwd", N, C, Vp, 1, 0);
    add(b, "softmax + cross-entropy (in place)", "fused_classifier_kernel", NULL, 2 * N * Vp * e + 8 * N, 0, 1, K_VEC);
    add(b, "loss mean", "mean_kernel", NULL, N * f, 0, 1, K_TINY);
    /* backward */
    add(b, "zero dresidual (memset)", NULL, NULL, NC * e, 0, 1, K_VEC);
    gemm(b, "classifier dgrad", N, Vp, C, 1, 0);
    gemm(b, "classifier wgrad (fp32 +=)", C, N, Vp, 1, Vp * C * (2 * f - e));
    double part = ceil(N / 256) * 2 * C * f;
    add(b, "layernorm bwd, one pass", "layernorm_backward_vec_kernel", NULL, 4 * NC * e + stats + part, 0, 2 * Li + 1,
        K_VEC);
    add(b, "layernorm dw/db partials, in order", "colsum_final_kernel", NULL, part + 4 * C * f, 0, 2 * Li + 1, K_TINY);
    gemm(b, "fcproj wgrad (+BGRADB)", 4 * C, N, C, Li, 4 * C * C * (2 * f - e));
    gemm(b, "fcproj dgrad (+DGELU, aux)", N, C, 4 * C, Li, N * 4 * C * e);
    gemm(b, "fc wgrad (+BGRADB)", C, N, 4 * C, Li, 4 * C * C * (2 * f - e));
    gemm(b, "fc dgrad", N, 4 * C, C, Li, 0);
    gemm(b, "attproj wgrad (+BGRADB)", C, N, C, Li, C * C * (2 * f - e));
    gemm(b, "attproj dgrad", N, C, C, Li, 0);
    add(b, "bias gradient += (BGRADB output)", "add_kernel", NULL, 3 * 9 * C * f / 4, 0, 4 * Li, K_TINY);
    add(b, "attention D = rowsum(dO*O)", "attention_rowdot_kernel", NULL, 2 * NC * e + N * NH * f, 0, Li, K_VEC);
    add(b, "attention dK,dV", "attention_dkdv_kernel", NULL, 6 * NC * e + 2 * N * NH * f, 4 * pairs * tile, Li,
        K_ATT_BWD);
    add(b, "attention dQ (own pass)", "attention_dq_kernel", NULL, 5 * NC * e + 2 * N * NH * f, 3 * pairs * tile, Li,
        K_ATT_BWD);
    gemm(b, "qkv wgrad (+BGRADB)", C, N, 3 * C, Li, 3 * C * C * (2 * f - e));
    gemm(b, "qkv dgrad", N, 3 * C, C, Li, 0);
    double uniq = fmin(N, b->V); /* distinct tokens, at most */
    add(b, "embedding bwd wte (segments)", "encoder_backward_seg_kernel", NULL, NC * e + N * 4 * 2 + 2 * uniq * C * f,
        0, 1, K_VEC);
    add(b, "embedding bwd wpe", "encoder_backward_wpe_kernel", NULL, NC * e + 2 * b->T * C * f, 0, 1, K_VEC);
    /* optimizer */
    double P = b->nparams;
    add(b, "zero grads (memset)", NULL, NULL, P * f, 0, 1, K_VEC);
    add(b, "grad norm", "norm_partial_kernel", NULL, P * f, 2 * P, 1, K_SCALAR);
    add(b, "AdamW (per tensor)", "adamw_kernel", NULL, P * (7 * f + e) / 17, 12 * P / 17, 17, K_SCALAR);
}

/* ---- the step before issue 17 (for comparison) ------------------------------ */

static void model_v0(struct budget *b)
{
    double N = b->N, C = b->C, L = b->L, e = b->e, NC = N * C, Vp = b->Vp, NH = b->NH, HS = b->HS, f = 4;
    int Li = (int)L;
    double pairs = tile_pairs(b->T) * b->B * NH, tile = 2 * 64 * 64 * HS, stats = 2 * N * f;
    add(b, "embedding fwd", NULL, NULL, 2 * NC * e + b->T * C * e + N * 4, 0, 1, K_SCALAR);
    add(b, "layernorm fwd (ln1 of layer 0)", NULL, NULL, 2 * NC * e + stats, 0, 1, K_SCALAR);
    gemm(b, "qkv fwd (+bias)", N, C, 3 * C, Li, 0);
    add(b, "attention fwd (WMMA)", NULL, NULL, 4 * NC * e + N * NH * f, 2 * pairs * tile, Li, K_ATT_WMMA);
    gemm(b, "attproj fwd (+bias)", N, C, C, Li, 0);
    add(b, "residual + layernorm fwd", NULL, NULL, 4 * NC * e + stats, 0, 2 * Li, K_SCALAR);
    gemm(b, "fc fwd (+bias, GELU, aux)", N, C, 4 * C, Li, N * 4 * C * e);
    gemm(b, "fcproj fwd (+bias)", N, 4 * C, C, Li, 0);
    gemm(b, "classifier fwd", N, C, Vp, 1, 0);
    add(b, "softmax + cross-entropy (in place)", NULL, NULL, 2 * N * Vp * e + 8 * N, 0, 1, K_SCALAR);
    add(b, "loss mean", NULL, NULL, N * f, 0, 1, K_TINY);
    add(b, "zero dresidual (memset)", NULL, NULL, NC * e, 0, 1, K_VEC);
    gemm(b, "classifier dgrad", N, Vp, C, 1, 0);
    gemm(b, "classifier wgrad (fp32 +=)", C, N, Vp, 1, Vp * C * (2 * f - e));
    double part = ceil(N / 256) * 2 * C * f;
    add(b, "layernorm bwd dx", NULL, NULL, 4 * NC * e + stats, 0, 2 * Li + 1, K_SCALAR);
    add(b, "layernorm dw/db column sums (2nd read)", NULL, NULL, 2 * NC * e + stats + part, 0, 2 * Li + 1, K_SCALAR);
    add(b, "column sums, final", NULL, NULL, part, 0, 6 * Li + 1, K_TINY);
    gemm(b, "fcproj wgrad", 4 * C, N, C, Li, 4 * C * C * (2 * f - e));
    gemm(b, "fcproj dgrad", N, C, 4 * C, Li, 0);
    add(b, "bias grads: column sums of dout", NULL, NULL, (1 + 4 + 1 + 3) * NC * e / 4, 0, 4 * Li, K_SCALAR);
    add(b, "GELU backward", NULL, NULL, 3 * 4 * NC * e, 0, Li, K_SCALAR);
    gemm(b, "fc wgrad", C, N, 4 * C, Li, 4 * C * C * (2 * f - e));
    gemm(b, "fc dgrad", N, 4 * C, C, Li, 0);
    gemm(b, "attproj wgrad", C, N, C, Li, C * C * (2 * f - e));
    gemm(b, "attproj dgrad", N, C, C, Li, 0);
    add(b, "attention D = rowsum(dO*O)", NULL, NULL, 2 * NC * e + N * NH * f, 0, Li, K_SCALAR);
    double dqpart = pairs * 64 * HS * f; /* fp32 dQ partial of every tile pair */
    add(b, "attention bwd (WMMA, dQ partials)", NULL, NULL, 5 * NC * e + 2 * N * NH * f + dqpart, 5 * pairs * tile, Li,
        K_ATT_WMMA);
    add(b, "dQ partials reduced in order", NULL, NULL, dqpart + NC * e, 0, Li, K_SCALAR);
    gemm(b, "qkv wgrad", C, N, 3 * C, Li, 3 * C * C * (2 * f - e));
    gemm(b, "qkv dgrad", N, 3 * C, C, Li, 0);
    double uniq = fmin(N, b->V);
    add(b, "embedding bwd wte (serial per token)", NULL, NULL, NC * e + N * 4 + 2 * uniq * C * f, 0, 1, K_SERIAL);
    add(b, "embedding bwd wpe", NULL, NULL, NC * e + 2 * b->T * C * f, 0, 1, K_SCALAR);
    double P = b->nparams;
    add(b, "zero grads (memset)", NULL, NULL, P * f, 0, 1, K_VEC);
    add(b, "grad norm", NULL, NULL, P * f, 2 * P, 1, K_SCALAR);
    add(b, "host drain before AdamW (bubble)", NULL, NULL, 0, 0, 1, K_TINY);
    add(b, "AdamW (per tensor)", NULL, NULL, P * (7 * f + e) / 17, 12 * P / 17, 17, K_SCALAR);
}

/* ---- ptxas ------------------------------------------------------------------- */

static void read_ptxas(struct budget *b, const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    char line[1024];
    struct ptx *cur = NULL;
    while (fgets(line, sizeof line, fp)) {
        char name[256];
        int a, s1, s2;
        if (sscanf(line, "ptxas info    : Compiling entry function '%255[^']'", name) == 1) {
            struct ptx *n = realloc(b->ptx, (size_t)(b->nptx + 1) * sizeof *n);
            if (!n) break;
            b->ptx = n;
            cur = &b->ptx[b->nptx++];
            memset(cur, 0, sizeof *cur);
            snprintf(cur->name, sizeof cur->name, "%s", name);
        } else if (cur && sscanf(line, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &a, &s1,
                                 &s2) == 3) {
            cur->stack = a, cur->spill_st = s1, cur->spill_ld = s2;
        } else if (cur && strstr(line, "Used ")) {
            const char *r = strstr(line, "Used ");
            sscanf(r, "Used %d registers", &cur->regs);
            const char *sm = strstr(line, "bytes smem");
            if (sm) {
                const char *q = sm;
                while (q > line && q[-1] == ' ') q--;
                while (q > line && q[-1] >= '0' && q[-1] <= '9') q--;
                cur->smem = atoi(q);
            }
        }
    }
    fclose(fp);
}

/* The ptxas record of kernel `stem` instantiated for the run's type (and
 * targ, when given). Mangled: _Z<len><stem>I<type>...<targ>... */
static const struct ptx *find_ptx(const struct budget *b, const char *stem, const char *targ)
{
    char pre[128];
    snprintf(pre, sizeof pre, "_Z%zu%s", strlen(stem), stem);
    const struct ptx *any = NULL;
    for (int i = 0; i < b->nptx; i++) {
        const char *n = b->ptx[i].name;
        if (strncmp(n, pre, strlen(pre))) continue;
        const char *rest = n + strlen(pre);
        if (rest[0] != 'I') return &b->ptx[i]; /* not a template */
        if (strncmp(rest + 1, b->type_mangled, strlen(b->type_mangled))) {
            if (!any && !strstr(rest, "__nv_bfloat16") && !strstr(rest, "6__half")) any = &b->ptx[i];
            continue;
        }
        if (targ && !strstr(rest, targ)) continue;
        return &b->ptx[i];
    }
    return any;
}

/* ---- output ------------------------------------------------------------------- */

struct totals {
    double floor_s, est_s, bytes, flops;
    int launches, spills, missing;
};

/* Estimated seconds per step of op o, its efficiencies scaled by `scale`
 * (at most 1), `gap` seconds per launch. */
static double op_est(const struct op *o, double scale, double gap)
{
    if (!strcmp(o->name, "host drain before AdamW (bubble)")) return 50e-6; /* a round trip, assumed */
    double bytes = o->bytes * o->calls, flops = o->flops * o->calls;
    double eb = bytes / (H100_BW * fmin(1.0, eff[o->kind].bw * scale));
    double ef = flops / (H100_PEAK * fmin(1.0, eff[o->kind].flops * scale));
    return (eb > ef ? eb : ef) + o->calls * gap;
}

static double step_est(const struct budget *b, double scale, double gap)
{
    double s = 0;
    for (int i = 0; i < b->nops; i++) s += op_est(&b->ops[i], scale, gap);
    return s;
}

static void print_table(struct budget *b, struct totals *t, int quiet)
{
    memset(t, 0, sizeof *t);
    if (!quiet)
        printf("| op | calls | kernel: regs / spill B / smem B (static+dynamic) | GB moved | TFLOP | roofline ms | "
               "bound | est. ms (%s) |\n|---|---|---|---|---|---|---|---|\n",
               "assumed efficiency");
    for (int i = 0; i < b->nops; i++) {
        struct op *o = &b->ops[i];
        double bytes = o->bytes * o->calls, flops = o->flops * o->calls;
        double tb = bytes / H100_BW, tf = flops / H100_PEAK;
        double est = op_est(o, 1.0, LAUNCH_GAP_S);
        t->floor_s += tb > tf ? tb : tf;
        t->est_s += est;
        t->bytes += bytes;
        t->flops += flops;
        t->launches += o->calls;
        char k[96] = "cuBLASLt / memset";
        if (o->kernel) {
            const struct ptx *p = find_ptx(b, o->kernel, o->targ);
            if (!p) {
                snprintf(k, sizeof k, "%s: no ptxas record", o->kernel);
                t->missing++;
            } else {
                snprintf(k, sizeof k, "%d / %d / %d+%zu", p->regs, p->spill_st + p->spill_ld, p->smem, o->dyn_smem);
                if (p->spill_st + p->spill_ld > 0 || p->stack > 0) t->spills++;
            }
        } else if (o->kind != K_GEMM) {
            snprintf(k, sizeof k, "-");
        }
        if (!quiet)
            printf("| %s | %d | %s | %.2f | %.2f | %.3f | %s | %.3f (%s) |\n", o->name, o->calls, k, bytes / 1e9,
                   flops / 1e12, (tb > tf ? tb : tf) * 1e3, tf > tb ? "compute" : "memory", est * 1e3,
                   eff[o->kind].name);
    }
}

/* The name gpu_tool bench --ops gives op o (trainer/cuda/prof.cuh): the
 * model's name up to " (", or one of these. */
static void prof_key(const struct op *o, char *k, size_t n)
{
    static const char *alias[][2] = {
        {"attention D = rowsum(dO*O)", "attention rowdot"},
        {"attention dK,dV", "attention dkdv"},
        {"attention dQ (own pass)", "attention dq"},
        {"layernorm bwd, one pass", "layernorm bwd"},
        {"bias gradient += (BGRADB output)", "bias grad"},
        {"embedding bwd wte (segments)", "embedding bwd"},
        {"AdamW (per tensor)", "adamw"},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(o->name, alias[i][0])) {
            snprintf(k, n, "%s", alias[i][1]);
            return;
        }
    snprintf(k, n, "%.*s", (int)strcspn(o->name, "("), o->name);
    size_t l = strlen(k);
    while (l && k[l - 1] == ' ') k[--l] = 0;
}

/* Reads the per-op table of `gpu_tool bench --ops`: its header must name
 * the same model, batch, sequence and precision. Sets measured_s of the ops
 * it has; *other_s: measured time of rows the model has no op for. */
static int read_ops(struct budget *b, const char *path, const char *model, int B, int T, const char *prec,
                    double *other_s, int *matched, skiff_err *err)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return skiff_error(err, errno, "budget: --calibrate %s", path);
    char line[512], want[160];
    snprintf(want, sizeof want, "--model %s --batch %d --seq %d --precision %s ", model, B, T, prec);
    *other_s = 0, *matched = 0;
    int header = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') {
            if (strstr(line, "# gpu_tool bench ")) header = strstr(line, want) != NULL;
            continue;
        }
        char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        double ms;
        if (!tab2) continue;
        *tab1 = 0;
        char *end;
        ms = strtod(tab2 + 1, &end);
        if (end == tab2 + 1) continue;
        int found = 0;
        for (int i = 0; i < b->nops; i++) {
            char k[64];
            prof_key(&b->ops[i], k, sizeof k);
            if (strcmp(k, line)) continue;
            /* ops the model splits (two layernorm forwards) share the time by
             * their estimates: the first takes it all, then it is split below */
            if (!found)
                b->ops[i].measured_s = ms / 1e3;
            else
                b->ops[i].measured_s = -2; /* sharer */
            found = 1;
        }
        if (found)
            (*matched)++;
        else
            *other_s += ms / 1e3;
    }
    fclose(fp);
    if (!header)
        return skiff_error(err, 0,
                           "budget: %s is not a table of gpu_tool bench %s(run budget with the bench's --model, "
                           "--batch, --seq and --precision)",
                           path, want);
    return 0;
}

/* The calibrated step: measured op times (split among the model's ops that
 * share a profiler name, in proportion to their estimates), the estimate of
 * the ops the table lacks, plus the table's rows the model has no op for. */
static double print_calibrated(struct budget *b, double other_s, int quiet)
{
    double total = other_s;
    if (!quiet)
        printf("\n| op | est. ms | measured ms | measured / est. | reached of the roofline |\n|---|---|---|---|---|\n");
    for (int i = 0; i < b->nops; i++) {
        struct op *o = &b->ops[i];
        if (o->measured_s == -2) continue;
        if (o->measured_s < 0) {
            total += op_est(o, 1.0, LAUNCH_GAP_S);
            continue;
        }
        /* the group: o and the sharers after it */
        char k[64], k2[64];
        prof_key(o, k, sizeof k);
        double est = 0, floor = 0;
        for (int j = i; j < b->nops; j++) {
            prof_key(&b->ops[j], k2, sizeof k2);
            if (strcmp(k, k2)) continue;
            est += op_est(&b->ops[j], 1.0, LAUNCH_GAP_S);
            double tb = b->ops[j].bytes * b->ops[j].calls / H100_BW, tf = b->ops[j].flops * b->ops[j].calls / H100_PEAK;
            floor += tb > tf ? tb : tf;
        }
        total += o->measured_s;
        if (!quiet)
            printf("| %s | %.3f | %.3f | %.2f | %.0f%% |\n", k, est * 1e3, o->measured_s * 1e3, o->measured_s / est,
                   100 * floor / o->measured_s);
    }
    return total;
}

static int parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s ? -1 : 0;
}

int cmd_budget(int argc, char **argv, skiff_err *err);
int cmd_budget(int argc, char **argv, skiff_err *err)
{
    const char *model = "d12", *prec_s = "bf16", *design = "now", *ptxas_dir = NULL, *check = NULL, *write = NULL,
               *calibrate = NULL;
    int B = 64, T = 1024, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!v) return skiff_error(err, 0, "budget: %s needs a value", a);
        i++;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--precision"))
            prec_s = v;
        else if (!strcmp(a, "--batch"))
            B = atoi(v);
        else if (!strcmp(a, "--seq"))
            T = atoi(v);
        else if (!strcmp(a, "--design"))
            design = v;
        else if (!strcmp(a, "--ptxas-dir"))
            ptxas_dir = v;
        else if (!strcmp(a, "--check"))
            check = v;
        else if (!strcmp(a, "--write-baseline"))
            write = v;
        else if (!strcmp(a, "--calibrate"))
            calibrate = v;
        else
            return skiff_error(err, 0, "budget: unknown option %s", a);
    }
    struct gpt2_config cfg;
    struct budget b;
    memset(&b, 0, sizeof b);
    if (gpt2_config_preset(model, &cfg, err) < 0 || cuda_precision_parse(prec_s, &b.prec, err) < 0) return -1;
    if (B <= 0 || T <= 0 || T > cfg.max_seq_len) return skiff_error(err, 0, "budget: bad --batch/--seq");
    b.B = B, b.T = T, b.C = cfg.channels, b.L = cfg.num_layers, b.NH = cfg.num_heads, b.HS = b.C / b.NH;
    b.V = cfg.vocab_size, b.Vp = cfg.padded_vocab_size, b.N = b.B * b.T;
    b.e = b.prec == 0 ? 4 : 2;
    b.type_mangled = b.prec == 0 ? "f" : b.prec == 1 ? "13__nv_bfloat16" : "6__half";
    size_t np = gpt2_param_layout(&cfg, NULL, NULL);
    b.nparams = (double)np;
    if (ptxas_dir) {
        const char *files[] = {"attention.ptxas", "cuda_model.ptxas", "matmul.ptxas"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", ptxas_dir, files[i]);
            read_ptxas(&b, path);
        }
        if (!b.nptx)
            return skiff_error(err, 0, "budget: no ptxas records in %s/*.ptxas (build the CUDA objects first)",
                               ptxas_dir);
    }
    int v0 = !strcmp(design, "v0");
    if (v0)
        model_v0(&b);
    else if (!strcmp(design, "now"))
        model_now(&b);
    else
        return skiff_error(err, 0, "budget: --design now|v0");
    if (!v0) {
        size_t sm[4];
        cuda_attention_smem(b.prec, (int)b.HS, sm);
        /* the kernels the launchers pick (SKIFF_CUDA_ATTENTION): 128-row
         * tiles by name attention128_*, with their registers and smem */
        const char *names[3][2] = {{"attention_forward_kernel", "attention128_forward_kernel"},
                                   {"attention_dkdv_kernel", "attention128_dkdv_kernel"},
                                   {"attention_dq_kernel", "attention128_dq_kernel"}};
        for (int i = 0; i < b.nops; i++)
            for (int k = 0; k < 3; k++)
                if (b.ops[i].kernel && !strcmp(b.ops[i].kernel, names[k][0])) {
                    b.ops[i].kernel = names[k][sm[3] == 128];
                    b.ops[i].dyn_smem = sm[k];
                }
    }
    static char hs_targ[16];
    snprintf(hs_targ, sizeof hs_targ, "Li%dE", (int)b.HS);
    for (int i = 0; i < b.nops; i++)
        if (b.ops[i].kernel && !strncmp(b.ops[i].kernel, "attention_", 10)) b.ops[i].targ = hs_targ;
    /* the vectorised row kernels run with NV = C / (32 * 16 bytes / e) vectors per lane */
    static char nv_targ[16];
    snprintf(nv_targ, sizeof nv_targ, "Li%dE", (int)ceil(b.C / (16 / b.e) / 32));
    for (int i = 0; i < b.nops; i++)
        if (b.ops[i].kernel && strstr(b.ops[i].kernel, "_vec_kernel")) b.ops[i].targ = nv_targ;

    double other = 0;
    int matched = 0;
    if (calibrate && read_ops(&b, calibrate, model, B, T, prec_s, &other, &matched, err) < 0) return -1;

    struct cuda_mem_plan mp;
    cuda_gpt2_memory_plan(&cfg, B, T, b.prec, 1, 0, np, np, &mp);
    if (!quiet)
        printf("budget (analytic model, not a measurement): %s, B=%d, T=%d, %s, one H100 SXM (%.2f TB/s, %.0f "
               "TFLOP/s bf16 dense), design %s\n\n",
               model, B, T, prec_s, H100_BW / 1e12, H100_PEAK / 1e12, v0 ? "v0 (before issue 17)" : "current");
    struct totals t;
    print_table(&b, &t, quiet);
    double tokens = b.N;
    printf("%sstep: %.1f GB moved, %.1f TFLOP, %d launches\n", quiet ? "" : "\n", t.bytes / 1e9, t.flops / 1e12,
           t.launches);
    printf("roofline floor: %.2f ms/step = %.0f tokens/s\n", t.floor_s * 1e3, tokens / t.floor_s);
    printf("estimate (assumed efficiencies, %.0f us per launch): %.2f ms/step = %.0f tokens/s\n", LAUNCH_GAP_S * 1e6,
           t.est_s * 1e3, tokens / t.est_s);
    double lo = step_est(&b, 0.75, 4e-6), hi = step_est(&b, 1.15, 1e-6);
    printf("range: %.0f to %.0f tokens/s (%.2f to %.2f ms/step)\n", tokens / lo, tokens / hi, lo * 1e3, hi * 1e3);
    if (!quiet) {
        printf("  assumptions: one H100 SXM at %.2f TB/s and %.0f TFLOP/s bf16 dense; per kind of kernel the "
               "fraction of those it reaches:",
               H100_BW / 1e12, H100_PEAK / 1e12);
        for (int k = 0; k < NKIND; k++)
            printf("%s %s %.0f%% of FLOP/s, %.0f%% of bandwidth", k ? ";" : "", eff[k].name, 100 * eff[k].flops,
                   100 * eff[k].bw);
        printf("; %.0f us between dependent launches. The range: those fractions 25%% lower and 4 us, to 15%% "
               "higher (at most 100%%) and 1 us\n",
               LAUNCH_GAP_S * 1e6);
    }
    if (calibrate) {
        double cal = print_calibrated(&b, other, quiet);
        printf("%scalibrated (%d measured ops from %s, the estimate for the rest): %.2f ms/step = %.0f tokens/s "
               "(estimate %.0f)\n",
               quiet ? "" : "\n", matched, calibrate, cal * 1e3, tokens / cal, tokens / t.est_s);
    }
    printf("device memory allocated by the model: %.2f GiB (params %.2f, grads %.2f, optimizer %.2f, activations "
           "%.2f, logits %.2f, backward %.2f, scratch %.2f, other %.3f)%s\n",
           mp.total / 1073741824.0, mp.params / 1073741824.0, mp.grads / 1073741824.0, mp.optimizer / 1073741824.0,
           mp.activations / 1073741824.0, mp.logits / 1073741824.0, mp.backward / 1073741824.0,
           mp.scratch / 1073741824.0, (mp.misc + mp.workspace) / 1073741824.0,
           v0 ? " [current code; v0 added the dQ partials to scratch]" : "");
    // --tp N: what one rank's part allocates for the same batch (its heads'
    // and MLP units' weights and activations; embeddings, LayerNorms and the
    // C-wide activations whole), where N divides the heads
    for (int tp = 2; tp <= 8 && !quiet; tp *= 2) {
        if (cfg.num_heads % tp) continue;
        size_t npt = gpt2_param_layout_tp(&cfg, tp, NULL, NULL);
        struct cuda_mem_plan mt;
        cuda_gpt2_memory_plan(&cfg, B, T, b.prec, tp, 0, npt, npt, &mt);
        printf("  per rank at --tp %d: %.2f GiB (params %.2f, grads %.2f, optimizer %.2f, activations %.2f, backward "
               "%.2f, scratch %.2f)\n",
               tp, mt.total / 1073741824.0, mt.params / 1073741824.0, mt.grads / 1073741824.0,
               mt.optimizer / 1073741824.0, mt.activations / 1073741824.0, mt.backward / 1073741824.0,
               mt.scratch / 1073741824.0);
    }
    if (!quiet) { /* --recompute: one block's inner activations, the residual stream per block */
        struct cuda_mem_plan mr;
        cuda_gpt2_memory_plan(&cfg, B, T, b.prec, 1, CUDA_GPT2_RECOMPUTE, np, np, &mr);
        printf("  with --recompute: %.2f GiB (activations %.2f)\n", mr.total / 1073741824.0,
               mr.activations / 1073741824.0);
    }
    /* --zero 3 over P ranks: the model's shard (weights, fp32 master, m, v)
     * and its activations, plus the device's accumulated gradient shard and
     * the gathered units (the root and two blocks: weights and gradients) */
    if (!quiet) {
        int P = 8;
        size_t zl = train_zero3_len(&cfg, 1, P), sh = zl / (size_t)P, off,
               r0 = train_zero3_unit(&cfg, 1, P, 0, 0, &off);
        size_t gath = r0 + 2 * train_zero3_unit(&cfg, 1, P, 0, 1, &off);
        struct cuda_mem_plan mz;
        cuda_gpt2_memory_plan(&cfg, B, T, b.prec, 1, CUDA_GPT2_UNITS, sh, sh, &mz);
        double gw = (double)gath * b.e, gg = (double)gath * 4 + (double)sh * 4, G = 1073741824.0;
        printf("  per rank at --zero 3 over %d ranks: %.2f GiB (params %.2f + gathered %.2f, grads %.2f (shard and "
               "gathered), optimizer %.2f, activations %.2f)\n",
               P, (mz.total + gw + gg) / G, mz.params / G, gw / G, gg / G, mz.optimizer / G, mz.activations / G);
    }
    if (v0) {
        double extra = ceil(b.T / 64) * b.N * b.C * 4;
        printf("v0 scratch held the dQ partials: +%.2f GiB -> %.2f GiB\n", extra / 1073741824.0,
               (mp.total + extra) / 1073741824.0);
    }
    if (ptxas_dir) printf("kernels of the step that spill: %d; without a ptxas record: %d\n", t.spills, t.missing);

    if (write) {
        FILE *fp = fopen(write, "w");
        if (!fp) return skiff_error(err, errno, "budget: %s", write);
        fprintf(fp, "# gpu_tool budget --model %s --batch %d --seq %d --precision %s (ms per step, analytic model)\n",
                model, B, T, prec_s);
        fprintf(fp, "floor_ms %.4f\nestimate_ms %.4f\n", t.floor_s * 1e3, t.est_s * 1e3);
        fclose(fp);
    }
    if (check) {
        FILE *fp = fopen(check, "r");
        if (!fp) return skiff_error(err, errno, "budget: baseline %s", check);
        char line[256];
        double floor_ms = 0, est_ms = 0, v;
        while (fgets(line, sizeof line, fp)) {
            if (!strncmp(line, "floor_ms ", 9) && parse_num(line + 9, &v) == 0) floor_ms = v;
            if (!strncmp(line, "estimate_ms ", 12) && parse_num(line + 12, &v) == 0) est_ms = v;
        }
        fclose(fp);
        if (floor_ms <= 0 || est_ms <= 0) return skiff_error(err, 0, "budget: %s has no floor_ms/estimate_ms", check);
        int bad = 0;
        if (t.floor_s * 1e3 > floor_ms * 1.005 || t.est_s * 1e3 > est_ms * 1.005) {
            printf("FAIL: modeled step time regressed: floor %.2f ms (baseline %.2f), estimate %.2f ms (baseline "
                   "%.2f)\n",
                   t.floor_s * 1e3, floor_ms, t.est_s * 1e3, est_ms);
            bad = 1;
        } else {
            printf("PASS: modeled step time within the baseline: floor %.2f ms (baseline %.2f), estimate %.2f ms "
                   "(baseline %.2f)\n",
                   t.floor_s * 1e3, floor_ms, t.est_s * 1e3, est_ms);
        }
        if (ptxas_dir && (t.spills || t.missing)) {
            printf("FAIL: %d kernel(s) of the step spill registers, %d have no ptxas record\n", t.spills, t.missing);
            bad = 1;
        } else if (ptxas_dir) {
            printf("PASS: no kernel of the step spills (ptxas, sm_90)\n");
        }
        if (bad) return skiff_error(err, 0, "budget check failed");
    }
    return 0;
}
