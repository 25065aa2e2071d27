/* gpu_tool: the GPU-side checks and measurements of skiff-train's CUDA path.
 *   gpu_tool check --model NAME --batch B --seq T --precision P [--seed S]
 *       CUDA vs the CPU reference (trainer/model.c) on the same weights and
 *       batch: probabilities, loss, every parameter gradient (relative L2 per
 *       tensor), one AdamW step, and bit-reproducibility of a second backward.
 *   gpu_tool gemm [--size N] [--iters K]    bf16 cuBLASLt GEMM peak, TFLOP/s
 *   gpu_tool bench --model NAME --seq T --precision P [--batch B|auto] [--zero 0|1|2]
 *       [--shards P] [--steps N] [--ops FILE]
 *       the CUDA device's training step (trainer/device.h, as `skiff-train
 *       train` runs it) on synthetic tokens: throughput, MFU, memory. --zero
 *       1/2 with --shards P (default 8): rank 0's step of a P-GPU ZeRO run
 *       (optimizer on 1/P of the parameters; the collectives are not
 *       measured on one GPU). --ops FILE: per-op GPU times of 3 more steps
 *       (CUDA events; trainer/cuda/prof.cuh), the table `budget --calibrate`
 *       reads
 *   gpu_tool mkshard --out FILE --tokens N --vocab V [--text]
 *       writes an llm.c shard: uniform random tokens, or (--text, V = 256)
 *       byte text from a fixed set of sentences, which a model learns quickly
 *   gpu_tool csr-selftest     host-only: the embedding-backward token index
 *   gpu_tool budget [--model M --batch B --seq T --precision P] [--design now|v0]
 *       [--ptxas-dir DIR] [--check BASELINE] [--write-baseline FILE] [--quiet]
 *       host-only: the analytic per-kernel cost model of one step (budget.c)
 * Exit status: 0 pass, 1 failure (a tolerance exceeded or an error). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cuda_model.h"
#include "device.h"
#include "error.h"
#include "model.h"
#include "data.h"

int cmd_budget(int argc, char **argv, skiff_err *err); /* budget.c */

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

struct args {
    const char *model, *precision, *out;
    int batch, seq, zero, shards, steps, size, iters, text;
    long tokens;
    int vocab;
    uint64_t seed;
};

static int parse(int argc, char **argv, struct args *a, skiff_err *err)
{
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"batch", 1, 0, 'b'},  {"seq", 1, 0, 't'},    {"precision", 1, 0, 'p'},
        {"seed", 1, 0, 's'},  {"zero", 1, 0, 'z'},   {"steps", 1, 0, 'n'},  {"size", 1, 0, 'N'},
        {"iters", 1, 0, 'i'}, {"out", 1, 0, 'o'},    {"tokens", 1, 0, 'k'}, {"vocab", 1, 0, 'v'},
        {"text", 0, 0, 'x'},  {"shards", 1, 0, 'S'}, {"ops", 1, 0, 'O'},    {0, 0, 0, 0}};
    memset(a, 0, sizeof(*a));
    a->model = "tiny", a->precision = "bf16", a->batch = 4, a->seq = 64, a->steps = 20;
    a->size = 8192, a->iters = 50, a->seed = 1337, a->vocab = 256;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'b': a->batch = strcmp(optarg, "auto") ? atoi(optarg) : 0; break;
        case 't': a->seq = atoi(optarg); break;
        case 'p': a->precision = optarg; break;
        case 's': a->seed = strtoull(optarg, NULL, 10); break;
        case 'z': a->zero = atoi(optarg); break;
        case 'n': a->steps = atoi(optarg); break;
        case 'N': a->size = atoi(optarg); break;
        case 'i': a->iters = atoi(optarg); break;
        case 'o': a->out = optarg; break;
        case 'k': a->tokens = atol(optarg); break;
        case 'v': a->vocab = atoi(optarg); break;
        case 'x': a->text = 1; break;
        case 'S': a->shards = atoi(optarg); break;
        case 'O': a->out = optarg; break;
        default: return skiff_error(err, EINVAL, "unknown option (see the comment at the top of gpu_tool.c)");
        }
    }
    return 0;
}

/* ---- check ------------------------------------------------------------------ */

struct tol {
    double loss, prob, grad_rel;
};

