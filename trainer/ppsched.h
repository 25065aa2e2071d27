/* ppsched: the pipeline's schedules (GPipe and 1F1B) once, for every
 * device. A device (the CPU's pipeline.c, the CUDA device) says how to
 * exchange buffers with a neighbouring stage, how to run one micro-batch's
 * forward and backward through its stage, and where a micro-batch's
 * buffers are; the schedule decides the order. */
#ifndef SKIFF_TRAINER_PPSCHED_H
#define SKIFF_TRAINER_PPSCHED_H

#include "error.h"

struct tr_pp_steps {
    int stage, stages, micro; /* this rank's stage of `stages`; micro-batches per step */
    void *ctx;
    /* sends sbuf to stage `to` and receives rbuf from stage `from` at once
     * (-1: that side is idle) */
    int (*p2p)(void *ctx, const void *sbuf, int to, void *rbuf, int from, skiff_err *err);
    int (*fwd)(void *ctx, int k, skiff_err *err); /* micro-batch k's forward */
    int (*bwd)(void *ctx, int k, skiff_err *err); /* and its backward */
    void *(*in)(void *ctx, int k);                /* k's activations from the stage before */
    void *(*out)(void *ctx, int k);               /* k's activations to the stage after */
    void *(*dout)(void *ctx);                     /* the gradient the stage after sends back */
    void *(*din)(void *ctx, int k);               /* k's input gradient, to the stage before */
};

/* All forwards, then all backwards. */
int tr_pp_gpipe(const struct tr_pp_steps *s, skiff_err *err);

/* 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): N-1-stage
 * forwards to fill the pipeline, then one forward and one backward in
 * turn, then the remaining backwards. Activations of at most N-stage
 * micro-batches are alive at once, against M for GPipe; the device's
 * in(k) buffers may be slots reused modulo N-stage. */
int tr_pp_1f1b(const struct tr_pp_steps *s, skiff_err *err);

#endif
