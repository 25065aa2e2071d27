// GPT-2 forward/backward/AdamW on one GPU; see cuda_model.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The layers: kernels and launchers, one header each (attention and the
// matmuls have translation units of their own).
#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "colsum.cuh"
#include "elementwise.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "global_norm.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "prof.cuh"

extern "C" {
#include "cuda_model.h"
}

#define MAX_LAYERS 128

struct cuda_gpt2 {
    struct gpt2_config cfg;
    int B, T, prec, L, C, NH, V, Vp;
    // Tensor parallelism (Megatron's split, trainer/model.h): tp ranks, this
    // one tp_rank; Cl = C/tp channels of Q, K and V (NHl = NH/tp heads), F =
    // 4C/tp hidden units of the MLP. tp 1: Cl = C, NHl = NH, F = 4C.
    int tp, tp_rank, Cl, NHl, F;
    cuda_tp_allreduce_fn tp_sum_fn; // the sum over the tp ranks, on the model's stream
    void *tp_ctx;
    float *tpbuf; // fp32 staging of a bf16/fp16 sum: (B*T, C)
    size_t nparams, n_pad, opt_off, opt_len;
    size_t sizes[GPT2_NUM_PARAM_TENSORS], offs[GPT2_NUM_PARAM_TENSORS];
    // where tensor i's block 0 (would) start in params and grads: offs, or
    // under a stage layout (CUDA_GPT2_STAGE) the stage's place less lo blocks
    ptrdiff_t base[GPT2_NUM_PARAM_TENSORS];
    int stage_layout; // CUDA_GPT2_STAGE: set_stage_layout must come before use
    // --recompute: the block's inner activations (ln1 ... fchg and their
    // statistics) have one slot that every layer's pointers share; the
    // backward redoes a block's forward into it from res3 of the block below
    int recompute;
    // --pp (cuda_gpt2_set_stage): this stage's blocks [lo, hi); 0, L: all
    int lo, hi;
    // ZeRO-3 (CUDA_GPT2_UNITS): the units' parameters and gradients, where
    // the caller put them while gathered (uw, ug: per unit, NULL otherwise);
    // uoff[i]: where tensor i's slice starts in its unit; the optimizer
    // range in pieces with their weight decay
    const struct cuda_gpt2_units *units;
    void *uw[MAX_LAYERS + 1];
    float *ug[MAX_LAYERS + 1];
    size_t uoff[GPT2_NUM_PARAM_TENSORS];
    struct cuda_opt_piece *pieces;
    int npieces;
    cudaStream_t stream;
    struct mm_ctx mm;
    // cuBLASLt epilogues, each on unless SKIFF_CUDA_EPILOGUES leaves it out:
    // GELU_AUX_BIAS on fc forward (else the own GELU kernel), DGELU on the
    // fcproj data gradient (else the own GELU' kernel), BGRADB for bias
    // gradients (else the own column sums)
    int fuse_gelu, fuse_dgelu, fuse_bgradb;
    int crows;     // rows of the classifier's chunks (cuda_classifier_rows)
    int have_dlnf; // the last forward did the classifier's backward (dloss != 0)
    size_t elem;   // bytes per storage element

    void *params;          // storage type, n_pad
    float *grads;          // n_pad
    float *master, *m, *v; // opt_len

    // activations (storage type unless float*)
    void *encoded, *lnf, *logits, *scratch;
    float *lnf_mean, *lnf_rstd, *losses, *loss_acc;
    void *ln1[MAX_LAYERS], *qkv[MAX_LAYERS], *atty[MAX_LAYERS], *res2[MAX_LAYERS];
    void *ln2[MAX_LAYERS], *fch[MAX_LAYERS], *fchg[MAX_LAYERS], *res3[MAX_LAYERS];
    float *ln1_mean[MAX_LAYERS], *ln1_rstd[MAX_LAYERS], *ln2_mean[MAX_LAYERS], *ln2_rstd[MAX_LAYERS];
    float *lse[MAX_LAYERS];
    // backward buffers
    void *dres, *d_c, *d_3c, *d_4c;
    float *fscratch;
    size_t fscratch_len;
    float *dbias; // BGRADB output, 4C floats
    int *d_tokens, *d_targets, *d_csr;
    // Pinned host staging for the ids, two sets used in turn so the upload of
    // micro-step k+1 is truly asynchronous while micro-step k still runs
    // (from pageable memory cudaMemcpyAsync would wait for the stream).
    int *h_pin[2], *h_counts;
    cudaEvent_t up_ev[2];
    int up_slot;
    // Every device -> host copy goes through this pinned bounce buffer and is
    // waited for by polling bounce_ev through `wait` (never a blocking copy
    // into pageable memory, which would hang on a stream stuck behind a dead
    // peer's collective).
    char *bounce;
    cudaEvent_t bounce_ev;
    cuda_wait_fn wait;
    void *wait_ctx;
    int nseg, nbig, have_targets;

    void *allocs[16 * MAX_LAYERS + 64];
    int nallocs;
    size_t bytes;
};

extern "C" int cuda_precision_parse(const char *name, int *prec, skiff_err *err)
{
    if (!name || !strcmp(name, "bf16"))
        *prec = SKIFF_CUDA_BF16;
    else if (!strcmp(name, "fp16"))
        *prec = SKIFF_CUDA_FP16;
    else if (!strcmp(name, "fp32"))
        *prec = SKIFF_CUDA_FP32;
    else
        return skiff_error(err, 0, "--precision '%s': use bf16, fp16 or fp32", name);
    return 0;
}

