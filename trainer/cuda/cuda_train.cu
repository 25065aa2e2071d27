// The CUDA training loop. It follows the same policy as train_cpu
// (trainer/policy.h: ZeRO layout, data windows, validation and checkpoint
// schedule, resume rules) and the same schedule, clipping and AdamW, so a run
// can move between devices and the two paths can be compared; what differs is
// where the model runs and how gradients move.
//
// The host waits for the GPU once per step: after the whole step (backward,
// collectives, norm, clipping, AdamW, ZeRO gather) is queued, one small copy
// brings back the norm and the per-rank losses. Clipping and the fp16
// overflow skip are decided on the device from the norm, so nothing waits
// before AdamW is queued. Every wait polls with the timeout (no blocking copy
// into pageable memory), so a dead peer is an error, never a hang.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_cuda.cuh"

extern "C" {
#include "cuda_model.h"
#include "cuda_train.h"
#include "data.h"
#include "dist.h"
#include "logger.h"
#include "policy.h"
}

// fp16 dynamic loss scaling: the scale never drops below SCALE_FLOOR, and
// after SKIFF_TRAIN_MAX_SKIPPED (default 30) skipped steps in a row the run
// stops with an error: then the forward pass itself overflows and no scale
// can help.
#define SCALE_START 65536.0
#define SCALE_FLOOR 1.0

struct run {
    const struct train_opts *o;
    struct train_dist dist;
    struct train_plan plan;
    struct tr_comm *comm;
    struct cuda_gpt2 *m;
    cudaStream_t s;
    int prec, P, rank;
    enum tr_dtype pdtype; // storage type of the parameters (ZeRO gathers them)
    struct data_loader train, val;
    int have_train, have_val;
    float *hparams, *hm, *hv; // host copies for init / checkpoints
    float *gshard;            // ZeRO-2 accumulated shard (device)
    // Device scalars: [0] norm^2 of this rank's gradient range, [1] the
    // global norm^2, then 2 slots per rank: [2+2r] its norm^2, [3+2r] its loss
    // (one all-gather moves both). hstat is their host copy.
    float *dscal, *hstat;
    int *in, *tg;
    struct train_log log;
    int log_open;
    cudaEvent_t ev0, ev1; // around the DDP waits (exposed communication)
    struct tr_comm_req **reqs;
    size_t nreqs, reqs_cap;
};

static size_t nscal(int P) { return 2 + 2 * (size_t)P; }

static int comm_wait(void *ctx, void *event, const char *what, skiff_err *err)
{
    return cuda_comm_wait_event((struct tr_comm *)ctx, (cudaEvent_t)event, what, err);
}

static void run_free(struct run *r)
{
    // A failed run may leave work queued behind a collective of a dead peer:
    // drain with the polled wait (it aborts NCCL on a timeout) before freeing
    // device memory, which would otherwise block.
    skiff_err ignored;
    if (r->comm) cuda_comm_sync(r->comm, &ignored);
    cuda_gpt2_destroy(r->m);
    if (r->have_train) data_loader_close(&r->train);
    if (r->have_val) data_loader_close(&r->val);
    free(r->hparams);
    free(r->hm);
    free(r->hv);
    if (r->gshard) cudaFree(r->gshard);
    if (r->dscal) cudaFree(r->dscal);
    free(r->hstat);
    free(r->in);
    free(r->tg);
    free(r->reqs);
    if (r->ev0) cudaEventDestroy(r->ev0);
    if (r->ev1) cudaEventDestroy(r->ev1);
    if (r->log_open) train_log_close(&r->log);
    tr_comm_destroy(r->comm);
    train_dist_fini(&r->dist);
}

