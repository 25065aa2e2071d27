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
// or host-staged like the world's. With --zero 3 the weights are sharded
// too and gathered block by block (z3_* below; under --pp a stage's at
// once, before its schedule: pipe_hold); --recompute is the model's
// (CUDA_GPT2_RECOMPUTE).
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
#include "ppsched.h"
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

// ZeRO-3 (FSDP) as cpu_device.c does it on the host, with the same units
// and shards (policy.h), so the checkpoints are the same files: each rank
// keeps its shard of every unit (the fp32 master, m and v in the model, the
// storage-type copy the gathers send, the accumulated gradient here). A
// unit's weights are all-gathered in the storage type (half the bytes of
// fp32 in bf16) into a unit-sized buffer just before the model uses them
// and given back after; while one block computes, the next block's gather
// is in flight (NCCL: on the communicator's stream, which the compute
// stream waits for only where the model needs the weights). A block's
// gradient goes into a buffer of its own, reduce-scattered as soon as the
// block's backward is queued, while the block below computes; this rank's
// piece of the sum is added to its gradient shard when the buffer comes
// round again or at the end of the backward. The root unit (wte, wpe, lnf)
// stays gathered until the weights change. Two buffers of each kind
// (--zero3-buffers 2) prefetch and overlap; one does neither. Every rank
// makes the same calls in the model's order, so the collectives match.
struct z3_slot {
    int unit; // -1: free
    void *buf;
    struct tr_comm_req *req; // the gather or reduce-scatter in flight
};

struct zero3 {
    struct cuda_device *cd;
    int world, rank, L, nbuf, g_turn, root_valid;
    size_t *len, *off; // per unit: padded length, this rank's piece in the shard
    size_t elem;       // bytes of a stored weight
    float *gshard;     // the accumulated gradient of the shard (device, opt_len)
    struct z3_slot root, root_grad, p[2], g[2];
    struct cuda_gpt2_units units;
};

// --pp, ZeRO-1/2: one range's piece of a data-parallel rank's shard
// (policy.h, train_pp_shard_copy): `have` floats at `local` in the
// stage's parameter buffer, at `shard` in the shard; the
// rest of the piece, up to the range's padded piece length, is padding.
struct pp_piece {
    size_t local, shard, have;
    size_t whole; // `local` in the whole buffer (llm.c's layout, of the tensor-parallel part)
};

