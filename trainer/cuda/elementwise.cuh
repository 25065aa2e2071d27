// Elementwise fp32 helpers of the model and the step: casts between fp32
// and the storage type, fill, accumulate.
#ifndef SKIFF_CUDA_ELEMENTWISE_CUH
#define SKIFF_CUDA_ELEMENTWISE_CUH

#include "common.cuh"

template <typename T> __global__ void cast_from_f32_kernel(T *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = from_f<T>(src[i]);
}
template <typename T> __global__ void cast_to_f32_kernel(float *dst, const T *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = to_f(src[i]);
}

__global__ void fill_f32_kernel(float *x, float v, size_t n) { GRID_STRIDE(i, n) x[i] = v; }

__global__ void add_kernel(float *x, const float *y, size_t n) { GRID_STRIDE(i, n) x[i] += y[i]; }

// ---------------------------------------------------------------- launchers

template <typename T> int k_cast_from_f32(T *dst, const float *src, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((cast_from_f32_kernel), grid_blocks(n), 256, 0, s, dst, src, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}
template <typename T> int k_cast_to_f32(float *dst, const T *src, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((cast_to_f32_kernel), grid_blocks(n), 256, 0, s, dst, src, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

inline int k_fill_f32(float *x, float v, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((fill_f32_kernel), grid_blocks(n), 256, 0, s, x, v, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

inline int k_add_f32(float *x, const float *y, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((add_kernel), grid_blocks(n), 256, 0, s, x, y, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
