// The CUDA device of the training loop (trainer/device.h): the model of
// cuda_model.h on the GPU local_rank % device count, in bf16, fp16 (dynamic
// loss scaling) or fp32/TF32, with collectives over NCCL when every rank has
// its own GPU, else host-staged (SKIFF_TRAIN_COMM=nccl|host-staged forces
// one). The step follows the same policy as the CPU's (trainer/policy.h) with
// the same schedule, clipping and AdamW, so a run can move between devices
// and the two can be compared; what differs is where the model runs and how
// gradients move.
//
// With --tp N the model is Megatron's split (cuda_model.h): WORLD_SIZE = dp
// x N processes, tensor parallel fastest as on the CPU (cpu_device.c), the
// model's all-reduces over the tensor-parallel group's communicator and the
// gradients' over the data-parallel group's (the device's comm), each NCCL
// or host-staged like the world's.
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
#include "device.h"
}

// fp16 dynamic loss scaling, as PyTorch's GradScaler does it: the scale
// halves on a step whose gradient overflowed (the step is skipped: no AdamW
// update, and AdamW's step counter does not advance), never below
// SCALE_FLOOR, and doubles after `window` finite steps. After `max_skipped`
// (SKIFF_TRAIN_MAX_SKIPPED, default 30) skipped steps in a row the run stops
// with an error: then the forward pass itself overflows and no scale can
// help. The state (scale, finite steps since the last change, skipped steps
// in a row and in all) is the loop's train_device.amp, so checkpoints carry
// it and an fp16 resume continues bit for bit.
#define SCALE_START 65536.0
#define SCALE_FLOOR 1.0

struct scaler {
    int fp16;
    int window, max_skipped;
};

struct cuda_device {
    const struct train_opts *o;
    const struct train_plan *plan;
    struct train_dist *dist;
    struct tr_comm *comm;    // the device's collectives (also train_device.comm): the data-parallel group
    struct tr_comm *tp_comm; // --tp: the tensor-parallel group (the model's all-reduces); else NULL
    struct cuda_gpt2 *m;
    cudaStream_t s;
    int prec, P, rank;    // the data-parallel group: its size and this process's place
    int wrank;            // the process's RANK (prints)
    float *hlocal;        // --tp: this rank's part of the weights (n_dev floats) on the host
    enum tr_dtype pdtype; // storage type of the parameters (ZeRO gathers them)
    char gpu[256];
    const char *backend;      // "single", "nccl", "host-staged"
    float *hparams, *hm, *hv; // host copies for init / checkpoints
    float *gshard;            // ZeRO-2 accumulated shard (device)
    // Device scalars: [0] norm^2 of this rank's gradient range, [1] the
    // global norm^2, then 2 slots per rank: [2+2r] its norm^2, [3+2r] its loss
    // (one all-gather moves both). hstat is their host copy.
    float *dscal, *hstat;
    cudaEvent_t ev0, ev1; // around the DDP waits (exposed communication)
    struct tr_comm_req **reqs;
    size_t nreqs, reqs_cap;
    struct scaler sc;
    struct train_amp_state *amp; // the loop's train_device.amp
};

// The loss scale of the next step: 1 unless fp16.
static double loss_scale(const struct cuda_device *cd) { return cd->sc.fp16 ? cd->amp->loss_scale : 1.0; }

static size_t nscal(int P) { return 2 + 2 * (size_t)P; }

static int comm_wait(void *ctx, void *event, const char *what, skiff_err *err)
{
    return cuda_comm_wait_event((struct tr_comm *)ctx, (cudaEvent_t)event, what, err);
}

