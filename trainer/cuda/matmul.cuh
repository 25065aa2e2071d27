// cuBLASLt matmuls for the model's linear layers, in llm.c's convention:
// weights W are (OC, C) row-major and y = x W^T + b for x (N, C).
// bf16/fp16 inputs accumulate in fp32; fp32 runs as TF32. Plans (descriptors
// and the heuristic's algorithm) are cached per shape, so steady-state calls
// cost one cublasLtMatmul each.
#ifndef SKIFF_CUDA_MATMUL_CUH
#define SKIFF_CUDA_MATMUL_CUH

#include "common.cuh"

#define MM_WORKSPACE_BYTES ((size_t)32 << 20) // what NVIDIA suggests for Hopper

struct mm_plan;

struct mm_ctx {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_size;
    struct mm_plan *plans; // small open-addressing cache
    int nplans, cap;
    int no_dgelu, no_bgradb; // cuBLASLt had no algorithm for the fused epilogue
};

int mm_init(struct mm_ctx *c, skiff_err *err);
void mm_fini(struct mm_ctx *c);

// out (N,OC) = inp (N,C) W^T + bias (bias may be NULL). With gelu_pre
// non-NULL the GELU epilogue is used: gelu_pre = x W^T + b, out = GELU(gelu_pre).
template <typename T>
int mm_forward(struct mm_ctx *c, T *out, T *gelu_pre, const T *inp, const T *w, const T *bias, int N, int C, int OC,
               cudaStream_t s, skiff_err *err);
// dinp (N,C) = dout (N,OC) W  (overwrites). With gelu_pre (the fc layer's
// pre-GELU activations, as the GELU_AUX_BIAS forward kept them) cuBLASLt's
// DGELU epilogue multiplies by GELU'(gelu_pre) before rounding to T; *fused
// says whether it did (else the caller runs the GELU backward kernel).
template <typename T>
int mm_backward_data(struct mm_ctx *c, T *dinp, const T *dout, const T *w, const T *gelu_pre, int N, int C, int OC,
                     cudaStream_t s, int *fused, skiff_err *err);
// dw (OC,C) += dout^T inp, accumulated in fp32. With dbias (OC fp32) the
// BGRADB epilogue also writes the bias gradient, the column sums of dout
// (overwriting dbias); *fused says whether it did.
template <typename T>
int mm_backward_weight(struct mm_ctx *c, float *dw, float *dbias, const T *inp, const T *dout, int N, int C, int OC,
                       cudaStream_t s, int *fused, skiff_err *err);

// Times a square-ish bf16 GEMM (m x n x k) for `iters` runs; returns TFLOP/s
// in *tflops. Used by the benchmark to measure the matmul peak of this GPU.
int mm_bench_bf16(struct mm_ctx *c, int m, int n, int k, int iters, double *tflops, skiff_err *err);

#endif
