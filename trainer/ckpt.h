/* Weights in and out of files: skiff-train's checkpoints (one file per
 * rank) and the starting weights of a run. */
#ifndef SKIFF_TRAINER_CKPT_H
#define SKIFF_TRAINER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "model.h"
#include "opts.h"

/* DIR/rank-R.ckpt, written as DIR/.rank-R.ckpt.tmp then renamed. Rank 0's file
 * holds the parameters; every file holds that rank's optimizer state (AdamW m
 * and v for [opt_off, opt_off+opt_len) of the parameter buffer: everything on
 * rank 0 and nothing elsewhere with --zero 0, its shard with ZeRO), the step
 * and the data position. Loading refuses another model config, world size,
 * --tp, ZeRO stage or parameter count with a message that says what differs.
 * With --tp, R is the process's RANK, the optimizer range is in its local
 * buffer (gpt2_param_layout_tp) and rank 0's parameters are the whole
 * model's, gathered from the tensor-parallel ranks. With --pp, rank 0's
 * parameters are gathered from every stage too; with ZeRO-1/2 a file's
 * optimizer range is its shard of its stage (policy.h,
 * train_pp_shard_copy), opt_off counting in the shards' concatenation;
 * with ZeRO-3 and --pp every file's weights are its shard of its stage, in
 * the same pieces. */
/* Mixed-precision state a resume needs to continue bit for bit: fp16's
 * dynamic loss scaling (the CUDA device's). All zero when a run never
 * scaled its loss (bf16, fp32, the CPU) or in a file of an older build:
 * loss_scale 0 means "start afresh". */
struct train_amp_state {
    double loss_scale;   /* the scale of the next step, or 0 */
    int32_t scale_good;  /* finite steps since the scale last changed */
    int32_t skipped_run; /* overflowed (skipped) steps in a row */
    int64_t skipped;     /* skipped steps in all: AdamW's step counter is
                          * (steps done - skipped), as with PyTorch's
                          * GradScaler, which skips optimizer.step() */
};

struct train_ckpt {
    struct gpt2_config cfg;
    int world, rank, zero;
    int tp;                  /* --tp of the run (1: none) */
    int pp;                  /* --pp of the run (1: none); world = data-parallel ranks x tp x pp */
    int step;                /* optimizer steps done */
    uint64_t data_pos;       /* next global train window */
    uint64_t rng;            /* spare RNG state (sampling etc.) */
    size_t num_params;       /* total floats in the parameter buffer (padded) */
    size_t opt_off, opt_len; /* optimizer range in this file */
    float *params;           /* num_params (rank 0 file) or NULL */
    float *m, *v;            /* opt_len each, or NULL when opt_len == 0 */
    struct train_amp_state amp;
};
int train_ckpt_save(const char *dir, const struct train_ckpt *c, skiff_err *err);
/* Reads DIR/rank-R.ckpt (R = want->rank) and checks it against *want (cfg,
 * world, zero, num_params, opt_off, opt_len). Copies into want->params (when
 * non-NULL and the file has them), want->m, want->v; fills step/data_pos/rng
 * and amp. */
int train_ckpt_load(const char *dir, struct train_ckpt *want, skiff_err *err);
/* --resume from a checkpoint of another layout (`saved`: rank 0's header,
 * train_ckpt_peek; other world size, --tp, --pp or ZeRO stage, the same
 * model): AdamW's m and v are put back together from every rank's file and
 * this rank (want->rank of want->world, placed by train_layout_place)
 * takes its part of them for want's optimizer range, the weights (rank
 * 0's, or a ZeRO-3 checkpoint's shards put together) go into want->params
 * when it is non-NULL (with want->zero 3: this rank's shard of them, as m
 * and v), and step, data position and amp come from the checkpoint. */
int train_ckpt_load_relayout(const char *dir, struct train_ckpt *want, const struct train_ckpt *saved, skiff_err *err);
/* Reads only the header of DIR/rank-R.ckpt (R = out->rank) into *out (cfg,
 * world, zero, step, num_params, opt_off, opt_len; no buffers). */
int train_ckpt_peek(const char *dir, struct train_ckpt *out, skiff_err *err);

/* The starting weights (params: gpt2_param_layout(&o->cfg) floats): read
 * from o->init_from (llm.c's format, llmc.h) when set, else GPT-2's
 * initialisation seeded by o->seed. Ranks other than 0 get zeros from a
 * file (rank 0's weights are broadcast to them). */
int train_init_params(const struct train_opts *o, int rank, float *params, skiff_err *err);

#endif
