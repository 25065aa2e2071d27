/* llm.c's GPT-2 checkpoint format (gpt2_124M.bin and friends), read by
 * `train --init-from` and `sample --init-from`, written by `export --llmc`.
 *
 * A header of 256 little-endian int32: [0] magic 20240326, [1] version (3:
 * fp32 parameters, 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp,
 * the rest 0; then the parameters in llm.c's order (the order of
 * gpt2_param_layout: wte, wpe, ln1w, ... lnfb), nothing after them. */
#ifndef SKIFF_TRAINER_LLMC_H
#define SKIFF_TRAINER_LLMC_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "model.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_FP32 3
#define LLMC_VERSION_BF16 5
#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

/* Checks a header against the size of its file: magic, version, every size
 * positive and within bounds, C % NH == 0, Vp >= V, and exactly the
 * parameters the shape needs after the header. Fills cfg and version. */
int llmc_parse_header(const int32_t h[LLMC_HEADER_INTS], uint64_t file_bytes, struct gpt2_config *cfg, int *version,
                      skiff_err *err);

/* Reads and checks the header of path. */
int llmc_peek(const char *path, struct gpt2_config *cfg, int *version, skiff_err *err);

/* Reads the parameters of path into params (gpt2_param_layout(want) floats;
 * bf16 files are widened), after checking that its shape is *want. */
int llmc_load(const char *path, const struct gpt2_config *want, float *params, skiff_err *err);

/* Writes a checkpoint atomically (temporary name, rename): version 3 (fp32)
 * or 5 (bf16, rounded to nearest even: what llm.c's CUDA trainer loads in
 * its default bf16 build). */
int llmc_save(const char *path, const struct gpt2_config *cfg, const float *params, int version, skiff_err *err);

/* "maxT=%d V=%d L=%d NH=%d C=%d Vp=%d", for messages. */
void llmc_shape_str(const struct gpt2_config *c, char *buf, size_t n);

#endif
