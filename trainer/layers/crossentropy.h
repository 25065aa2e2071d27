/* Softmax over the vocabulary and cross-entropy against the targets. */
#ifndef SKIFF_LAYER_CROSSENTROPY_H
#define SKIFF_LAYER_CROSSENTROPY_H

#include <math.h>
#include <stddef.h>

#include "vmath.h"

// probs is (N,Vp); logits is (N,Vp); only the first V columns are real tokens,
// the padded ones get probability 0. The max and the sum run in 16 interleaved
// lanes combined in a fixed order (so they vectorise and stay reproducible).
VMATH_CLONES static inline void softmax_forward(float *probs, const float *logits, int N, int V, int Vp)
{
    enum { LANES = 16 };
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        int Vl = V / LANES * LANES;
        float mx[LANES], sm[LANES];
        for (int j = 0; j < LANES; j++) mx[j] = -INFINITY, sm[j] = 0.0f;
        for (int i = 0; i < Vl; i += LANES)
            for (int j = 0; j < LANES; j++) mx[j] = l[i + j] > mx[j] ? l[i + j] : mx[j];
        float maxv = -INFINITY;
        for (int j = 0; j < LANES; j++) maxv = mx[j] > maxv ? mx[j] : maxv;
        for (int i = Vl; i < V; i++) maxv = l[i] > maxv ? l[i] : maxv;
        for (int i = 0; i < Vl; i += LANES)
            for (int j = 0; j < LANES; j++) {
                float e = vm_exp(l[i + j] - maxv);
                p[i + j] = e;
                sm[j] += e;
            }
        float sum = 0.0f;
        for (int j = 0; j < LANES; j++) sum += sm[j];
        for (int i = Vl; i < V; i++) {
            p[i] = vm_exp(l[i] - maxv);
            sum += p[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        for (int i = V; i < Vp; i++) p[i] = 0.0f;
    }
}

// losses is (N); targets is (N)
static inline void crossentropy_forward(float *losses, const float *probs, const int *targets, int N, int Vp)
{
    for (int n = 0; n < N; n++) losses[n] = -logf(probs[(size_t)n * Vp + targets[n]]);
}

// dlogits is (N,Vp) accumulated; dlosses is (N)
static inline void crossentropy_softmax_backward(float *dlogits, const float *dlosses, const float *probs,
                                                 const int *targets, int N, int V, int Vp)
{
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *dl = dlogits + (size_t)n * Vp;
        const float *p = probs + (size_t)n * Vp;
        float d = dlosses[n];
        for (int i = 0; i < V; i++) dl[i] += (p[i] - (i == targets[n] ? 1.0f : 0.0f)) * d;
    }
}

#endif
