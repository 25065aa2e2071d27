// Softmax + cross-entropy over the (N,Vp) logits in one pass per row,
// writing the logits' gradient in place, and the mean of the losses.
#ifndef SKIFF_CUDA_CLASSIFIER_CUH
#define SKIFF_CUDA_CLASSIFIER_CUH

#include "common.cuh"

// One block per row. Online max/sum in one read of the row (16-byte
// vectors), then a second read (from L2: a row is 100 KB at Vp = 50304 in
// bf16) writes the gradient in place, so the (N,Vp) probabilities never exist
// apart from the logits buffer itself.
template <typename T>
__global__ void fused_classifier_kernel(T *logits, float *losses, const int *targets, float dloss, int V, int Vp)
{
    constexpr int VE = vec16<T>::N;
    __shared__ float sm[32], ss[32];
    size_t row = blockIdx.x;
    T *lr = logits + row * Vp;
    float m = -INFINITY, sum = 0.0f, x[VE];
    for (int i = threadIdx.x * VE; i < V; i += blockDim.x * VE) {
        load16(x, lr + i);
        for (int k = 0; k < VE && i + k < V; k++) {
            if (x[k] > m) {
                sum = sum * __expf(m - x[k]) + 1.0f;
                m = x[k];
            } else {
                sum += __expf(x[k] - m);
            }
        }
    }
    // Combine (m, sum) pairs: first within the warp, then across warps.
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, sum, o);
        float nm = fmaxf(m, om);
        sum = (m == -INFINITY ? 0.0f : sum * __expf(m - nm)) + (om == -INFINITY ? 0.0f : os * __expf(om - nm));
        m = nm;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        sm[wid] = m;
        ss[wid] = sum;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < nw; k++) M = fmaxf(M, sm[k]);
    float S = 0.0f;
    for (int k = 0; k < nw; k++)
        if (sm[k] != -INFINITY) S += ss[k] * __expf(sm[k] - M);
    int tgt = targets[row];
    float lse = M + logf(S);
    if (threadIdx.x == 0) losses[row] = lse - to_f(lr[tgt]);
    if (dloss == 0.0f) return;
    __syncthreads(); // everyone has read lr[tgt] before it is overwritten
    for (int i = threadIdx.x * VE; i < Vp; i += blockDim.x * VE) {
        load16(x, lr + i);
        for (int k = 0; k < VE; k++)
            x[k] = i + k < V ? (__expf(x[k] - lse) - (i + k == tgt ? 1.0f : 0.0f)) * dloss : 0.0f;
        store16(lr + i, x);
    }
}

__global__ void mean_kernel(float *out, const float *x, int n)
{
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] += acc / n;
}

// ---------------------------------------------------------------- launchers

// Softmax + cross-entropy in one pass over each row of logits (N,Vp), V real
// columns: losses[i] = -log p[target]; when dloss != 0 the row is overwritten
// with dlogits = (p - onehot) * dloss (padding columns get 0).
template <typename T>
int k_fused_classifier(T *logits, float *losses, const int *targets, float dloss, int N, int V, int Vp, cudaStream_t s,
                       skiff_err *err)
{
    LAUNCH((fused_classifier_kernel), N, BIG_BLOCK, 0, s, logits, losses, targets, dloss, V, Vp);
    CUDA_CHECK_LAUNCH();
    return 0;
}

// Adds the mean of x[0..n) to out[0] (one block: a fixed order).
inline int k_mean(float *out, const float *x, int n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((mean_kernel), 1, BIG_BLOCK, 0, s, out, x, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