// NCCL refuses two ranks on one GPU: ranks publish host + PCI bus id and
// everyone picks host-staged when any two collide (all see the same data, so
// all pick the same backend).
static int pick_backend(struct cuda_device *cd, const char **name, skiff_err *err)
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
    int W = cd->dist->world;
    snprintf(key, sizeof(key), "cudadev/%d", cd->dist->rank);
    TRY(tr_store_set(cd->dist->store, key, me, strlen(me), err));
    char **ids = (char **)calloc(W, sizeof(char *));
    if (!ids) return skiff_error(err, ENOMEM, "device list");
    int rc = 0, shared = 0;
    for (int i = 0; i < W && rc == 0; i++) {
        size_t len;
        snprintf(key, sizeof(key), "cudadev/%d", i);
        rc = tr_store_get(cd->dist->store, key, (void **)&ids[i], &len, err);
        for (int j = 0; rc == 0 && j < i; j++)
            if (!strcmp(ids[i], ids[j])) shared = 1;
    }
    for (int i = 0; i < W; i++) free(ids[i]);
    free(ids);
    if (rc < 0) return skiff_err_wrap(err, "exchanging GPU ids");
    *name = shared ? "host-staged" : "nccl";
    return 0;
}

// One process group's communicator of the backend every rank picked: a
// group of one needs none; NCCL gets a communicator of its own (its id under
// "nccl/id/NAME"), host-staged a TCP ring of the members (keyed NAME).
static int make_group(struct cuda_device *cd, const char *name, const int *members, int n, int me, struct tr_comm **out,
                      skiff_err *err)
{
    const struct train_dist *dist = cd->dist;
    int to = cd->o->timeout_ms;
    if (n == 1) return cuda_comm_single_create(cd->s, to, out, err);
    if (!strcmp(cd->backend, "nccl"))
        return cuda_comm_nccl_create_group(dist->store, name, me, n, dist->local_rank, to, cd->s, out, err);
    struct tr_comm *host = NULL;
    TRY(tr_comm_tcp_create_group(dist->store, name, members, n, me, dist->local_rank, to, &host, err));
    return cuda_comm_staged_create(host, cd->s, out, err);
}

// Megatron's layout over WORLD_SIZE = dp x tp processes, as on the CPU:
// process r is tensor-parallel rank r % tp of data-parallel rank r / tp; its
// tensor-parallel group is {dp*tp + i} (the model's all-reduces, four per
// block per micro-step: neighbours, so one node's GPUs where they can), its
// data-parallel group {i*tp + tp_rank} (the gradients, the loss mean, ZeRO),
// which is cd->comm. Every rank creates the two in the same order.
static int tp_groups(struct cuda_device *cd, skiff_err *err)
{
    const struct train_plan *pl = cd->plan;
    int tp = pl->tp, dp = pl->world, *mem = (int *)malloc((size_t)(tp > dp ? tp : dp) * sizeof(int));
    if (!mem) return skiff_error(err, ENOMEM, "process groups");
    char name[64];
    for (int i = 0; i < tp; i++) mem[i] = pl->rank * tp + i;
    snprintf(name, sizeof(name), "tp/%d", pl->rank);
    int rc = make_group(cd, name, mem, tp, pl->tp_rank, &cd->tp_comm, err);
    if (rc == 0) {
        for (int i = 0; i < dp; i++) mem[i] = i * tp + pl->tp_rank;
        snprintf(name, sizeof(name), "dp/%d", pl->tp_rank);
        rc = make_group(cd, name, mem, dp, pl->rank, &cd->comm, err);
    }
    free(mem);
    return rc < 0 ? skiff_err_wrap(err, "tensor-parallel process groups (--tp %d, %s)", tp, cd->backend) : 0;
}

