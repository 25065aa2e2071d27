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

/* The world is split Megatron's way, WORLD_SIZE = dp x tp x pp, tensor
 * parallel fastest, then data parallel, then the pipeline stage:
 *   RANK = pp_rank * (dp * tp) + dp_rank * tp + tp_rank
 * so the tensor-parallel group (its all-reduces in every block) is tp
 * neighbouring ranks, one node where the launcher packs them so, the
 * data-parallel ranks of a stage come next, and the stages are furthest
 * apart (their activations are the smallest traffic). train_layout_place
 * gives a rank's place, train_layout_rank the rank at a place; every group
 * (trainer/cpu_device.c, pipeline.c) and every checkpoint file (ckpt.c)
 * is named through them. world and rank of struct train_plan are the
 * data-parallel ones (the data windows, ZeRO's shards, the mean over
 * ranks): the stages of one pipeline and the tensor-parallel ranks of one
 * replica read the same batches. */
void train_layout_place(int rank, int tp, int dp, int *pp_rank, int *dp_rank, int *tp_rank);
int train_layout_rank(int tp, int dp, int pp_rank, int dp_rank, int tp_rank);

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
 * the r-th of world equal shards (with --pp: of its stage's ranges,
 * train_pp_shard_copy, ZeRO-3 too). ZeRO-3: see train_zero3_copy; n_pad is
 * train_zero3_len. start = 0 until train_resume_load. world and rank are
 * the process's (WORLD_SIZE, RANK); o->tp must divide world
 * (train_plan_check). */
void train_plan_init(struct train_plan *p, const struct train_opts *o, size_t num_params, int world, int rank);
/* 0 when o->tp x o->pp divides WORLD_SIZE; else -1 with a message naming
 * the flag. */
int train_plan_check(const struct train_opts *o, int world, skiff_err *err);

/* ZeRO-3 (FSDP) shards the parameters by unit (model.h: the tensors outside
 * the blocks, then each block), so that one unit is gathered with one
 * all-gather: unit u is padded to a multiple of world (train_zero3_unit)
 * and rank r holds the r-th piece of every unit, back to back, as its
 * shard of train_zero3_len / world floats (the plan's opt_len; opt_off =
 * rank * opt_len counts in that concatenation, not in the llm.c buffer).
 * With --tp the units are those of a tensor-parallel rank's part of the
 * model (gpt2_unit_slices_tp over its local buffer), sharded over its
 * data-parallel group: world and rank are the data-parallel ones, flat is
 * the rank's local buffer (gpt2_param_layout_tp); tp 1 is the whole model.
 * train_zero3_len: the padded units' floats. train_zero3_unit: unit u's
 * padded length and where rank's piece of it starts in its shard. */
size_t train_zero3_len(const struct gpt2_config *cfg, int tp, int world);
size_t train_zero3_unit(const struct gpt2_config *cfg, int tp, int world, int rank, int u, size_t *piece_off);
/* Rank's shard from the (local) llm.c buffer flat, or with to_flat back
 * into it. */
void train_zero3_copy(const struct gpt2_config *cfg, int tp, int world, int rank, float *flat, float *shard,
                      int to_flat);

/* ---- pipeline stages (--pp) -----------------------------------------------
 * Stage s of n runs blocks [lo, hi) of L: the first L % n stages take one
 * block more than L / n (the last stage also runs the LM head). */
void train_stage_blocks(int L, int n, int s, int *lo, int *hi);

/* The ranges of a parameter buffer (gpt2_param_layout_tp of tp: the
 * tensor-parallel rank's part of the model) that stage `stage` of pp
 * owns: wte and wpe on the first stage, the stage's slice of each block
 * tensor, lnfw+lnfb (adjacent, one range) and the tied wte on the last.
 * `norm`: counted in the gradient norm here (the tied wte counts on the
 * first stage only); `owner`: its values go into the checkpoint from here
 * (the same rule); `tensor`: enum gpt2_param_index (lnf: GPT2_LNFW). */
#define TRAIN_STAGE_MAX_RANGES 16
struct train_range {
    size_t off, len;
    int tensor, norm, owner;
};
int train_stage_ranges(const struct gpt2_config *cfg, int tp, int pp, int stage,
                       struct train_range r[TRAIN_STAGE_MAX_RANGES]);

/* ZeRO-1/2 with --pp shard a stage's ranges over its dp data-parallel
 * ranks range by range: range i is padded to a multiple of dp and rank d
 * holds its d-th piece, the pieces of every range back to back as its
 * shard (train_pp_shard_len floats: the plan's opt_len, opt_off = d times
 * it). So the tied wte, a range of both the first and the last stage, has
 * the same piece on data-parallel rank d of either, and the two can sum
 * its gradient piece by piece. train_pp_shard_copy copies rank d's shard
 * out of the (tensor-parallel rank's) buffer `local`, zeros in the
 * padding, or with to_local back into it. */
size_t train_pp_shard_len(const struct gpt2_config *cfg, int tp, int pp, int stage, int dp);
/* The cut itself. A range of len floats in dp pieces of *piece floats
 * each: rank d's piece is the range's floats from d * *piece on, of which
 * the returned count are the range's (the rest of the piece is padding). */
size_t train_pp_piece(size_t len, int dp, int d, size_t *piece);
/* Rank d's shard of n ranges r of buf, range i at offs[i] (NULL: at
 * r[i].off), zeros in the padding; or with to_buf the shard back. */
void train_pp_pieces_copy(const struct train_range *r, const size_t *offs, int n, int dp, int d, float *buf,
                          float *shard, int to_buf);
void train_pp_shard_copy(const struct gpt2_config *cfg, int tp, int pp, int stage, int dp, int dp_rank, float *local,
                         float *shard, int to_local);

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
 * the parameters (all of them, tensor-parallel, pipelined or not); with
 * ZeRO 0 the optimizer state is the same on every data-parallel rank and
 * only data-parallel rank 0 keeps it (with --tp, each of its
 * tensor-parallel ranks its part; with --pp, every stage's rank 0 the
 * whole, gathered), with ZeRO each rank keeps its shard. */
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