/* Per-precision tolerances; doc/trainer-cuda.md explains them. */
static struct tol tolerance(int prec)
{
    struct tol t;
    if (prec == 0)
        t = (struct tol){2e-3, 2e-3, 1e-2}; /* fp32 storage, TF32 matmuls */
    else if (prec == 1)
        t = (struct tol){3e-2, 2e-2, 5e-2}; /* bf16: 8-bit mantissa */
    else
        t = (struct tol){1e-2, 1e-2, 2e-2}; /* fp16: 11-bit mantissa */
    return t;
}

static int cmd_check(struct args *a, skiff_err *err)
{
    struct gpt2_config cfg;
    int prec;
    if (gpt2_config_preset(a->model, &cfg, err) < 0 || cuda_precision_parse(a->precision, &prec, err) < 0) return -1;
    int B = a->batch, T = a->seq, N = B * T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    struct tol tol = tolerance(prec);
    char gpu[256];
    if (cuda_select_device(0, gpu, sizeof gpu, err) < 0) return -1;
    printf("check: %s B=%d T=%d precision %s on %s\n", a->model, B, T, a->precision, gpu);

    struct gpt2 cpu;
    if (gpt2_create(&cpu, &cfg, B, T, err) < 0) return -1;
    size_t n = cpu.num_params;
    gpt2_init_params(&cfg, cpu.params, a->seed);
    int *in = malloc(N * sizeof(int)), *tg = malloc(N * sizeof(int));
    float *logits = malloc((size_t)N * Vp * sizeof(float));
    float *g = malloc(n * sizeof(float)), *master = malloc(n * sizeof(float));
    struct cuda_gpt2 *m = NULL;
    int rc = -1, fails = 0;
    if (!in || !tg || !logits || !g || !master) {
        skiff_error(err, ENOMEM, "check buffers");
        goto out;
    }
    uint64_t s = a->seed;
    for (int i = 0; i < N; i++) in[i] = (int)(lcg(&s) % V);
    for (int i = 0; i < N; i++) tg[i] = i + 1 < N ? in[i + 1] : (int)(lcg(&s) % V);

    double t0 = skiff_now_s();
    float cpu_loss = gpt2_forward(&cpu, in, tg);
    gpt2_zero_grad(&cpu);
    gpt2_backward(&cpu, 1.0f);
    printf("check: CPU reference forward+backward %.2f s, loss %.6f\n", skiff_now_s() - t0, cpu_loss);

    if (cuda_gpt2_create(&m, &cfg, B, T, prec, 1, 0, 0, n, 0, n, err) < 0 ||
        cuda_gpt2_set_params(m, cpu.params, err) < 0)
        goto out;
    double l1, l2;
    if (cuda_gpt2_forward(m, in, tg, 0.0f, err) < 0 || cuda_gpt2_take_loss(m, &l1, err) < 0 ||
        cuda_gpt2_get_logits(m, logits, err) < 0)
        goto out;
    /* probabilities over the real vocabulary, against the CPU's */
    double pmax = 0;
    for (int r = 0; r < N; r++) {
        const float *lr = logits + (size_t)r * Vp;
        const float *pc = cpu.probs_out + (size_t)r * Vp;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = lr[v] > mx ? lr[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(lr[v] - mx);
        for (int v = 0; v < V; v++) {
            double d = fabs(exp(lr[v] - mx) / sum - pc[v]);
            if (d > pmax) pmax = d;
        }
    }
    int ok = pmax <= tol.prob;
    fails += !ok;
    printf("%s: probabilities max |diff| %.3g (tolerance %.3g)\n", ok ? "PASS" : "FAIL", pmax, tol.prob);
    ok = fabs(l1 - cpu_loss) <= tol.loss;
    fails += !ok;
    printf("%s: loss CUDA %.6f CPU %.6f |diff| %.3g (tolerance %.3g)\n", ok ? "PASS" : "FAIL", l1, cpu_loss,
           fabs(l1 - cpu_loss), tol.loss);

    if (cuda_gpt2_zero_grad(m, err) < 0 || cuda_gpt2_forward(m, in, tg, 1.0f / N, err) < 0 ||
        cuda_gpt2_take_loss(m, &l2, err) < 0 || cuda_gpt2_backward(m, NULL, NULL, err) < 0 ||
        cuda_gpt2_get_grads(m, g, err) < 0)
        goto out;
    size_t sizes[GPT2_NUM_PARAM_TENSORS], offs[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_layout(&cfg, sizes, offs);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        double dd = 0, cc = 0, mx = 0;
        for (size_t k = offs[i]; k < offs[i] + sizes[i]; k++) {
            double d = (double)g[k] - cpu.grads[k];
            dd += d * d;
            cc += (double)cpu.grads[k] * cpu.grads[k];
            if (fabs(d) > mx) mx = fabs(d);
        }
        double rel = cc > 0 ? sqrt(dd / cc) : sqrt(dd);
        ok = rel <= tol.grad_rel && isfinite(rel);
        fails += !ok;
        printf("%s: grad %-9s rel L2 %.3g max |diff| %.3g (tolerance rel %.3g)\n", ok ? "PASS" : "FAIL",
               gpt2_param_names[i], rel, mx, tol.grad_rel);
    }

    /* The backward pass has no float atomics: a second one is bit-identical. */
    float *g2 = malloc(n * sizeof(float));
    if (!g2) {
        skiff_error(err, ENOMEM, "grads");
        goto out;
    }
    double l3;
    if (cuda_gpt2_zero_grad(m, err) < 0 || cuda_gpt2_forward(m, in, tg, 1.0f / N, err) < 0 ||
        cuda_gpt2_take_loss(m, &l3, err) < 0 || cuda_gpt2_backward(m, NULL, NULL, err) < 0 ||
        cuda_gpt2_get_grads(m, g2, err) < 0) {
        free(g2);
        goto out;
    }
    ok = !memcmp(g, g2, n * sizeof(float)) && l2 == l3;
    fails += !ok;
    printf("%s: second forward+backward is bit-identical\n", ok ? "PASS" : "FAIL");
    free(g2);

    /* One AdamW step on the GPU against the same formula on the host. */
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    if (cuda_gpt2_adamw(m, cuda_gpt2_grads(m), lr, b1, b2, eps, wd, 0.5f, NULL, 0, 1, 1, err) < 0 ||
        cuda_gpt2_get_master(m, master, err) < 0)
        goto out;
    double amax = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++)
        for (size_t k = offs[i]; k < offs[i] + sizes[i]; k++) {
            float gi = g[k] * 0.5f, mi = (1 - b1) * gi, vi = (1 - b2) * gi * gi;
            float p = cpu.params[k];
            p -= lr * ((mi / (1 - b1)) / (sqrtf(vi / (1 - b2)) + eps) + (gpt2_param_decays(i) ? wd : 0) * p);
            double d = fabs((double)p - master[k]);
            if (d > amax) amax = d;
        }
    ok = amax <= 1e-6;
    fails += !ok;
    printf("%s: AdamW step max |diff| %.3g (tolerance 1e-6)\n", ok ? "PASS" : "FAIL", amax);
    rc = fails ? -1 : 0;
    if (fails) skiff_error(err, 0, "%d check(s) outside tolerance", fails);
out:
    cuda_gpt2_destroy(m);
    gpt2_destroy(&cpu);
    free(in);
    free(tg);
    free(logits);
    free(g);
    free(master);
    return rc;
}

