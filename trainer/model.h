/* GPT-2 model description shared by the CPU (trainer/model.c) and CUDA
 * (trainer/cuda/) paths: configuration, presets and the parameter layout.
 *
 * Parameters live in ONE contiguous float buffer, tensors in llm.c's order
 * (so checkpoints and the GPU path agree on offsets):
 *   0 wte      (Vp, C)      token embedding, tied with the output projection
 *   1 wpe      (maxT, C)    learned positions
 *   2 ln1w     (L, C)       3 ln1b     (L, C)
 *   4 qkvw     (L, 3C, C)   5 qkvb     (L, 3C)
 *   6 attprojw (L, C, C)    7 attprojb (L, C)
 *   8 ln2w     (L, C)       9 ln2b     (L, C)
 *  10 fcw      (L, 4C, C)  11 fcb      (L, 4C)
 *  12 fcprojw  (L, C, 4C)  13 fcprojb  (L, C)
 *  14 lnfw     (C)         15 lnfb     (C)
 * Weight matrices are stored (out, in): y = x W^T + b, as in llm.c. */
#ifndef SKIFF_TRAINER_MODEL_H
#define SKIFF_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct gpt2_config {
    int max_seq_len;       /* maxT: longest context, rows of wpe */
    int vocab_size;        /* V: real tokens (256 for the byte tokenizer, 50257 GPT-2) */
    int padded_vocab_size; /* Vp >= V, rows of wte; padded rows never win (logits masked) */
    int num_layers;        /* L */
    int num_heads;         /* NH; channels % num_heads == 0 */
    int channels;          /* C */
};

#define GPT2_NUM_PARAM_TENSORS 16

enum gpt2_param_index {
    GPT2_WTE,
    GPT2_WPE,
    GPT2_LN1W,
    GPT2_LN1B,
    GPT2_QKVW,
    GPT2_QKVB,
    GPT2_ATTPROJW,
    GPT2_ATTPROJB,
    GPT2_LN2W,
    GPT2_LN2B,
    GPT2_FCW,
    GPT2_FCB,
    GPT2_FCPROJW,
    GPT2_FCPROJB,
    GPT2_LNFW,
    GPT2_LNFB
};

/* Names of the 16 tensors, for logs and error messages ("qkvw", ...). */
extern const char *const gpt2_param_names[GPT2_NUM_PARAM_TENSORS];

/* Presets, smallest first:
 *   tiny  L2  H4  C64  T64   V256 (byte vocab, ~0.12M params; tests)
 *   tiny-gpt2 the same with GPT-2's vocab (V50257/Vp50304, ~3.3M params, most
 *         of them the token embedding; the demo with GPT-2 tokens, llm.c tests)
 *   mini  L4  H4  C128 T256  V256 (byte vocab, ~0.86M params; benchmarks)
 *   small L6  H6  C384 T512  V256 (byte vocab, ~10.9M params)
 *   d6    L6  H6  C384 T1024 V50257/Vp50304 (GPT-2 vocab, ~30M params)
 *   d12   L12 H12 C768 T1024 V50257/Vp50304 (GPT-2 124M)
 * Returns 0, or -1 with a message listing the known names. */
int gpt2_config_preset(const char *name, struct gpt2_config *cfg, skiff_err *err);

/* Space-separated list of preset names, for usage text. */
const char *gpt2_preset_names(void);

/* Checks a config for consistency (positive sizes, C % NH == 0, Vp >= V). */
int gpt2_config_check(const struct gpt2_config *cfg, skiff_err *err);

/* Fills the element counts and element offsets (into the one buffer) of the 16
 * tensors; returns the total number of floats. Either array may be NULL. */
size_t gpt2_param_layout(const struct gpt2_config *cfg, size_t sizes[GPT2_NUM_PARAM_TENSORS],
                         size_t offsets[GPT2_NUM_PARAM_TENSORS]);

