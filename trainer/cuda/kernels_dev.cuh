// Device code of kernels.cu: the kernels themselves, without launchers, so
// tests/gpu/emu can also compile them for the CPU (CUDA-on-threads emulation)
// and check them against the CPU reference layers without a GPU.
#ifndef SKIFF_CUDA_KERNELS_DEV_CUH
#define SKIFF_CUDA_KERNELS_DEV_CUH

#include "common.cuh"
#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// ---------------------------------------------------------------- encoder
template <typename T>
__global__ void encoder_forward_kernel(T *out, const int *tokens, const T *wte, const T *wpe,
                                       int Tn, int C, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t row = i / C;
    int c = (int)(i % C);
    int t = (int)(row % Tn);
    int tok = tokens[row];
    out[i] = from_f<T>(to_f(wte[(size_t)tok * C + c]) + to_f(wpe[(size_t)t * C + c]));
}

// Deterministic (no float atomics, so reruns and resumes are bit-identical):
// the rows that hold each distinct token are grouped on the host (csr: for
// unique token u, rows[start[u] .. start[u+1]) in increasing order), and one
// thread per (token, channel) sums its rows in that fixed order.
template <typename T>
__global__ void encoder_backward_wte_kernel(float *dwte, const T *dout, const int *uniq,
                                            const int *start, const int *rows, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = start[u]; k < start[u + 1]; k++) acc += to_f(dout[(size_t)rows[k] * C + c]);
    dwte[(size_t)uniq[u] * C + c] += acc;
}

// dwpe[t] += sum over b of dout[b, t], b in order.
template <typename T>
__global__ void encoder_backward_wpe_kernel(float *dwpe, const T *dout, int B, int Tn, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)Tn * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += to_f(dout[(size_t)b * Tn * C + i]);
    dwpe[i] += acc;
}

// ---------------------------------------------------------------- layernorm
// One warp per row. The residual sum is rounded to T before normalising so the
// statistics match the stored residual the backward pass reads.
template <typename T>
__global__ void residual_layernorm_forward_kernel(T *res_out, T *ln_out, float *mean, float *rstd,
                                                  const T *a, const T *b, const T *w,
                                                  const T *bias, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *ar = a + (size_t)row * C;
    const T *br = b ? b + (size_t)row * C : NULL;
    T *rr = res_out + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float x;
        if (br) {
            T xs = from_f<T>(to_f(ar[c]) + to_f(br[c]));
            rr[c] = xs;
            x = to_f(xs);
        } else {
            x = to_f(ar[c]);
        }
        sum += x;
    }
    const T *xr = br ? (const T *)rr : ar;
    float mu = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_f(xr[c]) - mu;
        var += d * d;
    }
    float rs = rsqrtf(warp_sum(var) / C + 1e-5f);
    T *lr = ln_out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        lr[c] = from_f<T>((to_f(xr[c]) - mu) * rs * to_f(w[c]) + to_f(bias[c]));
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

// dinp: one warp per row. dw/db are column sums over rows and go through the
// deterministic column reduction below instead of atomics.
template <typename T>
__global__ void layernorm_backward_kernel(T *dinp, const T *dout, const T *inp, const T *w,
                                          const float *mean, const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *dr = dout + (size_t)row * C, *xr = inp + (size_t)row * C;
    T *gr = dinp + (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float dsum = 0.0f, dxsum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xh = (to_f(xr[c]) - mu) * rs;
        float dn = to_f(w[c]) * to_f(dr[c]);
        dsum += dn;
        dxsum += dn * xh;
    }
    dsum = warp_sum(dsum) / C;
    dxsum = warp_sum(dxsum) / C;
    for (int c = lane; c < C; c += 32) {
        float xh = (to_f(xr[c]) - mu) * rs;
        float dn = to_f(w[c]) * to_f(dr[c]);
        gr[c] = from_f<T>(to_f(gr[c]) + rs * (dn - dsum - xh * dxsum));
    }
}

// Column sums in a fixed order: block (32 columns x 8 row lanes) over a slice
// of ROWS_PER rows writes one partial per column to part[blockIdx.y]; a second
// kernel adds the partials in order. With ln != 0 it sums dout*xhat (LayerNorm
// dw) into out0 and dout (db) into out1; otherwise dout into out0 (bias).
#define ROWS_PER 256
template <typename T>
__global__ void colsum_partial_kernel(float *part, const T *dout, const T *inp, const float *mean,
                                      const float *rstd, int N, int OC, int ln) {
    __shared__ float p0[8][33], p1[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * ROWS_PER, r1 = min(N, r0 + ROWS_PER);
    float a0 = 0.0f, a1 = 0.0f;
    if (col < OC)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = to_f(dout[(size_t)r * OC + col]);
            if (ln) {
                a0 += d * (to_f(inp[(size_t)r * OC + col]) - mean[r]) * rstd[r];
                a1 += d;
            } else {
                a0 += d;
            }
        }
    p0[threadIdx.y][threadIdx.x] = a0;
    p1[threadIdx.y][threadIdx.x] = a1;
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
        for (int k = 1; k < 8; k++) {
            a0 += p0[k][threadIdx.x];
            a1 += p1[k][threadIdx.x];
        }
        float *pp = part + (size_t)blockIdx.y * 2 * OC;
        pp[col] = a0;
        pp[OC + col] = a1;
    }
}