/* ---- gemm / bench ------------------------------------------------------------ */

static int cmd_gemm(struct args *a, skiff_err *err)
{
    char gpu[256];
    double tf = 0;
    if (cuda_select_device(0, gpu, sizeof gpu, err) < 0 ||
        cuda_gemm_bench(a->size, a->size, a->size, a->iters, &tf, err) < 0)
        return -1;
    printf("gemm: device=\"%s\" m=n=k=%d bf16 tflops=%.1f\n", gpu, a->size, tf);
    return 0;
}

/* Synthetic micro-batches for the device's step: the same tokens every
 * step (the model's speed does not depend on them). */
struct bench_batches {
    struct train_batches b; /* first: the device sees this */
    const int *in, *tg;
    size_t n;
};

static int bench_load(struct train_batches *b, int k, skiff_err *err)
{
    (void)k, (void)err;
    struct bench_batches *bb = (struct bench_batches *)b;
    memcpy(b->inputs, bb->in, bb->n * sizeof(int));
    memcpy(b->targets, bb->tg, bb->n * sizeof(int));
    return 0;
}

/* The CUDA device of the training loop (trainer/device.h) on one GPU, for
 * batch B: the same step as `skiff-train train` (micro-step, backward,
 * ZeRO stage, norm, AdamW, one host wait), without the data loader. With
 * shards > 1 the optimizer owns rank 0's 1/shards of the parameters, as in
 * a ZeRO run over `shards` GPUs; the collectives, which need those GPUs,
 * are the single-rank no-ops. */