extern "C" int cuda_select_device(int local_rank, char *name, size_t name_len, skiff_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return skiff_error(err, ENODEV,
                           "--device cuda: no usable GPU (%s); check the driver and "
                           "CUDA_VISIBLE_DEVICES, or use --device cpu",
                           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    int dev = local_rank % n;
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    if (p.major < 9)
        return skiff_error(err, ENODEV,
                           "GPU %d (%s) has compute capability %d.%d; skiff-train's CUDA path is "
                           "built for sm_90 (Hopper) and later: rebuild with CUDA_ARCH=-arch=sm_%d%d",
                           dev, p.name, p.major, p.minor, p.major, p.minor);
    if (name) snprintf(name, name_len, "%s", p.name);
    return 0;
}

static int dalloc(struct cuda_gpt2 *m, void **p, size_t bytes, const char *what, skiff_err *err)
{
    if ((size_t)m->nallocs == sizeof(m->allocs) / sizeof(m->allocs[0]))
        return skiff_error(err, 0, "too many device buffers");
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return skiff_error(err, ENOMEM,
                           "out of GPU memory allocating %s (%.1f MiB; %.1f MiB allocated so far, "
                           "%.1f MiB free of %.1f): use a smaller --batch or --seq",
                           what, bytes / 1048576.0, m->bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
    }
    m->allocs[m->nallocs++] = *p;
    m->bytes += bytes;
    return 0;
}
#define DALLOC(ptr, bytes) TRY(dalloc(m, (void **)&(ptr), (bytes), #ptr, err))

#define BOUNCE_BYTES (16u << 20)
#define DEFAULT_WAIT_MS (300 * 1000)

// Without a training loop's communicator (gpu_tool): poll with a timeout.
static int default_wait(void *, void *event, const char *what, skiff_err *err)
{
    return cuda_poll_event((cudaEvent_t)event, DEFAULT_WAIT_MS, NULL, NULL, what, err);
}

extern "C" void cuda_gpt2_set_waiter(struct cuda_gpt2 *m, cuda_wait_fn fn, void *ctx)
{
    m->wait = fn ? fn : default_wait;
    m->wait_ctx = ctx;
}

static int wait_for(struct cuda_gpt2 *m, cudaEvent_t e, const char *what, skiff_err *err)
{
    return m->wait(m->wait_ctx, (void *)e, what, err);
}

extern "C" int cuda_gpt2_d2h(struct cuda_gpt2 *m, void *host, const void *dev, size_t bytes, skiff_err *err)
{
    for (size_t off = 0; off < bytes; off += BOUNCE_BYTES) {
        size_t len = bytes - off < BOUNCE_BYTES ? bytes - off : BOUNCE_BYTES;
        CUDA_CHECK(cudaMemcpyAsync(m->bounce, (const char *)dev + off, len, cudaMemcpyDeviceToHost, m->stream));
        CUDA_CHECK(cudaEventRecord(m->bounce_ev, m->stream));
        TRY(wait_for(m, m->bounce_ev, "copying results from the GPU", err));
        memcpy((char *)host + off, m->bounce, len);
    }
    return 0;
}

extern "C" int cuda_gpt2_h2d(struct cuda_gpt2 *m, void *dev, const void *host, size_t bytes, skiff_err *err)
{
    for (size_t off = 0; off < bytes; off += BOUNCE_BYTES) {
        size_t len = bytes - off < BOUNCE_BYTES ? bytes - off : BOUNCE_BYTES;
        memcpy(m->bounce, (const char *)host + off, len);
        CUDA_CHECK(cudaMemcpyAsync((char *)dev + off, m->bounce, len, cudaMemcpyHostToDevice, m->stream));
        CUDA_CHECK(cudaEventRecord(m->bounce_ev, m->stream));
        TRY(wait_for(m, m->bounce_ev, "copying to the GPU", err)); // before the bounce is reused
    }
    return 0;
}

extern "C" void cuda_gpt2_destroy(struct cuda_gpt2 *m)
{
    if (!m) return;
    for (int i = 0; i < m->nallocs; i++) cudaFree(m->allocs[i]);
    mm_fini(&m->mm);
    if (m->stream) cudaStreamDestroy(m->stream);
    for (int i = 0; i < 2; i++) {
        if (m->h_pin[i]) cudaFreeHost(m->h_pin[i]);
        if (m->up_ev[i]) cudaEventDestroy(m->up_ev[i]);
    }
    if (m->bounce) cudaFreeHost(m->bounce);
    if (m->bounce_ev) cudaEventDestroy(m->bounce_ev);
    free(m->h_counts);
    free(m->pieces);
    free(m);
}

static size_t scratch_floats(int B, int T, int C, int NH)
{
    size_t N = (size_t)B * T, fs = k_attention_scratch_floats(B, T, C, NH);
    size_t cs = k_colsum_scratch_floats((int)N, 4 * C);
    if (cs > fs) fs = cs;
    if (k_norm_scratch_floats() > fs) fs = k_norm_scratch_floats();
    if (k_encoder_scratch_floats((int)N, C) > fs) fs = k_encoder_scratch_floats((int)N, C);
    return fs;
}

extern "C" void cuda_gpt2_memory_plan(const struct gpt2_config *cfg, int B, int T, int prec, int tp, unsigned flags,
                                      size_t n_pad, size_t opt_len, struct cuda_mem_plan *p)
{
    size_t e = prec == SKIFF_CUDA_FP32 ? 4 : 2, N = (size_t)B * T, C = cfg->channels, L = cfg->num_layers;
    size_t NC = N * C, f = sizeof(float), NCl = NC / (size_t)tp, NHl = (size_t)cfg->num_heads / (size_t)tp;
    size_t S = flags & CUDA_GPT2_RECOMPUTE ? 1 : L; // slots of a block's inner activations
    memset(p, 0, sizeof(*p));
    p->workspace = MM_WORKSPACE_BYTES;
    p->params = n_pad * e;
    p->grads = flags & CUDA_GPT2_UNITS ? 0 : n_pad * f;
    p->optimizer = 3 * opt_len * f; // master, m, v
    // per layer res3 (C wide); per slot ln1, res2, ln2 (C wide), qkv, atty
    // (3C/tp, C/tp), fch, fchg (4C/tp) + LayerNorm statistics and the
    // attention log-sum-exp of this rank's heads; then encoded and lnf
    p->activations = L * NC * e + S * ((3 * NC + 12 * NCl) * e + 4 * N * f + N * NHl * f) + 2 * NC * e + 2 * N * f;
    p->logits = (size_t)cuda_classifier_rows((int)N) * cfg->padded_vocab_size * e;
    p->backward = NC * e /* forward scratch */ + 2 * NC * e /* dres, d_c */ + 7 * NCl * e /* d_3c, d_4c */;
    p->scratch = scratch_floats(B, T, (int)C, cfg->num_heads) * f + 4 * C * f /* BGRADB output */ +
                 (tp > 1 && e != f ? NC * f : 0) /* fp32 staging of the tensor-parallel sums */;
    p->misc = N * f + 4 * f /* losses */ + 2 * N * sizeof(int) + k_encoder_csr_ints((int)N) * sizeof(int);
    p->total = p->workspace + p->params + p->grads + p->optimizer + p->activations + p->logits + p->backward +
               p->scratch + p->misc;
}

// SKIFF_CUDA_EPILOGUES: which fused cuBLASLt epilogues to use, a comma list
// of gelu, dgelu, bgradb, or "none"; unset: all three. An A/B switch for the
// GPU run (does BGRADB into fp32 pick a split-K kernel? is the fused GELU
// faster than the own kernel?). SKIFF_CUDA_FUSED_EPILOGUES=0 is "none".
static int epilogues_from_env(struct cuda_gpt2 *m, skiff_err *err)
{
    const char *fe = getenv("SKIFF_CUDA_FUSED_EPILOGUES"), *list = getenv("SKIFF_CUDA_EPILOGUES");
    int all = !(fe && !strcmp(fe, "0"));
    m->fuse_gelu = m->fuse_dgelu = m->fuse_bgradb = all;
    if (!list || !all) return 0;
    m->fuse_gelu = m->fuse_dgelu = m->fuse_bgradb = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "gelu"))
            m->fuse_gelu = 1;
        else if (!strcmp(t, "dgelu"))
            m->fuse_dgelu = 1;
        else if (!strcmp(t, "bgradb"))
            m->fuse_bgradb = 1;
        else if (strcmp(t, "none"))
            return skiff_error(err, 0, "SKIFF_CUDA_EPILOGUES='%s': '%s' is not one of gelu, dgelu, bgradb, none", list,
                               t);
    }
    return 0;
}

// The classifier (logits, softmax + cross-entropy, and in training its
// data and weight gradients) runs over chunks of this many rows, so only a
// chunk of the (B*T, Vp) logits exists: SKIFF_CUDA_CLASSIFIER_ROWS, default
// 8192; 0 = all rows at once (the former layout). A smaller chunk saves
// memory but accumulates wte's fp32 gradient once more per chunk (Vp*C*8
// bytes of traffic each: 0.31 GB at d12), so the default is set by memory.
extern "C" int cuda_classifier_rows(int N)
{
    const char *v = getenv("SKIFF_CUDA_CLASSIFIER_ROWS");
    long r = v && *v ? strtol(v, NULL, 10) : 8192;
    if (r <= 0 || r > N) r = N;
    return (int)r;
}