// The model's sum over the tensor-parallel group, queued on its stream
// (NCCL: on the side stream between two events; host-staged: done when it
// returns).
static int tp_allreduce(void *ctx, float *dev, size_t n, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)ctx;
    return tr_allreduce_sum(cd->tp_comm, dev, n, TR_F32, err);
}

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static int cuda_open(struct train_device *d, const struct train_opts *o, const struct train_plan *pl,
                     struct train_dist *dist, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)calloc(1, sizeof(*cd));
    if (!cd) return skiff_error(err, ENOMEM, "CUDA device");
    d->impl = cd;
    cd->o = o;
    cd->plan = pl;
    cd->dist = dist;
    TRY(cuda_precision_parse(o->precision, &cd->prec, err));
    cd->pdtype = cd->prec == SKIFF_CUDA_FP32 ? TR_F32 : cd->prec == SKIFF_CUDA_BF16 ? TR_BF16 : TR_F16;
    cd->P = pl->world, cd->rank = pl->rank, cd->wrank = dist->rank;
    TRY(cuda_select_device(dist->local_rank, cd->gpu, sizeof(cd->gpu), err));
    int P = cd->P, rank = cd->rank;
    TRY(cuda_gpt2_create(&cd->m, &o->cfg, o->batch, o->seq, cd->prec, pl->tp, pl->tp_rank, pl->n_dev, pl->opt_off,
                         pl->opt_len, err));
    cd->s = (cudaStream_t)cuda_gpt2_stream(cd->m);
    cd->backend = "single";
    if (dist->world == 1) {
        TRY(cuda_comm_single_create(cd->s, o->timeout_ms, &cd->comm, err));
    } else {
        TRY(pick_backend(cd, &cd->backend, err));
        if (pl->tp > 1) {
            TRY(tp_groups(cd, err));
        } else if (!strcmp(cd->backend, "nccl")) {
            TRY(cuda_comm_nccl_create(dist->store, rank, P, dist->local_rank, o->timeout_ms, cd->s, &cd->comm, err));
        } else {
            struct tr_comm *host = NULL;
            TRY(tr_comm_tcp_create(dist->store, rank, P, dist->local_rank, o->timeout_ms, &host, err));
            TRY(cuda_comm_staged_create(host, cd->s, &cd->comm, err));
        }
    }
    d->comm = cd->comm;
    cuda_gpt2_set_waiter(cd->m, comm_wait, cd->comm);
    if (cd->tp_comm) {
        cuda_comm_link(cd->comm, cd->tp_comm);
        cuda_gpt2_set_tp_allreduce(cd->m, tp_allreduce, cd);
        if (!(cd->hlocal = (float *)calloc(pl->n_dev, sizeof(float))))
            return skiff_error(err, ENOMEM, "host copy of this rank's parameters");
    }
    CUDA_CHECK(cudaEventCreate(&cd->ev0));
    CUDA_CHECK(cudaEventCreate(&cd->ev1));
    CUDA_CHECK(cudaMalloc((void **)&cd->dscal, nscal(P) * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(cd->dscal, 0, nscal(P) * sizeof(float), cd->s));
    if (o->zero == 2) CUDA_CHECK(cudaMalloc((void **)&cd->gshard, pl->opt_len * sizeof(float)));
    cd->hparams = (float *)calloc(pl->n_pad, sizeof(float));
    cd->hm = (float *)calloc(pl->opt_len, sizeof(float));
    cd->hv = (float *)calloc(pl->opt_len, sizeof(float));
    cd->hstat = (float *)calloc(nscal(P), sizeof(float));
    if (!cd->hparams || !cd->hm || !cd->hv || !cd->hstat) return skiff_error(err, ENOMEM, "host buffers");
    d->params = cd->hparams;
    d->m = cd->hm;
    d->v = cd->hv;
    d->rank_slots = cd->dscal + 2;
    cd->sc.fp16 = cd->prec == SKIFF_CUDA_FP16;
    cd->amp = &d->amp;
    if (cd->sc.fp16) d->amp.loss_scale = SCALE_START;
    cd->sc.window = env_int("SKIFF_TRAIN_SCALE_WINDOW", 1000);
    cd->sc.max_skipped = env_int("SKIFF_TRAIN_MAX_SKIPPED", 30);
    return 0;
}

