/* The GPT-2 model on one GPU, behind a C interface so C code (the training
 * loop, tests/gpu/gpu_tool.c) can drive it and compare it with the CPU model.
 *
 * Storage: parameters and activations in the precision's type (fp32, bf16 or
 * fp16) in the layout of trainer/model.h; parameter gradients and the AdamW
 * state (master weights, m, v) always fp32. The optimizer owns the range
 * [opt_off, opt_off + opt_len) of the (padded) parameter buffer: all of it
 * without ZeRO, one rank's shard with it. Every call is asynchronous on the
 * model's stream unless it returns host data. */
#ifndef SKIFF_CUDA_MODEL_H
#define SKIFF_CUDA_MODEL_H

#include <stddef.h>
#include <stdio.h>

#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_gpt2;

/* Precision names: "fp32" (TF32 matmuls), "bf16", "fp16". */
int cuda_precision_parse(const char *name, int *prec, skiff_err *err);

/* Selects the GPU (device = local_rank % device count) and returns its name. */
int cuda_select_device(int local_rank, char *name, size_t name_len, skiff_err *err);

/* Device memory cuda_gpt2_create allocates for these shapes, by what it is
 * for, computed on the host (no GPU needed); create checks that it
 * allocates exactly this. Not included: the CUDA context, NCCL's buffers, the
 * training loop's few scalars, the ZeRO-2 shard (opt_len floats) and
 * ZeRO-3's gathered units and gradient shard (the device's). With
 * CUDA_GPT2_UNITS, n_pad = opt_len is the shard: params holds it in the
 * storage type and there is no whole gradient buffer (grads 0). */
/* Flags of cuda_gpt2_create and cuda_gpt2_memory_plan. */
#define CUDA_GPT2_RECOMPUTE                                                                                            \
    1u /* --recompute: the activations inside a block are kept for one block, and the                                  \
        * backward redoes each block's forward from its input (kept per block) */
#define CUDA_GPT2_UNITS                                                                                                \
    2u /* ZeRO-3: the parameters and their gradients live in units (model.h) that the                                  \
        * caller gathers (cuda_gpt2_use_units); the model keeps the optimizer's shard */
#define CUDA_GPT2_STAGE                                                                                                \
    4u /* --pp: the parameter and gradient buffers (n_pad) hold only a pipeline stage's                                \
        * tensors, where cuda_gpt2_set_stage_layout puts them */
struct cuda_mem_plan {
    size_t params;      /* storage copy (n_pad elements of the run's type) */
    size_t grads;       /* fp32, n_pad */
    size_t optimizer;   /* fp32 master, m, v for the optimizer's range */
    size_t activations; /* kept for backward: 16 (B,T,C) tensors per layer + statistics */
    size_t logits;      /* one chunk of the classifier: (cuda_classifier_rows, Vp) */
    size_t backward;    /* gradient buffers of one layer + a forward scratch */
    size_t scratch;     /* reductions, attention D, embedding partials, bias gradients */
    size_t misc;        /* token ids, targets, token index, losses */
    size_t workspace;   /* cuBLASLt */
    size_t total;
};
void cuda_gpt2_memory_plan(const struct gpt2_config *cfg, int B, int T, int prec, int tp, unsigned flags, size_t n_pad,
                           size_t opt_len, struct cuda_mem_plan *p);

/* Rows of a classifier chunk for N = B*T rows: SKIFF_CUDA_CLASSIFIER_ROWS
 * (default 8192; 0 or more than N: all N). */
int cuda_classifier_rows(int N);

/* Dynamic shared memory the attention launchers request for head size hs
 * with the tiles they use now (SKIFF_CUDA_ATTENTION): out[0] forward, out[1]
 * dK/dV, out[2] dQ; out[3] the tile height, 64 or 128 (host only). */
void cuda_attention_smem(int prec, int hs, size_t out[4]);

/* n_pad >= number of parameters (padding for ZeRO shards). With tp > 1 the
 * model is tensor-parallel rank tp_rank of tp (Megatron's split, as
 * gpt2_create_tp on the CPU): its parameter buffer is the local layout of
 * gpt2_param_layout_tp (gpt2_tp_copy moves weights between that and the
 * whole), its attention runs NH/tp heads and its MLP 4C/tp units, and every
 * pass calls the all-reduce set by cuda_gpt2_set_tp_allreduce. tp 1,
 * tp_rank 0: the whole model. */
