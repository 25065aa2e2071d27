// Shared pieces of the CUDA path: check macros that turn a failed CUDA, cuBLAS or
// NCCL call into a skiff_err carrying file:line, the three element types the
// model can run in, and small device helpers. Included by every .cu file here.
#ifndef SKIFF_CUDA_COMMON_CUH
#define SKIFF_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <unistd.h>

extern "C" {
#include "clock.h"
#include "error.h"
}

// Every function that can fail takes `skiff_err *err` and returns int (0 / -1);
// these macros need `err` in scope. The message names the call and where it was
// made, so a failure on the device machine points at one line.
#define CUDA_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return skiff_error(err, 0, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorString(e_),        \
                               cudaGetErrorName(e_));                                                                  \
    } while (0)

// Kernel launches report errors only through cudaGetLastError.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            return skiff_error(err, 0, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_);             \
    } while (0)

// Propagates a -1 from a callee, adding nothing (the callee already said where).
#define TRY(...)                                                                                                       \
    do {                                                                                                               \
        if ((__VA_ARGS__) < 0) return -1;                                                                              \
    } while (0)

// Waits until event e has completed without blocking inside the driver: it
// polls, so a stream stuck behind a collective whose peer died turns into an
// error after timeout_ms instead of a hang (a blocking cudaMemcpy into
// pageable memory or cudaStreamSynchronize would never return). `check`
// (may be NULL) runs between polls and can fail the wait early (NCCL's
// asynchronous error). On a timeout err->code is ETIMEDOUT; a CUDA error
// keeps CUDA's own string.
static inline int cuda_poll_event(cudaEvent_t e, int timeout_ms, int (*check)(void *, skiff_err *), void *ctx,
                                  const char *what, skiff_err *err)
{
    double t0 = skiff_now_ms();
    for (;;) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady)
            return skiff_error(err, 0, "%s: %s (%s)", what, cudaGetErrorString(q), cudaGetErrorName(q));
        if (check && check(ctx, err) < 0) return -1;
        double waited = skiff_now_ms() - t0;
        if (waited > timeout_ms) {
            skiff_error(err, 0, "%s: the GPU did not finish within %.1f s", what, timeout_ms / 1000.0);
            err->code = ETIMEDOUT;
            return -1;
        }
        usleep(waited < 10 ? 20 : 500); // short waits stay short, long ones cost no CPU
    }
}

// Dynamic shared memory; tests/gpu/emu (SKIFF_CUDA_EMU) supplies its own.
#ifdef SKIFF_CUDA_EMU
#define DYN_SMEM(name) unsigned char *name = emu_dyn_smem()
#else
#define DYN_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

// Kernel launch. Under SKIFF_CUDA_EMU (tests/gpu/emu) the same launcher code
// runs the kernel on CPU threads instead. Parenthesise template kernel names:
// LAUNCH((k<T, 64>), grid, block, smem, stream, args...).
#ifdef SKIFF_CUDA_EMU
#define LAUNCH(kernel, grid, block, smem, stream, ...) emu_launch(dim3(grid), dim3(block), [=] { kernel(__VA_ARGS__); })
#else
#define LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

// Element types. The model is templated on the storage type of weights and
// activations; all arithmetic inside kernels is fp32.
typedef __nv_bfloat16 bf16;
typedef __half fp16;

enum skiff_cuda_precision { SKIFF_CUDA_FP32 = 0, SKIFF_CUDA_BF16 = 1, SKIFF_CUDA_FP16 = 2 };

template <typename T> __host__ __device__ __forceinline__ float to_f(T x);
template <> __host__ __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __host__ __device__ __forceinline__ float to_f<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __host__ __device__ __forceinline__ float to_f<fp16>(fp16 x) { return __half2float(x); }

template <typename T> __host__ __device__ __forceinline__ T from_f(float x);
template <> __host__ __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __host__ __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __host__ __device__ __forceinline__ fp16 from_f<fp16>(float x) { return __float2half_rn(x); }

// cuBLASLt / NCCL type tags for each storage type.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> {
    static constexpr cudaDataType_t cuda = CUDA_R_32F;
};
template <> struct dtype_of<bf16> {
    static constexpr cudaDataType_t cuda = CUDA_R_16BF;
};
template <> struct dtype_of<fp16> {
    static constexpr cudaDataType_t cuda = CUDA_R_16F;
};

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Elementwise kernels over n elements loop with a grid stride, launched with
// grid_blocks(n) blocks of 256: enough waves for the 132 SMs of an H100, not
// a block per 256 elements (and few emulated threads on the CPU).
#define GRID_STRIDE(i, n)                                                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
#ifdef SKIFF_CUDA_EMU
#define GRID_MAX_BLOCKS 4
#define BIG_BLOCK 128 // row-per-block kernels: fewer emulated threads
#else
#define GRID_MAX_BLOCKS 2048
#define BIG_BLOCK 1024
#endif
static inline unsigned grid_blocks(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < GRID_MAX_BLOCKS ? b : GRID_MAX_BLOCKS);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // part[] may still be read by a previous call
    if (lane == 0) part[wid] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0f;
    return warp_sum(v);
}

// ---------------------------------------------------------------- vectors
// Memory-bound kernels move 16 bytes per access (8 bf16/fp16 or 4 fp32).
// Every CUDA model has C a multiple of 16 (head sizes 16..128), so rows of C,
// 3C, 4C and Vp elements are whole vectors.
template <typename T> struct vec16 {
    static constexpr int N = 16 / sizeof(T);
};
template <typename T> __device__ __forceinline__ void load16(float *f, const T *p)
{
    int4 v = *reinterpret_cast<const int4 *>(p);
    const T *e = reinterpret_cast<const T *>(&v);
    for (int k = 0; k < vec16<T>::N; k++) f[k] = to_f(e[k]);
}
template <typename T> __device__ __forceinline__ void store16(T *p, const float *f)
{
    int4 v;
    T *e = reinterpret_cast<T *>(&v);
    for (int k = 0; k < vec16<T>::N; k++) e[k] = from_f<T>(f[k]);
    *reinterpret_cast<int4 *>(p) = v;
}
// n fp32 values (n a multiple of 4) at p += f, in float4 pieces.
__device__ __forceinline__ void add_f32(float *p, const float *f, int n)
{
    for (int k = 0; k < n; k += 4) {
        float4 v = *reinterpret_cast<float4 *>(p + k);
        v.x += f[k], v.y += f[k + 1], v.z += f[k + 2], v.w += f[k + 3];
        *reinterpret_cast<float4 *>(p + k) = v;
    }
}

#endif