// Mean over ranks of one value per rank, summed in rank order on every rank
// (train.c's mean_over_ranks, through device memory).
static int mean_over_ranks(struct run *r, double v, double *out, skiff_err *err)
{
    if (r->P == 1) {
        *out = v;
        return 0;
    }
    float *slots = r->dscal + 2;
    float mine = (float)v;
    CUDA_CHECK(cudaMemsetAsync(slots, 0, r->P * sizeof(float), r->s));
    TRY(cuda_gpt2_h2d(r->m, slots + r->rank, &mine, sizeof(float), err));
    TRY(tr_all_gather(r->comm, slots, (size_t)r->P, TR_F32, err));
    TRY(cuda_gpt2_d2h(r->m, r->hstat, slots, r->P * sizeof(float), err));
    double s = 0;
    for (int i = 0; i < r->P; i++) s += r->hstat[i];
    *out = s / r->P;
    return 0;
}

// Broadcast of host data from rank 0 through device memory, in pieces.
static int bcast_host(struct run *r, float *host, size_t n, skiff_err *err)
{
    if (r->P == 1) return 0;
    float *d;
    size_t piece = (size_t)16 << 20; // floats
    CUDA_CHECK(cudaMalloc((void **)&d, (n < piece ? n : piece) * sizeof(float)));
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        rc = cuda_gpt2_h2d(r->m, d, host + off, len * sizeof(float), err);
        if (rc == 0) rc = tr_broadcast(r->comm, d, len * sizeof(float), 0, err);
        if (rc == 0) rc = cuda_gpt2_d2h(r->m, host + off, d, len * sizeof(float), err);
    }
    cudaFree(d);
    return rc;
}

// NCCL refuses two ranks on one GPU: ranks publish host + PCI bus id and
// everyone picks host-staged when any two collide (all see the same data, so
// all pick the same backend).
static int pick_backend(struct run *r, const char **name, skiff_err *err)
{
    const char *env = getenv("SKIFF_TRAIN_COMM");
    if (env && *env && strcmp(env, "auto")) {
        if (strcmp(env, "nccl") && strcmp(env, "host-staged"))
            return skiff_error(err, 0, "SKIFF_TRAIN_COMM='%s': use nccl, host-staged or auto", env);
        *name = env;
        return 0;
    }
    char me[512], host[256] = "", bus[64] = "";
    int dev = 0;
    gethostname(host, sizeof(host) - 1);
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), dev));
    snprintf(me, sizeof(me), "%s/%s", host, bus);
    char key[64];
    snprintf(key, sizeof(key), "cudadev/%d", r->rank);
    TRY(tr_store_set(r->dist.store, key, me, strlen(me), err));
    char **ids = (char **)calloc(r->P, sizeof(char *));
    if (!ids) return skiff_error(err, ENOMEM, "device list");
    int rc = 0, shared = 0;
    for (int i = 0; i < r->P && rc == 0; i++) {
        size_t len;
        snprintf(key, sizeof(key), "cudadev/%d", i);
        rc = tr_store_get(r->dist.store, key, (void **)&ids[i], &len, err);
        for (int j = 0; rc == 0 && j < i; j++)
            if (!strcmp(ids[i], ids[j])) shared = 1;
    }
    for (int i = 0; i < r->P; i++) free(ids[i]);
    free(ids);
    if (rc < 0) return skiff_err_wrap(err, "exchanging GPU ids");
    *name = shared ? "host-staged" : "nccl";
    return 0;
}

