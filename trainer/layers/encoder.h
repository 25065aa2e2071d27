/* Token + position embedding. */
#ifndef SKIFF_LAYER_ENCODER_H
#define SKIFF_LAYER_ENCODER_H

// out is (B,T,C); inp is (B,T) token ids; wte is (Vp,C); wpe is (maxT,C)
static inline void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C)
{
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)inp[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
        }
    }
}

// dout is (B,T,C). Accumulates into dwte, dwpe. Serial over (b,t) because
// two positions may share a token row; parallel over channels keeps every
// element's summation order fixed (deterministic for any thread count).
static inline void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C)
{
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                float d = dout[((size_t)b * T + t) * C + c];
                dwte[(size_t)inp[b * T + t] * C + c] += d;
                dwpe[(size_t)t * C + c] += d;
            }
        }
    }
}

#endif