__global__ void colsum_final_kernel(float *out0, float *out1, const float *part, int nparts, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float a0 = 0.0f, a1 = 0.0f;
    for (int k = 0; k < nparts; k++) {
        a0 += part[(size_t)k * 2 * OC + col];
        a1 += part[(size_t)k * 2 * OC + OC + col];
    }
    out0[col] += a0;
    if (out1) out1[col] += a1;
}

// ---------------------------------------------------------------- GELU
template <typename T>
__global__ void gelu_forward_kernel(T *out, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]);
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    out[i] = from_f<T>(0.5f * x * (1.0f + tanhf(u)));
}

template <typename T>
__global__ void gelu_backward_kernel(T *d, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]);
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = from_f<T>(g * to_f(d[i]));
}

// ---------------------------------------------------------------- bias
template <typename T>
__global__ void add_bias_kernel(T *out, const T *bias, size_t total, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    out[i] = from_f<T>(to_f(out[i]) + to_f(bias[i % OC]));
}

// ---------------------------------------------------------------- classifier
// One block per row. Online max/sum in one read of the row, then a second read
// writes the gradient in place, so the (N,Vp) probabilities never exist apart
// from the logits buffer itself.
template <typename T>
__global__ void fused_classifier_kernel(T *logits, float *losses, const int *targets, float dloss,
                                        int V, int Vp) {
    __shared__ float sm[32], ss[32];
    size_t row = blockIdx.x;
    T *lr = logits + row * Vp;
    float m = -INFINITY, sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float x = to_f(lr[i]);
        if (x > m) {
            sum = sum * __expf(m - x) + 1.0f;
            m = x;
        } else {
            sum += __expf(x - m);
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
    __syncthreads();  // everyone has read lr[tgt] before it is overwritten
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = 0.0f;
        if (i < V) g = (__expf(to_f(lr[i]) - lse) - (i == tgt ? 1.0f : 0.0f)) * dloss;
        lr[i] = from_f<T>(g);
    }
}

// ---------------------------------------------------------------- optimizer
// The gradient is multiplied by gs; with norm2 (device, the squared global
// norm of the unscaled-by-gs gradient) the kernel also clips to `clip` and
// skips the update when the norm is not finite (an fp16 overflow), so the
// host never has to read the norm before queueing the update.
template <typename T>
__global__ void adamw_kernel(float *master, T *param, const float *grad, float *m, float *v,
                             size_t n, float lr, float b1, float b2, float eps, float wd,
                             float gs, const float *norm2, float clip, float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (norm2) {
        float norm = sqrtf(*norm2) * gs;
        if (!isfinite(norm)) return;
        if (clip > 0.0f && norm > clip) gs *= clip / norm;
    }
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

template <typename T>
__global__ void cast_from_f32_kernel(T *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_f<T>(src[i]);
}
template <typename T>
__global__ void cast_to_f32_kernel(float *dst, const T *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_f(src[i]);
}

// Two passes with a fixed grid, so the sum is the same on every run.
#define NORM_BLOCKS 512
__global__ void norm_partial_kernel(float *part, const float *g, size_t n) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += g[i] * g[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void norm_final_kernel(float *out, const float *part) {
    float acc = block_sum(part[threadIdx.x]);
    if (threadIdx.x == 0) out[0] += acc;
}

// out[0] = x[0] + x[stride] + x[2*stride] + ... (n terms, in order): a sum over
// ranks in rank order, like the CPU path's.
__global__ void strided_sum_kernel(float *out, const float *x, int n, int stride) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += x[(size_t)i * stride];
    out[0] = acc;
}

__global__ void fill_f32_kernel(float *x, float v, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

__global__ void scale_kernel(float *x, float a, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void add_kernel(float *x, const float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void mean_kernel(float *out, const float *x, int n) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] += acc / n;
}

// Host: rows of each distinct token in increasing order (see k_encoder_csr).
static inline int encoder_csr_build(int *csr, int *counts, const int *tokens, int N, int V) {
    for (int v = 0; v < V; v++) counts[v] = 0;
    for (int i = 0; i < N; i++) counts[tokens[i]]++;
    int nuniq = 0;
    for (int v = 0; v < V; v++) nuniq += counts[v] > 0;
    int *uniq = csr, *start = csr + nuniq, *rows = csr + 2 * nuniq + 1;
    int u = 0, pos = 0;
    for (int v = 0; v < V; v++) {
        if (!counts[v]) continue;
        uniq[u] = v;
        start[u++] = pos;
        int c = counts[v];
        counts[v] = pos;  // becomes the next free slot of token v
        pos += c;
    }
    start[nuniq] = pos;
    for (int i = 0; i < N; i++) rows[counts[tokens[i]]++] = i;  // rows ascending per token
    return nuniq;
}

#endif
