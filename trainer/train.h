/* The pieces of `skiff-train train` shared by the CPU loop (trainer/train.c)
 * and the CUDA loop (trainer/cuda/): options, data loader, LR schedule,
 * checkpoints, JSONL logging and the env:// rendezvous. */
#ifndef SKIFF_TRAINER_TRAIN_H
#define SKIFF_TRAINER_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "error.h"
#include "model.h"
#include "dist.h"
#include "logger.h"

/* ---- options ------------------------------------------------------------ */

enum train_device { TRAIN_DEVICE_CPU = 0, TRAIN_DEVICE_CUDA = 1 };

struct train_opts {
    const char *model;        /* --model NAME (preset), or the --init-from file's name */
    struct gpt2_config cfg;   /* the preset, or the shape in the --init-from file */
    const char *init_from;    /* --init-from FILE.bin: llm.c checkpoint with the start weights */
    const char *data;         /* --data GLOB (train shards) */
    const char *val;          /* --val GLOB or NULL */
    int batch;                /* --batch B: per-rank micro-batch (sequences) */
    int seq;                  /* --seq T (<= cfg.max_seq_len) */
    int grad_accum;           /* --grad-accum K (default 1) */
    int steps;                /* --steps N: optimizer steps of the LR schedule */
    float lr;                 /* --lr (default 6e-4): peak LR */
    float lr_min_frac;        /* --lr-min-frac (default 0.1): final LR = lr * this */
    int warmup;               /* --warmup steps (default: steps/10; 0 = none) */
    float weight_decay;       /* --weight-decay (default 0.1), 2-D tensors only */
    float beta1, beta2, eps;  /* --beta1 0.9, --beta2 0.95, --eps 1e-8 (AdamW) */
    float grad_clip;          /* --grad-clip (default 1.0; 0 = off) */
    uint64_t seed;            /* --seed S (default 1337): init + data shuffle */
    int sequential;           /* --data-order sequential: windows in file order (llm.c's
                                 loader without shuffling), not a seeded permutation */
    int zero;                 /* --zero 0|1|2 */
    double bucket_mb;         /* --bucket-mb M (default 25) */
    enum train_device device; /* --device cpu|cuda */
    const char *precision;    /* --precision fp32|bf16|fp16 (CPU: fp32 only) */
    const char *ckpt_dir;     /* --ckpt-dir DIR or NULL */
    int ckpt_every;           /* --ckpt-every N (0 = only at the end / stop-after) */
    int resume;               /* --resume */
    int stop_after;           /* --stop-after N (0 = run to --steps) */
    const char *log_path;     /* --log FILE.jsonl or NULL */
    int val_every;            /* --val-every N (0 = never; default 0) */
    int val_batches;          /* --val-batches N per rank (default 4) */
    int threads;              /* --threads N (OpenMP; 0 = default) */
    int timeout_ms;           /* --timeout SECONDS or SKIFF_TRAIN_TIMEOUT (default 300 s) */
    int quiet;                /* --quiet: no per-step line on stdout */
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

/* The starting weights (params: gpt2_param_layout(&o->cfg) floats): read
 * from o->init_from (llm.c's format, llmc.h) when set, else GPT-2's
 * initialisation seeded by o->seed. Ranks other than 0 get zeros from a
 * file (rank 0's weights are broadcast to them). */
int train_init_params(const struct train_opts *o, int rank, float *params, skiff_err *err);

/* ---- data ------------------------------------------------------------------ */

/* llm.c shard format: a 1024-byte header of 256 int32 (magic 20240520,
 * version 1, token count), then count uint16 tokens. */
#define SKIFF_SHARD_MAGIC 20240520
#define SKIFF_SHARD_VERSION 1
#define SKIFF_SHARD_HEADER_BYTES 1024

/* The training stream: every (T+1)-token window at stride T inside each
 * shard, visited in a permutation seeded by (seed, epoch). Global step s,
 * micro-step k, rank r reads the B windows starting at window
 * s*G + (k*world + r)*B with G = B*K*world, so ranks are disjoint and a run
 * with the same global batch sees the same windows whatever world is. */
struct data_loader {
    int B, T;
    size_t num_shards;
    struct data_shard *shards;
    size_t num_windows;  /* over all shards */
    size_t *shard_first; /* first global window of each shard */
    uint32_t *perm;      /* permutation of this epoch (NULL: in order) */
    uint64_t seed;
    int shuffle;
    long epoch; /* epoch of perm */
};

/* Maps the shards matching glob (sorted) read-only; checks headers and that
 * every token < vocab_size. shuffle: 1 for train, 0 for val. */
int data_loader_open(struct data_loader *l, const char *glob, int B, int T, int vocab_size, uint64_t seed, int shuffle,
                     skiff_err *err);
void data_loader_close(struct data_loader *l);
/* Fills inputs/targets (B*T ints each) with the B windows starting at global
 * window index `first` (wrapping into later epochs). */
int data_loader_batch(struct data_loader *l, uint64_t first, int *inputs, int *targets, skiff_err *err);

/* One shard mapped read-only after checking its header (magic, version,
 * token count vs file size). */
struct data_shard_map {
    void *map;
    size_t map_len;
    const uint16_t *tokens;
    size_t ntok;
};
int data_shard_map(const char *path, struct data_shard_map *sm, skiff_err *err);
void data_shard_unmap(struct data_shard_map *sm);

/* Writes one llm.c shard atomically (tmp + rename). */
int data_write_shard(const char *path, const uint16_t *tokens, size_t n, skiff_err *err);

/* ---- checkpoints ---------------------------------------------------------- */

/* DIR/rank-R.ckpt, written as DIR/.rank-R.ckpt.tmp then renamed. Rank 0's file
 * holds the parameters; every file holds that rank's optimizer state (AdamW m
 * and v for [opt_off, opt_off+opt_len) of the parameter buffer: everything on
 * rank 0 and nothing elsewhere with --zero 0, its shard with ZeRO), the step
 * and the data position. Loading refuses another model config, world size,
 * ZeRO stage or parameter count with a message that says what differs. */
struct train_ckpt {
    struct gpt2_config cfg;
    int world, rank, zero;
    int step;                /* optimizer steps done */
    uint64_t data_pos;       /* next global train window */
    uint64_t rng;            /* spare RNG state (sampling etc.) */
    size_t num_params;       /* total floats in the parameter buffer (padded) */
    size_t opt_off, opt_len; /* optimizer range in this file */
    float *params;           /* num_params (rank 0 file) or NULL */
    float *m, *v;            /* opt_len each, or NULL when opt_len == 0 */
};
int train_ckpt_save(const char *dir, const struct train_ckpt *c, skiff_err *err);
/* Reads DIR/rank-R.ckpt (R = want->rank) and checks it against *want (cfg,
 * world, zero, num_params, opt_off, opt_len). Copies into want->params (when
 * non-NULL and the file has them), want->m, want->v; fills step/data_pos/rng. */
int train_ckpt_load(const char *dir, struct train_ckpt *want, skiff_err *err);
/* Reads only the header of DIR/rank-R.ckpt (R = out->rank) into *out (cfg,
 * world, zero, step, num_params, opt_off, opt_len; no buffers). */
int train_ckpt_peek(const char *dir, struct train_ckpt *out, skiff_err *err);

/* ---- entry points ---------------------------------------------------------- */

int train_cpu(const struct train_opts *o, skiff_err *err);

#endif
