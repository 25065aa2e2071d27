/* skiff-train: front end. One table holds every subcommand with its usage;
 * `skiff-train SUBCMD --help` (or -h) prints that usage on stdout and exits
 * 0 before the subcommand parses anything. Only this file prints errors:
 * "skiff-train SUBCMD: MESSAGE"; exit 0 ok, 1 runtime failure, 2 usage
 * error. */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "tools.h"
#include "train.h"

static int cmd_train(int argc, char **argv, skiff_err *err)
{
    struct train_opts o;
    if (train_opts_parse(argc, argv, &o, err) < 0) return 2;
    const struct train_device_ops *device = &train_cpu_device;
    if (o.device == TRAIN_DEVICE_CUDA) {
#ifdef SKIFF_HAVE_CUDA
        device = &train_cuda_device;
#else
        skiff_error(err, 0,
                    "--device cuda: this skiff-train was built without CUDA (nvcc was not "
                    "found at build time); use --device cpu or rebuild where nvcc exists");
        return 2;
#endif
    }
    return train_run(&o, device, err) < 0 ? 1 : 0;
}

static const struct verb {
    const char *name;
    int (*run)(int argc, char **argv, skiff_err *err);
    const char *summary;
    const char *usage; /* the lines after "usage: skiff-train " */
} verbs[] = {
    {"train", cmd_train, "train a model (CPU or CUDA, one process or data-parallel ranks)",
     "train (--model NAME | --init-from FILE.bin) --data GLOB --batch B --seq T --steps N\n"
     "                   [options]\n"
     "Trains on llm.c token shards: one process, or one per rank with RANK, WORLD_SIZE,\n"
     "LOCAL_RANK, MASTER_ADDR and MASTER_PORT set.\n"
     "  --model NAME          a preset (see the list below)\n"
     "  --init-from FILE.bin  start from llm.c's checkpoint FILE.bin (e.g. gpt2_124M.bin);\n"
     "                        the shape is the file's (--model, if given, must agree)\n"
     "  --data GLOB           training shards (quote the glob); --val GLOB: validation shards\n"
     "  --batch B             per-rank micro-batch: global batch = B*T*K*DP tokens\n"
     "                        (DP = WORLD_SIZE / --pp)\n"
     "  --seq T               sequence length, at most the model's context\n"
     "  --grad-accum K        micro-steps per optimizer step (1)\n"
     "  --steps N             optimizer steps; the learning-rate schedule spans them\n"
     "  --lr X                peak learning rate (6e-4)\n"
     "  --warmup N            linear warmup steps (steps/10), then cosine decay\n"
     "  --lr-min-frac F       final LR = lr*F (0.1; 1 with --warmup 0: a constant LR)\n"
     "  --weight-decay X      AdamW decay of the 2-D weights (0.1)\n"
     "  --beta1 X --beta2 X --eps X   AdamW (0.9, 0.95, 1e-8)\n"
     "  --grad-clip X         clip the global gradient norm at X (1.0; 0 = off)\n"
     "  --seed S              initialisation and data order (1337)\n"
     "  --data-order ORDER    shuffle (seeded permutation, default) or sequential (file order,\n"
     "                        the windows llm.c's loader reads without shuffling)\n"
     "  --zero 0|1|2|3        DDP, ZeRO-1 (optimizer state sharded), ZeRO-2 (gradients too),\n"
     "                        ZeRO-3/FSDP (weights too, gathered block by block)\n"
     "  --zero3-buffers 1|2   ZeRO-3: 2 (default) prefetches the next block's weights and\n"
     "                        overlaps reduce-scatters; 1 holds one block (least memory)\n"
     "  --bucket-mb M         DDP gradient bucket size (25)\n"
     "  --tp N                tensor parallel over N ranks (Megatron: heads and MLP split;\n"
     "                        WORLD_SIZE = dp x N (x pp), tp fastest; N divides heads and 4C)\n"
     "  --recompute           keep one block's activations, redo each block's forward in the\n"
     "                        backward: less memory, ~1/3 more compute, the same losses\n"
     "  --pp N                pipeline parallel: the blocks in N stages, rank = stage*DP*TP +\n"
     "                        dp_rank*TP + tp_rank, DP = WORLD_SIZE/(TP*N); with --tp,\n"
     "                        --zero 0|1|2 and --recompute on CPU and CUDA (--zero 3: CPU)\n"
     "  --micro-batches M     micro-batches per step through the pipeline (= --grad-accum)\n"
     "  --pp-schedule S       1f1b (default) or gpipe (all forwards, then all backwards)\n"
     "  --device cpu|cuda     where to train (cpu)\n"
     "  --precision P         fp32 on CPU; bf16 (default), fp16 or fp32 on CUDA\n"
     "  --ckpt-dir DIR        checkpoint directory; --ckpt-every N: also every N steps\n"
     "  --resume              continue from --ckpt-dir\n"
     "  --stop-after N        run N steps, checkpoint and exit 0 (preemptible jobs)\n"
     "  --log FILE.jsonl      one JSON line per step (rank 0)\n"
     "  --val-every N         validation loss every N steps; --val-batches N per rank (4)\n"
     "  --threads N           OpenMP threads per rank\n"
     "  --timeout SEC         rendezvous and collective timeout (300; SKIFF_TRAIN_TIMEOUT)\n"
     "  --quiet               no line per step on stdout\n"},
    {"tokenize", tool_tokenize, "text files -> llm.c token shards",
     "tokenize --out PREFIX [--tokenizer bytes|gpt2|FILE] [--val-frac F]\n"
     "                   [--shard-tokens N] [--doc-sep LINE] FILE...\n"
     "Writes PREFIX_train_NNNNNN.bin and PREFIX_val_NNNNNN.bin (the directory of PREFIX is\n"
     "created). A PREFIX that is a directory (or ends in /) gets the shards inside, named\n"
     "after the one FILE, or the directory the FILEs share, else `tokens`. Documents are\n"
     "whole files, or blocks between lines equal to --doc-sep; each starts with the\n"
     "end-of-text token. Every round(1/F)-th document goes to val\n"
     "(F = --val-frac, 0.1, at most 0.5); with fewer documents than that, the last F of\n"
     "the tokens does.\n"
     "  --tokenizer bytes     token = byte, vocabulary 256, EOT 0 (default)\n"
     "  --tokenizer gpt2      GPT-2's BPE, vocabulary 50257, EOT 50256 (`make gpt2-bpe`)\n"
     "  --tokenizer FILE      a BPE file made by `skiff-train tokenizer-import`\n"},
    {"decode", tool_decode, "token shards -> text",
     "decode [--tokenizer bytes|gpt2|FILE] SHARD.bin...\n"
     "Prints the text of the shards; end-of-text tokens print as <|endoftext|>. The\n"
     "tokenizer defaults to gpt2 when a token is past 255, else bytes.\n"},
    {"sample", tool_sample, "generate text from a checkpoint",
     "sample (--ckpt-dir DIR | --init-from FILE.bin) [--tokenizer bytes|gpt2|FILE]\n"
     "                   [--model NAME] [--prompt TEXT] [--tokens N] [--temperature X]\n"
     "                   [--seed S]\n"
     "Generates N tokens (200) after the prompt from rank 0's checkpoint in DIR or from\n"
     "an llm.c checkpoint. The tokenizer defaults to bytes for a vocabulary of 256, else\n"
     "gpt2; --model checks the checkpoint's shape; temperature 0 takes the likeliest.\n"},
    {"export", tool_export, "a checkpoint -> llm.c's checkpoint format",
     "export --llmc OUT.bin --ckpt-dir DIR [--bf16]\n"
     "Writes rank 0's weights in DIR as an llm.c checkpoint: version 3 (fp32), which\n"
     "llm.c's train_gpt2 (CPU) reads, or with --bf16 version 5, which its CUDA trainer\n"
     "(train_gpt2cu -e OUT.bin) reads; `skiff-train train --init-from` reads both.\n"},
    {"tokenizer-import", tool_tokenizer_import, "GPT-2's encoder.json + vocab.bpe -> a BPE file",
     "tokenizer-import --encoder encoder.json --merges vocab.bpe --out FILE\n"
     "Checks and converts GPT-2's vocabulary and merge rules into the compact file that\n"
     "--tokenizer reads (scripts/fetch-gpt2-bpe does this for `make gpt2-bpe`).\n"},
    {"plot", tool_plot, "the loss curve of a JSONL log, as a PNG (gnuplot)", "plot LOG.jsonl OUT.png\n"},
    {"compare", tool_compare, "max difference of two checkpoints' parameters",
     "compare CKPT_DIR_A CKPT_DIR_B [--tol X]\n"
     "Prints the largest absolute difference; exit 1 when it exceeds X (default 0:\n"
     "bit-identical).\n"},
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

static void usage(FILE *f)
{
    fputs("usage: skiff-train SUBCOMMAND [options]   (skiff-train SUBCOMMAND --help)\n", f);
    for (size_t i = 0; i < NVERBS; i++) fprintf(f, "  %-17s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f,
            "models: %s\n"
            "See skiff-train(1) and doc/trainer.md.\n",
            gpt2_preset_names());
}

static void verb_usage(const struct verb *v, FILE *f)
{
    fprintf(f, "usage: skiff-train %s", v->usage);
    if (v->run == cmd_train) fprintf(f, "models: %s\n", gpt2_preset_names());
}

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

int main(int argc, char **argv)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (is_help(cmd) || !strcmp(cmd, "help")) {
        for (size_t i = 0; argc > 2 && i < NVERBS; i++) {
            if (!strcmp(argv[2], verbs[i].name)) {
                verb_usage(&verbs[i], stdout);
                return 0;
            }
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("skiff-train %s\n", SKIFF_VERSION);
        return 0;
    }
    const struct verb *v = NULL;
    for (size_t i = 0; i < NVERBS; i++)
        if (!strcmp(cmd, verbs[i].name)) v = &verbs[i];
    if (!v) {
        fprintf(stderr, "skiff-train: unknown subcommand '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++) {
        if (is_help(argv[i])) {
            verb_usage(v, stdout);
            return 0;
        }
    }
    int rc = v->run(argc - 1, argv + 1, &err);
    if (rc != 0) fprintf(stderr, "skiff-train %s: %s\n", v->name, err.msg);
    if (rc == 2) fprintf(stderr, "(skiff-train %s --help shows the usage)\n", v->name);
    return rc;
}
