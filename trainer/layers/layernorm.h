/* LayerNorm over the channel dimension, eps 1e-5. */
#ifndef SKIFF_LAYER_LAYERNORM_H
#define SKIFF_LAYER_LAYERNORM_H

#include <math.h>
#include <stddef.h>

// out is (N,C) with N = B*T; inp is (N,C); mean, rstd are (N) saved for backward
static inline void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                     const float *weight, const float *bias, int N, int C)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp is (N,C) accumulated; dweight, dbias are (C) accumulated
static inline void layernorm_backward(float *dinp, float *dweight, float *dbias,
                                      const float *dout, const float *inp, const float *weight,
                                      const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        // dxhat = d * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        float sum1 = 0.0f, sum2 = 0.0f;
        for (int c = 0; c < C; c++) {
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
    // parameter gradients: one thread per channel, rows in order
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        float dw = 0.0f, db = 0.0f;
        for (int n = 0; n < N; n++) {
            float xhat = (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            float d = dout[(size_t)n * C + c];
            dw += d * xhat;
            db += d;
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
}

#endif