/* ---- tensor parallelism (Megatron-LM's, --tp N) ----------------------
 * With tp ranks, each holds 1/tp of the attention heads and of the MLP's
 * hidden units: qkvw/qkvb its heads' rows of Q, K and V (column-parallel:
 * local rows [q of its heads; k; v]), attprojw its heads' columns
 * (row-parallel, (C, C/tp)), fcw/fcb its rows (column-parallel, 4C/tp),
 * fcprojw its columns (row-parallel, (C, 4C/tp)). Everything else (wte, wpe,
 * the LayerNorms, the row-parallel layers' biases) is replicated. The local
 * buffer keeps llm.c's tensor order with these local shapes. */

/* 1 when tensor i is split over the tensor-parallel ranks. */
int gpt2_tp_sharded(int i);
/* 0 when tp divides the heads (and so C and 4C); else -1 with a message
 * naming --tp. */
int gpt2_tp_check(const struct gpt2_config *cfg, int tp, skiff_err *err);
/* gpt2_param_layout of one of tp ranks' local buffer (tp 1: the whole). */
size_t gpt2_param_layout_tp(const struct gpt2_config *cfg, int tp, size_t sizes[GPT2_NUM_PARAM_TENSORS],
                            size_t offsets[GPT2_NUM_PARAM_TENSORS]);
/* Between the whole buffer (gpt2_param_layout) and rank's local one:
 * to_local copies rank's part of full into local; else local into its
 * place in full (the replicated tensors too). */
void gpt2_tp_copy(const struct gpt2_config *cfg, int tp, int rank, float *full, float *local, int to_local);
/* gpt2_decay_mask over a local buffer (tp 1: the whole). */
void gpt2_decay_mask_tp(const struct gpt2_config *cfg, int tp, float *mask);

/* 1 when tensor i is a 2-D weight matrix and gets AdamW weight decay (wte, wpe,
 * qkvw, attprojw, fcw, fcprojw); 0 for biases and LayerNorm gains/shifts. */
int gpt2_param_decays(int i);

/* Fills mask[0..nparams) with 1.0 where the element decays, 0.0 otherwise. */
void gpt2_decay_mask(const struct gpt2_config *cfg, float *mask);

/* GPT-2 initialisation (llm.c / nanoGPT): N(0, 0.02) weights, residual
 * projections scaled by 1/sqrt(2L), zero biases, LayerNorm gain 1 shift 0.
 * Deterministic for a seed; independent of the number of ranks. */
void gpt2_init_params(const struct gpt2_config *cfg, float *params, uint64_t seed);

/* ---- CPU model (trainer/model.c) ------------------------------------- */

