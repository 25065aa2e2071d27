// The gradient's squared L2 norm in a fixed order (two passes, fixed
// grid), and the in-order sum over ranks of per-rank values.
#ifndef SKIFF_CUDA_GLOBAL_NORM_CUH
#define SKIFF_CUDA_GLOBAL_NORM_CUH

#include "common.cuh"

// Two passes with a fixed grid, so the sum is the same on every run (the
// emulation uses a smaller grid: fewer emulated threads, same code).
#ifdef SKIFF_CUDA_EMU
#define NORM_BLOCKS 32
#else
#define NORM_BLOCKS 512
#endif
__global__ void norm_partial_kernel(float *part, const float *g, size_t n)
{
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += g[i] * g[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void norm_final_kernel(float *out, const float *part)
{
    float acc = block_sum(part[threadIdx.x]);
    if (threadIdx.x == 0) out[0] += acc;
}

// out[0] = x[0] + x[stride] + x[2*stride] + ... (n terms, in order): a sum over
// ranks in rank order, like the CPU path's.
__global__ void strided_sum_kernel(float *out, const float *x, int n, int stride)
{
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += x[(size_t)i * stride];
    out[0] = acc;
}

// ---------------------------------------------------------------- launchers

inline size_t k_norm_scratch_floats(void) { return NORM_BLOCKS; }

// out[0] += sum of squares of g[0..n), in a fixed order. scratch: k_norm_scratch_floats().
inline int k_norm_squared(float *out, float *scratch, const float *g, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((norm_partial_kernel), NORM_BLOCKS, BIG_BLOCK / 2, 0, s, scratch, g, n);
    CUDA_CHECK_LAUNCH();
    LAUNCH((norm_final_kernel), 1, NORM_BLOCKS, 0, s, out, scratch);
    CUDA_CHECK_LAUNCH();
    return 0;
}

// out[0] = sum of x[i*stride] for i < n, in order (one thread).
inline int k_strided_sum(float *out, const float *x, int n, int stride, cudaStream_t s, skiff_err *err)
{
    LAUNCH((strided_sum_kernel), 1, 1, 0, s, out, x, n, stride);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