static int setup(struct run *r, const struct train_opts *o, skiff_err *err)
{
    r->o = o;
    TRY(cuda_precision_parse(o->precision, &r->prec, err));
    r->pdtype = r->prec == SKIFF_CUDA_FP32 ? TR_F32 : r->prec == SKIFF_CUDA_BF16 ? TR_BF16 : TR_F16;
    TRY(train_dist_init(&r->dist, o->timeout_ms, err));
    r->P = r->dist.world, r->rank = r->dist.rank;
    char gpu[256] = "";
    TRY(cuda_select_device(r->dist.local_rank, gpu, sizeof(gpu), err));
    int P = r->P, rank = r->rank;
    struct train_plan *pl = &r->plan;
    train_plan_init(pl, o, gpt2_param_layout(&o->cfg, NULL, NULL), P, rank);
    TRY(cuda_gpt2_create(&r->m, &o->cfg, o->batch, o->seq, r->prec, pl->n_pad, pl->opt_off, pl->opt_len, err));
    r->s = (cudaStream_t)cuda_gpt2_stream(r->m);
    const char *backend = "single";
    if (P == 1) {
        TRY(cuda_comm_single_create(r->s, o->timeout_ms, &r->comm, err));
    } else {
        TRY(pick_backend(r, &backend, err));
        if (!strcmp(backend, "nccl")) {
            TRY(cuda_comm_nccl_create(r->dist.store, rank, P, r->dist.local_rank, o->timeout_ms, r->s, &r->comm, err));
        } else {
            struct tr_comm *host = NULL;
            TRY(tr_comm_tcp_create(r->dist.store, rank, P, r->dist.local_rank, o->timeout_ms, &host, err));
            TRY(cuda_comm_staged_create(host, r->s, &r->comm, err));
        }
    }
    cuda_gpt2_set_waiter(r->m, comm_wait, r->comm);
    CUDA_CHECK(cudaEventCreate(&r->ev0));
    CUDA_CHECK(cudaEventCreate(&r->ev1));
    CUDA_CHECK(cudaMalloc((void **)&r->dscal, nscal(P) * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(r->dscal, 0, nscal(P) * sizeof(float), r->s));
    if (o->zero == 2) CUDA_CHECK(cudaMalloc((void **)&r->gshard, pl->opt_len * sizeof(float)));
    r->hparams = (float *)calloc(pl->n_pad, sizeof(float));
    r->hm = (float *)calloc(pl->opt_len, sizeof(float));
    r->hv = (float *)calloc(pl->opt_len, sizeof(float));
    r->hstat = (float *)calloc(nscal(P), sizeof(float));
    r->in = (int *)calloc((size_t)o->batch * o->seq, sizeof(int));
    r->tg = (int *)calloc((size_t)o->batch * o->seq, sizeof(int));
    if (!r->hparams || !r->hm || !r->hv || !r->hstat || !r->in || !r->tg)
        return skiff_error(err, ENOMEM, "host buffers");
    if (data_loader_open(&r->train, o->data, o->batch, o->seq, o->cfg.vocab_size, o->seed, !o->sequential, err) < 0)
        return skiff_err_wrap(err, "--data");
    r->have_train = 1;
    if (o->val) {
        if (data_loader_open(&r->val, o->val, o->batch, o->seq, o->cfg.vocab_size, o->seed, 0, err) < 0)
            return skiff_err_wrap(err, "--val");
        r->have_val = 1;
    }

    TRY(train_init_params(o, rank, r->hparams, err));
    if (o->resume) {
        TRY(train_resume_load(pl, o, r->hparams, r->hm, r->hv, err));
        if (train_resume_shares_opt(pl, o) &&
            (bcast_host(r, r->hm, pl->n_pad, err) < 0 || bcast_host(r, r->hv, pl->n_pad, err) < 0))
            return skiff_err_wrap(err, "sharing optimizer state");
        TRY(cuda_gpt2_set_opt_state(r->m, r->hm, r->hv, err));
        double mean;
        TRY(mean_over_ranks(r, pl->start, &mean, err));
        TRY(train_resume_agree(pl, o, mean, err));
    }
    if (bcast_host(r, r->hparams, pl->n_pad, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters from rank 0");
    TRY(cuda_gpt2_set_params(r->m, r->hparams, err));
    if (rank == 0) {
        TRY(train_log_open(&r->log, o->log_path, o->resume, o->quiet, err));
        r->log_open = 1;
    }
    if (rank == 0 && !o->quiet)
        printf("skiff-train: model %s (%zu params, L%d H%d C%d T%d V%d) on %s, %s, world %d (%s), "
               "batch %d x %d x accum %d x world = %zu tokens/step, zero %d, %.2f GiB on the GPU%s\n",
               o->model, pl->num_params, o->cfg.num_layers, o->cfg.num_heads, o->cfg.channels, o->seq,
               o->cfg.vocab_size, gpu, o->precision ? o->precision : "bf16", P, backend, o->batch, o->seq,
               o->grad_accum, (size_t)o->batch * o->seq * o->grad_accum * P, o->zero,
               cuda_gpt2_bytes(r->m) / 1073741824.0, o->resume ? ", resumed" : "");
    return 0;
}

// DDP: each layer's gradient slices start their all-reduce as one group as
// soon as the backward pass has finished that layer; NCCL runs it on its own
// stream while the backward goes on.
static int grad_ready(void *ctx, struct cuda_gpt2 *m, int layer, skiff_err *err)
{
    struct run *r = (struct run *)ctx;
    size_t lo[16], hi[16], ns[16];
    void *bufs[16];
    int k = cuda_gpt2_layer_ranges(m, layer, lo, hi);
    float *g = cuda_gpt2_grads(m);
    for (int i = 0; i < k; i++) {
        bufs[i] = g + lo[i];
        ns[i] = hi[i] - lo[i];
    }
    if (r->nreqs == r->reqs_cap) {
        size_t nc = r->reqs_cap ? 2 * r->reqs_cap : 64;
        struct tr_comm_req **n = (struct tr_comm_req **)realloc(r->reqs, nc * sizeof(*n));
        if (!n) return skiff_error(err, ENOMEM, "bucket list");
        r->reqs = n;
        r->reqs_cap = nc;
    }
    TRY(tr_comm_start_group(r->comm, TR_COMM_ALLREDUCE, bufs, ns, k, TR_F32, &r->reqs[r->nreqs], err));
    r->nreqs++;
    return 0;
}

static int save(struct run *r, int step, skiff_err *err)
{
    const struct train_plan *pl = &r->plan;
    // Full fp32 weights for rank 0: every rank's master range into the (now
    // free) gradient buffer, gathered when sharded.
    float *g = cuda_gpt2_grads(r->m);
    TRY(cuda_gpt2_master_to(r->m, g, err));
    if (r->o->zero && r->P > 1) TRY(tr_all_gather(r->comm, g, pl->n_pad, TR_F32, err));
    if (r->rank == 0) TRY(cuda_gpt2_d2h(r->m, r->hparams, g, pl->n_pad * sizeof(float), err));
    TRY(cuda_gpt2_get_opt_state(r->m, r->hm, r->hv, err));
    struct train_ckpt c;
    train_plan_ckpt(pl, r->o, step, r->hparams, r->hm, r->hv, &c);
    TRY(train_ckpt_save(r->o->ckpt_dir, &c, err));
    return tr_barrier(r->comm, err);
}

static int evaluate(struct run *r, double *out, skiff_err *err)
{
    const struct train_opts *o = r->o;
    double sum = 0;
    for (int i = 0; i < o->val_batches; i++) {
        TRY(data_loader_batch(&r->val, train_plan_val_window(&r->plan, r->val.B, i), r->in, r->tg, err));
        TRY(cuda_gpt2_forward(r->m, r->in, r->tg, 0.0f, err));
    }
    TRY(cuda_gpt2_take_loss(r->m, &sum, err));
    return mean_over_ranks(r, sum / o->val_batches, out, err);
}

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

// Tests: SKIFF_TRAIN_INJECT_OVERFLOW_STEP=N writes +inf into the gradient of
// step N; "N+" into every step from N on.
static int inject_overflow(int step1)
{
    const char *v = getenv("SKIFF_TRAIN_INJECT_OVERFLOW_STEP");
    if (!v || !*v) return 0;
    int n = atoi(v);
    return n > 0 && (step1 == n || (v[strlen(v) - 1] == '+' && step1 >= n));
}

struct scaler {
    int fp16;
    double scale;
    int window, good, skipped, max_skipped;
};

// After the step's one drain: what the device did with the norm, the same
// decision on the host (same float arithmetic), and the next loss scale.
static int scaler_update(struct scaler *sc, const struct run *r, int step1, float norm, skiff_err *err)
{
    if (isfinite(norm)) {
        sc->skipped = 0;
        if (sc->fp16 && ++sc->good >= sc->window) {
            sc->scale *= 2;
            sc->good = 0;
            if (r->rank == 0) printf("fp16: step %d: loss scale now %g\n", step1, sc->scale);
        }
        return 0;
    }
    if (!sc->fp16) return skiff_error(err, 0, "step %d: gradient norm is %f (loss diverged); lower --lr", step1, norm);
    sc->good = 0;
    if (sc->scale > SCALE_FLOOR) sc->scale /= 2;
    if (r->rank == 0) printf("fp16: step %d: gradient overflow, step skipped, loss scale now %g\n", step1, sc->scale);
    if (++sc->skipped >= sc->max_skipped)
        return skiff_error(err, 0,
                           "fp16: %d steps in a row overflowed (last: step %d, loss scale %g): the "
                           "forward pass itself overflows in fp16; use --precision bf16 or a lower --lr",
                           sc->skipped, step1, sc->scale);
    return 0;
}

// Queues one optimizer step after the backward passes: gradient reduction
// for the ZeRO stage, norm, AdamW (clipping and the overflow skip on the
// device), the ZeRO gather of the updated weights and the per-rank
// loss/norm slots, then waits once and reads them.
static int finish_step(struct run *r, int step, float lr, const struct scaler *sc, float *norm, double *loss,
                       skiff_err *err)
{
    const struct train_opts *o = r->o;
    const struct train_plan *pl = &r->plan;
    struct tr_comm *c = r->comm;
    float *grads = cuda_gpt2_grads(r->m);
    int P = r->P;
    if (o->zero == 1) TRY(tr_reduce_scatter(c, grads, pl->n_pad, TR_F32, err));
    const float *gopt = o->zero == 0 ? grads : o->zero == 1 ? grads + pl->opt_off : r->gshard;
    if (inject_overflow(step + 1)) TRY(cuda_gpt2_fill(r->m, (float *)gopt, INFINITY, 1, err));
    float *ss = r->dscal, *norm2 = r->dscal + 1, *slots = r->dscal + 2;
    CUDA_CHECK(cudaMemsetAsync(ss, 0, sizeof(float), r->s));
    TRY(cuda_gpt2_sumsq(r->m, ss, gopt, pl->opt_len, err));
    // Each rank's [norm^2 of its range, loss] into its slot pair; one gather.
    CUDA_CHECK(cudaMemcpyAsync(slots + 2 * r->rank, ss, sizeof(float), cudaMemcpyDeviceToDevice, r->s));
    TRY(cuda_gpt2_take_loss_dev(r->m, slots + 2 * r->rank + 1, err));
    if (P > 1) TRY(tr_all_gather(c, slots, 2 * (size_t)P, TR_F32, err));
    if (o->zero) // norm^2 = sum over ranks of each shard's, in rank order
        TRY(cuda_gpt2_sum_strided(r->m, norm2, slots, P, 2, err));
    else
        CUDA_CHECK(cudaMemcpyAsync(norm2, ss, sizeof(float), cudaMemcpyDeviceToDevice, r->s));
    float inv = (float)(1.0 / sc->scale);
    TRY(cuda_gpt2_adamw(r->m, gopt, lr, o->beta1, o->beta2, o->eps, o->weight_decay, inv, norm2, o->grad_clip, step + 1,
                        1, err));
    // ZeRO: each rank updated its shard of the fp32 master and of the stored
    // weights; gather the stored (bf16/fp16) weights, half the bytes of fp32.
    if (o->zero && P > 1) TRY(tr_all_gather(c, cuda_gpt2_params(r->m), pl->n_pad, r->pdtype, err));
    // The step's one drain.
    TRY(cuda_gpt2_d2h(r->m, r->hstat, r->dscal, nscal(P) * sizeof(float), err));
    *norm = sqrtf(r->hstat[1]) * inv;
    double s = 0;
    for (int i = 0; i < P; i++) s += r->hstat[3 + 2 * i];
    *loss = s / P / o->grad_accum;
    return 0;
}

static int loop(struct run *r, skiff_err *err)
{
    const struct train_opts *o = r->o;
    const struct train_plan *pl = &r->plan;
    struct tr_comm *c = r->comm;
    int P = r->P, K = o->grad_accum;
    uint64_t G = (uint64_t)o->batch * (uint64_t)K * (uint64_t)P;
    float *grads = cuda_gpt2_grads(r->m);
    struct scaler sc;
    memset(&sc, 0, sizeof(sc));
    sc.fp16 = r->prec == SKIFF_CUDA_FP16;
    sc.scale = sc.fp16 ? SCALE_START : 1.0;
    sc.window = env_int("SKIFF_TRAIN_SCALE_WINDOW", 1000);
    sc.max_skipped = env_int("SKIFF_TRAIN_MAX_SKIPPED", 30);
    for (int step = pl->start; step < pl->end; step++) {
        double t0 = skiff_now_ms(), busy0 = c->stats.busy_s;
        float wait_ms = 0.0f, lr = train_lr(o, step);
        int ddp_step = o->zero == 0 && P > 1;
        TRY(cuda_gpt2_zero_grad(r->m, err));
        if (o->zero == 2) CUDA_CHECK(cudaMemsetAsync(r->gshard, 0, pl->opt_len * sizeof(float), r->s));
        for (int k = 0; k < K; k++) {
            TRY(data_loader_batch(&r->train, train_plan_window(pl, o, step, k), r->in, r->tg, err));
            float dloss = (float)(sc.scale / ((double)o->batch * o->seq * K * P));
            TRY(cuda_gpt2_forward(r->m, r->in, r->tg, dloss, err));
            int last = k == K - 1, ddp = ddp_step && last; // no_sync on earlier micro-steps
            r->nreqs = 0;
            TRY(cuda_gpt2_backward(r->m, ddp ? grad_ready : NULL, r, err));
            if (ddp) {
                CUDA_CHECK(cudaEventRecord(r->ev0, r->s));
                for (size_t i = 0; i < r->nreqs; i++) TRY(tr_comm_wait(c, r->reqs[i], err));
                CUDA_CHECK(cudaEventRecord(r->ev1, r->s));
            }
            if (o->zero == 2) {
                TRY(tr_reduce_scatter(c, grads, pl->n_pad, TR_F32, err));
                TRY(cuda_gpt2_accumulate(r->m, r->gshard, grads + pl->opt_off, pl->opt_len, err));
                if (!last) TRY(cuda_gpt2_zero_grad(r->m, err));
            }
        }
        float norm = 0.0f;
        double loss = 0.0;
        TRY(finish_step(r, step, lr, &sc, &norm, &loss, err));
        if (ddp_step) CUDA_CHECK(cudaEventElapsedTime(&wait_ms, r->ev0, r->ev1));
        TRY(scaler_update(&sc, r, step + 1, norm, err));
        double val_loss = NAN;
        if (r->have_val && train_plan_val_due(o, step)) TRY(evaluate(r, &val_loss, err));
        double dt = (skiff_now_ms() - t0) / 1000;
        if (r->rank == 0) {
            struct train_step_log sl;
            memset(&sl, 0, sizeof(sl));
            sl.step = step + 1, sl.loss = loss, sl.lr = lr, sl.grad_norm = norm;
            sl.tokens_per_s = (double)G * o->seq / dt, sl.ms = dt * 1000, sl.val_loss = val_loss;
            sl.comm_ms = (c->stats.busy_s - busy0) * 1000, sl.wait_ms = wait_ms;
            train_log_step(&r->log, &sl);
        }
        if (train_plan_save_due(o, pl, step + 1)) TRY(save(r, step + 1, err));
    }
    if (r->rank == 0 && !o->quiet) {
        size_t fr = 0, tot = 0;
        CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
        printf("skiff-train: GPU memory: %.2f GiB allocated by the model, %.2f GiB in use on the device\n",
               cuda_gpt2_bytes(r->m) / 1073741824.0, (tot - fr) / 1073741824.0);
    }
    return 0;
}

extern "C" int cuda_train(const struct train_opts *o, skiff_err *err)
{
    struct run r;
    memset(&r, 0, sizeof(r));
    int rc = -1;
    if (setup(&r, o, err) == 0 && loop(&r, err) == 0) rc = 0;
    if (rc < 0 && r.P > 1) skiff_err_wrap(err, "rank %d", r.rank);
    run_free(&r);
    return rc;
}
