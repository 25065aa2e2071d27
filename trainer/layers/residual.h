/* Residual connection: out = a + b. */
#ifndef SKIFF_LAYER_RESIDUAL_H
#define SKIFF_LAYER_RESIDUAL_H

#include <stddef.h>

// out, a, b are (N) for N = B*T*C
static inline void residual_forward(float *out, const float *a, const float *b, size_t N)
{
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

// da, db are (N), accumulated
static inline void residual_backward(float *da, float *db, const float *dout, size_t N)
{
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

#endif
