/* Causal multi-head self-attention on a fused qkv input. */
#ifndef SKIFF_LAYER_ATTENTION_H
#define SKIFF_LAYER_ATTENTION_H

#include <math.h>
#include <stddef.h>

#include "vmath.h"

// out is (B,T,C); inp is (B,T,3C) holding q,k,v; preatt, att are (B,NH,T,T)
// (only t2 <= t is written; the rest stays 0)
VMATH_CLONES static inline void attention_forward(float *out, float *preatt, float *att, const float *inp, int B, int T,
                                                  int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = inp + ((size_t)b * T + t) * C3 + h * hs;
                float *pre = preatt + (((size_t)b * NH + h) * T + t) * T;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float s = vm_dot(q, k, hs) * scale;
                    pre[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = vm_exp(pre[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++) o[i] += w * v[i];
                }
            }
        }
    }
}

// dinp is (B,T,3C) accumulated; dpreatt, datt are (B,NH,T,T) scratch
// (accumulated, zero them first). Parallel over (b,h): each (b,h) owns its
// slice of dinp, so no races and a fixed order.
VMATH_CLONES static inline void attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout,
                                                   const float *inp, const float *att, int B, int T, int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float *da = datt + (((size_t)b * NH + h) * T + t) * T;
                float *dpre = dpreatt + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                // out = att @ v
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float *dv = dinp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    da[t2] += vm_dot(v, d, hs);
                    float w = a[t2];
                    for (int i = 0; i < hs; i++) dv[i] += w * d[i];
                }
                // softmax: dpre = a * (da - sum(a * da))
                float dot = vm_dot(a, da, t + 1);
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] += a[t2] * (da[t2] - dot);
                // pre = scale * q . k
                const float *q = inp + ((size_t)b * T + t) * C3 + h * hs;
                float *dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float *dk = dinp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float g = dpre[t2] * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += k[i] * g;
                        dk[i] += q[i] * g;
                    }
                }
            }
        }
    }
}

#endif
