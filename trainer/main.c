/* skiff-train: front end. Subcommands: train, tokenize, sample, plot.
 * Only this file prints errors ("skiff-train: MESSAGE"); exit 0 ok, 1 runtime
 * failure, 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "tools.h"
#include "train.h"
#ifdef SKIFF_HAVE_CUDA
#include "cuda/cuda_train.h"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: skiff-train train --model NAME --data GLOB [--val GLOB] --batch B --seq T\n"
            "                   [--grad-accum K] --steps N [--lr X] [--seed S] [--zero 0|1|2]\n"
            "                   [--bucket-mb M] [--device cpu|cuda] [--precision fp32|bf16|fp16]\n"
            "                   [--ckpt-dir DIR] [--ckpt-every N] [--resume] [--stop-after N]\n"
            "                   [--log FILE.jsonl] [--val-every N] [--threads N] [--timeout SEC]\n"
            "       skiff-train tokenize --out PREFIX [--val-frac F] [--shard-tokens N] FILE...\n"
            "       skiff-train sample --ckpt-dir DIR [--model NAME] [--prompt TEXT] [--tokens N]\n"
            "                   [--temperature X] [--seed S]\n"
            "       skiff-train plot LOG.jsonl OUT.png\n"
            "       skiff-train compare CKPT_DIR_A CKPT_DIR_B [--tol X]\n"
            "models: %s\n"
            "--batch is the per-rank micro-batch: global batch = B*T*K*WORLD_SIZE tokens.\n"
            "Distributed runs read RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.\n"
            "See skiff-train(1) and doc/trainer.md.\n",
            gpt2_preset_names());
}

static int cmd_train(int argc, char **argv, skiff_err *err)
{
    struct train_opts o;
    if (train_opts_parse(argc, argv, &o, err) < 0) return 2;
    if (o.device == TRAIN_DEVICE_CUDA) {
#ifdef SKIFF_HAVE_CUDA
        return cuda_train(&o, err) < 0 ? 1 : 0;
#else
        skiff_error(err, 0,
                    "--device cuda: this skiff-train was built without CUDA (nvcc was not "
                    "found at build time); use --device cpu or rebuild where nvcc exists");
        return 2;
#endif
    }
    return train_cpu(&o, err) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int rc;
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    } else if (!strcmp(cmd, "--version")) {
        printf("skiff-train %s\n", SKIFF_VERSION);
        return 0;
    } else if (!strcmp(cmd, "train")) {
        rc = cmd_train(argc - 1, argv + 1, &err);
    } else if (!strcmp(cmd, "tokenize")) {
        rc = tool_tokenize(argc - 1, argv + 1, &err);
    } else if (!strcmp(cmd, "sample")) {
        rc = tool_sample(argc - 1, argv + 1, &err);
    } else if (!strcmp(cmd, "compare")) {
        rc = tool_compare(argc - 1, argv + 1, &err);
    } else if (!strcmp(cmd, "plot")) {
        rc = tool_plot(argc - 1, argv + 1, &err);
    } else {
        fprintf(stderr, "skiff-train: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    if (rc != 0) fprintf(stderr, "skiff-train: %s\n", err.msg);
    return rc;
}