int cuda_gpt2_create(struct cuda_gpt2 **out, const struct gpt2_config *cfg, int B, int T, int prec, int tp, int tp_rank,
                     unsigned flags, size_t n_pad, size_t opt_off, size_t opt_len, skiff_err *err);
/* ZeRO-3 (a model created with CUDA_GPT2_UNITS): what the model calls for
 * the units' parameters and gradients, as the CPU model's gpt2_units does
 * (model.h). gather(u) returns unit u's parameters (storage type, in the
 * unit's layout: gpt2_unit_slices), valid until release(u); the forward
 * gathers block l+1 before the end of block l (its first LayerNorm is fused
 * with block l's last residual add), the backward gathers every block
 * again. grad(u) returns a zeroed fp32 buffer of unit u's length, which the
 * model adds the unit's gradient into, and grad_done(u) says it is final:
 * block by block in the backward; the root (unit 0) once per micro-step,
 * asked for in the forward (the classifier adds wte's gradient there) and
 * done at the end of the backward. Device work is queued on the model's
 * stream. On a failure gather and grad return NULL, release and grad_done
 * -1, with err set. */
struct cuda_gpt2_units {
    void *ctx;
    void *(*gather)(void *ctx, int u, int backward, skiff_err *err);
    int (*release)(void *ctx, int u, skiff_err *err);
    float *(*grad)(void *ctx, int u, skiff_err *err);
    int (*grad_done)(void *ctx, int u, skiff_err *err);
};
void cuda_gpt2_use_units(struct cuda_gpt2 *m, const struct cuda_gpt2_units *u);
/* --pp: the model runs only blocks [lo, hi) (a stage reads and writes only
 * its blocks' slices, wte and wpe on the first stage, lnf and wte on the
 * last; the parameter and gradient buffers hold the whole model's unless
 * created with CUDA_GPT2_STAGE). With lo > 0 the forward starts
 * from the (B,T,C) residual stream in stage_in (storage type, written by
 * the caller; the token ids still pass through cuda_gpt2_forward), with
 * hi < L it ends at stage_out (no classifier, no loss) and the backward
 * starts from the gradient of stage_out that the caller wrote into
 * stage_grad; with lo > 0 the backward leaves the gradient of stage_in in
 * stage_grad. With --recompute the backward redoes each block of the
 * stage from its input (stage_in for block lo), but for the model's last
 * block, whose activations the slot holds after the forward. Not with
 * ZeRO-3. */
int cuda_gpt2_set_stage(struct cuda_gpt2 *m, int lo, int hi, skiff_err *err);
/* A model created with CUDA_GPT2_STAGE, after cuda_gpt2_set_stage: where
 * each tensor the stage uses starts in the parameter and gradient buffers,
 * off[i] (a block tensor: its slice of block lo, blocks lo+1 .. hi-1
 * following; the tensors the stage does not use are never addressed). */
int cuda_gpt2_set_stage_layout(struct cuda_gpt2 *m, const size_t off[GPT2_NUM_PARAM_TENSORS], skiff_err *err);
void *cuda_gpt2_stage_in(struct cuda_gpt2 *m); /* NULL on the first stage */
void *cuda_gpt2_stage_out(struct cuda_gpt2 *m);
void *cuda_gpt2_stage_grad(struct cuda_gpt2 *m);
/* ZeRO-3: the optimizer's range is a shard of units (policy.h), not a range
 * of the llm.c buffer, so AdamW runs over these pieces of it, each with its
 * tensor's weight decay (the model keeps a copy). */
struct cuda_opt_piece {
    size_t off, len; /* in the optimizer's range */
    int decay;
    int split; /* --tp: of a tensor split over the tensor-parallel ranks (gpt2_tp_sharded) */
};
int cuda_gpt2_set_opt_pieces(struct cuda_gpt2 *m, const struct cuda_opt_piece *p, int n, skiff_err *err);
/* The sum over the tensor-parallel ranks, in place on n fp32 device floats,
 * ordered on the model's stream (queued there, or done before returning):
 * twice per block in the forward, twice in the backward. */
typedef int (*cuda_tp_allreduce_fn)(void *ctx, float *dev, size_t n, skiff_err *err);
void cuda_gpt2_set_tp_allreduce(struct cuda_gpt2 *m, cuda_tp_allreduce_fn fn, void *ctx);
void cuda_gpt2_destroy(struct cuda_gpt2 *m);