/* A model instance for batch B and sequence length T (T <= max_seq_len). */
struct gpt2 {
    struct gpt2_config cfg;
    int B, T;
    size_t num_params;
    size_t param_sizes[GPT2_NUM_PARAM_TENSORS];
    size_t param_offsets[GPT2_NUM_PARAM_TENSORS];
    float *params; /* num_held floats */
    float *grads;  /* num_held floats, accumulated by gpt2_backward */
    /* Where each tensor is in params and grads: the whole model's layout
     * (param_offsets, num_held = num_params), or for a pipeline stage
     * (gpt2_set_stage) only the tensors it computes, its blocks' slices
     * back to back (held_sizes[i] floats from held_offsets[i], starting at
     * layer layer_lo; 0: not held). */
    size_t num_held;
    size_t held_sizes[GPT2_NUM_PARAM_TENSORS];
    size_t held_offsets[GPT2_NUM_PARAM_TENSORS];
    int grads_cleared; /* gpt2_zero_grad was called: the next backward writes
                        * grads instead of adding to them (see gpt2_zero_grad) */
    int recompute;     /* gpt2_recompute: one block's activations, redone in backward */
    float *acts;       /* activations for (B,T) */
    float *dacts;      /* their gradients */
    size_t num_acts;
    float *probs_out; /* (B,T,Vp) probabilities of the last forward */
    float mean_loss;  /* mean loss of the last forward with targets, else -1 */
    const int *inputs, *targets;
    /* Called by gpt2_backward after the gradient of every element in
     * [lo, hi) of grads is final for this backward pass (in the order the
     * backward produces them: from the end of the buffer towards the start,
     * roughly), so DDP can start all-reducing a bucket while the rest of
     * the backward runs. May be NULL. */
    void (*grad_ready)(void *ctx, size_t lo, size_t hi);
    void *grad_ready_ctx;
    /* Tensor parallelism (gpt2_create_tp): this rank's share of heads and
     * hidden units, and the sum over the tp ranks, in place, that Megatron
     * puts after each row-parallel layer's forward and on the input gradient
     * of each column-parallel layer. It returns -1 on failure; the pass
     * then goes on with what it has and the caller reports the error. */
    int tp;
    int (*tp_allreduce)(void *ctx, float *buf, size_t n);
    void *tp_ctx;
    /* A pipeline stage (gpt2_set_stage): the blocks [layer_lo, layer_hi)
     * this instance runs, 0 and L for the whole model. */
    int layer_lo, layer_hi;
    const float *stage_dout; /* layer_hi < L: (B,T,C) gradient of the output, read by gpt2_backward */
    /* ZeRO-3: where the units' parameters and gradients live instead of
     * params and grads (NULL: in them); see gpt2_use_units. */
    const struct gpt2_units *units;
};

/* ---- ZeRO-3 units (FSDP's flat parameters) -------------------------------
 * ZeRO-3 shards and gathers the parameters by unit, as FSDP wraps modules:
 * unit 0 is the tensors outside the blocks (wte, wpe, lnfw, lnfb: the tied
 * wte is used at both ends of a pass, so this unit is the "root" that stays
 * gathered), unit 1+l is block l's twelve tensors (ln1w ... fcprojb). A
 * unit's buffer holds its tensors' slices back to back, in that order. */
struct gpt2_slice {
    int tensor;      /* enum gpt2_param_index */
    size_t flat_off; /* where the slice starts in the one (llm.c) buffer */
    size_t len;
};
#define GPT2_UNIT_MAX_SLICES 12

/* L + 1. */
int gpt2_num_units(const struct gpt2_config *cfg);
/* Unit u's slices in buffer order; returns their count and sets *total to
 * their floats. */
int gpt2_unit_slices(const struct gpt2_config *cfg, int u, struct gpt2_slice s[GPT2_UNIT_MAX_SLICES], size_t *total);
/* The same over one of tp tensor-parallel ranks' local buffer
 * (gpt2_param_layout_tp): a block's unit is the rank's part of the block
 * (its heads and hidden units, the replicated tensors whole), so ZeRO-3
 * under --tp shards and gathers each rank's part over its data-parallel
 * group. tp 1: gpt2_unit_slices. */
int gpt2_unit_slices_tp(const struct gpt2_config *cfg, int tp, int u, struct gpt2_slice s[GPT2_UNIT_MAX_SLICES],
                        size_t *total);
/* Copies unit u's slices from the one buffer into unit (its layout) or,
 * with to_flat, back. */
void gpt2_unit_copy(const struct gpt2_config *cfg, int u, float *flat, float *unit, int to_flat);

/* What the model calls when its parameters live in units (ZeRO-3). Every
 * rank makes the same calls in the same order, so the collectives behind
 * them match. */
struct gpt2_units {
    void *ctx;
    /* Unit u's parameters in its layout, before the pass first uses them
     * (backward: 0 in gpt2_forward, 1 in gpt2_backward); valid until
     * release(u). */
    float *(*gather)(void *ctx, int u, int backward);
    void (*release)(void *ctx, int u);
    /* Unit u's gradient buffer for this backward: the model writes every
     * element of it (zeroing what it only adds to), then calls
     * grad_done(u) once it is final. */
    float *(*grad)(void *ctx, int u);
    void (*grad_done)(void *ctx, int u);
};