static void cuda_close(struct train_device *d)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    if (!cd) return;
    // A failed run may leave work queued behind a collective of a dead peer:
    // drain with the polled wait (it aborts NCCL on a timeout) before freeing
    // device memory, which would otherwise block.
    skiff_err ignored;
    if (cd->comm) cuda_comm_sync(cd->comm, &ignored);
    if (cd->tp_comm) cuda_comm_sync(cd->tp_comm, &ignored);
    cuda_gpt2_destroy(cd->m);
    free(cd->hparams);
    free(cd->hlocal);
    free(cd->hm);
    free(cd->hv);
    if (cd->gshard) cudaFree(cd->gshard);
    if (cd->dscal) cudaFree(cd->dscal);
    free(cd->hstat);
    free(cd->reqs);
    if (cd->ev0) cudaEventDestroy(cd->ev0);
    if (cd->ev1) cudaEventDestroy(cd->ev1);
    tr_comm_destroy(cd->comm);
    tr_comm_destroy(cd->tp_comm);
    free(cd);
}

// --tp: rank `root`'s n host floats to every rank of the tensor-parallel
// group, staged through the gradient buffer (n_dev floats, free between
// steps) in pieces.
static int tp_broadcast_host(struct cuda_device *cd, float *host, size_t n, int root, skiff_err *err)
{
    float *g = cuda_gpt2_grads(cd->m);
    size_t piece = cd->plan->n_dev;
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        if (cd->plan->tp_rank == root) TRY(cuda_gpt2_h2d(cd->m, g, host + off, len * sizeof(float), err));
        TRY(tr_broadcast(cd->tp_comm, g, len * sizeof(float), root, err));
        if (cd->plan->tp_rank != root) TRY(cuda_gpt2_d2h(cd->m, host + off, g, len * sizeof(float), err));
    }
    CUDA_CHECK(cudaMemsetAsync(g, 0, piece * sizeof(float), cd->s));
    return 0;
}

static int cuda_upload(struct train_device *d, int with_opt, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    // A resumed run's scaler state is the checkpoint's: a file without one
    // (bf16, fp32, the CPU, an older build) starts the fp16 scale afresh;
    // bf16 and fp32 keep only the count of skipped steps (AdamW's counter).
    if (cd->sc.fp16 && !(d->amp.loss_scale >= SCALE_FLOOR)) {
        d->amp.loss_scale = SCALE_START;
        d->amp.scale_good = d->amp.skipped_run = 0;
    } else if (!cd->sc.fp16) {
        d->amp.loss_scale = 0;
        d->amp.scale_good = d->amp.skipped_run = 0;
    }
    if (with_opt) TRY(cuda_gpt2_set_opt_state(cd->m, cd->hm, cd->hv, err));
    const struct train_plan *pl = cd->plan;
    if (pl->tp == 1) return cuda_gpt2_set_params(cd->m, cd->hparams, err);
    // --tp: the loop's whole weights (broadcast over the data-parallel group
    // from rank 0) from tensor-parallel rank 0 to the others, each keeping
    // its part (m and v are already in the part's layout)
    if (tp_broadcast_host(cd, cd->hparams, pl->n_pad, 0, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters over the tensor-parallel group");
    gpt2_tp_copy(&cd->o->cfg, pl->tp, pl->tp_rank, cd->hparams, cd->hlocal, 1);
    return cuda_gpt2_set_params(cd->m, cd->hlocal, err);
}

// --tp, before a checkpoint: data-parallel rank 0's tensor-parallel group
// brings each rank's part (fp32 master, in dev) to tensor-parallel rank 0
// in turn, which puts the whole weights together (world rank 0 writes them).
static int tp_gather_params(struct cuda_device *cd, float *dev, skiff_err *err)
{
    const struct train_plan *pl = cd->plan;
    size_t n = pl->n_dev;
    float *tmp = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&tmp, n * sizeof(float), cd->s));
    int rc = 0;
    for (int r = 0; r < pl->tp && rc == 0; r++) {
        float *buf = r == pl->tp_rank ? dev : tmp; // the root sends its own, the others receive
        rc = tr_broadcast(cd->tp_comm, buf, n * sizeof(float), r, err);
        if (rc == 0 && pl->tp_rank == 0) rc = cuda_gpt2_d2h(cd->m, cd->hlocal, buf, n * sizeof(float), err);
        if (rc == 0 && pl->tp_rank == 0) gpt2_tp_copy(&cd->o->cfg, pl->tp, r, cd->hparams, cd->hlocal, 0);
    }
    cudaFreeAsync(tmp, cd->s);
    return rc < 0 ? skiff_err_wrap(err, "gathering the tensor-parallel parameters") : 0;
}