static int bench_open(struct train_device *d, struct train_opts *o, struct train_plan *pl, struct train_dist *dist,
                      int shards, const float *init, size_t n, skiff_err *err)
{
    memset(d, 0, sizeof *d);
    train_plan_init(pl, o, n, shards, 0);
    *dist = (struct train_dist){.rank = 0, .world = 1, .local_rank = 0};
    if (train_device_open(d, &train_cuda_device, o, pl, dist, err) < 0) return -1;
    memcpy(d->params, init, n * sizeof(float));
    return d->ops->upload(d, 0, err);
}

static int cmd_bench(struct args *a, skiff_err *err)
{
    struct train_opts o;
    train_opts_defaults(&o);
    o.model = a->model, o.precision = a->precision, o.seq = a->seq, o.zero = a->zero, o.grad_accum = 1;
    o.steps = 1 << 30, o.warmup = 0, o.quiet = 1;
    int prec;
    char gpu[256];
    if (gpt2_config_preset(a->model, &o.cfg, err) < 0 || cuda_precision_parse(a->precision, &prec, err) < 0 ||
        cuda_select_device(0, gpu, sizeof gpu, err) < 0)
        return -1;
    if (a->zero < 0 || a->zero > 2) return skiff_error(err, EINVAL, "bench: --zero 0, 1 or 2");
    /* ZeRO without a shard count: rank 0 of 8 (one node of 8 GPUs) */
    int shards = a->shards ? a->shards : a->zero ? 8 : 1;
    if (!a->zero && shards != 1) return skiff_error(err, EINVAL, "bench: --shards needs --zero 1 or 2");
    size_t n = gpt2_param_layout(&o.cfg, NULL, NULL);
    int T = a->seq;
    int tries[] = {64, 48, 32, 24, 16, 8, 4, 2, 1};
    int ntries = a->batch ? 1 : (int)(sizeof tries / sizeof tries[0]);
    struct train_device d;
    struct train_plan pl;
    struct train_dist dist;
    struct train_step_stats st;
    struct bench_batches bb;
    int *in = NULL, *tg = NULL, *bin = NULL, *btg = NULL, B = 0, rc = -1, opened = 0;
    float *host = calloc(n, sizeof(float));
    if (!host) return skiff_error(err, ENOMEM, "params");
    gpt2_init_params(&o.cfg, host, a->seed);
    for (int t = 0; t < ntries; t++) {
        B = a->batch ? a->batch : tries[t];
        o.batch = B;
        size_t N = (size_t)B * T;
        free(in), free(tg), free(bin), free(btg);
        in = malloc(N * sizeof(int)), tg = malloc(N * sizeof(int));
        bin = malloc(N * sizeof(int)), btg = malloc(N * sizeof(int));
        if (!in || !tg || !bin || !btg) {
            skiff_error(err, ENOMEM, "tokens");
            goto out;
        }
        uint64_t s = a->seed;
        for (size_t i = 0; i < N; i++)
            in[i] = (int)(lcg(&s) % o.cfg.vocab_size), tg[i] = (int)(lcg(&s) % o.cfg.vocab_size);
        bb = (struct bench_batches){{1, bin, btg, bench_load}, in, tg, N};
        skiff_err e2;
        /* the first step allocates what a step needs beyond the model */
        if (bench_open(&d, &o, &pl, &dist, shards, host, n, &e2) == 0 &&
            d.ops->step(&d, 0, 6e-4f, &bb.b, &st, &e2) == 0) {
            opened = 1;
            break;
        }
        fprintf(stderr, "bench: batch %d does not fit or failed: %s\n", B, e2.msg);
        train_device_close(&d);
        if (a->batch || t == ntries - 1) {
            *err = e2;
            goto out;
        }
    }
    int N = B * T;
    for (int i = 1; i < 3; i++) /* warm-up beyond the first step */
        if (d.ops->step(&d, i, 6e-4f, &bb.b, &st, err) < 0) goto out;
    double t0 = skiff_now_s();
    for (int i = 0; i < a->steps; i++)
        if (d.ops->step(&d, 3 + i, 6e-4f, &bb.b, &st, err) < 0) goto out;
    double dt = (skiff_now_s() - t0) / a->steps;
    size_t used = 0, total = 0;
    if (cuda_mem_info(&used, &total, err) < 0) goto out;
    double flops_tok = 6.0 * n + 6.0 * o.cfg.num_layers * o.cfg.channels * T;
    double tps = N / dt;
    /* what the model allocates (cuda_gpt2_create checks it equals the plan) */
    struct cuda_mem_plan mp;
    cuda_gpt2_memory_plan(&o.cfg, B, T, prec, 1, 0, pl.n_pad, pl.opt_len, &mp);
    printf("bench: device=\"%s\" model=%s precision=%s zero=%d shards=%d batch=%d seq=%d params=%zu opt_params=%zu "
           "step_ms=%.2f "
           "tokens_per_s=%.0f tflops=%.1f model_gib=%.2f device_used_gib=%.2f loss=%.4f\n",
           gpu, a->model, a->precision, a->zero, shards, B, T, n, pl.opt_len, dt * 1000, tps, tps * flops_tok / 1e12,
           mp.total / 1073741824.0, used / 1073741824.0, st.loss);
    /* per-op GPU times over a few more steps, after the timed ones */
    if (a->out) {
        FILE *fp = fopen(a->out, "w");
        if (!fp) {
            skiff_error(err, errno, "bench: --ops %s", a->out);
            goto out;
        }
        int np = 3;
        fprintf(fp,
                "# gpu_tool bench --model %s --batch %d --seq %d --precision %s --zero %d (shards %d) on %s; "
                "%.2f ms/step unprofiled\n",
                a->model, B, T, a->precision, a->zero, shards, gpu, dt * 1000);
        int prc = cuda_prof_start(err);
        for (int i = 0; prc == 0 && i < np; i++) prc = d.ops->step(&d, 3 + a->steps + i, 6e-4f, &bb.b, &st, err);
        if (prc == 0) prc = cuda_prof_report(fp, np, err);
        if (fclose(fp) != 0 && prc == 0) prc = skiff_error(err, errno, "bench: writing %s", a->out);
        if (prc < 0) goto out;
    }
    rc = isfinite(st.loss) ? 0 : skiff_error(err, ERANGE, "loss is %f", st.loss);
out:
    if (opened) train_device_close(&d);
    free(host), free(in), free(tg), free(bin), free(btg);
    return rc;
}

