/* `skiff-train train`: the training loop (train.c), the same for every
 * device; the device (device.h) does the step. */
#ifndef SKIFF_TRAINER_TRAIN_H
#define SKIFF_TRAINER_TRAIN_H

#include "device.h"
#include "error.h"
#include "opts.h"

/* Trains as o says on `device` (&train_cpu_device, &train_cuda_device):
 * one process, or this rank of the env:// world. Returns 0, or -1 with err
 * filled ("rank R: ..." when there are several). */
int train_run(const struct train_opts *o, const struct train_device_ops *device, skiff_err *err);

#endif