// Full fp32 weights for rank 0: every rank's master range into the (now
// free) gradient buffer, gathered when sharded; and this rank's m and v.
static int cuda_download(struct train_device *d, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    const struct train_plan *pl = cd->plan;
    float *g = cuda_gpt2_grads(cd->m);
    TRY(cuda_gpt2_master_to(cd->m, g, err));
    if (cd->o->zero && cd->P > 1) TRY(tr_all_gather(cd->comm, g, pl->n_dev, TR_F32, err));
    if (cd->rank == 0 && pl->tp > 1)
        TRY(tp_gather_params(cd, g, err));
    else if (cd->rank == 0)
        TRY(cuda_gpt2_d2h(cd->m, cd->hparams, g, pl->n_pad * sizeof(float), err));
    return cuda_gpt2_get_opt_state(cd->m, cd->hm, cd->hv, err);
}

// DDP: each layer's gradient slices start their all-reduce as one group as
// soon as the backward pass has finished that layer; NCCL runs it on its own
// stream while the backward goes on.
static int grad_ready(void *ctx, struct cuda_gpt2 *m, int layer, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)ctx;
    size_t lo[16], hi[16], ns[16];
    void *bufs[16];
    int k = cuda_gpt2_layer_ranges(m, layer, lo, hi);
    float *g = cuda_gpt2_grads(m);
    for (int i = 0; i < k; i++) {
        bufs[i] = g + lo[i];
        ns[i] = hi[i] - lo[i];
    }
    if (cd->nreqs == cd->reqs_cap) {
        size_t nc = cd->reqs_cap ? 2 * cd->reqs_cap : 64;
        struct tr_comm_req **n = (struct tr_comm_req **)realloc(cd->reqs, nc * sizeof(*n));
        if (!n) return skiff_error(err, ENOMEM, "bucket list");
        cd->reqs = n;
        cd->reqs_cap = nc;
    }
    TRY(tr_comm_start_group(cd->comm, TR_COMM_ALLREDUCE, bufs, ns, k, TR_F32, &cd->reqs[cd->nreqs], err));
    cd->nreqs++;
    return 0;
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

// After the step's one drain: what the device did with the norm, the same
// decision on the host (same float arithmetic), and the next loss scale.
static int scaler_update(const struct scaler *sc, struct train_amp_state *a, const struct cuda_device *cd, int step1,
                         float norm, skiff_err *err)
{
    if (isfinite(norm)) {
        a->skipped_run = 0;
        if (sc->fp16 && ++a->scale_good >= sc->window) {
            a->loss_scale *= 2;
            a->scale_good = 0;
            if (cd->wrank == 0) printf("fp16: step %d: loss scale now %g\n", step1, a->loss_scale);
        }
        return 0;
    }
    if (!sc->fp16) return skiff_error(err, 0, "step %d: gradient norm is %f (loss diverged); lower --lr", step1, norm);
    a->scale_good = 0;
    a->skipped++;
    if (a->loss_scale > SCALE_FLOOR) a->loss_scale /= 2;
    if (cd->wrank == 0)
        printf("fp16: step %d: gradient overflow, step skipped, loss scale now %g\n", step1, a->loss_scale);
    if (++a->skipped_run >= sc->max_skipped)
        return skiff_error(err, 0,
                           "fp16: %d steps in a row overflowed (last: step %d, loss scale %g): the "
                           "forward pass itself overflows in fp16; use --precision bf16 or a lower --lr",
                           a->skipped_run, step1, a->loss_scale);
    return 0;
}

