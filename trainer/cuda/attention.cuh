// Causal self-attention (FlashAttention-2 structure on mma.sync tensor
// cores): the launchers, defined and instantiated in attention.cu, whose
// kernels (attention_dev.cuh) are the slowest code here to compile and so
// build in a translation unit of their own, beside cuda_model.cu.
#ifndef SKIFF_CUDA_ATTENTION_CUH
#define SKIFF_CUDA_ATTENTION_CUH

#include "common.cuh"

// Causal self-attention on qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T) saved.
// Flash-style: the T x T matrix never exists in memory. Head size 16/32/64/128.
template <typename T>
int k_attention_forward(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH, cudaStream_t s, skiff_err *err);
// dqkv (B,T,3C) from dout, using qkv, out and lse of the forward pass;
// deterministic (no atomics: dK/dV and dQ each have one owner block).
// scratch: k_attention_scratch_floats(B, T, C, NH) floats (rowsum(dO*O)).
size_t k_attention_scratch_floats(int B, int Tn, int C, int NH);
template <typename T>
int k_attention_backward(T *dqkv, float *scratch, const T *dout, const T *qkv, const T *out, const float *lse, int B,
                         int Tn, int C, int NH, cudaStream_t s, skiff_err *err);

#endif
