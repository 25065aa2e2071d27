/* Fully connected layer: out = inp @ weight^T + bias, weight stored (OC, C). */
#ifndef SKIFF_LAYER_MATMUL_H
#define SKIFF_LAYER_MATMUL_H

#include <stddef.h>

// out is (N,OC) with N = B*T; inp is (N,C); weight is (OC,C); bias is (OC) or NULL
static inline void matmul_forward(float *out, const float *inp, const float *weight,
                                  const float *bias, int N, int C, int OC)
{
    // Four rows share each weight row load; `omp simd` lets GCC vectorise the
    // dot products without -ffast-math (the lane order is fixed at compile
    // time, so results stay deterministic).
#pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 4) {
        int nn = N - n0 < 4 ? N - n0 : 4;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            for (int r = 0; r < nn; r++) {
                const float *x = inp + (size_t)(n0 + r) * C;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int i = 0; i < C; i++) sum += x[i] * w[i];
                out[(size_t)(n0 + r) * OC + o] = sum + (bias ? bias[o] : 0.0f);
            }
        }
    }
}

// dout is (N,OC). Accumulates dinp (N,C), dweight (OC,C), dbias (OC) (may be NULL).
// Each output element is owned by one thread with a fixed loop order.
static inline void matmul_backward(float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   int N, int C, int OC)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *dx = dinp + (size_t)n * C;
        const float *d = dout + (size_t)n * OC;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            float g = d[o];
#pragma omp simd
            for (int i = 0; i < C; i++) dx[i] += g * w[i];
        }
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        float *dw = dweight + (size_t)o * C;
        float db = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            float g = dout[(size_t)n * OC + o];
            db += g;
#pragma omp simd
            for (int i = 0; i < C; i++) dw[i] += g * x[i];
        }
        if (dbias) dbias[o] += db;
    }
}

#endif