size_t cuda_gpt2_num_params(const struct cuda_gpt2 *m);       /* unpadded */
void *cuda_gpt2_stream(struct cuda_gpt2 *m);                  /* cudaStream_t */
float *cuda_gpt2_grads(struct cuda_gpt2 *m);                  /* device, n_pad floats */
size_t cuda_gpt2_bytes(const struct cuda_gpt2 *m);            /* device memory it allocated */
void *cuda_gpt2_params(struct cuda_gpt2 *m);                  /* device, n_pad elements of the storage type */
size_t cuda_gpt2_param_elem_bytes(const struct cuda_gpt2 *m); /* 4 (fp32) or 2 */

/* How the model waits before the host reads what the GPU wrote: fn returns
 * once `event` (a cudaEvent_t) has completed, or fails. The default polls
 * with a 300 s timeout; the training loop installs its communicator's wait,
 * which also aborts NCCL when a peer died, so no copy to the host can hang. */
typedef int (*cuda_wait_fn)(void *ctx, void *event, const char *what, skiff_err *err);
void cuda_gpt2_set_waiter(struct cuda_gpt2 *m, cuda_wait_fn fn, void *ctx);
/* Copies between any host memory and the device through a pinned bounce
 * buffer on the model's stream, waiting with the waiter; they return when
 * the data has arrived. */
int cuda_gpt2_d2h(struct cuda_gpt2 *m, void *host, const void *dev, size_t bytes, skiff_err *err);
int cuda_gpt2_h2d(struct cuda_gpt2 *m, void *dev, const void *host, size_t bytes, skiff_err *err);

/* Uploads n_pad host floats: storage copy of all, master copy of the opt range. */
int cuda_gpt2_set_params(struct cuda_gpt2 *m, const float *host, skiff_err *err);
/* Same from n_pad device floats (after a broadcast / all-gather). */
int cuda_gpt2_set_params_device(struct cuda_gpt2 *m, const float *dev, skiff_err *err);
/* Downloads the master copy of the opt range into host[0..opt_len). */
int cuda_gpt2_get_master(struct cuda_gpt2 *m, float *host, skiff_err *err);
/* Copies the master range into dev[opt_off..opt_off+opt_len) (dev: n_pad floats). */
int cuda_gpt2_master_to(struct cuda_gpt2 *m, float *dev, skiff_err *err);
int cuda_gpt2_get_opt_state(struct cuda_gpt2 *m, float *host_m, float *host_v, skiff_err *err);
int cuda_gpt2_set_opt_state(struct cuda_gpt2 *m, const float *host_m, const float *host_v, skiff_err *err);

/* Forward on host token ids (B*T each; targets may be NULL: no loss). The
 * classifier runs over chunks of rows (cuda_classifier_rows): with dloss != 0
 * it also does its own backward for dloss * d(sum of losses)/dlogits, chunk
 * by chunk (the data gradient kept for cuda_gpt2_backward, wte's gradient
 * added to the gradient buffer), so no (B*T, Vp) logits buffer exists. The
 * mean loss of this batch is added to a device accumulator
 * (cuda_gpt2_take_loss). */
int cuda_gpt2_forward(struct cuda_gpt2 *m, const int *inputs, const int *targets, float dloss, skiff_err *err);
/* Host copy of the mean-loss accumulator (waits for the stream), then zeroes it. */
int cuda_gpt2_take_loss(struct cuda_gpt2 *m, double *sum, skiff_err *err);
/* The same into one device float, queued (no wait). */
int cuda_gpt2_take_loss_dev(struct cuda_gpt2 *m, float *dev, skiff_err *err);
/* (B*T, Vp) logits of the last forward as fp32 on the host (computed again
 * from its final LayerNorm output, chunk by chunk). */
int cuda_gpt2_get_logits(struct cuda_gpt2 *m, float *host, skiff_err *err);

/* Called during backward each time layer `layer`'s gradients are final
 * (layer L-1 down to 0, and -1 once wte/wpe/lnf are final at the end). */
typedef int (*cuda_grad_ready_fn)(void *ctx, struct cuda_gpt2 *m, int layer, skiff_err *err);
/* The element ranges [lo, hi) of the gradient buffer that layer `layer` (or
 * -1) owns; returns how many (at most 16). */
