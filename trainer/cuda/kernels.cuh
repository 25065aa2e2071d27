// Launchers for the model's own kernels (everything that is not a matmul).
// Shapes follow llm.c's comments: N = B*T rows, C channels, V vocab, Vp padded.
// Every launcher is asynchronous on `s`, checks the launch and returns 0 / -1.
// Parameter gradients are fp32 and always accumulated (+=), activations and
// their gradients are in the storage type T (float, bf16 or fp16).
#ifndef SKIFF_CUDA_KERNELS_CUH
#define SKIFF_CUDA_KERNELS_CUH

#include "common.cuh"

// out (N,C) = wte[tokens] + wpe[t]
template <typename T>
int k_encoder_forward(T *out, const int *tokens, const T *wte, const T *wpe, int B, int Tn, int C, cudaStream_t s,
                      skiff_err *err);
// dwte[tokens] += dout, dwpe[t] += dout, deterministically. csr (device) is
// the segmented token index built on the host by k_encoder_csr (N token ids
// < V; counts is V ints of scratch; k_encoder_csr_ints(N) ints; returns the
// ints written, nseg = csr[0], nbig = csr[1]). scratch:
// k_encoder_scratch_floats(N, C) floats for the partial sums of frequent tokens.
int k_encoder_csr(int *csr, int *counts, const int *tokens, int N, int V);
size_t k_encoder_csr_ints(int N);
size_t k_encoder_scratch_floats(int N, int C);
template <typename T>
int k_encoder_backward(float *dwte, float *dwpe, float *scratch, const T *dout, const int *csr, int nseg, int nbig,
                       int B, int Tn, int C, cudaStream_t s, skiff_err *err);
// res_out = a + b (skipped when b is NULL: then a is the residual), ln_out =
// LayerNorm(res_out) * w + bias; mean/rstd (N) kept for the backward pass.
template <typename T>
int k_residual_layernorm_forward(T *res_out, T *ln_out, float *mean, float *rstd, const T *a, const T *b, const T *w,
                                 const T *bias, int N, int C, cudaStream_t s, skiff_err *err);
// dinp += LayerNorm'(dout); dw, db += (fp32). scratch: k_colsum_scratch_floats(N, C).
template <typename T>
int k_layernorm_backward(T *dinp, float *dw, float *db, float *scratch, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C, cudaStream_t s, skiff_err *err);
// tanh-approximated GELU (GPT-2's), forward and in-place backward.
template <typename T> int k_gelu_forward(T *out, const T *inp, size_t n, cudaStream_t s, skiff_err *err);
template <typename T> int k_gelu_backward(T *dinout, const T *inp, size_t n, cudaStream_t s, skiff_err *err);
// out (N,OC) += bias, for when a cuBLASLt bias epilogue is not used.
template <typename T> int k_add_bias(T *out, const T *bias, int N, int OC, cudaStream_t s, skiff_err *err);
// dbias (OC) += column sums of dout (N,OC). scratch: k_colsum_scratch_floats(N, OC).
// Column sums run in a fixed order (no atomics): results are bit-reproducible.
template <typename T>
int k_bias_backward(float *dbias, float *scratch, const T *dout, int N, int OC, cudaStream_t s, skiff_err *err);
size_t k_colsum_scratch_floats(int N, int OC);
// Softmax + cross-entropy in one pass over each row of logits (N,Vp), V real
// columns: losses[i] = -log p[target]; when dloss != 0 the row is overwritten
// with dlogits = (p - onehot) * dloss (padding columns get 0).
template <typename T>
int k_fused_classifier(T *logits, float *losses, const int *targets, float dloss, int N, int V, int Vp, cudaStream_t s,
                       skiff_err *err);
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
// Fused AdamW on n elements: master (fp32) updated from grad * grad_scale, the
// storage copy `param` (may be NULL) rewritten from it. With norm2 (device
// pointer to the squared global gradient norm, before grad_scale): clipped to
// `clip` (0: off), and skipped when the norm is inf/NaN.
template <typename T>
int k_adamw(float *master, T *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
            float beta2, float eps, float wd, float grad_scale, const float *norm2, float clip, float bc1, float bc2,
            cudaStream_t s, skiff_err *err);
template <typename T> int k_cast_from_f32(T *dst, const float *src, size_t n, cudaStream_t s, skiff_err *err);
template <typename T> int k_cast_to_f32(float *dst, const T *src, size_t n, cudaStream_t s, skiff_err *err);

// out[0] += sum of squares of g[0..n), in a fixed order. scratch: k_norm_scratch_floats().
int k_norm_squared(float *out, float *scratch, const float *g, size_t n, cudaStream_t s, skiff_err *err);
size_t k_norm_scratch_floats(void);
int k_add_f32(float *x, const float *y, size_t n, cudaStream_t s, skiff_err *err);
int k_scale_f32(float *x, float a, size_t n, cudaStream_t s, skiff_err *err);
int k_fill_f32(float *x, float v, size_t n, cudaStream_t s, skiff_err *err);
// out[0] = sum of x[i*stride] for i < n, in order (one thread).
int k_strided_sum(float *out, const float *x, int n, int stride, cudaStream_t s, skiff_err *err);
// Adds the mean of x[0..n) to out[0] (one block: a fixed order).
int k_mean(float *out, const float *x, int n, cudaStream_t s, skiff_err *err);

#endif