// --pp: this rank's pipeline stage (pipeline schedule below).
struct cuda_pipe {
    int stages, stage, dp, dp_rank, tp, tp_rank, zero, micro, gpipe, nslots, lo, hi;
    // the stages of this rank's data-parallel replica (and tensor-parallel
    // rank); the stage's data-parallel ranks; the first and the last stage
    // (the tied wte: ppc itself with 2 stages, NULL on a middle stage)
    struct tr_comm *ppc, *dpc, *emb;
    // the stage's ranges of the whole (tensor-parallel part's) parameter
    // buffer, and where each sits in the model's buffers, which hold only
    // these, back to back (CUDA_GPT2_STAGE): coff[i], stage_len in all
    struct train_range r[TRAIN_STAGE_MAX_RANGES];
    int nr;
    size_t coff[TRAIN_STAGE_MAX_RANGES], stage_len;
    size_t wte_off, wte_len; // (wte_off: in the stage's buffers)
    float *hstage;           // host, stage_len: the loop's whole buffers cut to the stage's
    // ZeRO-1/2: piece[d * nr + i] is data-parallel rank d's piece of range
    // i; packed (device, dp x shard_len floats) every rank's shard in turn
    // for the reduce-scatter, and in the storage type for the all-gather of
    // the stepped weights; gshard this rank's gradient shard (ZeRO-2:
    // accumulated over the micro-batches)
    struct pp_piece *piece;
    size_t shard_len, wte_piece_off, wte_piece_len;
    float *packed, *gshard;
    // ZeRO-3: this rank's shard of the master weights (the model's opt
    // buffer 0) is the only copy that persists, the one a checkpoint saves;
    // stale says the stage's weights in the model are not yet gathered from
    // the shards' current values (pipe_hold gathers them before their use)
    int stale;
    size_t bytes; // one (B,T,C) tensor of the storage type on the wire
    // A micro-batch in flight, until its backward: its token ids (host),
    // and on the device its input (stages before the last: the forward is
    // redone from it before the backward) or the gradient of its input
    // (the last stage, which runs forward and backward back to back)
    void **dev;
    int **in, **tg;
    int current; // the micro-batch whose activations the model holds, -1 none
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
    struct zero3 *z3;            // --zero 3
    unsigned mflags;             // the model's CUDA_GPT2_* flags
    size_t mpad;                 // its parameter buffer (with --zero 3 the shard; with --pp the stage's ranges)
    size_t mopt;                 // its optimizer range (with --pp and ZeRO 0 the stage's ranges)
    struct cuda_pipe *pp;        // --pp
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

// Megatron's layout over WORLD_SIZE = dp x tp x pp processes, as on the
// CPU (policy.h, train_layout_rank): process r is tensor-parallel rank
// r % tp of data-parallel rank r / tp % dp of stage r / (tp*dp); its
// tensor-parallel group is the tp neighbours of its stage and data-parallel
// rank (the model's all-reduces, four per block per micro-step: one node's
// GPUs where they can), cd->comm the ranks of every stage with its
// tensor-parallel rank (without --pp its data-parallel group: the
// gradients, the loss mean, ZeRO; with --pp the loop's broadcast and means,
// the pipeline making its own groups). Every rank creates the two in the
// same order.
static int tp_groups(struct cuda_device *cd, skiff_err *err)
{
    const struct train_plan *pl = cd->plan;
    int tp = pl->tp, dp = pl->world, pp = pl->pp;
    int *mem = (int *)malloc((size_t)(tp > dp * pp ? tp : dp * pp) * sizeof(int));
    if (!mem) return skiff_error(err, ENOMEM, "process groups");
    char name[64];
    for (int i = 0; i < tp; i++) mem[i] = train_layout_rank(tp, dp, pl->pp_rank, pl->rank, i);
    snprintf(name, sizeof(name), "tp/%d", pl->pp_rank * dp + pl->rank);
    int rc = make_group(cd, name, mem, tp, pl->tp_rank, &cd->tp_comm, err);
    if (rc == 0) {
        for (int st = 0; st < pp; st++)
            for (int i = 0; i < dp; i++) mem[st * dp + i] = train_layout_rank(tp, dp, st, i, pl->tp_rank);
        snprintf(name, sizeof(name), "dp/%d", pl->tp_rank);
        rc = make_group(cd, name, mem, dp * pp, pl->pp_rank * dp + pl->rank, &cd->comm, err);
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

// ---- ZeRO-3: the model's units (cuda_gpt2_units) over the device's comm

static int z3_start(struct zero3 *z, struct z3_slot *s, int op, skiff_err *err)
{
    enum tr_dtype t = op == TR_COMM_ALL_GATHER ? z->cd->pdtype : TR_F32;
    return tr_comm_start(z->cd->comm, op, s->buf, z->len[s->unit], t, &s->req, err);
}

static int z3_wait(struct zero3 *z, struct z3_slot *s, skiff_err *err)
{
    if (!s->req) return 0;
    struct tr_comm_req *r = s->req;
    s->req = NULL;
    return tr_comm_wait(z->cd->comm, r, err);
}

// This rank's piece of unit u (its shard of the stored weights) into s at
// the piece's place, and the all-gather of the rest started.
static int z3_gather_into(struct zero3 *z, struct z3_slot *s, int u, skiff_err *err)
{
    size_t plen = z->len[u] / (size_t)z->world, e = z->elem;
    const char *shard = (const char *)cuda_gpt2_params(z->cd->m);
    s->unit = u;
    CUDA_CHECK(cudaMemcpyAsync((char *)s->buf + (size_t)z->rank * plen * e, shard + z->off[u] * e, plen * e,
                               cudaMemcpyDeviceToDevice, z->cd->s));
    return z3_start(z, s, TR_COMM_ALL_GATHER, err);
}

static struct z3_slot *z3_find(struct zero3 *z, int u)
{
    for (int i = 0; i < z->nbuf; i++)
        if (z->p[i].unit == u) return &z->p[i];
    return NULL;
}

static void *z3_gather(void *ctx, int u, int backward, skiff_err *err)
{
    struct zero3 *z = (struct zero3 *)ctx;
    struct z3_slot *s;
    if (u == 0) {
        s = &z->root;
        if (!z->root_valid && z3_gather_into(z, s, 0, err) < 0) return NULL;
        z->root_valid = 1;
    } else if (!(s = z3_find(z, u))) {
        // not prefetched: the slots' gathers are no longer needed (the
        // stream orders the new one after the kernels that read them)
        for (int i = 0; i < z->nbuf; i++) {
            if (z3_wait(z, &z->p[i], err) < 0) return NULL;
            z->p[i].unit = -1;
        }
        s = &z->p[0];
        if (z3_gather_into(z, s, u, err) < 0) return NULL;
    }
    if (z3_wait(z, s, err) < 0) return NULL;
    int next = backward ? (u == 0 ? z->L : u - 1) : u + 1;
    if (z->nbuf == 2 && next >= 1 && next <= z->L && !z3_find(z, next)) {
        struct z3_slot *f = z->p[0].unit == -1 ? &z->p[0] : z->p[1].unit == -1 ? &z->p[1] : NULL;
        if (f && z3_gather_into(z, f, next, err) < 0) return NULL;
    }
    return s->buf;
}

static int z3_release(void *ctx, int u, skiff_err *)
{
    struct zero3 *z = (struct zero3 *)ctx;
    struct z3_slot *s = u ? z3_find(z, u) : NULL; // the root stays
    if (s) s->unit = -1;
    return 0;
}

// Waits for s's reduce-scatter and adds this rank's piece of the sum to
// the gradient shard.
static int z3_reduced(struct zero3 *z, struct z3_slot *s, skiff_err *err)
{
    if (s->unit < 0) return 0;
    TRY(z3_wait(z, s, err));
    size_t plen = z->len[s->unit] / (size_t)z->world;
    TRY(cuda_gpt2_accumulate(z->cd->m, z->gshard + z->off[s->unit], (const float *)s->buf + (size_t)z->rank * plen,
                             plen, err));
    s->unit = -1;
    return 0;
}

static float *z3_grad(void *ctx, int u, skiff_err *err)
{
    struct zero3 *z = (struct zero3 *)ctx;
    struct z3_slot *s = u ? &z->g[z->g_turn] : &z->root_grad;
    if (u) z->g_turn = (z->g_turn + 1) % z->nbuf;
    // the oldest buffer: its reduce-scatter ran while the last block computed
    if (z3_reduced(z, s, err) < 0) return NULL;
    s->unit = u;
    cudaError_t e = cudaMemsetAsync(s->buf, 0, z->len[u] * sizeof(float), z->cd->s);
    if (e != cudaSuccess) {
        skiff_error(err, 0, "%s:%d: cudaMemsetAsync: %s", __FILE__, __LINE__, cudaGetErrorString(e));
        return NULL;
    }
    return (float *)s->buf;
}

static int z3_grad_done(void *ctx, int u, skiff_err *err)
{
    struct zero3 *z = (struct zero3 *)ctx;
    struct z3_slot *s = !u ? &z->root_grad : z->g[0].unit == u ? &z->g[0] : &z->g[1];
    return z3_start(z, s, TR_COMM_REDUCE_SCATTER, err);
}

// After a backward: every reduce-scatter in, every prefetch done.
static int z3_drain(struct zero3 *z, skiff_err *err)
{
    TRY(z3_reduced(z, &z->g[0], err));
    TRY(z3_reduced(z, &z->g[1], err));
    TRY(z3_reduced(z, &z->root_grad, err));
    for (int i = 0; i < z->nbuf; i++) {
        TRY(z3_wait(z, &z->p[i], err));
        z->p[i].unit = -1;
    }
    return 0;
}

// Floats of the gathered buffers of each kind (weights, gradients): the
// root and --zero3-buffers blocks.
static size_t z3_gathered(const struct zero3 *z) { return z->len[0] + (size_t)z->nbuf * z->len[1]; }

// The shard's pieces for AdamW: unit by unit, this rank's piece of the
// unit cut where its tensors meet, each with its tensor's weight decay.
static int z3_opt_pieces(struct zero3 *z, const struct gpt2_config *cfg, skiff_err *err)
{
    int U = gpt2_num_units(cfg), n = 0;
    struct cuda_opt_piece *pc = (struct cuda_opt_piece *)calloc((size_t)U * GPT2_UNIT_MAX_SLICES, sizeof(*pc));
    if (!pc) return skiff_error(err, ENOMEM, "optimizer pieces");
    struct gpt2_slice sl[GPT2_UNIT_MAX_SLICES];
    for (int u = 0; u < U; u++) {
        size_t total, uo = 0, plen = z->len[u] / (size_t)z->world, a = (size_t)z->rank * plen, b = a + plen;
        int k = gpt2_unit_slices_tp(cfg, z->cd->plan->tp, u, sl, &total);
        for (int i = 0; i < k; uo += sl[i].len, i++) {
            size_t lo = uo > a ? uo : a, hi = uo + sl[i].len < b ? uo + sl[i].len : b;
            if (lo < hi)
                pc[n++] = (struct cuda_opt_piece){z->off[u] + (lo - a), hi - lo, gpt2_param_decays(sl[i].tensor),
                                                  gpt2_tp_sharded(sl[i].tensor)};
        }
    }
    int rc = cuda_gpt2_set_opt_pieces(z->cd->m, pc, n, err);
    free(pc);
    return rc;
}

static int z3_open(struct cuda_device *cd, skiff_err *err)
{
    const struct gpt2_config *cfg = &cd->o->cfg;
    struct zero3 *z = (struct zero3 *)calloc(1, sizeof(*z));
    if (!z) return skiff_error(err, ENOMEM, "ZeRO-3");
    cd->z3 = z;
    z->cd = cd;
    z->world = cd->P, z->rank = cd->rank, z->L = cfg->num_layers;
    z->nbuf = cd->o->zero3_buffers;
    z->elem = cuda_gpt2_param_elem_bytes(cd->m);
    int U = gpt2_num_units(cfg);
    z->len = (size_t *)calloc((size_t)U, sizeof(size_t));
    z->off = (size_t *)calloc((size_t)U, sizeof(size_t));
    if (!z->len || !z->off) return skiff_error(err, ENOMEM, "ZeRO-3 units");
    for (int u = 0; u < U; u++) z->len[u] = train_zero3_unit(cfg, cd->plan->tp, z->world, z->rank, u, &z->off[u]);
    CUDA_CHECK(cudaMalloc((void **)&z->gshard, cd->plan->opt_len * sizeof(float)));
    struct z3_slot *w[] = {&z->root, &z->p[0], &z->p[1]}, *g[] = {&z->root_grad, &z->g[0], &z->g[1]};
    for (int i = 0; i < 3; i++) {
        w[i]->unit = g[i]->unit = -1;
        if (i > z->nbuf) continue;
        size_t n = z->len[i ? 1 : 0]; // the blocks are all the same size
        CUDA_CHECK(cudaMalloc(&w[i]->buf, n * z->elem));
        CUDA_CHECK(cudaMalloc(&g[i]->buf, n * sizeof(float)));
    }
    z->units = (struct cuda_gpt2_units){z, z3_gather, z3_release, z3_grad, z3_grad_done};
    cuda_gpt2_use_units(cd->m, &z->units);
    return z3_opt_pieces(z, cfg, err);
}

static void z3_close(struct zero3 *z)
{
    if (!z) return;
    struct z3_slot *all[] = {&z->root, &z->root_grad, &z->p[0], &z->p[1], &z->g[0], &z->g[1]};
    skiff_err ignored;
    for (int i = 0; i < 6; i++) {
        z3_wait(z, all[i], &ignored);
        if (all[i]->buf) cudaFree(all[i]->buf);
    }
    if (z->gshard) cudaFree(z->gshard);
    free(z->len);
    free(z->off);
    free(z);
}

// ---- --pp: pipeline stages on the GPU ------------------------------------
// The layout is the CPU's (trainer/pipeline.c, policy.h): process r is
// stage r / (DP x TP) of data-parallel replica r / TP % DP, tensor-parallel
// rank r % TP; train_stage_blocks splits the blocks. Each tensor-parallel
// rank has its own pipeline, as on the CPU: the residual stream between
// blocks is whole and the same on every tensor-parallel rank, so stage s's
// rank t sends to stage s+1's rank t alone. A stage computes, reduces and
// steps only its ranges of the parameter buffer (train_stage_ranges): the
// gradient is all-reduced over the stage's data-parallel group, the tied
// wte's between the first and the last stage; with ZeRO-1/2 the ranges are
// sharded over the stage's data-parallel ranks range by range
// (train_pp_shard_copy), reduce-scattered after the schedule (ZeRO-1) or
// after every micro-batch's backward (ZeRO-2), each rank steps its shard
// and an all-gather of the stepped weights (in the storage type) puts the
// stage's ranges back together. ZeRO-3 is ZeRO-1's pieces with the
// stepped weights left in the shards: each step gathers the stage's weights
// from them before its schedule (pipe_hold), the gradient is
// reduce-scattered after it as ZeRO-1's, and a checkpoint saves each
// rank's shard (the CPU pipeline's files); the stage-sized weight and
// gradient buffers stay allocated, so the device's memory for them is
// ZeRO-1/2's and only what persists between steps is the shard (see
// doc/trainer-parallelism.md, "ZeRO-3 and the pipeline"). The gradient
// norm is summed over the data-parallel group (ZeRO), the tensor-parallel
// group and the stages.
// As the CPU's stage, the model's weights and gradient hold the stage's
// ranges only, back to back (CUDA_GPT2_STAGE, cuda_gpt2_set_stage_layout),
// and so do the master, m and v with ZeRO 0 (with ZeRO: this rank's shard
// of them). What differs from the CPU pipeline, and why:
//  - The host copies stay whole for the run (the loop's and the
//    checkpoint's layout; the CPU's exist only around the upload and a
//    save): pipe_cut cuts them to the stage at upload, and a checkpoint
//    puts every stage's ranges together in a whole-sized device buffer
//    made for the save (pipe_download).
//  - The model keeps one set of activations (cuda_model.cu's buffers are
//    per layer, not per micro-batch): a stage before the last keeps each
//    micro-batch's input until its backward and redoes its forward from
//    it first (GPipe's re-materialisation: one more forward per
//    micro-batch there, the same kernels on the same input, so the same
//    bits); the last stage runs each micro-batch's forward and backward
//    back to back and keeps the gradient of its input until the schedule
//    sends it. --recompute composes: the model keeps one block's inner
//    activations and redoes the others in the backward.
//  - Activations and their gradients travel with tr_sendrecv on the
//    stages' group: ncclSend/ncclRecv in one group (NCCL), or through
//    pinned host memory and the TCP ring (host-staged), comm_cuda.cu.
//  - No bubble measured (the kernels run asynchronously).
// The schedules (GPipe, 1F1B) are ppsched.c's, the CPU pipeline's too.

static void pipe_close(struct cuda_pipe *p)
{
    if (!p) return;
    for (int k = 0; k < p->nslots; k++) {
        if (p->dev && p->dev[k]) cudaFree(p->dev[k]);
        if (p->in) free(p->in[k]);
        if (p->tg) free(p->tg[k]);
    }
    free(p->dev);
    free(p->in);
    free(p->tg);
    free(p->piece);
    free(p->hstage);
    if (p->packed) cudaFree(p->packed);
    if (p->gshard) cudaFree(p->gshard);
    if (p->emb != p->ppc) tr_comm_destroy(p->emb);
    tr_comm_destroy(p->ppc);
    tr_comm_destroy(p->dpc);
    free(p);
}

// The pieces of every data-parallel rank's shard of the stage's ranges,
// laid out as train_pp_shard_copy does (the checkpoints are the CPU's).
static int pipe_pieces(struct cuda_pipe *p, skiff_err *err)
{
    size_t D = (size_t)p->dp;
    p->piece = (struct pp_piece *)calloc(D * (size_t)p->nr, sizeof(*p->piece));
    if (!p->piece) return skiff_error(err, ENOMEM, "pipeline shard pieces");
    size_t at = 0;
    for (int i = 0; i < p->nr; i++) {
        size_t piece;
        train_pp_piece(p->r[i].len, p->dp, 0, &piece);
        if (p->r[i].tensor == GPT2_WTE) p->wte_piece_off = at, p->wte_piece_len = piece;
        for (size_t d = 0; d < D; d++) {
            size_t a = d * piece, have = train_pp_piece(p->r[i].len, p->dp, (int)d, &piece);
            p->piece[d * p->nr + i] = (struct pp_piece){p->coff[i] + a, at, have, p->r[i].off + a};
        }
        at += piece;
    }
    p->shard_len = at;
    return 0;
}

// AdamW's pieces: the stage's ranges (ZeRO 0: the optimizer's range is
// the whole buffer) or this rank's pieces of them (ZeRO: the shard), each
// with its tensor's weight decay (lnf, one range of two 1-D tensors, has
// none); the padding is never stepped.
static int pipe_opt_pieces(struct cuda_device *cd, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    struct cuda_opt_piece pc[TRAIN_STAGE_MAX_RANGES];
    int n = 0;
    for (int i = 0; i < p->nr; i++) {
        int t = p->r[i].tensor, decay = gpt2_param_decays(t), split = gpt2_tp_sharded(t);
        if (!p->zero) {
            pc[n++] = (struct cuda_opt_piece){p->coff[i], p->r[i].len, decay, split};
            continue;
        }
        const struct pp_piece *q = &p->piece[(size_t)p->dp_rank * p->nr + i];
        if (q->have) pc[n++] = (struct cuda_opt_piece){q->shard, q->have, decay, split};
    }
    return cuda_gpt2_set_opt_pieces(cd->m, pc, n, err);
}

static int rank_at(const struct cuda_pipe *p, int stage, int dp_rank)
{
    return train_layout_rank(p->tp, p->dp, stage, dp_rank, p->tp_rank);
}

// The stage's groups, every rank in the same order as pipeline.c: its
// data-parallel group, its pipeline, the embedding pair (first and last
// stage, with more than 2 stages).
static int pipe_groups(struct cuda_device *cd, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    int N = p->stages, D = p->dp, t = p->tp_rank;
    int *mem = (int *)malloc((size_t)(N > D ? N : D) * sizeof(int));
    if (!mem) return skiff_error(err, ENOMEM, "pipeline groups");
    char name[64];
    for (int i = 0; i < D; i++) mem[i] = rank_at(p, p->stage, i);
    snprintf(name, sizeof(name), "pp-dp/%d/%d", p->stage, t);
    int rc = make_group(cd, name, mem, D, p->dp_rank, &p->dpc, err);
    for (int st = 0; rc == 0 && st < N; st++) mem[st] = rank_at(p, st, p->dp_rank);
    snprintf(name, sizeof(name), "pp/%d/%d", p->dp_rank, t);
    if (rc == 0) rc = make_group(cd, name, mem, N, p->stage, &p->ppc, err);
    if (rc == 0 && N > 2 && (p->stage == 0 || p->stage == N - 1)) {
        int pair[2] = {rank_at(p, 0, p->dp_rank), rank_at(p, N - 1, p->dp_rank)};
        snprintf(name, sizeof(name), "pp-emb/%d/%d", p->dp_rank, t);
        rc = make_group(cd, name, pair, 2, p->stage == 0 ? 0 : 1, &p->emb, err);
    } else if (rc == 0 && N == 2) {
        p->emb = p->ppc;
    }
    free(mem);
    if (rc < 0)
        return skiff_err_wrap(err, "pipeline groups of stage %d, data-parallel replica %d (--pp %d, %s)", p->stage,
                              p->dp_rank, N, cd->backend);
    return 0;
}

static int pipe_open(struct cuda_device *cd, skiff_err *err)
{
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct cuda_pipe *p = (struct cuda_pipe *)calloc(1, sizeof(*p));
    if (!p) return skiff_error(err, ENOMEM, "pipeline");
    cd->pp = p;
    p->stages = pl->pp, p->stage = pl->pp_rank, p->dp = pl->world, p->dp_rank = pl->rank;
    p->tp = pl->tp, p->tp_rank = pl->tp_rank, p->zero = o->zero;
    p->micro = o->grad_accum, p->gpipe = o->pp_gpipe, p->current = -1;
    train_stage_blocks(o->cfg.num_layers, p->stages, p->stage, &p->lo, &p->hi);
    TRY(cuda_gpt2_set_stage(cd->m, p->lo, p->hi, err));
    p->nr = train_stage_ranges(&o->cfg, p->tp, p->stages, p->stage, p->r);
    // the model's stage layout: the ranges back to back (lnf's one range
    // holds lnfw, then lnfb)
    size_t sz[GPT2_NUM_PARAM_TENSORS], off[GPT2_NUM_PARAM_TENSORS] = {0};
    gpt2_param_layout_tp(&o->cfg, p->tp, sz, NULL);
    for (int i = 0; i < p->nr; i++) {
        int t = p->r[i].tensor;
        p->coff[i] = p->stage_len;
        off[t] = p->stage_len;
        if (t == GPT2_LNFW) off[GPT2_LNFB] = p->stage_len + sz[GPT2_LNFW];
        if (t == GPT2_WTE) p->wte_off = p->stage_len, p->wte_len = p->r[i].len;
        p->stage_len += p->r[i].len;
    }
    if (p->stage_len != cd->mpad)
        return skiff_error(err, 0, "%s:%d: internal: the stage's ranges have %zu floats, the model %zu", __FILE__,
                           __LINE__, p->stage_len, cd->mpad);
    TRY(cuda_gpt2_set_stage_layout(cd->m, off, err));
    if (!(p->hstage = (float *)malloc(p->stage_len * sizeof(float))))
        return skiff_error(err, ENOMEM, "host copy of the stage's parameters");
    if (p->zero) {
        TRY(pipe_pieces(p, err));
        if (p->shard_len != pl->opt_len)
            return skiff_error(err, 0, "%s:%d: internal: the stage's shard has %zu floats, the plan %zu", __FILE__,
                               __LINE__, p->shard_len, pl->opt_len);
        CUDA_CHECK(cudaMalloc((void **)&p->packed, p->shard_len * (size_t)p->dp * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&p->gshard, p->shard_len * sizeof(float)));
    }
    TRY(pipe_opt_pieces(cd, err));
    int N = p->stages;
    p->nslots = p->gpipe || N - p->stage > p->micro ? p->micro : N - p->stage;
    p->bytes = (size_t)o->batch * o->seq * o->cfg.channels * cuda_gpt2_param_elem_bytes(cd->m);
    size_t BT = (size_t)o->batch * o->seq;
    p->dev = (void **)calloc((size_t)p->nslots, sizeof(void *));
    p->in = (int **)calloc((size_t)p->nslots, sizeof(int *));
    p->tg = (int **)calloc((size_t)p->nslots, sizeof(int *));
    if (!p->dev || !p->in || !p->tg) return skiff_error(err, ENOMEM, "pipeline slots");
    for (int k = 0; k < p->nslots; k++) {
        p->in[k] = (int *)malloc(BT * sizeof(int));
        p->tg[k] = (int *)malloc(BT * sizeof(int));
        if (!p->in[k] || !p->tg[k]) return skiff_error(err, ENOMEM, "pipeline token slots");
        CUDA_CHECK(cudaMalloc(&p->dev[k], p->bytes));
    }
    return pipe_groups(cd, err);
}

// Moves data-parallel rank d's shard (elem bytes a value) between the
// parameter-sized buffer `local` and `shard`, piece by piece, queued.
static int pipe_shard_move(struct cuda_device *cd, int d, void *local, void *shard, size_t elem, int to_local,
                           skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    for (int i = 0; i < p->nr; i++) {
        const struct pp_piece *q = &p->piece[(size_t)d * p->nr + i];
        char *l = (char *)local + q->local * elem, *x = (char *)shard + q->shard * elem;
        if (q->have)
            CUDA_CHECK(
                cudaMemcpyAsync(to_local ? l : x, to_local ? x : l, q->have * elem, cudaMemcpyDeviceToDevice, cd->s));
    }
    return 0;
}

// ZeRO-1/2: the gradient of the stage's ranges reduce-scattered over its
// data-parallel group: this rank's shard of the sum into gshard, or added
// to it (ZeRO-2, every micro-batch).
static int pipe_shard_reduce(struct cuda_device *cd, int add, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    size_t n = p->shard_len * (size_t)p->dp;
    float *g = cuda_gpt2_grads(cd->m), *mine = p->packed + (size_t)p->dp_rank * p->shard_len;
    CUDA_CHECK(cudaMemsetAsync(p->packed, 0, n * sizeof(float), cd->s)); // the padding
    for (int d = 0; d < p->dp; d++) TRY(pipe_shard_move(cd, d, g, p->packed + (size_t)d * p->shard_len, 4, 0, err));
    if (p->dp > 1 && tr_reduce_scatter(p->dpc, p->packed, n, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d: gradient reduce-scatter over its %d data-parallel ranks",
                              p->stage, p->dp);
    if (add) return cuda_gpt2_accumulate(cd->m, p->gshard, mine, p->shard_len, err);
    CUDA_CHECK(cudaMemcpyAsync(p->gshard, mine, p->shard_len * sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
    return 0;
}

// After the schedule: the stage's gradient summed over its data-parallel
// group (ZeRO: reduce-scattered; ZeRO-2 did it during the schedule), then
// the tied wte's (ZeRO: its piece of the shard, the same piece on
// data-parallel rank d of the first and of the last stage) between the
// first and the last stage.
static int pipe_reduce(struct cuda_device *cd, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    float *g = cuda_gpt2_grads(cd->m);
    if (p->zero == 1 || p->zero == 3) TRY(pipe_shard_reduce(cd, 0, err));
    if (!p->zero && p->dp > 1) {
        void *bufs[TRAIN_STAGE_MAX_RANGES];
        size_t ns[TRAIN_STAGE_MAX_RANGES];
        for (int i = 0; i < p->nr; i++) bufs[i] = g + p->coff[i], ns[i] = p->r[i].len;
        struct tr_comm_req *req = NULL;
        if (tr_comm_start_group(p->dpc, TR_COMM_ALLREDUCE, bufs, ns, p->nr, TR_F32, &req, err) < 0 ||
            tr_comm_wait(p->dpc, req, err) < 0)
            return skiff_err_wrap(err, "pipeline stage %d: gradient all-reduce over its %d data-parallel ranks",
                                  p->stage, p->dp);
    }
    if (!p->emb) return 0;
    float *w = p->zero ? p->gshard + p->wte_piece_off : g + p->wte_off;
    if (tr_allreduce_sum(p->emb, w, p->zero ? p->wte_piece_len : p->wte_len, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline: the tied embedding's gradient between the first and the last stage");
    return 0;
}

// The squared gradient norm into ss (device), the same bits on every
// rank: each range once (the tied wte on the first stage only), with --tp
// the replicated tensors on tensor-parallel rank 0 only, summed over the
// stage's data-parallel group (ZeRO: each rank has its shard), the
// tensor-parallel group and the stages.
static int pipe_norm2(struct cuda_device *cd, const float *gopt, float *ss, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    CUDA_CHECK(cudaMemsetAsync(ss, 0, sizeof(float), cd->s));
    for (int i = 0; i < p->nr; i++) {
        if (!p->r[i].norm || (p->tp > 1 && p->tp_rank != 0 && !gpt2_tp_sharded(p->r[i].tensor))) continue;
        const struct pp_piece *q = p->zero ? &p->piece[(size_t)p->dp_rank * p->nr + i] : NULL;
        const float *g = q ? gopt + q->shard : gopt + p->coff[i];
        size_t n = q ? q->have : p->r[i].len;
        if (n) TRY(cuda_gpt2_sumsq(cd->m, ss, g, n, err));
    }
    if (p->zero && p->dp > 1) TRY(tr_allreduce_sum(p->dpc, ss, 1, TR_F32, err));
    if (cd->tp_comm) TRY(tr_allreduce_sum(cd->tp_comm, ss, 1, TR_F32, err));
    if (tr_allreduce_sum(p->ppc, ss, 1, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline: summing the gradient norm over the stages");
    return 0;
}

// ZeRO-1/2, after AdamW stepped this rank's shard of the master weights
// (ZeRO-3: before the weights' next use, pipe_hold): the shard in the
// storage type all-gathered over the stage's data-parallel group (packed
// is free: half its bytes in bf16) and every rank's pieces put into the
// stage's ranges of the weights.
static int pipe_share_params(struct cuda_device *cd, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    size_t e = cuda_gpt2_param_elem_bytes(cd->m);
    char *pk = (char *)p->packed;
    TRY(cuda_gpt2_to_storage(cd->m, pk + (size_t)p->dp_rank * p->shard_len * e, cuda_gpt2_opt_buf(cd->m, 0),
                             p->shard_len, err));
    if (p->dp > 1 && tr_all_gather(p->dpc, pk, p->shard_len * (size_t)p->dp, cd->pdtype, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d: parameter all-gather over its %d data-parallel ranks", p->stage,
                              p->dp);
    for (int d = 0; d < p->dp; d++)
        TRY(pipe_shard_move(cd, d, cuda_gpt2_params(cd->m), pk + (size_t)d * p->shard_len * e, e, 1, err));
    return 0;
}

// ZeRO-3: the stage's weights gathered from the shards if they changed
// since the last gather (a step, an upload), before a step's schedule or a
// validation pass; every rank of the stage's data-parallel group sees the
// same changes, so they gather together.
static int pipe_hold(struct cuda_device *cd, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    if (p->zero != 3 || !p->stale) return 0;
    TRY(pipe_share_params(cd, err));
    p->stale = 0;
    return 0;
}

// The stage's ranges of a whole (tensor-parallel part's) host buffer, back
// to back into hstage: the model's stage layout.
static float *pipe_cut(struct cuda_pipe *p, const float *whole)
{
    for (int i = 0; i < p->nr; i++) memcpy(p->hstage + p->coff[i], whole + p->r[i].off, p->r[i].len * sizeof(float));
    return p->hstage;
}

// ZeRO-1/2, at upload: this rank's shard of the master weights from the
// stage's weights on the host (stage layout), staged through the gradient
// buffer (free between steps).
static int pipe_upload_master(struct cuda_device *cd, const float *host, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    float *g = cuda_gpt2_grads(cd->m), *master = cuda_gpt2_opt_buf(cd->m, 0);
    TRY(cuda_gpt2_h2d(cd->m, g, host, p->stage_len * sizeof(float), err));
    CUDA_CHECK(cudaMemsetAsync(master, 0, p->shard_len * sizeof(float), cd->s));
    TRY(pipe_shard_move(cd, p->dp_rank, g, master, 4, 0, err));
    CUDA_CHECK(cudaMemsetAsync(g, 0, p->stage_len * sizeof(float), cd->s));
    return 0;
}

// Before a checkpoint, into dev (n_dev floats: the whole buffer of the
// tensor-parallel part): every stage's values of src (the master weights,
// m or v, in the stage layout; ZeRO: this rank's shard, all-gathered over
// the stage's data-parallel group first)
// from the data-parallel rank 0 of the stage that owns each range, zeros
// from every other rank, summed over the device's comm (the ranks of every
// stage with this tensor-parallel rank): each holds the whole buffer,
// exactly (pipeline.c's tr_pipeline_gather).
static int pipe_gather(struct cuda_device *cd, const float *src, float *dev, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    size_t n = cd->plan->n_dev;
    if (p->zero) {
        float *mine = p->packed + (size_t)p->dp_rank * p->shard_len;
        CUDA_CHECK(cudaMemcpyAsync(mine, src, p->shard_len * sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
        if (p->dp > 1 && tr_all_gather(p->dpc, p->packed, p->shard_len * (size_t)p->dp, TR_F32, err) < 0)
            return skiff_err_wrap(err, "pipeline stage %d: gathering its shards for a checkpoint", p->stage);
    }
    CUDA_CHECK(cudaMemsetAsync(dev, 0, n * sizeof(float), cd->s));
    for (int i = 0; i < p->nr && p->dp_rank == 0; i++) {
        if (!p->r[i].owner) continue;
        for (int d = 0; p->zero && d < p->dp; d++) {
            const struct pp_piece *q = &p->piece[(size_t)d * p->nr + i];
            if (q->have)
                CUDA_CHECK(cudaMemcpyAsync(dev + q->whole, p->packed + (size_t)d * p->shard_len + q->shard,
                                           q->have * sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
        }
        if (!p->zero)
            CUDA_CHECK(cudaMemcpyAsync(dev + p->r[i].off, src + p->coff[i], p->r[i].len * sizeof(float),
                                       cudaMemcpyDeviceToDevice, cd->s));
    }
    if (tr_allreduce_sum(cd->comm, dev, n, TR_F32, err) < 0)
        return skiff_err_wrap(err, "pipeline: gathering the stages for a checkpoint");
    return 0;
}

static int pipe_p2p(struct cuda_pipe *p, const void *sbuf, int to, void *rbuf, int from, skiff_err *err)
{
    if (to < 0 && from < 0) return 0;
    if (tr_sendrecv(p->ppc, sbuf, p->bytes, to, rbuf, p->bytes, from, err) < 0)
        return skiff_err_wrap(err, "pipeline stage %d", p->stage);
    return 0;
}

static int pipe_prev(const struct cuda_pipe *p) { return p->stage > 0 ? p->stage - 1 : -1; }
static int pipe_next(const struct cuda_pipe *p) { return p->stage < p->stages - 1 ? p->stage + 1 : -1; }
static int pipe_last(const struct cuda_pipe *p) { return p->stage == p->stages - 1; }
static int pipe_slot(const struct cuda_pipe *p, int k) { return k % p->nslots; }

// Where micro-batch k's input arrives: its slot, or on the last stage the
// model's stage input (its forward follows at once).
static void *pipe_in(struct cuda_device *cd, int k)
{
    struct cuda_pipe *p = cd->pp;
    return pipe_last(p) ? cuda_gpt2_stage_in(cd->m) : p->dev[pipe_slot(p, k)];
}

// The gradient of micro-batch k's input, after its backward.
static void *pipe_din(struct cuda_device *cd, int k)
{
    struct cuda_pipe *p = cd->pp;
    return pipe_last(p) ? p->dev[pipe_slot(p, k)] : cuda_gpt2_stage_grad(cd->m);
}

static float pipe_dloss(const struct cuda_device *cd)
{
    const struct train_opts *o = cd->o;
    return (float)(loss_scale(cd) / ((double)o->batch * o->seq * o->grad_accum * cd->pp->dp));
}

// ZeRO-2, after each micro-batch's backward: its gradient to the shards
// at once, so no rank adds up the stage's whole gradient.
static int pipe_zero2(struct cuda_device *cd, skiff_err *err)
{
    if (cd->pp->zero != 2) return 0;
    TRY(pipe_shard_reduce(cd, 1, err));
    return cuda_gpt2_zero_grad(cd->m, err);
}

// Seconds the pipeline's groups have spent communicating, all steps.
static double pipe_busy(const struct cuda_pipe *p)
{
    double b = p->ppc->stats.busy_s + p->dpc->stats.busy_s;
    return p->emb && p->emb != p->ppc ? b + p->emb->stats.busy_s : b;
}

// The stage's forward of micro-batch k from its slot (the tokens and, after
// the first stage, its input).
static int pipe_run_forward(struct cuda_device *cd, int k, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    int sl = pipe_slot(p, k);
    if (p->stage > 0 && !pipe_last(p))
        CUDA_CHECK(cudaMemcpyAsync(cuda_gpt2_stage_in(cd->m), p->dev[sl], p->bytes, cudaMemcpyDeviceToDevice, cd->s));
    TRY(cuda_gpt2_forward(cd->m, p->in[sl], pipe_last(p) ? p->tg[sl] : NULL, pipe_dloss(cd), err));
    p->current = k;
    return 0;
}

static int pipe_fwd(struct cuda_device *cd, struct train_batches *b, int k, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    int sl = pipe_slot(p, k);
    size_t BT = (size_t)cd->o->batch * cd->o->seq;
    TRY(b->load(b, k, err));
    memcpy(p->in[sl], b->inputs, BT * sizeof(int));
    memcpy(p->tg[sl], b->targets, BT * sizeof(int));
    TRY(pipe_run_forward(cd, k, err));
    if (!pipe_last(p)) return 0;
    // the last stage: the backward at once, the gradient of the input kept
    TRY(cuda_gpt2_backward(cd->m, NULL, NULL, err));
    CUDA_CHECK(cudaMemcpyAsync(p->dev[sl], cuda_gpt2_stage_grad(cd->m), p->bytes, cudaMemcpyDeviceToDevice, cd->s));
    return pipe_zero2(cd, err);
}

// The stage's backward of micro-batch k from the gradient the next stage
// sent into the model's stage_grad; the forward redone first unless the
// model holds k's activations.
static int pipe_bwd(struct cuda_device *cd, int k, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    if (pipe_last(p)) return 0; // done with the forward
    if (p->current != k) TRY(pipe_run_forward(cd, k, err));
    TRY(cuda_gpt2_backward(cd->m, NULL, NULL, err));
    return pipe_zero2(cd, err);
}

// The schedule (trainer/ppsched.c, the CPU pipeline's too) over this
// stage: the device and the step's batches.
struct pipe_run {
    struct cuda_device *cd;
    struct train_batches *b;
};
static int pr_p2p(void *ctx, const void *sbuf, int to, void *rbuf, int from, skiff_err *err)
{
    return pipe_p2p(((struct pipe_run *)ctx)->cd->pp, sbuf, to, rbuf, from, err);
}
static int pr_fwd(void *ctx, int k, skiff_err *err)
{
    struct pipe_run *r = (struct pipe_run *)ctx;
    return pipe_fwd(r->cd, r->b, k, err);
}
static int pr_bwd(void *ctx, int k, skiff_err *err) { return pipe_bwd(((struct pipe_run *)ctx)->cd, k, err); }
static void *pr_in(void *ctx, int k) { return pipe_in(((struct pipe_run *)ctx)->cd, k); }
static void *pr_out(void *ctx, int) { return cuda_gpt2_stage_out(((struct pipe_run *)ctx)->cd->m); }
static void *pr_dout(void *ctx) { return cuda_gpt2_stage_grad(((struct pipe_run *)ctx)->cd->m); }
static void *pr_din(void *ctx, int k) { return pipe_din(((struct pipe_run *)ctx)->cd, k); }

static int pipe_schedule(struct cuda_device *cd, struct train_batches *b, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    struct pipe_run r = {cd, b};
    struct tr_pp_steps st = {p->stage, p->stages, p->micro, &r, pr_p2p, pr_fwd, pr_bwd, pr_in, pr_out, pr_dout, pr_din};
    return p->gpipe ? tr_pp_gpipe(&st, err) : tr_pp_1f1b(&st, err);
}

// Validation: the batch through the stages, forward only; the loss is the
// last stage's (take_loss reports it as pipeline.c's loss share does).
static int pipe_forward(struct cuda_device *cd, const int *inputs, const int *targets, skiff_err *err)
{
    struct cuda_pipe *p = cd->pp;
    TRY(pipe_hold(cd, err));
    if (pipe_p2p(p, NULL, -1, cuda_gpt2_stage_in(cd->m), pipe_prev(p), err) < 0) return -1;
    TRY(cuda_gpt2_forward(cd->m, inputs, pipe_last(p) ? targets : NULL, 0.0f, err));
    p->current = -1;
    return pipe_p2p(p, cuda_gpt2_stage_out(cd->m), pipe_next(p), NULL, -1, err);
}

// One compute stream, several groups: each linked to the next in a ring,
// so a wait on any of them watches every one's NCCL communicator
// (comm_cuda.cu, cuda_comm_link).
static void link_groups(struct cuda_device *cd)
{
    struct cuda_pipe *p = cd->pp;
    struct tr_comm *g[5];
    int n = 0;
    struct tr_comm *all[5] = {cd->comm, cd->tp_comm, p ? p->ppc : NULL, p ? p->dpc : NULL,
                              p && p->emb != p->ppc ? p->emb : NULL};
    for (int i = 0; i < 5; i++)
        if (all[i]) g[n++] = all[i];
    for (int i = 0; n > 1 && i < n; i++) cuda_comm_link(g[i], g[(i + 1) % n]);
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
    // --pp: the device's comm spans the ranks of every stage with this
    // tensor-parallel rank (the loop's broadcast and means, the checkpoint's
    // gather); the stages reduce over groups of their own (pipe_groups)
    if (pl->pp > 1) cd->P = pl->world * pl->pp, cd->rank = pl->pp_rank * pl->world + pl->rank;
    TRY(cuda_select_device(dist->local_rank, cd->gpu, sizeof(cd->gpu), err));
    int P = cd->P, rank = cd->rank, z3 = o->zero == 3 && pl->pp == 1;
    // --zero 3: the model holds the shard only (opt_len, at 0), the units
    // come from z3_open's buffers (under --pp: the pipeline's shards)
    cd->mflags = (o->recompute ? CUDA_GPT2_RECOMPUTE : 0u) | (z3 ? CUDA_GPT2_UNITS : 0u);
    cd->mpad = z3 ? pl->opt_len : pl->n_dev;
    cd->mopt = pl->opt_len;
    // --pp: the model's weights and gradients are the stage's ranges only,
    // and so are the master, m and v with ZeRO 0; with ZeRO the optimizer's
    // range is this rank's shard of them (pipe_opt_pieces), laid out by the
    // device
    if (pl->pp > 1) {
        struct train_range r[TRAIN_STAGE_MAX_RANGES];
        int nr = train_stage_ranges(&o->cfg, pl->tp, pl->pp, pl->pp_rank, r);
        cd->mpad = 0;
        for (int i = 0; i < nr; i++) cd->mpad += r[i].len;
        cd->mflags |= CUDA_GPT2_STAGE;
        if (!o->zero) cd->mopt = cd->mpad;
    }
    TRY(cuda_gpt2_create(&cd->m, &o->cfg, o->batch, o->seq, cd->prec, pl->tp, pl->tp_rank, cd->mflags, cd->mpad,
                         z3 || pl->pp > 1 ? 0 : pl->opt_off, cd->mopt, err));
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
    if (pl->pp > 1) TRY(pipe_open(cd, err));
    link_groups(cd);
    if (cd->tp_comm) {
        cuda_gpt2_set_tp_allreduce(cd->m, tp_allreduce, cd);
        if (!(cd->hlocal = (float *)calloc(pl->n_dev, sizeof(float))))
            return skiff_error(err, ENOMEM, "host copy of this rank's parameters");
    }
    CUDA_CHECK(cudaEventCreate(&cd->ev0));
    CUDA_CHECK(cudaEventCreate(&cd->ev1));
    CUDA_CHECK(cudaMalloc((void **)&cd->dscal, nscal(P) * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(cd->dscal, 0, nscal(P) * sizeof(float), cd->s));
    if (o->zero == 2 && !cd->pp) CUDA_CHECK(cudaMalloc((void **)&cd->gshard, pl->opt_len * sizeof(float)));
    if (z3) TRY(z3_open(cd, err));
    cd->hparams = (float *)calloc(o->zero == 3 ? pl->opt_len : pl->n_pad, sizeof(float)); // ZeRO-3: the loop's shard
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
    if (cd->pp && cd->pp->ppc) cuda_comm_sync(cd->pp->ppc, &ignored);
    z3_close(cd->z3);
    pipe_close(cd->pp);
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
// group, staged through the gradient buffer (the model's mpad floats, free between
// steps) in pieces.
static int tp_broadcast_host(struct cuda_device *cd, float *host, size_t n, int root, skiff_err *err)
{
    float *g = cuda_gpt2_grads(cd->m);
    size_t piece = cd->mpad; // (--pp: the stage's ranges)
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
    const struct train_plan *pl = cd->plan;
    struct cuda_pipe *p = cd->pp;
    if (with_opt && p && !p->zero) { // --pp, ZeRO 0: the stage's ranges of the whole m and v
        TRY(cuda_gpt2_h2d(cd->m, cuda_gpt2_opt_buf(cd->m, 1), pipe_cut(p, cd->hm), p->stage_len * sizeof(float), err));
        TRY(cuda_gpt2_h2d(cd->m, cuda_gpt2_opt_buf(cd->m, 2), pipe_cut(p, cd->hv), p->stage_len * sizeof(float), err));
    } else if (with_opt) {
        TRY(cuda_gpt2_set_opt_state(cd->m, cd->hm, cd->hv, err));
    }
    if (cd->z3) cd->z3->root_valid = 0; // the next forward gathers the new weights
    // ZeRO-3: this rank's shard (of its tensor-parallel part), made by the loop
    const float *w = cd->hparams;
    if (pl->tp > 1 && cd->o->zero != 3) {
        // --tp: the loop's whole weights (broadcast over the data-parallel
        // group from rank 0) from tensor-parallel rank 0 to the others, each
        // keeping its part (m and v are already in the part's layout)
        if (tp_broadcast_host(cd, cd->hparams, pl->n_pad, 0, err) < 0)
            return skiff_err_wrap(err, "broadcasting parameters over the tensor-parallel group");
        gpt2_tp_copy(&cd->o->cfg, pl->tp, pl->tp_rank, cd->hparams, cd->hlocal, 1);
        w = cd->hlocal;
    }
    if (!p) return cuda_gpt2_set_params(cd->m, w, err);
    if (p->zero == 3) { // the loop's shard is the master's; the first use gathers the weights
        TRY(cuda_gpt2_h2d(cd->m, cuda_gpt2_opt_buf(cd->m, 0), w, p->shard_len * sizeof(float), err));
        p->stale = 1;
        return 0;
    }
    // --pp: the stage's ranges; with ZeRO the master weights are this
    // rank's shard of them
    TRY(cuda_gpt2_set_params(cd->m, pipe_cut(p, w), err));
    return p->zero ? pipe_upload_master(cd, p->hstage, err) : 0;
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

// --pp, before a checkpoint: every stage's weights put together
// (pipe_gather) in a buffer of the whole (tensor-parallel part's) size, for
// the checkpoint only, of which rank 0 (stage 0) writes them; with ZeRO
// each rank's shard of m and v, with ZeRO 0 every stage's m and v
// likewise, so each stage's data-parallel rank 0 writes the whole, as the
// CPU pipeline does.
static int pipe_download(struct cuda_device *cd, skiff_err *err)
{
    const struct train_plan *pl = cd->plan;
    float *w = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&w, pl->n_dev * sizeof(float), cd->s));
    int rc = pipe_gather(cd, cuda_gpt2_opt_buf(cd->m, 0), w, err);
    if (rc == 0 && cd->rank == 0)
        rc = pl->tp > 1 ? tp_gather_params(cd, w, err)
                        : cuda_gpt2_d2h(cd->m, cd->hparams, w, pl->n_pad * sizeof(float), err);
    if (rc == 0 && cd->o->zero) rc = cuda_gpt2_get_opt_state(cd->m, cd->hm, cd->hv, err);
    float *host[2] = {cd->hm, cd->hv};
    for (int k = 0; k < 2 && rc == 0 && !cd->o->zero; k++) {
        rc = pipe_gather(cd, cuda_gpt2_opt_buf(cd->m, 1 + k), w, err);
        if (rc == 0) rc = cuda_gpt2_d2h(cd->m, host[k], w, pl->opt_len * sizeof(float), err);
    }
    cudaFreeAsync(w, cd->s);
    return rc;
}

// Full fp32 weights for rank 0: every rank's master range into the (now
// free) gradient buffer, gathered when sharded; and this rank's m and v.
static int cuda_download(struct train_device *d, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    const struct train_plan *pl = cd->plan;
    if (cd->o->zero == 3) { // each rank its shard, as the CPU's ZeRO-3 saves it (--pp: of its stage's ranges)
        TRY(cuda_gpt2_get_master(cd->m, cd->hparams, err));
        return cuda_gpt2_get_opt_state(cd->m, cd->hm, cd->hv, err);
    }
    if (cd->pp) return pipe_download(cd, err);
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
    struct cuda_pipe *pp = cd->pp;
    if (o->zero == 1 && !pp) TRY(tr_reduce_scatter(c, grads, pl->n_dev, TR_F32, err));
    const float *gopt = o->zero == 0   ? grads
                        : pp           ? pp->gshard
                        : o->zero == 1 ? grads + pl->opt_off
                        : o->zero == 2 ? cd->gshard
                                       : cd->z3->gshard;
    if (inject_overflow(step + 1)) TRY(cuda_gpt2_fill(cd->m, (float *)gopt, INFINITY, 1, err));
    float *ss = cd->dscal, *norm2 = cd->dscal + 1, *slots = cd->dscal + 2;
    if (pp) { // the whole norm^2 already, summed over the stages
        TRY(pipe_norm2(cd, gopt, ss, err));
    } else {
        CUDA_CHECK(cudaMemsetAsync(ss, 0, sizeof(float), cd->s));
        TRY(cuda_gpt2_sumsq_tp(cd->m, ss, gopt, pl->opt_off, pl->opt_len, err));
        // --tp: this rank's share summed over its group (the same bits on each)
        if (cd->tp_comm) TRY(tr_allreduce_sum(cd->tp_comm, ss, 1, TR_F32, err));
    }
    // Each rank's [norm^2 of its range, loss] into its slot pair; one gather.
    CUDA_CHECK(cudaMemcpyAsync(slots + 2 * cd->rank, ss, sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
    TRY(cuda_gpt2_take_loss_dev(cd->m, slots + 2 * cd->rank + 1, err));
    if (P > 1) TRY(tr_all_gather(c, slots, 2 * (size_t)P, TR_F32, err));
    if (o->zero && !pp) // norm^2 = sum over ranks of each shard's, in rank order
        TRY(cuda_gpt2_sum_strided(cd->m, norm2, slots, P, 2, err));
    else
        CUDA_CHECK(cudaMemcpyAsync(norm2, ss, sizeof(float), cudaMemcpyDeviceToDevice, cd->s));
    float inv = (float)(1.0 / loss_scale(cd));
    // AdamW's step counter: the steps that updated (a skipped fp16 step does
    // not count; if this one overflows the device skips it whatever t is).
    int t = step + 1 - (int)cd->amp->skipped;
    // (--pp with ZeRO: the shard is not a range of the stored weights;
    // pipe_share_params writes them)
    int ppz = pp && o->zero;
    TRY(cuda_gpt2_adamw(cd->m, gopt, lr, o->beta1, o->beta2, o->eps, o->weight_decay, inv, norm2, o->grad_clip, t, !ppz,
                        err));
    // ZeRO: each rank updated its shard of the fp32 master and of the stored
    // weights; gather the stored (bf16/fp16) weights, half the bytes of fp32.
    // ZeRO-3 gathers nothing here: the next forward gathers unit by unit
    // (--pp: the next step's schedule or validation gathers the stage's).
    if (ppz && o->zero == 3)
        pp->stale = 1; // the next step or validation gathers them (pipe_hold)
    else if (ppz)
        TRY(pipe_share_params(cd, err));
    else if (o->zero && o->zero < 3 && P > 1)
        TRY(tr_all_gather(c, cuda_gpt2_params(cd->m), pl->n_dev, cd->pdtype, err));
    if (cd->z3) cd->z3->root_valid = 0; // the weights changed
    // The step's one drain.
    TRY(cuda_gpt2_d2h(cd->m, cd->hstat, cd->dscal, nscal(P) * sizeof(float), err));
    *norm = sqrtf(cd->hstat[1]) * inv;
    double s = 0;
    for (int i = 0; i < P; i++) s += cd->hstat[3 + 2 * i];
    *loss = s / P / o->grad_accum;
    if (cd->pp) *loss *= cd->pp->stages; // only the last stage's ranks have one
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
    TRY(cuda_gpt2_zero_grad(cd->m, err)); // (ZeRO-3: none to zero, every unit's buffer starts at zero)
    if (cd->pp) {                         // the schedule, then the stage's reductions (pipe_reduce)
        struct cuda_pipe *p = cd->pp;
        double pp_busy0 = pipe_busy(p);
        p->current = -1; // the weights changed since any activations the model holds
        TRY(pipe_hold(cd, err));
        if (p->zero == 2) CUDA_CHECK(cudaMemsetAsync(p->gshard, 0, p->shard_len * sizeof(float), cd->s));
        TRY(pipe_schedule(cd, b, err));
        TRY(pipe_reduce(cd, err));
        float norm = 0.0f;
        TRY(finish_step(cd, step, lr, &norm, &st->loss, err));
        TRY(scaler_update(&cd->sc, cd->amp, cd, step + 1, norm, err));
        st->grad_norm = norm;
        st->group_comm_ms = (pipe_busy(p) - pp_busy0) * 1000;
        if (cd->tp_comm) st->group_comm_ms += (cd->tp_comm->stats.busy_s - tp_busy0) * 1000;
        return 0;
    }
    if (o->zero == 2) CUDA_CHECK(cudaMemsetAsync(cd->gshard, 0, pl->opt_len * sizeof(float), cd->s));
    if (cd->z3) CUDA_CHECK(cudaMemsetAsync(cd->z3->gshard, 0, pl->opt_len * sizeof(float), cd->s));
    for (int k = 0; k < K; k++) {
        TRY(b->load(b, k, err));
        float dloss = (float)(loss_scale(cd) / ((double)o->batch * o->seq * K * P));
        TRY(cuda_gpt2_forward(cd->m, b->inputs, b->targets, dloss, err));
        int last = k == K - 1, ddp = ddp_step && last; // no_sync on earlier micro-steps
        cd->nreqs = 0;
        TRY(cuda_gpt2_backward(cd->m, ddp ? grad_ready : NULL, cd, err));
        if (cd->z3) TRY(z3_drain(cd->z3, err)); // each block's reduce-scatter added to the shard
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
    if (cd->pp) return pipe_forward(cd, inputs, targets, err);
    return cuda_gpt2_forward(cd->m, inputs, targets, 0.0f, err);
}

static int cuda_take_loss(struct train_device *d, double *sum, skiff_err *err)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    TRY(cuda_gpt2_take_loss(cd->m, sum, err));
    if (cd->pp) *sum *= cd->pp->stages; // the last stage's, 0 on the others: the mean over every rank is theirs
    return 0;
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

// Where the run trains, and what a rank holds by kind as the CPU device
// says it (from the model's memory plan, which its allocations are checked
// against, and the device's own buffers): the weights in the storage type
// (ZeRO-3: the shard and the gathered units), the gradients (fp32; ZeRO-2
// and ZeRO-3: with the accumulated shard), AdamW's master, m and v, and the
// activations with their gradients (kept, one chunk of logits, the
// backward's buffers).
static void cuda_describe(struct train_device *d, char *buf, size_t len)
{
    struct cuda_device *cd = (struct cuda_device *)d->impl;
    const struct train_opts *o = cd->o;
    const struct train_plan *pl = cd->plan;
    struct cuda_mem_plan mp;
    cuda_gpt2_memory_plan(&o->cfg, o->batch, o->seq, cd->prec, pl->tp, cd->mflags, cd->mpad, cd->mopt, &mp);
    double f = 1.0 / (1 << 20), gath = cd->z3 ? (double)z3_gathered(cd->z3) : 0;
    double params = (double)mp.params + gath * (double)cuda_gpt2_param_elem_bytes(cd->m);
    double grads =
        (double)mp.grads + (cd->gshard || cd->z3 ? (double)pl->opt_len * sizeof(float) : 0) + gath * sizeof(float);
    double acts = (double)(mp.activations + mp.logits + mp.backward);
    double own = (double)cuda_gpt2_bytes(cd->m) + (params - mp.params) + (grads - mp.grads);
    char tp[160] = "", z3[128] = "";
    if (pl->tp > 1) snprintf(tp, sizeof(tp), ", tensor-parallel part %d of %d", pl->tp_rank, pl->tp);
    if (cd->pp) {
        struct cuda_pipe *p = cd->pp;
        char t[32] = "";
        if (p->tp > 1) snprintf(t, sizeof(t), ", tp %d", p->tp);
        snprintf(tp, sizeof(tp), ", pipeline stage %d of %d (blocks %d-%d), dp %d%s, %s", p->stage, p->stages, p->lo,
                 p->hi - 1, p->dp, t, p->gpipe ? "gpipe" : "1f1b");
        // the micro-batches' inputs (or input gradients) in flight, and
        // with ZeRO the shard staging and the gradient shard
        acts += (double)p->nslots * (double)p->bytes;
        grads += (double)(p->zero ? p->shard_len * ((size_t)p->dp + 1) : 0) * sizeof(float);
        own += (double)p->nslots * (double)p->bytes + (double)(p->zero ? p->shard_len * ((size_t)p->dp + 1) : 0) * 4;
    }
    if (cd->pp && o->zero == 3) // (the shard is the optimizer's master; the stage's buffers are ZeRO-2's)
        snprintf(z3, sizeof(z3), ", ZeRO-3: the stage's weights gathered from the shards each step");
    else if (cd->z3)
        snprintf(z3, sizeof(z3), ", of which gathered units %.1f MiB + %.1f MiB",
                 gath * (double)cuda_gpt2_param_elem_bytes(cd->m) * f, gath * sizeof(float) * f);
    snprintf(buf, len,
             "%s (cuda, %s, %s collectives%s, %.2f GiB), per rank: params %.1f MiB, gradients %.1f MiB, optimizer "
             "%.1f MiB, activations %.1f MiB%s%s",
             cd->gpu, o->precision ? o->precision : "bf16", cd->backend, tp, own / 1073741824.0, params * f, grads * f,
             (double)mp.optimizer * f, acts * f, cd->mflags & CUDA_GPT2_RECOMPUTE ? " (recomputed per block)" : "", z3);
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
