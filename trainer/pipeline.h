/* Pipeline parallelism (--pp N --micro-batches M) for the CPU device: the
 * model's blocks split into N contiguous stages, one per rank of a
 * pipeline, activations sent forward and their gradients backward between
 * neighbouring stages with point-to-point sendrecv, a 1F1B schedule (or
 * GPipe's, all forwards then all backwards), composed with data and tensor
 * parallelism in Megatron's order (policy.h, train_layout_rank: tensor
 * parallel fastest, then data parallel, then the stage), DP = WORLD_SIZE /
 * (TP x N). Each tensor-parallel rank t has its own pipeline groups: the
 * stages' activations at block boundaries (the residual stream) are whole
 * and the same on every tensor-parallel rank, so stage s's rank t sends to
 * stage s+1's rank t alone. Each stage's gradients are all-reduced within
 * its DP group, or with ZeRO-1/2 reduce-scattered there (each rank steps a
 * shard of the stage's ranges: train_pp_shard_copy). With ZeRO-3 the
 * stage's weights are sharded the same way and gathered once per step.
 *
 * A stage holds only its ranges (train_stage_ranges) of the parameters,
 * their gradients and, with ZeRO 0, AdamW's m and v: the model's held
 * layout (gpt2_set_stage), the ranges back to back. The whole buffer
 * (llm.c's layout, or the tensor-parallel rank's part of it) exists only
 * where the loop needs it: tr_pipeline_take takes a stage's ranges from
 * it, and before a checkpoint tr_pipeline_gather puts every stage's
 * ranges together in it, so rank
 * 0's file holds the whole model as a DDP run's does. */
#ifndef SKIFF_TRAINER_PIPELINE_H
#define SKIFF_TRAINER_PIPELINE_H

#include "comm.h"
#include "device.h"
#include "dist.h"
#include "error.h"
#include "model.h"
#include "opts.h"
#include "policy.h"

struct tr_pipeline;

/* Makes model this rank's stage (gpt2_set_stage), builds the DP, pipeline
 * and embedding groups of its tensor-parallel rank over dist, the
 * activation buffers of the micro-batches in flight and, with ZeRO, the
 * shard buffers. */
int tr_pipeline_open(struct tr_pipeline **out, struct gpt2 *model, const struct train_opts *o,
                     const struct train_plan *pl, struct train_dist *dist, skiff_err *err);
void tr_pipeline_close(struct tr_pipeline *p);

/* This stage's ranges of the parameter buffer (policy.h). */
const struct train_range *tr_pipeline_ranges(const struct tr_pipeline *p, int *count);

/* The micro-batches of one step through the pipeline (the schedule), then
 * the gradients of this stage's ranges reduced over DP and wte's between the
 * first and last stage: the gradient of one step on the global batch (ZeRO:
 * this rank's shard of it, tr_pipeline_grad_shard). *loss_sum: the sum of
 * the micro-batches' losses on the last stage, 0 on the others; *comm_s:
 * seconds spent in the pipeline's own communication. */
int tr_pipeline_grads(struct tr_pipeline *p, struct train_batches *b, double *loss_sum, double *comm_s, skiff_err *err);

/* ZeRO-1/2: the shard's pieces (off and len in the shard, the range's
 * tensor and norm flag; len includes the padding, which is zero), the
 * gradient shard after tr_pipeline_grads, this rank's shard of the weights
 * (taken from the model, to step in place), and the all-gather that puts
 * every rank's stepped shard back into the model. ZeRO-3: the same pieces;
 * the weight shard is the only copy of the stage's weights between steps
 * (the loop fills it, a checkpoint saves it), tr_pipeline_grads and
 * tr_pipeline_forward gather the stage's weights from the shards first,
 * the step's reductions free them again, and tr_pipeline_share_params
 * only marks them stale. */
const struct train_range *tr_pipeline_shard_ranges(const struct tr_pipeline *p, int *count);
float *tr_pipeline_grad_shard(struct tr_pipeline *p);
float *tr_pipeline_param_shard(struct tr_pipeline *p);
int tr_pipeline_share_params(struct tr_pipeline *p, skiff_err *err);
/* *v summed over the stage's data-parallel ranks (as a float, the wire
 * type: the same bits on each). */
int tr_pipeline_dp_sum(struct tr_pipeline *p, double *v, skiff_err *err);
/* Seconds the pipeline's groups have spent communicating, all steps. */
double tr_pipeline_busy(const struct tr_pipeline *p);

/* The sum over stages of one value per stage (the same on every rank of a
 * stage), added in stage order: the same bits on every rank. */
int tr_pipeline_sum(struct tr_pipeline *p, double v, double *out, skiff_err *err);

/* v on the last stage scaled so that the mean over the device's comm (the
 * ranks of every stage with this tensor-parallel rank) is the mean over
 * the last stage's ranks (N*v there, 0 elsewhere): how the loop's
 * train_device_mean averages a loss only the last stage has. */
double tr_pipeline_loss_share(const struct tr_pipeline *p, double v);

/* Forward only through the pipeline (validation): the loss on the last
 * stage, -1 elsewhere. */
int tr_pipeline_forward(struct tr_pipeline *p, const int *inputs, const int *targets, double *loss, skiff_err *err);

/* Every stage's parameters and AdamW m, v into whole buffers (n floats
 * each: params, m, v; m and v may be NULL: ZeRO keeps its shards) on every
 * rank of comm, the ranks of every stage with this tensor-parallel rank,
 * before a checkpoint; the stage's own come from the model's parameters
 * and held_m, held_v (the held layout). */
int tr_pipeline_gather(struct tr_pipeline *p, struct tr_comm *comm, float *params, float *m, float *v, size_t n,
                       const float *held_m, const float *held_v, skiff_err *err);
/* The stage's ranges of a whole buffer (the tensor-parallel rank's part
 * of the model) into held, a buffer in the held layout. */
void tr_pipeline_take(const struct tr_pipeline *p, const float *whole, float *held);
/* Floats of the held layout: parameters (and gradients, m, v) per rank. */
size_t tr_pipeline_num_held(const struct tr_pipeline *p);

/* The measured bubble: the fraction of the schedule's time this rank did
 * no forward or backward, over the steps so far. */
double tr_pipeline_bubble(const struct tr_pipeline *p);
/* (N-1)/(M+N-1): the bubble of a pipeline of equal stages. */
double tr_pipeline_bubble_ideal(const struct tr_pipeline *p);

/* "stage 1 of 2 (blocks 1-1), 1f1b, 2 micro-batches in flight" */
void tr_pipeline_describe(const struct tr_pipeline *p, char *buf, size_t len);
/* Floats of activations this rank holds (the slots in flight, and one set
 * of their gradients). */
size_t tr_pipeline_num_acts(const struct tr_pipeline *p);
/* Floats of gradient staging (ZeRO: every rank's shard packed, and the
 * gradient shard; ZeRO 0 reduces the held gradient in place: none). */
size_t tr_pipeline_num_staging(const struct tr_pipeline *p);

#endif
