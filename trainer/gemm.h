/* Single-precision matrix multiply for the CPU trainer: cache-blocked, packed,
 * register-tiled, threaded with OpenMP, and bit-reproducible.
 *
 * C (M,N) row-major with row stride ldc gets A (M,K) times B (K,N), where the
 * operands are given by strides so one routine serves all three products of a
 * fully connected layer (x W^T, dy W and dy^T x) without transposing copies:
 * element (i,p) of A is a[i*a_rs + p*a_cs], element (p,j) of B is
 * b[p*b_rs + j*b_cs].
 *
 * Reproducibility: every element of C is ONE chain of multiply-adds over
 * p = 0..K-1 in order, starting from its initial value (C itself when
 * accumulating, else bias[j] or 0). Blocking, tile edges and the split between
 * threads only decide who computes an element, never how: the bits do not
 * depend on the number of threads. They do depend on the instruction set the
 * machine offers (with FMA a multiply-add rounds once), and one machine
 * always picks the same kernel, so runs on it repeat exactly. */
#ifndef SKIFF_TRAINER_GEMM_H
#define SKIFF_TRAINER_GEMM_H

#include "error.h"

struct gemm_operand {
    const float *p;
    long rs, cs; /* strides of a row step and of a column step, in floats */
};

/* accumulate: C += A B; otherwise C = bias + A B (bias has N floats, indexed
 * by column; NULL for none). Runs on the OpenMP threads of the caller's
 * team size (omp_get_max_threads). */
void gemm(int M, int N, int K, struct gemm_operand a, struct gemm_operand b, float *c, long ldc, const float *bias,
          int accumulate);

/* Allocates the packing buffers for the caller's team size now, so that
 * gemm() never has to (it grows them on demand, and with less memory runs
 * on fewer threads; only with none at all does it abort). */
int gemm_reserve(skiff_err *err);

/* Name of the register kernel this machine runs ("avx512", "avx2",
 * "generic"): for logs and benchmarks. */
const char *gemm_kernel_name(void);

/* Tests: run kernel `name` (one gemm_kernel_name() can return) instead of
 * the widest one; NULL restores the default. -1 when this CPU cannot run it. */
int gemm_force_kernel(const char *name);

#endif
