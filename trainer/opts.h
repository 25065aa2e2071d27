/* The options of `skiff-train train` and the option-value parsers every
 * subcommand uses. Parsing only: checking a value against the machine (files,
 * GPUs, peers) happens where it is used. */
#ifndef SKIFF_TRAINER_OPTS_H
#define SKIFF_TRAINER_OPTS_H

#include <stdint.h>

#include "error.h"
#include "model.h"

enum train_device_kind { TRAIN_DEVICE_CPU = 0, TRAIN_DEVICE_CUDA = 1 };

struct train_opts {
    const char *model;             /* --model NAME (preset), or the --init-from file's name */
    struct gpt2_config cfg;        /* the preset, or the shape in the --init-from file */
    const char *init_from;         /* --init-from FILE.bin: llm.c checkpoint with the start weights */
    const char *data;              /* --data GLOB (train shards) */
    const char *val;               /* --val GLOB or NULL */
    int batch;                     /* --batch B: per-rank micro-batch (sequences) */
    int seq;                       /* --seq T (<= cfg.max_seq_len) */
    int grad_accum;                /* --grad-accum K (default 1); --micro-batches M sets it */
    int steps;                     /* --steps N: optimizer steps of the LR schedule */
    float lr;                      /* --lr (default 6e-4): peak LR */
    float lr_min_frac;             /* --lr-min-frac (default 0.1): final LR = lr * this */
    int warmup;                    /* --warmup steps (default: steps/10; 0 = none) */
    float weight_decay;            /* --weight-decay (default 0.1), 2-D tensors only */
    float beta1, beta2, eps;       /* --beta1 0.9, --beta2 0.95, --eps 1e-8 (AdamW) */
    float grad_clip;               /* --grad-clip (default 1.0; 0 = off) */
    uint64_t seed;                 /* --seed S (default 1337): init + data shuffle */
    int sequential;                /* --data-order sequential: windows in file order (llm.c's
                                      loader without shuffling), not a seeded permutation */
    int zero;                      /* --zero 0|1|2|3 */
    int recompute;                 /* --recompute: redo each block's forward in the backward */
    int zero3_buffers;             /* --zero3-buffers 1|2: gathered blocks per kind under ZeRO-3 */
    int tp;                        /* --tp N: tensor-parallel ranks (default 1); WORLD_SIZE = dp * tp */
    int pp;                        /* --pp N: pipeline stages (1 = none); DP = WORLD_SIZE / N */
    int pp_gpipe;                  /* --pp-schedule gpipe (all forwards, then all backwards); else 1f1b */
    double bucket_mb;              /* --bucket-mb M (default 25) */
    enum train_device_kind device; /* --device cpu|cuda */
    const char *precision;         /* --precision fp32|bf16|fp16 (CPU: fp32 only) */
    const char *ckpt_dir;          /* --ckpt-dir DIR or NULL */
    int ckpt_every;                /* --ckpt-every N (0 = only at the end / stop-after) */
    int resume;                    /* --resume */
    int stop_after;                /* --stop-after N (0 = run to --steps) */
    const char *log_path;          /* --log FILE.jsonl or NULL */
    int val_every;                 /* --val-every N (0 = never; default 0) */
    int val_batches;               /* --val-batches N per rank (default 4) */
    int threads;                   /* --threads N (OpenMP; 0 = default) */
    int timeout_ms;                /* --timeout SECONDS or SKIFF_TRAIN_TIMEOUT (default 300 s) */
    int quiet;                     /* --quiet: no per-step line on stdout */
};

/* Fills defaults, then parses `train` arguments (argv[0] is "train").
 * Returns 0, or -1 with a usage error message. */
int train_opts_parse(int argc, char **argv, struct train_opts *o, skiff_err *err);
void train_opts_defaults(struct train_opts *o);

/* Option values for every subcommand: an integer >= lo, a finite number >=
 * lo (named opt in the message). 0, or -1 with a usage error. */
int train_parse_int(const char *opt, const char *s, int lo, int *out, skiff_err *err);
int train_parse_double(const char *opt, const char *s, double lo, double *out, skiff_err *err);
/* The usage error for what getopt_long (optstring ":") returned as c: an
 * unknown option or one without its value. Returns -1. */
int train_opt_error(int c, char **argv, skiff_err *err);

#endif
