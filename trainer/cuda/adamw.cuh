// AdamW on the optimizer's range: fp32 master weights, m and v, the
// storage copy rewritten from the master; clipping and the fp16 overflow
// skip decided on the device from the squared global norm.
#ifndef SKIFF_CUDA_ADAMW_CUH
#define SKIFF_CUDA_ADAMW_CUH

#include "common.cuh"

// The gradient is multiplied by gs; with norm2 (device, the squared global
// norm of the unscaled-by-gs gradient) the kernel also clips to `clip` and
// skips the update when the norm is not finite (an fp16 overflow), so the
// host never has to read the norm before queueing the update.
template <typename T>
__global__ void adamw_kernel(float *master, T *param, const float *grad, float *m, float *v, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float gs, const float *norm2, float clip,
                             float bc1, float bc2)
{
    if (norm2) {
        float norm = sqrtf(*norm2) * gs;
        if (!isfinite(norm)) return;
        if (clip > 0.0f && norm > clip) gs *= clip / norm;
    }
    GRID_STRIDE(i, n)
    {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = master[i];
        p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
        master[i] = p;
        if (param) param[i] = from_f<T>(p);
    }
}

// ---------------------------------------------------------------- launchers

// Fused AdamW on n elements: master (fp32) updated from grad * grad_scale, the
// storage copy `param` (may be NULL) rewritten from it. With norm2 (device
// pointer to the squared global gradient norm, before grad_scale): clipped to
// `clip` (0: off), and skipped when the norm is inf/NaN.
template <typename T>
int k_adamw(float *master, T *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
            float beta2, float eps, float wd, float grad_scale, const float *norm2, float clip, float bc1, float bc2,
            cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((adamw_kernel), grid_blocks(n), 256, 0, s, master, param, grad, m, v, n, lr, beta1, beta2, eps, wd,
           grad_scale, norm2, clip, bc1, bc2);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
