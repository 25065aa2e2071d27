/* LayerNorm over the channel dimension, eps 1e-5. */
#ifndef SKIFF_LAYER_LAYERNORM_H
#define SKIFF_LAYER_LAYERNORM_H

#include <math.h>
#include <stddef.h>

#include "vmath.h"

// out is (N,C) with N = B*T; inp is (N,C); mean, rstd are (N) saved for backward
VMATH_CLONES static inline void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                                  const float *weight, const float *bias, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = vm_sum(x, C) / C;
        float v = vm_sumsq_dev(x, m, C) / C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp is (N,C) accumulated; dweight, dbias are (C) accumulated
VMATH_CLONES static inline void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                                   const float *inp, const float *weight, const float *mean,
                                                   const float *rstd, int N, int C)
{
    enum { LANES = VM_LANES };
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        // dxhat = d * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
        // both sums in interleaved lanes (see vmath.h)
        float p1[LANES] = {0}, p2[LANES] = {0};
        int Cl = C / LANES * LANES;
        for (int c0 = 0; c0 < Cl; c0 += LANES)
            for (int j = 0; j < LANES; j++) {
                float xhat = (x[c0 + j] - m) * s;
                float dxhat = d[c0 + j] * weight[c0 + j];
                p1[j] += dxhat;
                p2[j] += dxhat * xhat;
            }
        float sum1 = 0.0f, sum2 = 0.0f;
        for (int j = 0; j < LANES; j++) sum1 += p1[j], sum2 += p2[j];
        for (int c = Cl; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dxhat = d[c] * weight[c];
            sum1 += dxhat;
            sum2 += dxhat * xhat;
        }
        sum1 /= C;
        sum2 /= C;
        float *dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dxhat = d[c] * weight[c];
            dx[c] += s * (dxhat - sum1 - xhat * sum2);
        }
    }
    // parameter gradients: each channel owned by one thread and summed over
    // rows in order; blocks of channels so the rows are read contiguously
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = C - c0 < 64 ? C : c0 + 64;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c] * ((x[c] - m) * s);
                dbias[c] += d[c];
            }
        }
    }
}

#endif
