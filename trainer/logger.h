/* The per-step log of `skiff-train train` (rank 0): one JSON object per line
 * in --log FILE.jsonl, and one line per step on stdout unless --quiet. */
#ifndef SKIFF_TRAINER_LOGGER_H
#define SKIFF_TRAINER_LOGGER_H

#include <stdio.h>

#include "error.h"

struct train_step_log {
    int step;    /* 1-based number of the step just done */
    double loss; /* mean over all ranks and micro-steps */
    double lr;
    double grad_norm;    /* global L2 norm before clipping */
    double tokens_per_s; /* global tokens / step wall time */
    double ms;           /* step wall time */
    double val_loss;     /* NAN when not evaluated this step */
    double comm_ms;      /* time the comm backend was busy this step */
    double wait_ms;      /* time compute waited on comm this step (exposed) */
    double overlap_ms;   /* comm time that finished while the backward still ran
                            (0 = not measured; logged only when > 0) */
};

struct train_log {
    FILE *jsonl; /* NULL when no --log */
    int quiet;
};

/* Rank 0 only opens the file (append when resuming, else truncate). */
int train_log_open(struct train_log *lg, const char *path, int resume, int quiet, skiff_err *err);
/* One JSON object per line (step, loss, lr, grad_norm, tokens_per_s, ms,
 * val_loss when present, comm_ms, wait_ms) plus a line on stdout. */
void train_log_step(struct train_log *lg, const struct train_step_log *s);
void train_log_close(struct train_log *lg);

#endif