static int create(struct cuda_gpt2 *m, const struct gpt2_config *cfg, int B, int T, int prec, int tp, int tp_rank,
                  unsigned flags, size_t n_pad, size_t opt_off, size_t opt_len, skiff_err *err)
{
    m->cfg = *cfg;
    m->B = B, m->T = T, m->prec = prec;
    m->L = cfg->num_layers, m->C = cfg->channels, m->NH = cfg->num_heads;
    m->lo = 0, m->hi = m->L;
    TRY(gpt2_tp_check(cfg, tp, err));
    if (tp_rank < 0 || tp_rank >= tp) return skiff_error(err, 0, "tensor-parallel rank %d of %d", tp_rank, tp);
    m->tp = tp, m->tp_rank = tp_rank;
    m->Cl = m->C / tp, m->NHl = m->NH / tp, m->F = 4 * m->C / tp;
    m->V = cfg->vocab_size, m->Vp = cfg->padded_vocab_size;
    if (m->L > MAX_LAYERS) return skiff_error(err, 0, "at most %d layers on CUDA", MAX_LAYERS);
    if (T > cfg->max_seq_len) return skiff_error(err, 0, "--seq %d > the model's %d", T, cfg->max_seq_len);
    int hs = m->NH > 0 && m->C % m->NH == 0 ? m->C / m->NH : 0;
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
        return skiff_error(err, 0,
                           "the CUDA attention kernels support head sizes 16, 32, 64 and 128; this model "
                           "has n_embd %d / n_head %d: use --device cpu or another --model",
                           m->C, m->NH);
    m->nparams = gpt2_param_layout_tp(cfg, tp, m->sizes, m->offs);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) m->base[i] = (ptrdiff_t)m->offs[i];
    m->stage_layout = (flags & CUDA_GPT2_STAGE) != 0;
    int units = (flags & CUDA_GPT2_UNITS) != 0;
    m->recompute = (flags & CUDA_GPT2_RECOMPUTE) != 0;
    if (units) { // where each tensor's slice sits in its unit (the root's, a block's; with --tp, of the rank's part)
        struct gpt2_slice sl[GPT2_UNIT_MAX_SLICES];
        size_t total;
        for (int u = 0; u < 2; u++) {
            int n = gpt2_unit_slices_tp(cfg, tp, u, sl, &total);
            size_t at = 0;
            for (int i = 0; i < n; at += sl[i].len, i++) m->uoff[sl[i].tensor] = at;
        }
    }
    if ((!units && !m->stage_layout && n_pad < m->nparams) || opt_off + opt_len > n_pad)
        return skiff_error(err, 0, "bad parameter padding/shard (%zu/%zu+%zu of %zu)", n_pad, opt_off, opt_len,
                           m->nparams);
    m->n_pad = n_pad, m->opt_off = opt_off, m->opt_len = opt_len;
    m->elem = prec == SKIFF_CUDA_FP32 ? 4 : 2;
    TRY(epilogues_from_env(m, err));
    m->crows = cuda_classifier_rows(B * T);
    CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    m->wait = default_wait;
    CUDA_CHECK(cudaMallocHost((void **)&m->bounce, BOUNCE_BYTES));
    CUDA_CHECK(cudaEventCreateWithFlags(&m->bounce_ev, cudaEventDisableTiming));
    TRY(mm_init(&m->mm, err));
    m->bytes += m->mm.workspace_size;

    size_t e = m->elem, N = (size_t)B * T, C = m->C, L = m->L, Cl = m->Cl, F = m->F;
    DALLOC(m->params, n_pad * e);
    if (!units) DALLOC(m->grads, n_pad * sizeof(float));
    DALLOC(m->master, opt_len * sizeof(float));
    DALLOC(m->m, opt_len * sizeof(float));
    DALLOC(m->v, opt_len * sizeof(float));
    // On the model's stream: the legacy-stream cudaMemset would not be ordered
    // before later work on this non-blocking stream.
    CUDA_CHECK(cudaMemsetAsync(m->params, 0, n_pad * e, m->stream));
    if (!units) CUDA_CHECK(cudaMemsetAsync(m->grads, 0, n_pad * sizeof(float), m->stream));
    CUDA_CHECK(cudaMemsetAsync(m->m, 0, opt_len * sizeof(float), m->stream));
    CUDA_CHECK(cudaMemsetAsync(m->v, 0, opt_len * sizeof(float), m->stream));

    DALLOC(m->encoded, N * C * e);
    for (size_t l = 0; l < L; l++) {
        DALLOC(m->res3[l], N * C * e);
        if (m->recompute && l > 0) { // the block's one slot
            m->ln1[l] = m->ln1[0], m->ln1_mean[l] = m->ln1_mean[0], m->ln1_rstd[l] = m->ln1_rstd[0];
            m->qkv[l] = m->qkv[0], m->atty[l] = m->atty[0], m->lse[l] = m->lse[0], m->res2[l] = m->res2[0];
            m->ln2[l] = m->ln2[0], m->ln2_mean[l] = m->ln2_mean[0], m->ln2_rstd[l] = m->ln2_rstd[0];
            m->fch[l] = m->fch[0], m->fchg[l] = m->fchg[0];
            continue;
        }
        DALLOC(m->ln1[l], N * C * e);
        DALLOC(m->ln1_mean[l], N * sizeof(float));
        DALLOC(m->ln1_rstd[l], N * sizeof(float));
        DALLOC(m->qkv[l], N * 3 * Cl * e);
        DALLOC(m->atty[l], N * Cl * e);
        DALLOC(m->lse[l], N * m->NHl * sizeof(float));
        DALLOC(m->res2[l], N * C * e);
        DALLOC(m->ln2[l], N * C * e);
        DALLOC(m->ln2_mean[l], N * sizeof(float));
        DALLOC(m->ln2_rstd[l], N * sizeof(float));
        DALLOC(m->fch[l], N * F * e);
        DALLOC(m->fchg[l], N * F * e);
    }
    DALLOC(m->lnf, N * C * e);
    DALLOC(m->lnf_mean, N * sizeof(float));
    DALLOC(m->lnf_rstd, N * sizeof(float));
    DALLOC(m->logits, (size_t)m->crows * m->Vp * e); // one chunk of rows
    DALLOC(m->losses, N * sizeof(float));
    DALLOC(m->loss_acc, 4 * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(m->loss_acc, 0, 4 * sizeof(float), m->stream));
    DALLOC(m->scratch, N * C * e);
    DALLOC(m->dres, N * C * e);
    DALLOC(m->d_c, N * C * e);
    DALLOC(m->d_3c, N * 3 * Cl * e);
    DALLOC(m->d_4c, N * F * e);
    size_t fs = scratch_floats(B, T, m->C, m->NH);
    m->fscratch_len = fs;
    DALLOC(m->fscratch, fs * sizeof(float));
    DALLOC(m->d_tokens, N * sizeof(int));
    DALLOC(m->d_targets, N * sizeof(int));
    DALLOC(m->dbias, 4 * C * sizeof(float));
    if (tp > 1 && e != sizeof(float)) DALLOC(m->tpbuf, N * C * sizeof(float));
    size_t csr_ints = k_encoder_csr_ints((int)N);
    DALLOC(m->d_csr, csr_ints * sizeof(int));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost((void **)&m->h_pin[i], (2 * N + csr_ints) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&m->up_ev[i], cudaEventDisableTiming));
    }
    m->h_counts = (int *)malloc((size_t)m->Vp * sizeof(int));
    if (!m->h_counts) return skiff_error(err, ENOMEM, "token index");
    // The memory plan (what gpu_tool budget reports without a GPU) must be
    // what was allocated.
    struct cuda_mem_plan plan;
    cuda_gpt2_memory_plan(cfg, B, T, prec, tp, flags, n_pad, opt_len, &plan);
    if (plan.total != m->bytes)
        return skiff_error(err, 0, "%s:%d: internal: the model allocated %zu bytes, cuda_gpt2_memory_plan says %zu",
                           __FILE__, __LINE__, m->bytes, plan.total);
    return 0;
}

extern "C" int cuda_gpt2_create(struct cuda_gpt2 **out, const struct gpt2_config *cfg, int B, int T, int prec, int tp,
                                int tp_rank, unsigned flags, size_t n_pad, size_t opt_off, size_t opt_len,
                                skiff_err *err)
{
    struct cuda_gpt2 *m = (struct cuda_gpt2 *)calloc(1, sizeof(*m));
    if (!m) return skiff_error(err, ENOMEM, "model");
    if (create(m, cfg, B, T, prec, tp, tp_rank, flags, n_pad, opt_off, opt_len, err) < 0) {
        cuda_gpt2_destroy(m);
        return -1;
    }
    *out = m;
    return 0;
}