int cuda_gpt2_layer_ranges(const struct cuda_gpt2 *m, int layer, size_t lo[16], size_t hi[16]);

int cuda_gpt2_zero_grad(struct cuda_gpt2 *m, skiff_err *err);
/* Adds the gradients of the last forward (which needs dloss != 0). */
int cuda_gpt2_backward(struct cuda_gpt2 *m, cuda_grad_ready_fn ready, void *ctx, skiff_err *err);
/* Host copy of the n_pad gradient floats. */
int cuda_gpt2_get_grads(struct cuda_gpt2 *m, float *host, skiff_err *err);

/* Sum of squares of grad[lo, lo+n) (device pointer) added into *dev_out. */
int cuda_gpt2_sumsq(struct cuda_gpt2 *m, float *dev_out, const float *grad, size_t n, skiff_err *err);
/* The same for grad, the gradient of [lo, lo+n) of the parameter buffer,
 * as this rank's share of the whole model's: with tp > 1 the replicated
 * tensors (every tensor-parallel rank holds the same gradient) count on
 * tensor-parallel rank 0 only, so the sum over the group is the whole's. */
int cuda_gpt2_sumsq_tp(struct cuda_gpt2 *m, float *dev_out, const float *grad, size_t lo, size_t n, skiff_err *err);
/* AdamW on the opt range from grad (device, opt_len floats aligned with
 * opt_off), weight decay on 2-D tensors only; step t is 1-based;
 * grad_scale multiplies the gradient (loss-scale removal). With norm2 (a
 * device float: the squared global norm of grad) the update clips to `clip`
 * (0 = off) and is skipped on the device when the norm times grad_scale is
 * inf/NaN, so the host need not wait for the norm. When update_params, the
 * storage copy of the range is rewritten too. */
int cuda_gpt2_adamw(struct cuda_gpt2 *m, const float *grad, float lr, float beta1, float beta2, float eps, float wd,
                    float grad_scale, const float *norm2, float clip, int t, int update_params, skiff_err *err);
/* dev_out[0] = dev[0] + dev[stride] + ... (n terms, in order), queued. */
int cuda_gpt2_sum_strided(struct cuda_gpt2 *m, float *dev_out, const float *dev, int n, int stride, skiff_err *err);
/* dev[0..n) = v, queued (tests: overflow injection). */
int cuda_gpt2_fill(struct cuda_gpt2 *m, float *dev, float v, size_t n, skiff_err *err);
/* dst[i] += src[i] for n floats (device), on the model's stream. */
int cuda_gpt2_accumulate(struct cuda_gpt2 *m, float *dst, const float *src, size_t n, skiff_err *err);
/* Storage copy of all parameters from an fp32 device buffer of n_pad floats. */
int cuda_gpt2_params_from(struct cuda_gpt2 *m, const float *dev, skiff_err *err);
/* dst[0..n) (device, the storage type) = src[0..n) (device fp32) rounded, queued. */
int cuda_gpt2_to_storage(struct cuda_gpt2 *m, void *dst, const float *src, size_t n, skiff_err *err);
/* The optimizer's device buffers (opt_len floats each): which 0 the fp32
 * master weights, 1 AdamW's m, 2 its v. For a device that lays the range
 * out itself (--pp with ZeRO: a shard of the stage's ranges). */
float *cuda_gpt2_opt_buf(struct cuda_gpt2 *m, int which);

/* bf16 cuBLASLt GEMM (m x n x k) timed over iters runs: TFLOP/s. */
int cuda_gemm_bench(int m, int n, int k, int iters, double *tflops, skiff_err *err);
/* Per-op GPU times (prof.cuh): start records every op of the calls that
 * follow; report stops, waits for them (polled) and writes one line per op
 * (key, calls and ms per step over `steps` steps, GEMM notes) to out. */
int cuda_prof_start(skiff_err *err);
int cuda_prof_report(FILE *out, int steps, skiff_err *err);
/* Device memory in use (all processes) and total, from cudaMemGetInfo. */
int cuda_mem_info(size_t *used, size_t *total, skiff_err *err);
/* Host-only helper (for tests): see k_encoder_csr in encoder.cuh. */
int cuda_encoder_csr(int *csr, int *counts, const int *tokens, int N, int V);

#ifdef __cplusplus
}
#endif
#endif
