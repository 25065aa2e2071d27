/* Fully connected layer: out = inp @ weight^T + bias, weight stored (OC, C). */
#ifndef SKIFF_LAYER_MATMUL_H
#define SKIFF_LAYER_MATMUL_H

#include <stddef.h>

/* The matmuls are most of the CPU time: on x86-64 GCC also builds an
 * AVX2+FMA copy and picks it at load time (ifunc), so one binary runs
 * everywhere and uses the wide units where they exist. FMA rounds once
 * instead of twice, so bits differ between the two copies, but one machine
 * always runs the same copy: runs there stay reproducible. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SKIFF_CUDA_EMU)
#define MATMUL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MATMUL_CLONES
#endif

// out is (N,OC) with N = B*T; inp is (N,C); weight is (OC,C); bias is (OC) or NULL
MATMUL_CLONES static inline void matmul_forward(float *out, const float *inp, const float *weight,
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
// Each output element is owned by one thread and summed in a fixed order
// (dinp over o, dweight over n, ascending), so results do not depend on the
// thread count. Blocks of four rows share each loaded weight / input row.
MATMUL_CLONES static inline void matmul_backward(float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   int N, int C, int OC)
{
#pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 4) {
        int nn = N - n0 < 4 ? N - n0 : 4;
        float *dx0 = dinp + (size_t)n0 * C;
        const float *d0 = dout + (size_t)n0 * OC;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            if (nn == 4) {
                float g0 = d0[o], g1 = d0[OC + o], g2 = d0[2 * OC + o], g3 = d0[3 * OC + o];
                float *x1 = dx0 + C, *x2 = dx0 + 2 * C, *x3 = dx0 + 3 * C;
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    float wi = w[i];
                    dx0[i] += g0 * wi;
                    x1[i] += g1 * wi;
                    x2[i] += g2 * wi;
                    x3[i] += g3 * wi;
                }
            } else {
                for (int r = 0; r < nn; r++) {
                    float g = d0[(size_t)r * OC + o];
                    float *dx = dx0 + (size_t)r * C;
#pragma omp simd
                    for (int i = 0; i < C; i++) dx[i] += g * w[i];
                }
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 4) {
        int oo = OC - o0 < 4 ? OC - o0 : 4;
        float *dw0 = dweight + (size_t)o0 * C;
        float db[4] = {0, 0, 0, 0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *g = dout + (size_t)n * OC + o0;
            for (int r = 0; r < oo; r++) db[r] += g[r];
            if (oo == 4) {
                float g0 = g[0], g1 = g[1], g2 = g[2], g3 = g[3];
                float *w1 = dw0 + C, *w2 = dw0 + 2 * C, *w3 = dw0 + 3 * C;
#pragma omp simd
                for (int i = 0; i < C; i++) {
                    float xi = x[i];
                    dw0[i] += g0 * xi;
                    w1[i] += g1 * xi;
                    w2[i] += g2 * xi;
                    w3[i] += g3 * xi;
                }
            } else {
                for (int r = 0; r < oo; r++) {
                    float *dw = dw0 + (size_t)r * C;
#pragma omp simd
                    for (int i = 0; i < C; i++) dw[i] += g[r] * x[i];
                }
            }
        }
        if (dbias)
            for (int r = 0; r < oo; r++) dbias[o0 + r] += db[r];
    }
}

#endif