/* Allocates the buffers (params zeroed). */
int gpt2_create(struct gpt2 *m, const struct gpt2_config *cfg, int B, int T, skiff_err *err);
/* The same for one of tp tensor-parallel ranks: params, grads and the
 * activations of its heads and hidden units only; set m->tp_allreduce
 * before the first forward. */
int gpt2_create_tp(struct gpt2 *m, const struct gpt2_config *cfg, int tp, int B, int T, skiff_err *err);
void gpt2_destroy(struct gpt2 *m);
/* From now on the parameters and gradients live where u says: frees
 * m->params and m->grads (NULL afterwards). */
void gpt2_use_units(struct gpt2 *m, const struct gpt2_units *u);

/* Floats of activations (and as many of their gradients) a (B,T) pass keeps,
 * with or without activation recomputation. */
size_t gpt2_num_acts(const struct gpt2_config *cfg, int B, int T, int recompute);
size_t gpt2_num_acts_tp(const struct gpt2_config *cfg, int tp, int B, int T, int recompute);

/* Activation recomputation (checkpointing each block, as torch.utils.checkpoint
 * or Megatron's --recompute-granularity full): the activations inside a
 * transformer block are kept for one block only; the backward redoes each
 * block's forward from its input (the residual stream, kept for every block)
 * before differentiating it. About one forward more per step, the same bits
 * (the forward is deterministic), activation memory from ~L blocks to one
 * plus the residual stream. Reallocates m's activations. */
int gpt2_recompute(struct gpt2 *m, skiff_err *err);

/* Pipeline parallelism (trainer/pipeline.c): makes m run blocks [lo, hi)
 * only and reallocates its activations for them (the head's only when hi
 * is L). With lo > 0 the forward skips the embedding and starts from the
 * residual stream written into gpt2_stage_in; with hi < L it returns -1
 * after block hi-1, whose output is gpt2_stage_out, and the backward starts
 * from m->stage_dout (the next stage's gradient, loss scale included)
 * and, with lo > 0, leaves the gradient of the input in gpt2_stage_din.
 * The stage uses only its blocks' slices of the parameters (and wte, wpe
 * on the first stage; lnf and wte, tied, on the last), and its parameter
 * and gradient buffers are reallocated to hold those only, in that order:
 * wte and wpe (lo = 0), each block tensor's slices of blocks [lo, hi) in
 * llm.c's order, lnfw and lnfb (hi = L), wte (hi = L, lo > 0);
 * held_offsets and held_sizes say where. The parameters keep their values
 * (taken from the whole buffer); the gradient starts at zero. Once only:
 * a model that holds part of its parameters is refused. The pointers are
 * into m->acts / m->dacts, which
 * a caller may swap for buffers of m->num_acts floats (one per micro-batch
 * in flight). */
int gpt2_set_stage(struct gpt2 *m, int lo, int hi, skiff_err *err);
float *gpt2_stage_in(struct gpt2 *m);
float *gpt2_stage_out(struct gpt2 *m);
float *gpt2_stage_din(struct gpt2 *m);

/* inputs, targets: (B,T) token ids (targets may be NULL: then no loss).
 * Returns the mean cross-entropy loss over B*T, or -1 when targets is NULL. */
float gpt2_forward(struct gpt2 *m, const int *inputs, const int *targets);

/* Adds d(mean loss)/d(params) * loss_scale to m->grads (call gpt2_zero_grad
 * first when not accumulating). Needs a forward with targets just before. */
void gpt2_backward(struct gpt2 *m, float loss_scale);

/* Makes the gradient zero for the next gpt2_backward, which then writes
 * every element instead of adding to it: the same bits as zeroing and
 * adding, without a pass over 4 bytes per parameter (500 MB at d12) or
 * reading the old values. Until that backward, m->grads holds stale values:
 * do not read them in between. */
void gpt2_zero_grad(struct gpt2 *m);

#endif
