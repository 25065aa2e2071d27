/* What a device does for the training loop.
 *
 * trainer/train.c is the one training loop of skiff-train: env:// setup, the
 * plan (policy.h), data, LR schedule, validation, checkpoints and the log are
 * written once, for every device. A device (cpu_device.c; cuda/cuda_device.cu)
 * holds the model, the optimizer state and the collectives that move its
 * memory, and differs from the others only in these operations:
 *
 *   open      allocate the model and the optimizer for the plan, create the
 *             collectives over the rendezvous' ranks
 *   step      one optimizer step: the micro-batches (read from the loop on
 *             demand), forward, backward, gradient reduction, norm,
 *             clipping, AdamW, the ZeRO gather; reports loss and norm
 *   forward   a loss without a gradient (validation)
 *   upload, download     between the host copies (params, m, v: what the
 *             loop initialises, resumes and checkpoints) and the device
 *   alloc, release, h2d, d2h   device memory for the loop's own collectives
 *
 * Extending it: a new parallel layout (ZeRO-3, tensor or pipeline
 * parallelism) belongs to a device. It builds its sub-communicators in open
 * from the rendezvous (dist: the store and every rank) and keeps `comm` the
 * group the loop broadcasts over and averages over; a step that schedules
 * micro-batches its own way (pipeline stages) asks for them with b->load in
 * any order. The CPU pipeline (pipeline.h) keeps `comm` the ranks of every
 * stage (with --tp, those of its tensor-parallel rank), since rank 0's
 * weights must reach every stage, and reports a loss that only its last
 * stage has as N times it there and 0 elsewhere, so the mean over `comm` is
 * the mean over the last stage's ranks. What the loop needs to stay the same is that a
 * step is all micro-batches of one optimizer step and that the host copies
 * hold the full fp32 weights on rank 0 at a checkpoint; under ZeRO-3
 * (--zero 3) d->params is instead this rank's shard of the weights (with
 * --tp, of its tensor-parallel part; policy.h: train_zero3_copy; with --pp
 * of its stage's ranges, train_pp_shard_copy), what the loop fills and
 * checkpoints. The CPU pipeline (--pp), whose stages hold
 * their own ranges only, keeps (but under ZeRO-3) the whole host copies (d->params, and with
 * ZeRO 0 d->m and d->v) from open to upload and from download to the next
 * step, when the loop uses them, and NULL in between. */
#ifndef SKIFF_TRAINER_DEVICE_H
#define SKIFF_TRAINER_DEVICE_H

#include <stddef.h>

#include "comm.h"
#include "dist.h"
#include "error.h"
#include "opts.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

struct train_device;

/* The micro-batches of one optimizer step, read when the device asks for
 * them: load(b, k) fills b->inputs and b->targets (B*T token ids each) with
 * this rank's batch for micro-step k, 0 <= k < count. */
struct train_batches {
    int count; /* micro-steps (--grad-accum) */
    int *inputs, *targets;
    int (*load)(struct train_batches *b, int k, skiff_err *err);
};

/* What a step reports to the log. */
struct train_step_stats {
    double loss;          /* mean over ranks and micro-steps */
    float grad_norm;      /* global L2 norm of the gradient before clipping */
    double wait_ms;       /* time compute waited on communication */
    double overlap_ms;    /* communication done while the backward still ran (ZeRO-3: while the
                           * forward or backward ran, not waited for; 0: not measured) */
    double group_comm_ms; /* communication over the device's other groups (tensor parallel), which
                           * the loop adds to what it measures on `comm` */
};

struct train_device_ops {
    const char *name; /* "cpu", "cuda" */
    /* Allocates the model for o's shape and p's parameter padding and
     * optimizer range, creates d->comm over dist's ranks, and points
     * d->params (p->n_pad floats), d->m and d->v (p->opt_len floats) at host
     * memory. On failure the loop still calls close. */
    int (*open)(struct train_device *d, const struct train_opts *o, const struct train_plan *p, struct train_dist *dist,
                skiff_err *err);
    /* Host copies to the device once the loop has filled them: the weights,
     * and m and v too when with_opt (after --resume). NULL when the host
     * copies are the device's own memory. */
    int (*upload)(struct train_device *d, int with_opt, skiff_err *err);
    /* Device to host copies before a checkpoint: all weights (fp32) into
     * d->params on rank 0, this rank's range of m and v. May be NULL. */
    int (*download)(struct train_device *d, skiff_err *err);
    /* One optimizer step (0-based `step`, learning rate lr) over b's
     * micro-batches; fills s. */
    int (*step)(struct train_device *d, int step, float lr, struct train_batches *b, struct train_step_stats *s,
                skiff_err *err);
    /* Forward only on one batch: its mean loss is added to an accumulator
     * that take_loss returns (this rank's sum) and clears. */
    int (*forward)(struct train_device *d, const int *inputs, const int *targets, skiff_err *err);
    int (*take_loss)(struct train_device *d, double *sum, skiff_err *err);
    /* Device memory, and copies between it and any host memory (returning
     * when the data has arrived). NULL when device memory is host memory
     * (d->host_memory). */
    void *(*alloc)(struct train_device *d, size_t bytes, skiff_err *err);
    void (*release)(struct train_device *d, void *mem);
    int (*h2d)(struct train_device *d, void *dev, const void *host, size_t bytes, skiff_err *err);
    int (*d2h)(struct train_device *d, void *host, const void *dev, size_t bytes, skiff_err *err);
    /* Where the run trains, for the first line of the run ("cpu, 2 threads"). */
    void (*describe)(struct train_device *d, char *buf, size_t len);
    /* After the last step of a run that did not fail. May be NULL. */
    int (*finish)(struct train_device *d, skiff_err *err);
    /* Frees everything open made, after a failure at any point too. */
    void (*close)(struct train_device *d);
};

struct train_device {
    const struct train_device_ops *ops;
    struct tr_comm *comm; /* collectives over the device's memory, every rank */
    float *params;        /* host: the weights, n_pad fp32 (ZeRO-3: this rank's shard, opt_len) */
    float *m, *v;         /* host: AdamW state of this rank's optimizer range */
    int host_memory;      /* device memory is host memory: collectives take host buffers */
    float *rank_slots;    /* device memory for one float per rank (train_device_mean) */
    /* Mixed-precision state (fp16 loss scaling, steps skipped on overflow):
     * kept up to date by step, written into checkpoints by the loop, and
     * filled by the loop from the checkpoint on --resume before upload.
     * AdamW's step counter is (steps done - amp.skipped) on every device. */
    struct train_amp_state amp;
    void *impl; /* the device's own state */
};

/* The devices. CUDA's exists only in a build with nvcc (SKIFF_HAVE_CUDA). */
extern const struct train_device_ops train_cpu_device;
extern const struct train_device_ops train_cuda_device;

/* d->ops = ops, then ops->open. */
int train_device_open(struct train_device *d, const struct train_device_ops *ops, const struct train_opts *o,
                      const struct train_plan *p, struct train_dist *dist, skiff_err *err);
/* ops->close when opened; fine on a zeroed d. */
void train_device_close(struct train_device *d);

/* The mean over ranks of one value per rank: each rank's value as a float
 * (the type on the wire), summed in rank order, so every rank and every
 * device gets the same bits. */
int train_device_mean(struct train_device *d, double v, double *out, skiff_err *err);
/* Rank 0's n host floats to every rank (through device memory in pieces
 * when the device has its own). */
int train_device_broadcast(struct train_device *d, float *host, size_t n, skiff_err *err);

#ifdef __cplusplus
}
#endif
#endif
