/* Pipeline parallelism (--pp N --micro-batches M) for the CPU device: the
 * model's blocks split into N contiguous stages, one per rank of a
 * pipeline, activations sent forward and their gradients backward between
 * neighbouring stages with point-to-point sendrecv, a 1F1B schedule (or
 * GPipe's, all forwards then all backwards), composed with data
 * parallelism: rank = stage * DP + dp_rank (Megatron's order without TP),
 * DP = WORLD_SIZE / N, each stage's gradients all-reduced within its DP
 * group.
 *
 * The parameter buffer stays the whole model's (llm.c's layout, every
 * rank); a stage computes, reduces and steps only its ranges of it
 * (tr_pipeline_ranges). A checkpoint gathers every stage's ranges onto rank
 * 0 (tr_pipeline_gather), so it is the same file as a DDP run's. */
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

/* A range of the parameter buffer this stage owns. `norm`: counted in the
 * global gradient norm here (wte, tied between the first and the last
 * stage, counts on the first only); `owner`: its values go into the
 * checkpoint from this stage (the same rule). */
struct tr_pipe_range {
    size_t off, len;
    int norm, owner;
};

/* Blocks of stage s of n over L layers: the first L % n stages take one
 * block more than L / n (the last stage also runs the LM head). */
void tr_pipeline_split(int L, int n, int s, int *lo, int *hi);

/* Makes model this rank's stage (gpt2_set_stage), builds the DP, pipeline
 * and embedding groups over dist, and the activation buffers of the
 * micro-batches in flight. world is the loop's communicator (every rank). */
int tr_pipeline_open(struct tr_pipeline **out, struct gpt2 *model, const struct train_opts *o,
                     const struct train_plan *pl, struct train_dist *dist, skiff_err *err);
void tr_pipeline_close(struct tr_pipeline *p);

/* This stage's ranges of the parameter buffer. */
const struct tr_pipe_range *tr_pipeline_ranges(const struct tr_pipeline *p, int *count);

/* The micro-batches of one step through the pipeline (the schedule), then
 * the gradients of this stage's ranges reduced over DP and wte's between the
 * first and last stage: the gradient of one step on the global batch.
 * *loss_sum: the sum of the micro-batches' losses on the last stage, 0 on
 * the others; *comm_s: seconds spent in the pipeline's own communication;
 * *busy_s: its groups' communication time (for the step's comm_ms). */
int tr_pipeline_grads(struct tr_pipeline *p, struct train_batches *b, double *loss_sum, double *comm_s, double *busy_s,
                      skiff_err *err);

/* The sum over stages of one value per stage (the same on every rank of a
 * stage), added in stage order: the same bits on every rank. */
int tr_pipeline_sum(struct tr_pipeline *p, double v, double *out, skiff_err *err);

/* v on the last stage scaled so that the mean over every rank of the world
 * is the mean over the last stage's ranks (N*v there, 0 elsewhere): how the
 * loop's train_device_mean averages a loss only the last stage has. */
double tr_pipeline_loss_share(const struct tr_pipeline *p, double v);

/* Forward only through the pipeline (validation): the loss on the last
 * stage, -1 elsewhere. */
int tr_pipeline_forward(struct tr_pipeline *p, const int *inputs, const int *targets, double *loss, skiff_err *err);

/* Every stage's parameters and AdamW m, v (n floats each, the whole
 * buffer) onto every rank over world, before a checkpoint. */
int tr_pipeline_gather(struct tr_pipeline *p, struct tr_comm *world, float *params, float *m, float *v, size_t n,
                       skiff_err *err);

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

#endif