/* ---- shards ------------------------------------------------------------------- */

static const char *const sentences[] = {
    "the quick brown fox jumps over the lazy dog. ",
    "a skiff is a small boat that one person can row. ",
    "gradient descent walks downhill one small step at a time. ",
    "every rank reads its own slice of the batch. ",
    "the loss goes down when the model learns the pattern. ",
    "bread and butter, salt and pepper, cup and saucer. ",
};

static int cmd_mkshard(struct args *a, skiff_err *err)
{
    if (!a->out || a->tokens <= 0) return skiff_error(err, EINVAL, "mkshard needs --out FILE and --tokens N");
    if (a->text && a->vocab != 256) return skiff_error(err, EINVAL, "--text makes byte tokens: use --vocab 256");
    uint16_t *t = malloc(a->tokens * sizeof(uint16_t));
    if (!t) return skiff_error(err, ENOMEM, "tokens");
    uint64_t s = a->seed;
    long i = 0;
    while (i < a->tokens) {
        if (a->text) {
            const char *p = sentences[lcg(&s) % (sizeof sentences / sizeof sentences[0])];
            for (; *p && i < a->tokens; p++) t[i++] = (uint8_t)*p;
        } else {
            t[i++] = (uint16_t)(lcg(&s) % a->vocab);
        }
    }
    int rc = data_write_shard(a->out, t, a->tokens, err);
    free(t);
    return rc;
}

/* ---- host-only self test ------------------------------------------------------ */