extern "C" void cuda_gpt2_set_tp_allreduce(struct cuda_gpt2 *m, cuda_tp_allreduce_fn fn, void *ctx)
{
    m->tp_sum_fn = fn;
    m->tp_ctx = ctx;
}

extern "C" int cuda_gpt2_set_stage(struct cuda_gpt2 *m, int lo, int hi, skiff_err *err)
{
    if (lo < 0 || hi <= lo || hi > m->L || ((lo > 0 || hi < m->L) && m->units))
        return skiff_error(err, 0, "pipeline stage: blocks [%d, %d) of %d%s", lo, hi, m->L,
                           m->units ? " (not with ZeRO-3)" : "");
    m->lo = lo, m->hi = hi;
    return 0;
}
extern "C" int cuda_gpt2_set_stage_layout(struct cuda_gpt2 *m, const size_t off[GPT2_NUM_PARAM_TENSORS], skiff_err *err)
{
    if (!m->stage_layout) return skiff_error(err, 0, "stage layout of a model created without CUDA_GPT2_STAGE");
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        int block = i >= GPT2_LN1W && i <= GPT2_FCPROJB;
        ptrdiff_t per = (ptrdiff_t)(m->sizes[i] / (block ? m->L : 1));
        m->base[i] = (ptrdiff_t)off[i] - (block ? (ptrdiff_t)m->lo * per : 0);
    }
    return 0;
}
extern "C" void *cuda_gpt2_stage_in(struct cuda_gpt2 *m) { return m->lo > 0 ? m->res3[m->lo - 1] : NULL; }
extern "C" void *cuda_gpt2_stage_out(struct cuda_gpt2 *m) { return m->res3[m->hi - 1]; }
extern "C" void *cuda_gpt2_stage_grad(struct cuda_gpt2 *m) { return m->dres; }

extern "C" void cuda_gpt2_use_units(struct cuda_gpt2 *m, const struct cuda_gpt2_units *u) { m->units = u; }

extern "C" int cuda_gpt2_set_opt_pieces(struct cuda_gpt2 *m, const struct cuda_opt_piece *p, int n, skiff_err *err)
{
    struct cuda_opt_piece *c = (struct cuda_opt_piece *)malloc((n ? n : 1) * sizeof(*c));
    if (!c) return skiff_error(err, ENOMEM, "optimizer pieces");
    for (int i = 0; i < n; i++)
        if (p[i].off + p[i].len > m->opt_len) {
            free(c);
            return skiff_error(err, 0, "optimizer piece %zu+%zu beyond the range's %zu", p[i].off, p[i].len,
                               m->opt_len);
        }
    memcpy(c, p, n * sizeof(*c));
    free(m->pieces);
    m->pieces = c;
    m->npieces = n;
    return 0;
}

// ZeRO-3: unit u's parameters (the caller's gather) and gradients (its
// buffer for this backward), remembered for P and G; no-ops without units.
static int unit_gather(struct cuda_gpt2 *m, int u, int backward, skiff_err *err)
{
    if (!m->units) return 0;
    if (!(m->uw[u] = m->units->gather(m->units->ctx, u, backward, err))) return -1;
    return 0;
}
static int unit_release(struct cuda_gpt2 *m, int u, skiff_err *err)
{
    if (!m->units) return 0;
    m->uw[u] = NULL;
    return m->units->release(m->units->ctx, u, err);
}
static int unit_grad(struct cuda_gpt2 *m, int u, skiff_err *err)
{
    if (!m->units) return 0;
    if (!(m->ug[u] = m->units->grad(m->units->ctx, u, err))) return -1;
    return 0;
}
static int unit_grad_done(struct cuda_gpt2 *m, int u, skiff_err *err)
{
    if (!m->units) return 0;
    m->ug[u] = NULL;
    return m->units->grad_done(m->units->ctx, u, err);
}

extern "C" size_t cuda_gpt2_num_params(const struct cuda_gpt2 *m) { return m->nparams; }
extern "C" void *cuda_gpt2_stream(struct cuda_gpt2 *m) { return m->stream; }
extern "C" float *cuda_gpt2_grads(struct cuda_gpt2 *m) { return m->grads; }
extern "C" size_t cuda_gpt2_bytes(const struct cuda_gpt2 *m) { return m->bytes; }

// ---------------------------------------------------------------- parameters
template <typename T> static int params_from_t(struct cuda_gpt2 *m, const float *dev, skiff_err *err)
{
    return k_cast_from_f32<T>((T *)m->params, dev, m->n_pad, m->stream, err);
}

extern "C" int cuda_gpt2_params_from(struct cuda_gpt2 *m, const float *dev, skiff_err *err)
{
    switch (m->prec) {
    case SKIFF_CUDA_FP32: return params_from_t<float>(m, dev, err);
    case SKIFF_CUDA_BF16: return params_from_t<bf16>(m, dev, err);
    default: return params_from_t<fp16>(m, dev, err);
    }
}

extern "C" int cuda_gpt2_to_storage(struct cuda_gpt2 *m, void *dst, const float *src, size_t n, skiff_err *err)
{
    switch (m->prec) {
    case SKIFF_CUDA_FP32: return k_cast_from_f32<float>((float *)dst, src, n, m->stream, err);
    case SKIFF_CUDA_BF16: return k_cast_from_f32<bf16>((bf16 *)dst, src, n, m->stream, err);
    default: return k_cast_from_f32<fp16>((fp16 *)dst, src, n, m->stream, err);
    }
}

extern "C" float *cuda_gpt2_opt_buf(struct cuda_gpt2 *m, int which)
{
    return which == 0 ? m->master : which == 1 ? m->m : m->v;
}

extern "C" int cuda_gpt2_set_params_device(struct cuda_gpt2 *m, const float *dev, skiff_err *err)
{
    CUDA_CHECK(
        cudaMemcpyAsync(m->master, dev + m->opt_off, m->opt_len * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    return cuda_gpt2_params_from(m, dev, err);
}

extern "C" int cuda_gpt2_set_params(struct cuda_gpt2 *m, const float *host, skiff_err *err)
{
    if (m->units) { // the shard: its fp32 master, then the storage copy from it
        TRY(cuda_gpt2_h2d(m, m->master, host, m->opt_len * sizeof(float), err));
        return cuda_gpt2_params_from(m, m->master, err);
    }
    // The gradient buffer (n_pad floats) is free between steps: stage there.
    TRY(cuda_gpt2_h2d(m, m->grads, host, m->n_pad * sizeof(float), err));
    TRY(cuda_gpt2_set_params_device(m, m->grads, err));
    CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->n_pad * sizeof(float), m->stream));
    return 0;
}

extern "C" int cuda_gpt2_get_master(struct cuda_gpt2 *m, float *host, skiff_err *err)
{
    return cuda_gpt2_d2h(m, host, m->master, m->opt_len * sizeof(float), err);
}

