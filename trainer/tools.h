/* The subcommands of skiff-train besides train, by what they work on:
 *   tools_data.c   tokenize, decode, tokenizer-import (text, token shards,
 *                  the vocabulary)
 *   tools_model.c  sample, export, compare (a trained model's weights)
 *   tools_plot.c   plot (a --log file)
 * Each takes its own argv (argv[0] is the subcommand) and returns 0 on
 * success, 1 on a runtime failure, 2 on a usage error (err filled). Their
 * usage texts live in main.c's table. */
#ifndef SKIFF_TRAINER_TOOLS_H
#define SKIFF_TRAINER_TOOLS_H

#include "error.h"

/* A usage error in a subcommand: the message in err, exit status 2. */
#define USAGE(...) (skiff_error(err, 0, __VA_ARGS__), 2)

int tool_tokenize(int argc, char **argv, skiff_err *err);
int tool_decode(int argc, char **argv, skiff_err *err);
int tool_sample(int argc, char **argv, skiff_err *err);
/* export --llmc OUT.bin --ckpt-dir DIR: rank 0's weights in llm.c's format. */
int tool_export(int argc, char **argv, skiff_err *err);
int tool_tokenizer_import(int argc, char **argv, skiff_err *err);
int tool_plot(int argc, char **argv, skiff_err *err);
/* compare DIR_A DIR_B [--tol X]: max abs difference of two checkpoints'
 * parameters; exit 1 when it exceeds X (default 0: bit-identical). */
int tool_compare(int argc, char **argv, skiff_err *err);

#endif