// Queues one optimizer step after the backward passes: gradient reduction
// for the ZeRO stage, norm, AdamW (clipping and the overflow skip on the
// device), the ZeRO gather of the updated weights and the per-rank
// loss/norm slots, then waits once and reads them.
static int finish_step(struct cuda_device *cd, int step, float lr, float *norm, double *loss, skiff_err *err)
{
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct tr_comm *c = cd->comm;
    float *grads = cuda_gpt2_grads(cd->m);
    int P = cd->P;
    if (o->zero == 1) TRY(tr_reduce_scatter(c, grads, pl->n_dev, TR_F32, err));
    const float *gopt = o->zero == 0 ? grads : o->zero == 1 ? grads + pl->opt_off : cd->gshard;
    if (inject_overflow(step + 1)) TRY(cuda_gpt2_fill(cd->m, (float *)gopt, INFINITY, 1, err));
    float *ss = cd->dscal, *norm2 = cd->dscal + 1, *slots = cd->dscal + 2;
    CUDA_CHECK(cudaMemsetAsync(ss, 0, sizeof(float), cd->s));
    TRY(cuda_gpt2_sumsq_tp(cd->m, ss, gopt, pl->opt_off, pl->opt_len, err));
    // --tp: this rank's share summed over its group (the same bits on each)
    if (cd->tp_comm) TRY(tr_allreduce_sum(cd->tp_comm, ss, 1, TR_F32, err));
    // Each rank's [norm^2 of its range, loss] into its slot pair; one gather.
    CUDA_CHECK(cudaMemcpyAsync(slots + 2 * cd->rank, ss, sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
    TRY(cuda_gpt2_take_loss_dev(cd->m, slots + 2 * cd->rank + 1, err));
    if (P > 1) TRY(tr_all_gather(c, slots, 2 * (size_t)P, TR_F32, err));
    if (o->zero) // norm^2 = sum over ranks of each shard's, in rank order
        TRY(cuda_gpt2_sum_strided(cd->m, norm2, slots, P, 2, err));
    else
        CUDA_CHECK(cudaMemcpyAsync(norm2, ss, sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
    float inv = (float)(1.0 / loss_scale(cd));
    // AdamW's step counter: the steps that updated (a skipped fp16 step does
    // not count; if this one overflows the device skips it whatever t is).
    int t = step + 1 - (int)cd->amp->skipped;
    TRY(cuda_gpt2_adamw(cd->m, gopt, lr, o->beta1, o->beta2, o->eps, o->weight_decay, inv, norm2, o->grad_clip, t, 1,
                        err));
    // ZeRO: each rank updated its shard of the fp32 master and of the stored
    // weights; gather the stored (bf16/fp16) weights, half the bytes of fp32.
    if (o->zero && P > 1) TRY(tr_all_gather(c, cuda_gpt2_params(cd->m), pl->n_dev, cd->pdtype, err));
    // The step's one drain.
    TRY(cuda_gpt2_d2h(cd->m, cd->hstat, cd->dscal, nscal(P) * sizeof(float), err));
    *norm = sqrtf(cd->hstat[1]) * inv;
    double s = 0;
    for (int i = 0; i < P; i++) s += cd->hstat[3 + 2 * i];
    *loss = s / P / o->grad_accum;
    return 0;
}

static int cuda_step(struct train_device *d, int step, float lr, struct train_batches *b, struct train_step_stats *st,
                     skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct tr_comm *c = cd->comm;
    int P = cd->P, K = b->count;
    float *grads = cuda_gpt2_grads(cd->m);
    float wait_ms = 0.0f;
    int ddp_step = o->zero == 0 && P > 1;
    double tp_busy0 = cd->tp_comm ? cd->tp_comm->stats.busy_s : 0;
    TRY(cuda_gpt2_zero_grad(cd->m, err));
    if (o->zero == 2) CUDA_CHECK(cudaMemsetAsync(cd->gshard, 0, pl->opt_len * sizeof(float), cd->s));
    for (int k = 0; k < K; k++) {
        TRY(b->load(b, k, err));
        float dloss = (float)(loss_scale(cd) / ((double)o->batch * o->seq * K * P));
        TRY(cuda_gpt2_forward(cd->m, b->inputs, b->targets, dloss, err));
        int last = k == K - 1, ddp = ddp_step && last; // no_sync on earlier micro-steps
        cd->nreqs = 0;
        TRY(cuda_gpt2_backward(cd->m, ddp ? grad_ready : NULL, cd, err));
        if (ddp) {
            CUDA_CHECK(cudaEventRecord(cd->ev0, cd->s));
            for (size_t i = 0; i < cd->nreqs; i++) TRY(tr_comm_wait(c, cd->reqs[i], err));
            CUDA_CHECK(cudaEventRecord(cd->ev1, cd->s));
        }
        if (o->zero == 2) {
            TRY(tr_reduce_scatter(c, grads, pl->n_dev, TR_F32, err));
            TRY(cuda_gpt2_accumulate(cd->m, cd->gshard, grads + pl->opt_off, pl->opt_len, err));
            if (!last) TRY(cuda_gpt2_zero_grad(cd->m, err));
        }
    }
    float norm = 0.0f;
    TRY(finish_step(cd, step, lr, &norm, &st->loss, err));
    if (ddp_step) CUDA_CHECK(cudaEventElapsedTime(&wait_ms, cd->ev0, cd->ev1));
    TRY(scaler_update(&cd->sc, cd->amp, cd, step + 1, norm, err));
    st->grad_norm = norm;
    st->wait_ms = wait_ms;
    if (cd->tp_comm) st->group_comm_ms = (cd->tp_comm->stats.busy_s - tp_busy0) * 1000;
    return 0;
}

static int cuda_forward(struct train_device *d, const int *inputs, const int *targets, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    return cuda_gpt2_forward(cd->m, inputs, targets, 0.0f, err);
}

static int cuda_take_loss(struct train_device *d, double *sum, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    return cuda_gpt2_take_loss(cd->m, sum, err);
}

static void *cuda_alloc(struct train_device *, size_t bytes, skiff_err *err)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        skiff_error(err, ENOMEM, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_release(struct train_device *, void *mem) { cudaFree(mem); }

static int cuda_h2d(struct train_device *d, void *dev, const void *host, size_t bytes, skiff_err *err)
{
    return cuda_gpt2_h2d(((struct cuda_device *)d->impl)->m, dev, host, bytes, err);
}

static int cuda_d2h(struct train_device *d, void *host, const void *dev, size_t bytes, skiff_err *err)
{
    return cuda_gpt2_d2h(((struct cuda_device *)d->impl)->m, host, dev, bytes, err);
}

static void cuda_describe(struct train_device *d, char *buf, size_t len)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    char tp[48] = "";
    if (cd->plan->tp > 1) snprintf(tp, sizeof(tp), ", tensor-parallel part %d of %d", cd->plan->tp_rank, cd->plan->tp);
    snprintf(buf, len, "%s (cuda, %s, %s collectives%s, %.2f GiB)", cd->gpu,
             cd->o->precision ? cd->o->precision : "bf16", cd->backend, tp, cuda_gpt2_bytes(cd->m) / 1073741824.0);
}

static int cuda_finish(struct train_device *d, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    if (cd->wrank == 0 && !cd->o->quiet) {
        size_t fr = 0, tot = 0;
        CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
        printf("skiff-train: GPU memory: %.2f GiB allocated by the model, %.2f GiB in use on the device\n",
               cuda_gpt2_bytes(cd->m) / 1073741824.0, (tot - fr) / 1073741824.0);
    }
    return 0;
}

extern "C" const struct train_device_ops train_cuda_device = {
    .name = "cuda",
    .open = cuda_open,
    .upload = cuda_upload,
    .download = cuda_download,
    .step = cuda_step,
    .forward = cuda_forward,
    .take_loss = cuda_take_loss,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .h2d = cuda_h2d,
    .d2h = cuda_d2h,
    .describe = cuda_describe,
    .finish = cuda_finish,
    .close = cuda_close,
};
