// GPT-2's tanh-approximated GELU, forward and in-place backward: the
// fallback for when cuBLASLt's GELU epilogues are off or unavailable.
#ifndef SKIFF_CUDA_GELU_CUH
#define SKIFF_CUDA_GELU_CUH

#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// Used when cuBLASLt's GELU epilogues are off or unavailable; thread per
// 16-byte vector (n is a multiple of the vector length: rows of 4C).
__device__ __forceinline__ float gelu_f(float x)
{
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x)
{
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename T> __global__ void gelu_forward_kernel(T *out, const T *inp, size_t n)
{
    constexpr int V = vec16<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V];
    load16(x, inp + i);
    for (int k = 0; k < V; k++) x[k] = gelu_f(x[k]);
    store16(out + i, x);
}

template <typename T> __global__ void gelu_backward_kernel(T *d, const T *inp, size_t n)
{
    constexpr int V = vec16<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V], g[V];
    load16(x, inp + i);
    load16(g, d + i);
    for (int k = 0; k < V; k++) g[k] *= gelu_grad_f(x[k]);
    store16(d + i, g);
}

// ---------------------------------------------------------------- launchers

// tanh-approximated GELU (GPT-2's), forward and in-place backward.
template <typename T> int k_gelu_forward(T *out, const T *inp, size_t n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((gelu_forward_kernel), ceil_div(n / vec16<T>::N, 256), 256, 0, s, out, inp, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T> int k_gelu_backward(T *dinout, const T *inp, size_t n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((gelu_backward_kernel), ceil_div(n / vec16<T>::N, 256), 256, 0, s, dinout, inp, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
