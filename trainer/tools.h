/* The small subcommands of skiff-train: tokenize, sample, plot. Each returns
 * 0 on success, 1 on a runtime failure, 2 on a usage error (err filled). */
#ifndef SKIFF_TRAINER_TOOLS_H
#define SKIFF_TRAINER_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

int tool_tokenize(int argc, char **argv, skiff_err *err);
int tool_sample(int argc, char **argv, skiff_err *err);
int tool_plot(int argc, char **argv, skiff_err *err);
/* compare DIR_A DIR_B [--tol X]: max abs difference of two checkpoints'
 * parameters; exit 1 when it exceeds X (default 0: bit-identical). */
int tool_compare(int argc, char **argv, skiff_err *err);

/* The byte-level tokenizer: token = byte value (vocab 256). Byte 0 (NUL,
 * absent from text) is the end-of-text token that separates documents. */
#define SKIFF_BYTE_EOT 0
size_t tok_encode_bytes(const char *text, size_t len, uint16_t *out);

#endif
