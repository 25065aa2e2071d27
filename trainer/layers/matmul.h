/* Fully connected layer: out = inp @ weight^T + bias, weight stored (OC, C). */
#ifndef SKIFF_LAYER_MATMUL_H
#define SKIFF_LAYER_MATMUL_H

#include <stddef.h>

#include "gemm.h"

/* The three products go through gemm() (trainer/gemm.c): packed, blocked,
 * register-tiled, and each output element one ordered multiply-add chain, so
 * the bits do not depend on the thread count (the DDP tests compare
 * --threads 1 with --threads 2). */

// out is (N,OC) with N = B*T; inp is (N,C); weight is (OC,C); bias is (OC) or NULL
static inline void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                                  int OC)
{
    gemm(N, OC, C, (struct gemm_operand){inp, C, 1}, (struct gemm_operand){weight, 1, C}, out, OC, bias, 0);
}

// dout is (N,OC). Accumulates dinp (N,C); dweight (OC,C) and dbias (OC) (may be
// NULL) too, or with overwrite_params set, writes them (their old contents are
// not read: the model's zero_grad costs no pass over the weights).
static inline void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                   const float *weight, int N, int C, int OC, int overwrite_params)
{
    // dinp += dout @ weight
    gemm(N, C, OC, (struct gemm_operand){dout, OC, 1}, (struct gemm_operand){weight, C, 1}, dinp, C, NULL, 1);
    // dweight += dout^T @ inp
    gemm(OC, C, N, (struct gemm_operand){dout, 1, OC}, (struct gemm_operand){inp, C, 1}, dweight, C, NULL,
         !overwrite_params);
    if (!dbias) return;
        // dbias[o] += sum over rows in order; chunks of outputs per thread
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 256) {
        int o1 = OC - o0 < 256 ? OC : o0 + 256;
        if (overwrite_params)
            for (int o = o0; o < o1; o++) dbias[o] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *g = dout + (size_t)n * OC;
            for (int o = o0; o < o1; o++) dbias[o] += g[o];
        }
    }
}

#endif
