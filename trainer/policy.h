/* The training policy of the loop (trainer/train.c), whatever the device
 * that does the step (cpu_device.c, cuda/cuda_device.cu): the learning-rate
 * schedule and clipping, how the parameter buffer is padded and sharded for
 * ZeRO, which data windows a rank reads, when to validate and save, what a
 * checkpoint holds, and the rules of --resume. Kept in one place so the
 * devices cannot drift apart (they once did: a finished run resumed with
 * exit 0 on the CPU and failed on CUDA). */
#ifndef SKIFF_TRAINER_POLICY_H
#define SKIFF_TRAINER_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ckpt.h"
#include "opts.h"

/* With --tp N the WORLD_SIZE processes are split Megatron's way, tensor
 * parallel fastest: process r is tensor-parallel rank r % N of data-parallel
 * rank r / N; world and rank below are the data-parallel ones (the data
 * windows, ZeRO's shards, the mean over ranks), tp and tp_rank the others.
 * With --pp N (not with --tp yet) the pipeline stage is slowest: process r
 * is stage r / dp of data-parallel rank r % dp, dp = WORLD_SIZE / N, so the
 * stages of one pipeline read the same batches. */
struct train_plan {
    int world, rank;            /* the data-parallel group: WORLD_SIZE / tp, and this process's place in it */
    int tp, tp_rank;            /* tensor-parallel ranks (1 without --tp) and this process's */
    int pp, pp_rank;            /* pipeline stages (1 without --pp) and this process's */
    size_t num_params;          /* real parameter count */
    size_t n_pad;               /* padded to a multiple of world (ZeRO shards): the host copy of the weights */
    size_t n_dev;               /* the device's parameter buffer: n_pad, or with --tp this rank's
                                 * part of the model (gpt2_param_layout_tp) padded the same way */
    size_t opt_off, opt_len;    /* the range of the device's buffer this rank's optimizer steps */
    int start, end;             /* this run does optimizer steps [start, end) */
    struct train_amp_state amp; /* with --resume: the checkpoint's (else zeros) */
};

/* ZeRO 0: every rank steps the whole (padded) buffer; ZeRO 1/2: rank r owns
 * the r-th of world equal shards. ZeRO-3: see train_zero3_copy; n_pad is
 * train_zero3_len. start = 0 until train_resume_load. world and rank are
 * the process's (WORLD_SIZE, RANK); o->tp must divide world
 * (train_plan_check). */
void train_plan_init(struct train_plan *p, const struct train_opts *o, size_t num_params, int world, int rank);
/* 0 when o->tp and o->pp divide WORLD_SIZE; else -1 with a message naming
 * the flag. */
int train_plan_check(const struct train_opts *o, int world, skiff_err *err);

/* ZeRO-3 (FSDP) shards the parameters by unit (model.h: the tensors outside
 * the blocks, then each block), so that one unit is gathered with one
 * all-gather: unit u is padded to a multiple of world (train_zero3_unit)
 * and rank r holds the r-th piece of every unit, back to back, as its
 * shard of train_zero3_len / world floats (the plan's opt_len; opt_off =
 * rank * opt_len counts in that concatenation, not in the llm.c buffer).
 * train_zero3_len: the padded units' floats. train_zero3_unit: unit u's
 * padded length and where rank's piece of it starts in its shard. */
size_t train_zero3_len(const struct gpt2_config *cfg, int world);
size_t train_zero3_unit(const struct gpt2_config *cfg, int world, int rank, int u, size_t *piece_off);
/* Rank's shard from the llm.c buffer flat, or with to_flat back into it. */
void train_zero3_copy(const struct gpt2_config *cfg, int world, int rank, float *flat, float *shard, int to_flat);

/* First global train window of micro-step k of step `step` on this rank:
 * step*G + (k*world + rank)*B with G = B*K*world (see struct data_loader). */
uint64_t train_plan_window(const struct train_plan *p, const struct train_opts *o, int step, int k);
/* First validation window of validation batch i (B = the val loader's B). */
uint64_t train_plan_val_window(const struct train_plan *p, int B, int i);
/* Whether to evaluate after 0-based step `step` (every --val-every steps and
 * after the last step of the schedule). */
int train_plan_val_due(const struct train_opts *o, int step);
/* Whether to save after `done` steps (every --ckpt-every and at the end of
 * this run, --stop-after included). */
int train_plan_save_due(const struct train_opts *o, const struct train_plan *p, int done);

/* The checkpoint record of this rank after `step` steps. Rank 0's file holds
 * the parameters (all of them, tensor-parallel or not); with ZeRO 0 the
 * optimizer state is the same on every data-parallel rank and only
 * data-parallel rank 0 keeps it (with --tp, each of its tensor-parallel
 * ranks its part), with ZeRO each rank keeps its shard. */
void train_plan_ckpt(const struct train_plan *p, const struct train_opts *o, int step, float *params, float *m,
                     float *v, struct train_ckpt *c);

/* --resume, first half: reads this rank's checkpoint (parameters into params
 * on rank 0, optimizer state into m and v where this rank's file has it) and
 * sets p->start, p->end and p->amp. Then the caller shares the state (ZeRO 0 with
 * several ranks: rank 0 broadcasts m and v) and computes the mean of p->start
 * over ranks for train_resume_agree. */
int train_resume_load(struct train_plan *p, const struct train_opts *o, float *params, float *m, float *v,
                      skiff_err *err);
/* 1 when rank 0 must broadcast the optimizer state after loading. */
int train_resume_shares_opt(const struct train_plan *p, const struct train_opts *o);
/* --resume, second half: fails when the ranks' checkpoints are at different
 * steps (an interrupted save). A run that is already finished is not an
 * error: rank 0 says so and the loop does nothing, so a requeued job's
 * `--resume` ends with exit 0. */
int train_resume_agree(const struct train_plan *p, const struct train_opts *o, double mean_start, skiff_err *err);

/* The learning rate of 0-based step `step`: linear warmup over o->warmup
 * steps to o->lr, then cosine to lr * lr_min_frac at o->steps. */
float train_lr(const struct train_opts *o, int step);

/* Gradient clipping: the factor the gradient is multiplied by for a global
 * norm `norm` (1 when --grad-clip is 0 or the norm is below it). */
float train_clip_scale(const struct train_opts *o, float norm);

#endif
