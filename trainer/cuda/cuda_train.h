/* `skiff-train train --device cuda`: the CUDA training loop (trainer/cuda/).
 * Declared for trainer/main.c when SKIFF_HAVE_CUDA is defined. */
#ifndef SKIFF_CUDA_TRAIN_H
#define SKIFF_CUDA_TRAIN_H

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct train_opts;

/* Same contract as train_cpu (trainer/train.h): env:// distributed setup,
 * data, schedule, checkpoints and JSONL log shared with the CPU path; the
 * model runs on the GPU local_rank % device count in o->precision (bf16,
 * fp16 with dynamic loss scaling, or fp32/TF32). Collectives: NCCL when every
 * rank has its own GPU, else host-staged (SKIFF_TRAIN_COMM=nccl|host-staged
 * forces one). Returns 0, or -1 with err filled. */
int cuda_train(const struct train_opts *o, skiff_err *err);

#ifdef __cplusplus
}
#endif
#endif
