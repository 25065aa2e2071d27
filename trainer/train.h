/* `skiff-train train` on the CPU (trainer/train.c); the CUDA loop is
 * trainer/cuda/cuda_train.h. */
#ifndef SKIFF_TRAINER_TRAIN_H
#define SKIFF_TRAINER_TRAIN_H

#include "error.h"
#include "opts.h"

int train_cpu(const struct train_opts *o, skiff_err *err);

#endif