extern "C" int cuda_gpt2_master_to(struct cuda_gpt2 *m, float *dev, skiff_err *err)
{
    CUDA_CHECK(
        cudaMemcpyAsync(dev + m->opt_off, m->master, m->opt_len * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    return 0;
}

extern "C" int cuda_gpt2_get_opt_state(struct cuda_gpt2 *m, float *hm, float *hv, skiff_err *err)
{
    TRY(cuda_gpt2_d2h(m, hm, m->m, m->opt_len * sizeof(float), err));
    return cuda_gpt2_d2h(m, hv, m->v, m->opt_len * sizeof(float), err);
}

extern "C" int cuda_gpt2_set_opt_state(struct cuda_gpt2 *m, const float *hm, const float *hv, skiff_err *err)
{
    TRY(cuda_gpt2_h2d(m, m->m, hm, m->opt_len * sizeof(float), err));
    return cuda_gpt2_h2d(m, m->v, hv, m->opt_len * sizeof(float), err);
}

// ---------------------------------------------------------------- forward
// Pointer to layer l's slice of parameter tensor i in the storage buffer.
// Under ZeRO-3, in unit 1+l's (or the root's) gathered buffer.
template <typename T> static T *P(struct cuda_gpt2 *m, int i, int l)
{
    int block = i >= GPT2_LN1W && i <= GPT2_FCPROJB;
    if (m->units) return (T *)m->uw[block ? 1 + l : 0] + m->uoff[i];
    ptrdiff_t per = (ptrdiff_t)(m->sizes[i] / (block ? m->L : 1));
    return (T *)m->params + (m->base[i] + (ptrdiff_t)l * per);
}
static float *G(struct cuda_gpt2 *m, int i, int l)
{
    int block = i >= GPT2_LN1W && i <= GPT2_FCPROJB;
    if (m->units) return m->ug[block ? 1 + l : 0] + m->uoff[i];
    ptrdiff_t per = (ptrdiff_t)(m->sizes[i] / (block ? m->L : 1));
    return m->grads + (m->base[i] + (ptrdiff_t)l * per);
}

// Megatron's sum over the tensor-parallel ranks (a no-op with one), in
// place on n elements of the storage type: after a row-parallel layer's
// partial products (forward) and on a column-parallel layer's input
// gradient (backward). bf16/fp16 are summed in fp32 (tpbuf) and rounded
// once, so every rank gets the same bits whatever the backend (the
// host-staged ring reduces fp32 only), at twice the bytes of a bf16 sum.
template <typename T> static int tp_sum(struct cuda_gpt2 *m, T *buf, size_t n, skiff_err *err)
{
    if (m->tp == 1) return 0;
    if (!m->tp_sum_fn) return skiff_error(err, 0, "--tp %d: the model has no tensor-parallel communicator", m->tp);
    cudaStream_t s = m->stream;
    if constexpr (sizeof(T) == sizeof(float)) {
        PROF(s, "tp all-reduce", m->tp_sum_fn(m->tp_ctx, (float *)(void *)buf, n, err));
    } else {
        PROF(s, "tp all-reduce", k_cast_to_f32<T>(m->tpbuf, buf, n, s, err));
        PROF(s, "tp all-reduce", m->tp_sum_fn(m->tp_ctx, m->tpbuf, n, err));
        PROF(s, "tp all-reduce", k_cast_from_f32<T>(buf, m->tpbuf, n, s, err));
    }
    return 0;
}

// The classifier over rows [r0, r0+R) of lnf, through the chunk buffer:
// logits = lnf W_te^T; with targets the losses of those rows; in training
// (dloss != 0) the chunk is overwritten by dlogits, and its data gradient
// (dlnf rows, into d_c, which the backward starts from) and its share of
// wte's gradient follow at once, so the chunk buffer is free for the next.
template <typename T> static int classifier_chunk(struct cuda_gpt2 *m, int r0, int R, float dloss, skiff_err *err)
{
    cudaStream_t s = m->stream;
    size_t C = m->C;
    T *lg = (T *)m->logits, *x = (T *)m->lnf + r0 * C;
    PROF(s, "classifier fwd", mm_forward<T>(&m->mm, lg, NULL, x, P<T>(m, GPT2_WTE, 0), NULL, R, m->C, m->Vp, s, err));
    if (!m->have_targets) return 0;
    PROF(s, "softmax + cross-entropy",
         k_fused_classifier<T>(lg, m->losses + r0, m->d_targets + r0, dloss, R, m->V, m->Vp, s, err));
    if (dloss == 0.0f) return 0;
    int unused;
    PROF(s, "classifier dgrad",
         mm_backward_data<T>(&m->mm, (T *)m->d_c + r0 * C, lg, P<T>(m, GPT2_WTE, 0), NULL, R, m->C, m->Vp, s, &unused,
                             err));
    PROF(s, "classifier wgrad",
         mm_backward_weight<T>(&m->mm, G(m, GPT2_WTE, 0), NULL, x, lg, R, m->C, m->Vp, s, &unused, err));
    return 0;
}

// Block l's forward from its first LayerNorm's output (ln1[l], written by
// the kernel before) to the MLP's hidden activations (fch, fchg): what the
// backward reads, and all that --recompute redoes. With tensor parallelism
// the block runs this rank's heads and hidden units (Cl, NHl, F); the
// row-parallel output (attproj) is summed over the ranks before the
// residual, its replicated bias added by rank 0's GEMM only, so it is in
// the sum once.
template <typename T> static int block_inner(struct cuda_gpt2 *m, int l, skiff_err *err)
{
    int B = m->B, Tn = m->T, C = m->C, N = B * Tn, NH = m->NHl, Cl = m->Cl, F = m->F;
    cudaStream_t s = m->stream;
    int bias_here = m->tp_rank == 0; // the row-parallel layers' bias
    T *res_in = l == 0 ? (T *)m->encoded : (T *)m->res3[l - 1];
    T *scr = (T *)m->scratch;
    PROF(s, "qkv fwd",
         mm_forward<T>(&m->mm, (T *)m->qkv[l], NULL, (T *)m->ln1[l], P<T>(m, GPT2_QKVW, l), P<T>(m, GPT2_QKVB, l), N, C,
                       3 * Cl, s, err));
    TRY(k_attention_forward<T>((T *)m->atty[l], m->lse[l], (T *)m->qkv[l], B, Tn, Cl, NH, s, err));
    PROF(s, "attproj fwd",
         mm_forward<T>(&m->mm, scr, NULL, (T *)m->atty[l], P<T>(m, GPT2_ATTPROJW, l),
                       bias_here ? P<T>(m, GPT2_ATTPROJB, l) : NULL, N, Cl, C, s, err));
    TRY(tp_sum<T>(m, scr, (size_t)N * C, err));
    PROF(s, "residual + layernorm fwd",
         k_residual_layernorm_forward<T>((T *)m->res2[l], (T *)m->ln2[l], m->ln2_mean[l], m->ln2_rstd[l], res_in, scr,
                                         P<T>(m, GPT2_LN2W, l), P<T>(m, GPT2_LN2B, l), N, C, s, err));
    if (m->fuse_gelu) {
        PROF(s, "fc fwd",
             mm_forward<T>(&m->mm, (T *)m->fchg[l], (T *)m->fch[l], (T *)m->ln2[l], P<T>(m, GPT2_FCW, l),
                           P<T>(m, GPT2_FCB, l), N, C, F, s, err));
    } else {
        PROF(s, "fc fwd",
             mm_forward<T>(&m->mm, (T *)m->fch[l], NULL, (T *)m->ln2[l], P<T>(m, GPT2_FCW, l), P<T>(m, GPT2_FCB, l), N,
                           C, F, s, err));
        PROF(s, "gelu fwd", k_gelu_forward<T>((T *)m->fchg[l], (T *)m->fch[l], (size_t)N * F, s, err));
    }
    return 0;
}

// The forward: the embedding and block 0's first LayerNorm, every block
// (block_inner, then the MLP's second, row-parallel GEMM summed over the
// tensor-parallel ranks and the residual add fused with the next LayerNorm:
// ln1 of l+1, or lnf), the classifier. Under ZeRO-3 each block's unit is
// gathered before it and released after it, and the next block's is
// gathered before that last fused kernel, which reads its ln1 weights.
template <typename T> static int forward_t(struct cuda_gpt2 *m, float dloss, skiff_err *err)
{
    int B = m->B, Tn = m->T, C = m->C, L = m->L, N = B * Tn, F = m->F;
    cudaStream_t s = m->stream;
    int bias_here = m->tp_rank == 0; // the row-parallel layers' bias
    T *enc = (T *)m->encoded, *scr = (T *)m->scratch;
    int lo = m->lo, hi = m->hi;
    TRY(unit_gather(m, 0, 0, err));
    TRY(unit_gather(m, 1 + lo, 0, err)); // its ln1 is the embedding's LayerNorm
    // a later pipeline stage starts from the residual stream the stage
    // before sent into cuda_gpt2_stage_in (res3 of the block below)
    if (lo == 0)
        PROF(s, "embedding fwd",
             k_encoder_forward<T>(enc, m->d_tokens, P<T>(m, GPT2_WTE, 0), P<T>(m, GPT2_WPE, 0), B, Tn, C, s, err));
    else
        enc = (T *)m->res3[lo - 1];
    PROF(s, "layernorm fwd",
         k_residual_layernorm_forward<T>(enc, (T *)m->ln1[lo], m->ln1_mean[lo], m->ln1_rstd[lo], enc, NULL,
                                         P<T>(m, GPT2_LN1W, lo), P<T>(m, GPT2_LN1B, lo), N, C, s, err));
    for (int l = lo; l < hi; l++) {
        TRY(unit_gather(m, 1 + l, 0, err)); // (gathered already: ZeRO-3 starts the next one's gather)
        TRY(block_inner<T>(m, l, err));
        PROF(s, "fcproj fwd",
             mm_forward<T>(&m->mm, scr, NULL, (T *)m->fchg[l], P<T>(m, GPT2_FCPROJW, l),
                           bias_here ? P<T>(m, GPT2_FCPROJB, l) : NULL, N, F, C, s, err));
        TRY(tp_sum<T>(m, scr, (size_t)N * C, err));
        // residual add fused with the next LayerNorm (ln1 of l+1, or lnf)
        int last = l == L - 1;
        if (!last) TRY(unit_gather(m, 2 + l, 0, err));
        PROF(s, "residual + layernorm fwd",
             k_residual_layernorm_forward<T>((T *)m->res3[l], last ? (T *)m->lnf : (T *)m->ln1[l + 1],
                                             last ? m->lnf_mean : m->ln1_mean[l + 1],
                                             last ? m->lnf_rstd : m->ln1_rstd[l + 1], (T *)m->res2[l], scr,
                                             last ? P<T>(m, GPT2_LNFW, 0) : P<T>(m, GPT2_LN1W, l + 1),
                                             last ? P<T>(m, GPT2_LNFB, 0) : P<T>(m, GPT2_LN1B, l + 1), N, C, s, err));
        TRY(unit_release(m, 1 + l, err));
    }
    m->have_dlnf = 0;
    if (hi < L) return unit_release(m, 0, err); // an earlier stage: its output is res3[hi-1]
    // Without targets there is nothing to compute from the logits here
    // (cuda_gpt2_get_logits computes them when asked).
    m->have_dlnf = 0;
    if (m->have_targets) {
        if (dloss != 0.0f) TRY(unit_grad(m, 0, err)); // the classifier adds wte's gradient
        for (int r0 = 0; r0 < N; r0 += m->crows)
            TRY(classifier_chunk<T>(m, r0, N - r0 < m->crows ? N - r0 : m->crows, dloss, err));
        m->have_dlnf = dloss != 0.0f;
        PROF(s, "loss mean", k_mean(m->loss_acc, m->losses, N, s, err));
    }
    return unit_release(m, 0, err);
}

extern "C" int cuda_gpt2_forward(struct cuda_gpt2 *m, const int *inputs, const int *targets, float dloss,
                                 skiff_err *err)
{
    int N = m->B * m->T;
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= m->V || (targets && (targets[i] < 0 || targets[i] >= m->V)))
            return skiff_error(err, 0, "token %d at position %d is outside the vocabulary (%d)",
                               inputs[i] < 0 || inputs[i] >= m->V ? inputs[i] : targets[i], i, m->V);
    int slot = m->up_slot ^= 1;
    TRY(wait_for(m, m->up_ev[slot], "reusing the token upload buffer", err)); // its last upload was read
    int *tok = m->h_pin[slot], *tgt = tok + N, *csr = tgt + N;
    memcpy(tok, inputs, N * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(m->d_tokens, tok, N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (targets) {
        memcpy(tgt, targets, N * sizeof(int));
        CUDA_CHECK(cudaMemcpyAsync(m->d_targets, tgt, N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    }
    m->have_targets = targets != NULL;
    // Rows grouped by token for the deterministic embedding backward.
    int ncsr = k_encoder_csr(csr, m->h_counts, inputs, N, m->V);
    m->nseg = csr[0], m->nbig = csr[1];
    CUDA_CHECK(cudaMemcpyAsync(m->d_csr, csr, (size_t)ncsr * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaEventRecord(m->up_ev[slot], m->stream));
    switch (m->prec) {
    case SKIFF_CUDA_FP32: return forward_t<float>(m, dloss, err);
    case SKIFF_CUDA_BF16: return forward_t<bf16>(m, dloss, err);
    default: return forward_t<fp16>(m, dloss, err);
    }
}

extern "C" int cuda_gpt2_take_loss(struct cuda_gpt2 *m, double *sum, skiff_err *err)
{
    float h = 0.0f;
    TRY(cuda_gpt2_d2h(m, &h, m->loss_acc, sizeof(float), err));
    CUDA_CHECK(cudaMemsetAsync(m->loss_acc, 0, sizeof(float), m->stream));
    *sum = h;
    return 0;
}

extern "C" int cuda_gpt2_take_loss_dev(struct cuda_gpt2 *m, float *dev, skiff_err *err)
{
    CUDA_CHECK(cudaMemcpyAsync(dev, m->loss_acc, sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    CUDA_CHECK(cudaMemsetAsync(m->loss_acc, 0, sizeof(float), m->stream));
    return 0;
}

template <typename T> static int get_logits_t(struct cuda_gpt2 *m, float *host, float *tmp, skiff_err *err)
{
    int N = m->B * m->T;
    size_t Vp = m->Vp, C = m->C;
    for (int r0 = 0; r0 < N; r0 += m->crows) {
        int R = N - r0 < m->crows ? N - r0 : m->crows;
        TRY(mm_forward<T>(&m->mm, (T *)m->logits, NULL, (T *)m->lnf + r0 * C, P<T>(m, GPT2_WTE, 0), NULL, R, m->C,
                          m->Vp, m->stream, err));
        TRY(k_cast_to_f32<T>(tmp, (T *)m->logits, R * Vp, m->stream, err));
        TRY(cuda_gpt2_d2h(m, host + r0 * Vp, tmp, R * Vp * sizeof(float), err));
    }
    return 0;
}

// The logits of the last forward's lnf, computed again chunk by chunk (the
// forward keeps none).
extern "C" int cuda_gpt2_get_logits(struct cuda_gpt2 *m, float *host, skiff_err *err)
{
    if (m->units) return skiff_error(err, 0, "the logits of a ZeRO-3 model: wte is not gathered after the forward");
    float *tmp;
    CUDA_CHECK(cudaMallocAsync((void **)&tmp, (size_t)m->crows * m->Vp * sizeof(float), m->stream));
    int rc = m->prec == SKIFF_CUDA_FP32   ? get_logits_t<float>(m, host, tmp, err)
             : m->prec == SKIFF_CUDA_BF16 ? get_logits_t<bf16>(m, host, tmp, err)
                                          : get_logits_t<fp16>(m, host, tmp, err);
    cudaFreeAsync(tmp, m->stream);
    return rc;
}

// ---------------------------------------------------------------- backward
extern "C" int cuda_gpt2_layer_ranges(const struct cuda_gpt2 *m, int layer, size_t lo[16], size_t hi[16])
{
    int n = 0;
    if (layer < 0) {
        int t[] = {GPT2_WTE, GPT2_WPE, GPT2_LNFW, GPT2_LNFB};
        for (int k = 0; k < 4; k++) {
            lo[n] = m->offs[t[k]];
            hi[n++] = m->offs[t[k]] + m->sizes[t[k]];
        }
        return n;
    }
    for (int i = GPT2_LN1W; i <= GPT2_FCPROJB; i++) {
        size_t per = m->sizes[i] / m->L;
        lo[n] = m->offs[i] + (size_t)layer * per;
        hi[n] = lo[n] + per;
        n++;
    }
    return n;
}

// Bias gradient of one linear layer's weight-gradient GEMM: cuBLASLt's
// BGRADB wrote it into dbias (fp32, overwritten), to be added; or, without
// the epilogue, the deterministic column sums of dout.
template <typename T>
static int bias_grad(struct cuda_gpt2 *m, float *g, int fused, const T *dout, int N, int OC, skiff_err *err)
{
    if (fused) return k_add_f32(g, m->dbias, OC, m->stream, err);
    return k_bias_backward<T>(g, m->fscratch, dout, N, OC, m->stream, err);
}

// Profile keys of one linear layer's backward: weight gradient, bias
// gradient (BGRADB's output added, or the own column sums), data gradient.
struct lin_keys {
    const char *wgrad, *bias, *dgrad;
};
static const struct lin_keys K_FCPROJ = {"fcproj wgrad", "bias grad", "fcproj dgrad"},
                             K_FC = {"fc wgrad", "bias grad", "fc dgrad"},
                             K_ATTPROJ = {"attproj wgrad", "bias grad", "attproj dgrad"},
                             K_QKV = {"qkv wgrad", "bias grad", "qkv dgrad"};

// One linear layer y = x W^T + b backwards: dx (unless NULL) = dy W, with
// GELU' of gelu_pre applied when given; dW += x^T dy; db += colsum(dy).
template <typename T>
static int linear_backward(struct cuda_gpt2 *m, const struct lin_keys *k, T *dx, const T *gelu_pre, int wi, int bi,
                           int l, const T *x, const T *dy, int N, int IC, int OC, skiff_err *err)
{
    struct mm_ctx *mm = &m->mm;
    cudaStream_t s = m->stream;
    int fused_w = 0, fused_d = 0;
    float *db = m->fuse_bgradb ? m->dbias : NULL;
    PROF(s, k->wgrad, mm_backward_weight<T>(mm, G(m, wi, l), db, x, dy, N, IC, OC, s, &fused_w, err));
    PROF(s, k->bias, bias_grad<T>(m, G(m, bi, l), fused_w, dy, N, OC, err));
    if (!dx) return 0;
    PROF(s, k->dgrad,
         mm_backward_data<T>(mm, dx, dy, P<T>(m, wi, l), m->fuse_dgelu ? gelu_pre : NULL, N, IC, OC, s, &fused_d, err));
    if (gelu_pre && !fused_d) PROF(s, "gelu bwd", k_gelu_backward<T>(dx, gelu_pre, (size_t)N * IC, s, err));
    return 0;
}

// The classifier's gradients were done chunk by chunk in the forward
// (classifier_chunk): dlnf is in d_c, wte's share in its gradient.
// With tensor parallelism the input gradients of the column-parallel layers
// (fc, qkv: this rank's units' and heads' share) are summed over the ranks
// before their LayerNorm's backward; everything C wide stays whole.
template <typename T> static int backward_t(struct cuda_gpt2 *m, cuda_grad_ready_fn ready, void *ctx, skiff_err *err)
{
    int B = m->B, Tn = m->T, C = m->C, L = m->L, N = B * Tn, NH = m->NHl, Cl = m->Cl, F = m->F;
    cudaStream_t s = m->stream;
    T *dres = (T *)m->dres, *dc = (T *)m->d_c, *d3 = (T *)m->d_3c, *d4 = (T *)m->d_4c;
    float *fs = m->fscratch;
    int lo = m->lo, hi = m->hi;
    TRY(unit_gather(m, 0, 1, err)); // (its gradient buffer is the forward's)
    // an earlier pipeline stage starts from the gradient of its output that
    // the next stage sent into dres (cuda_gpt2_stage_grad)
    if (hi == L) {
        TRY(cuda_prof_begin(s, "zero dresidual"));
        CUDA_CHECK(cudaMemsetAsync(dres, 0, (size_t)N * C * sizeof(T), s));
        TRY(cuda_prof_end(s));
        PROF(s, "layernorm bwd",
             k_layernorm_backward<T>(dres, G(m, GPT2_LNFW, 0), G(m, GPT2_LNFB, 0), fs, dc, (T *)m->res3[L - 1],
                                     P<T>(m, GPT2_LNFW, 0), m->lnf_mean, m->lnf_rstd, N, C, s, err));
    }
    for (int l = hi - 1; l >= lo; l--) {
        T *res_in = l == 0 ? (T *)m->encoded : (T *)m->res3[l - 1];
        TRY(unit_gather(m, 1 + l, 1, err));
        TRY(unit_grad(m, 1 + l, err));
        // --recompute: the slot holds the last block's activations from the
        // forward; any other block's forward is redone into it from its
        // input (the first LayerNorm alone, res_in being whole already), the
        // same kernels on the same inputs: the same bits. A pipeline stage
        // before the last redoes all its blocks: its forward ended writing
        // the next block's first LayerNorm into the slot.
        if (m->recompute && l < L - 1) {
            PROF(s, "layernorm fwd",
                 k_residual_layernorm_forward<T>(res_in, (T *)m->ln1[l], m->ln1_mean[l], m->ln1_rstd[l], res_in, NULL,
                                                 P<T>(m, GPT2_LN1W, l), P<T>(m, GPT2_LN1B, l), N, C, s, err));
            TRY(block_inner<T>(m, l, err));
        }
        // MLP: fcproj (+ GELU'), fc, ln2
        TRY(linear_backward<T>(m, &K_FCPROJ, d4, (T *)m->fch[l], GPT2_FCPROJW, GPT2_FCPROJB, l, (T *)m->fchg[l], dres,
                               N, F, C, err));
        TRY(linear_backward<T>(m, &K_FC, dc, NULL, GPT2_FCW, GPT2_FCB, l, (T *)m->ln2[l], d4, N, C, F, err));
        TRY(tp_sum<T>(m, dc, (size_t)N * C, err));
        PROF(s, "layernorm bwd",
             k_layernorm_backward<T>(dres, G(m, GPT2_LN2W, l), G(m, GPT2_LN2B, l), fs, dc, (T *)m->res2[l],
                                     P<T>(m, GPT2_LN2W, l), m->ln2_mean[l], m->ln2_rstd[l], N, C, s, err));
        // attention: attproj, attention, qkv, ln1
        TRY(linear_backward<T>(m, &K_ATTPROJ, dc, NULL, GPT2_ATTPROJW, GPT2_ATTPROJB, l, (T *)m->atty[l], dres, N, Cl,
                               C, err));
        TRY(k_attention_backward<T>(d3, fs, dc, (T *)m->qkv[l], (T *)m->atty[l], m->lse[l], B, Tn, Cl, NH, s, err));
        TRY(linear_backward<T>(m, &K_QKV, dc, NULL, GPT2_QKVW, GPT2_QKVB, l, (T *)m->ln1[l], d3, N, C, 3 * Cl, err));
        TRY(tp_sum<T>(m, dc, (size_t)N * C, err));
        PROF(s, "layernorm bwd",
             k_layernorm_backward<T>(dres, G(m, GPT2_LN1W, l), G(m, GPT2_LN1B, l), fs, dc, res_in,
                                     P<T>(m, GPT2_LN1W, l), m->ln1_mean[l], m->ln1_rstd[l], N, C, s, err));
        TRY(unit_release(m, 1 + l, err));
        TRY(unit_grad_done(m, 1 + l, err));
        if (ready) TRY(ready(ctx, m, l, err));
    }
    // a later pipeline stage leaves the gradient of its input in dres
    if (lo == 0)
        PROF(s, "embedding bwd",
             k_encoder_backward<T>(G(m, GPT2_WTE, 0), G(m, GPT2_WPE, 0), fs, dres, m->d_csr, m->nseg, m->nbig, B, Tn, C,
                                   s, err));
    TRY(unit_release(m, 0, err));
    TRY(unit_grad_done(m, 0, err));
    if (ready) TRY(ready(ctx, m, -1, err));
    return 0;
}

extern "C" int cuda_gpt2_zero_grad(struct cuda_gpt2 *m, skiff_err *err)
{
    if (m->units) return 0; // ZeRO-3: every unit's buffer comes zeroed (cuda_gpt2_units.grad)
    TRY(cuda_prof_begin(m->stream, "zero grads"));
    CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->n_pad * sizeof(float), m->stream));
    return cuda_prof_end(m->stream);
}

extern "C" int cuda_gpt2_backward(struct cuda_gpt2 *m, cuda_grad_ready_fn ready, void *ctx, skiff_err *err)
{
    if (!m->have_dlnf && m->hi == m->L)
        return skiff_error(err, 0, "backward needs a forward with targets and dloss != 0");
    switch (m->prec) {
    case SKIFF_CUDA_FP32: return backward_t<float>(m, ready, ctx, err);
    case SKIFF_CUDA_BF16: return backward_t<bf16>(m, ready, ctx, err);
    default: return backward_t<fp16>(m, ready, ctx, err);
    }
}

extern "C" int cuda_gpt2_get_grads(struct cuda_gpt2 *m, float *host, skiff_err *err)
{
    if (m->units) return skiff_error(err, 0, "the gradients of a ZeRO-3 model live in its units");
    return cuda_gpt2_d2h(m, host, m->grads, m->n_pad * sizeof(float), err);
}

// ---------------------------------------------------------------- optimizer
extern "C" int cuda_gpt2_sumsq(struct cuda_gpt2 *m, float *dev_out, const float *grad, size_t n, skiff_err *err)
{
    PROF(m->stream, "grad norm", k_norm_squared(dev_out, m->fscratch, grad, n, m->stream, err));
    return 0;
}

extern "C" int cuda_gpt2_sumsq_tp(struct cuda_gpt2 *m, float *dev_out, const float *grad, size_t lo, size_t n,
                                  skiff_err *err)
{
    if (m->tp == 1 || m->tp_rank == 0) return cuda_gpt2_sumsq(m, dev_out, grad, n, err);
    // the tensor-parallel tensors' pieces inside [lo, lo+n) only (the
    // padding after the last tensor is zero on every rank); ZeRO-3: the
    // shard's pieces of those tensors
    for (int i = 0; i < m->npieces; i++)
        if (m->pieces[i].split) TRY(cuda_gpt2_sumsq(m, dev_out, grad + m->pieces[i].off, m->pieces[i].len, err));
    if (m->pieces) return 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        size_t a = m->offs[i], b = a + m->sizes[i];
        if (!gpt2_tp_sharded(i)) continue;
        if (a < lo) a = lo;
        if (b > lo + n) b = lo + n;
        if (a < b) TRY(cuda_gpt2_sumsq(m, dev_out, grad + (a - lo), b - a, err));
    }
    return 0;
}

template <typename T>
static int adamw_t(struct cuda_gpt2 *m, const float *grad, float lr, float b1, float b2, float eps, float wd, float gs,
                   const float *norm2, float clip, int t, int upd, skiff_err *err)
{
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (int i = 0; i < m->npieces; i++) { // ZeRO-3: the shard's pieces (the padding of its units stays zero)
        const struct cuda_opt_piece *p = &m->pieces[i];
        size_t k = p->off;
        PROF(m->stream, "adamw",
             k_adamw<T>(m->master + k, upd ? (T *)m->params + k : NULL, grad + k, m->m + k, m->v + k, p->len, lr, b1,
                        b2, eps, p->decay ? wd : 0.0f, gs, norm2, clip, bc1, bc2, m->stream, err));
    }
    if (m->pieces) return 0;
    size_t lo = m->opt_off, hi = m->opt_off + m->opt_len;
    // One launch per tensor piece inside the range, each with its own decay.
    for (int i = 0; i <= GPT2_NUM_PARAM_TENSORS; i++) {
        size_t a = i < GPT2_NUM_PARAM_TENSORS ? m->offs[i] : m->nparams;
        size_t b = i < GPT2_NUM_PARAM_TENSORS ? a + m->sizes[i] : m->n_pad; // padding: no decay
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        float w = i < GPT2_NUM_PARAM_TENSORS && gpt2_param_decays(i) ? wd : 0.0f;
        size_t k = a - lo;
        PROF(m->stream, "adamw",
             k_adamw<T>(m->master + k, upd ? (T *)m->params + a : NULL, grad + k, m->m + k, m->v + k, b - a, lr, b1, b2,
                        eps, w, gs, norm2, clip, bc1, bc2, m->stream, err));
    }
    return 0;
}

extern "C" int cuda_gpt2_adamw(struct cuda_gpt2 *m, const float *grad, float lr, float beta1, float beta2, float eps,
                               float wd, float grad_scale, const float *norm2, float clip, int t, int update_params,
                               skiff_err *err)
{
    switch (m->prec) {
    case SKIFF_CUDA_FP32:
        return adamw_t<float>(m, grad, lr, beta1, beta2, eps, wd, grad_scale, norm2, clip, t, update_params, err);
    case SKIFF_CUDA_BF16:
        return adamw_t<bf16>(m, grad, lr, beta1, beta2, eps, wd, grad_scale, norm2, clip, t, update_params, err);
    default: return adamw_t<fp16>(m, grad, lr, beta1, beta2, eps, wd, grad_scale, norm2, clip, t, update_params, err);
    }
}

extern "C" int cuda_gpt2_sum_strided(struct cuda_gpt2 *m, float *dev_out, const float *dev, int n, int stride,
                                     skiff_err *err)
{
    return k_strided_sum(dev_out, dev, n, stride, m->stream, err);
}

extern "C" int cuda_gpt2_fill(struct cuda_gpt2 *m, float *dev, float v, size_t n, skiff_err *err)
{
    return k_fill_f32(dev, v, n, m->stream, err);
}

extern "C" void *cuda_gpt2_params(struct cuda_gpt2 *m) { return m->params; }
extern "C" size_t cuda_gpt2_param_elem_bytes(const struct cuda_gpt2 *m) { return m->elem; }

extern "C" int cuda_gpt2_accumulate(struct cuda_gpt2 *m, float *dst, const float *src, size_t n, skiff_err *err)
{
    return k_add_f32(dst, src, n, m->stream, err);
}

extern "C" int cuda_gemm_bench(int mm_, int n, int k, int iters, double *tflops, skiff_err *err)
{
    struct mm_ctx c;
    TRY(mm_init(&c, err));
    int rc = mm_bench_bf16(&c, mm_, n, k, iters, tflops, err);
    mm_fini(&c);
    return rc;
}

extern "C" int cuda_mem_info(size_t *used, size_t *total, skiff_err *err)
{
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    *used = tot - fr;
    *total = tot;
    return 0;
}

extern "C" int cuda_encoder_csr(int *csr, int *counts, const int *tokens, int N, int V)
{
    return k_encoder_csr(csr, counts, tokens, N, V);
}