static int cmd_csr_selftest(skiff_err *err)
{
    /* token 0 appears 200 times: more than one segment (64 rows), so it takes
     * the partial-sum path */
    enum { N = 1000, V = 50, SEG = 64 };
    static int csr[4 * N + 64];
    int tokens[N], counts[V], seen[N] = {0};
    uint64_t s = 7;
    for (int i = 0; i < N; i++) tokens[i] = i % 5 == 0 ? 0 : 1 + (int)(lcg(&s) % (V - 1));
    int used = cuda_encoder_csr(csr, counts, tokens, N, V);
    int nseg = csr[0], nbig = csr[1], npart = csr[2];
    const int *rows = csr + 3, *seg_tok = rows + N, *seg_start = seg_tok + nseg, *seg_dst = seg_start + nseg + 1;
    const int *big_tok = seg_dst + nseg, *big_first = big_tok + nbig;
    if (used != 3 + N + 3 * nseg + 1 + 2 * nbig + 1 || nbig != 1 || big_tok[0] != 0 || npart != 4 ||
        seg_start[0] != 0 || seg_start[nseg] != N || big_first[0] != 0 || big_first[1] != npart)
        return skiff_error(err, 0, "csr: %d ints, %d segments, %d frequent tokens, %d partials", used, nseg, nbig,
                           npart);
    int next_part = 0;
    for (int g = 0; g < nseg; g++) {
        if (seg_start[g + 1] - seg_start[g] > SEG || seg_start[g + 1] <= seg_start[g])
            return skiff_error(err, 0, "csr: segment %d has %d rows", g, seg_start[g + 1] - seg_start[g]);
        if (g && seg_tok[g] < seg_tok[g - 1]) return skiff_error(err, 0, "csr: tokens not increasing at %d", g);
        if (seg_dst[g] >= 0 && seg_dst[g] != next_part++)
            return skiff_error(err, 0, "csr: segment %d writes partial %d", g, seg_dst[g]);
        if ((seg_dst[g] >= 0) != (seg_tok[g] == 0)) return skiff_error(err, 0, "csr: segment %d: wrong path", g);
        for (int k = seg_start[g]; k < seg_start[g + 1]; k++) {
            if (tokens[rows[k]] != seg_tok[g])
                return skiff_error(err, 0, "csr: row %d is not token %d", rows[k], seg_tok[g]);
            if (k > seg_start[g] && rows[k] <= rows[k - 1]) return skiff_error(err, 0, "csr: rows not increasing");
            seen[rows[k]]++;
        }
    }
    for (int i = 0; i < N; i++)
        if (seen[i] != 1) return skiff_error(err, 0, "csr: row %d listed %d times", i, seen[i]);
    printf("PASS: embedding-backward token index (%d segments over %d rows, the frequent token split in %d)\n", nseg, N,
           npart);
    return 0;
}

int main(int argc, char **argv)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_tool check|gemm|bench|mkshard|csr-selftest|budget [options]\n");
        return 2;
    }
    if (!strcmp(argv[1], "budget")) {
        int brc = cmd_budget(argc - 1, argv + 1, &err);
        if (brc < 0) fprintf(stderr, "gpu_tool: %s\n", err.msg);
        return brc < 0 ? 1 : 0;
    }
    struct args a;
    if (parse(argc - 1, argv + 1, &a, &err) < 0) {
        fprintf(stderr, "gpu_tool: %s\n", err.msg);
        return 2;
    }
    int rc;
    if (!strcmp(argv[1], "check"))
        rc = cmd_check(&a, &err);
    else if (!strcmp(argv[1], "gemm"))
        rc = cmd_gemm(&a, &err);
    else if (!strcmp(argv[1], "bench"))
        rc = cmd_bench(&a, &err);
    else if (!strcmp(argv[1], "mkshard"))
        rc = cmd_mkshard(&a, &err);
    else if (!strcmp(argv[1], "csr-selftest"))
        rc = cmd_csr_selftest(&err);
    else {
        fprintf(stderr, "gpu_tool: unknown command '%s'\n", argv[1]);
        return 2;
    }
    if (rc < 0) fprintf(stderr, "gpu_tool: %s\n", err.msg);
    return rc < 0 ? 1 : 0;
}
