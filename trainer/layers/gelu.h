/* GELU, tanh approximation (GPT-2). */
#ifndef SKIFF_LAYER_GELU_H
#define SKIFF_LAYER_GELU_H

#include <math.h>
#include <stddef.h>

#include "vmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

// out, inp are (N) for N = B*T*4C
VMATH_CLONES static inline void gelu_forward(float *out, const float *inp, size_t N)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vm_tanh(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

// dinp is (N), accumulated
VMATH_CLONES static inline void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = vm_tanh(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
}

#endif
