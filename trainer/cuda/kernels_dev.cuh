// Device code of kernels.cu: the kernels themselves, without launchers, so
// tests/gpu/emu can also compile them for the CPU (CUDA-on-threads emulation)
// and check them against the CPU reference layers without a GPU.
#ifndef SKIFF_CUDA_KERNELS_DEV_CUH
#define SKIFF_CUDA_KERNELS_DEV_CUH

#include "common.cuh"
#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

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

// ---------------------------------------------------------------- encoder
// One thread per 16-byte vector of the output.
template <typename T>
__global__ void encoder_forward_kernel(T *out, const int *tokens, const T *wte, const T *wpe, int Tn, int C,
                                       size_t nvec)
{
    constexpr int V = vec16<T>::N;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    size_t e = i * V, row = e / C;
    int c = (int)(e % C), t = (int)(row % Tn);
    float x[V], y[V];
    load16(x, wte + (size_t)tokens[row] * C + c);
    load16(y, wpe + (size_t)t * C + c);
    for (int k = 0; k < V; k++) x[k] += y[k];
    store16(out + e, x);
}

// Deterministic embedding backward (no float atomics, so reruns and resumes
// are bit-identical). The host groups the rows of each distinct token
// (encoder_csr_build): a token with at most ENC_SEG rows is one segment whose
// sum is added to dwte directly; a frequent token's rows are split into
// segments of ENC_SEG that sum into partial rows, and a second kernel adds a
// token's partials in order. So no thread sums thousands of rows serially.
#define ENC_SEG 64
struct enc_csr { // pointers into the int array built by encoder_csr_build
    const int *rows, *seg_tok, *seg_start, *seg_dst, *big_tok, *big_first;
    int nseg, nbig, npart;
};
__host__ __device__ __forceinline__ enc_csr enc_csr_view(const int *csr, int N)
{
    enc_csr v;
    v.nseg = csr[0], v.nbig = csr[1], v.npart = csr[2];
    v.rows = csr + 3;
    v.seg_tok = v.rows + N;
    v.seg_start = v.seg_tok + v.nseg;
    v.seg_dst = v.seg_start + v.nseg + 1;
    v.big_tok = v.seg_dst + v.nseg;
    v.big_first = v.big_tok + v.nbig;
    return v;
}
// Ints the array needs for N rows (any token distribution, segments >= 1 row).
static inline size_t enc_csr_ints(int N, int seg)
{
    size_t maxseg = (size_t)N + N / seg + 1, maxbig = N / seg + 1;
    return 3 + (size_t)N + 3 * maxseg + 1 + 2 * maxbig + 1;
}

// Thread per (segment, vector of channels); blockIdx.x = segment.
template <typename T>
__global__ void encoder_backward_seg_kernel(float *dwte, float *part, const T *dout, const int *csr, int N, int C)
{
    constexpr int V = vec16<T>::N;
    enc_csr v = enc_csr_view(csr, N);
    int s = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c >= C) return;
    float acc[V], x[V];
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    for (int r = v.seg_start[s]; r < v.seg_start[s + 1]; r++) {
        load16(x, dout + (size_t)v.rows[r] * C + c);
        for (int k = 0; k < V; k++) acc[k] += x[k];
    }
    int d = v.seg_dst[s];
    if (d < 0) {
        add_f32(dwte + (size_t)v.seg_tok[s] * C + c, acc, V);
    } else {
        for (int k = 0; k < V; k++) part[(size_t)d * C + c + k] = acc[k];
    }
}

// Thread per (frequent token, channel): its partials in order.
__global__ void encoder_backward_big_kernel(float *dwte, const float *part, const int *csr, int N, int C)
{
    enc_csr v = enc_csr_view(csr, N);
    int b = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int p = v.big_first[b]; p < v.big_first[b + 1]; p++) acc += part[(size_t)p * C + c];
    dwte[(size_t)v.big_tok[b] * C + c] += acc;
}

// dwpe[t] += sum over b of dout[b, t], b in order; thread per vector.
template <typename T> __global__ void encoder_backward_wpe_kernel(float *dwpe, const T *dout, int B, int Tn, int C)
{
    constexpr int V = vec16<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= (size_t)Tn * C) return;
    float acc[V], x[V];
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    for (int b = 0; b < B; b++) {
        load16(x, dout + (size_t)b * Tn * C + i);
        for (int k = 0; k < V; k++) acc[k] += x[k];
    }
    add_f32(dwpe + i, acc, V);
}

// ---------------------------------------------------------------- layernorm
// One warp per row. The residual sum is rounded to T before normalising so the
// statistics match the stored residual the backward pass reads.
template <typename T>
__global__ void residual_layernorm_forward_kernel(T *res_out, T *ln_out, float *mean, float *rstd, const T *a,
                                                  const T *b, const T *w, const T *bias, int N, int C)
{
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
    for (int c = lane; c < C; c += 32) lr[c] = from_f<T>((to_f(xr[c]) - mu) * rs * to_f(w[c]) + to_f(bias[c]));
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

// dinp: one warp per row. dw/db are column sums over rows and go through the
// deterministic column reduction below instead of atomics.
template <typename T>
__global__ void layernorm_backward_kernel(T *dinp, const T *dout, const T *inp, const T *w, const float *mean,
                                          const float *rstd, int N, int C)
{
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

// Vectorised versions: one warp per row, the row kept in registers (NV
// 16-byte vectors per lane, so C <= 32 * NV * 16 / sizeof(T)); the launchers
// pick NV from C and fall back to the kernels above for wider rows.
#define LN_MAX_PER_LANE 32 // floats of one row a lane may hold (C <= 1024)
template <typename T, int NV>
__global__ void residual_layernorm_forward_vec_kernel(T *res_out, T *ln_out, float *mean, float *rstd, const T *a,
                                                      const T *b, const T *w, const T *bias, int N, int C)
{
    constexpr int V = vec16<T>::N;
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    int nvec = C / V;
    size_t off = (size_t)row * C;
    float x[NV][V], y[V];
    float sum = 0.0f;
    for (int j = 0; j < NV; j++) {
        int c = (lane + 32 * j) * V;
        if (c >= C) continue;
        load16(x[j], a + off + c);
        if (b) {
            load16(y, b + off + c);
            // rounded to T, so the statistics match the stored residual
            for (int k = 0; k < V; k++) x[j][k] = to_f(from_f<T>(x[j][k] + y[k]));
            store16(res_out + off + c, x[j]);
        }
        for (int k = 0; k < V; k++) sum += x[j][k];
    }
    float mu = warp_sum(sum) / C, var = 0.0f;
    for (int j = 0; j < NV; j++)
        if (lane + 32 * j < nvec)
            for (int k = 0; k < V; k++) var += (x[j][k] - mu) * (x[j][k] - mu);
    float rs = rsqrtf(warp_sum(var) / C + 1e-5f);
    for (int j = 0; j < NV; j++) {
        int c = (lane + 32 * j) * V;
        if (c >= C) continue;
        float wv[V], bv[V];
        load16(wv, w + c);
        load16(bv, bias + c);
        for (int k = 0; k < V; k++) y[k] = (x[j][k] - mu) * rs * wv[k] + bv[k];
        store16(ln_out + off + c, y);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

// LayerNorm backward in one pass over dout and inp: a block of 8 warps takes
// ROWS_PER rows (warp per row, the row in registers), adds into dinp, and
// keeps per-lane dw/db sums for its columns; the 8 warps' sums are added in
// warp order through shared memory and written as the block's partial
// (part[blockIdx.x][2C]); colsum_final_kernel adds the partials in order.
// No atomics: bit-reproducible.
#define ROWS_PER 256
template <typename T, int NV>
__global__ void __launch_bounds__(256)
    layernorm_backward_vec_kernel(T *dinp, float *part, const T *dout, const T *inp, const T *w, const float *mean,
                                  const float *rstd, int N, int C)
{
    constexpr int V = vec16<T>::N;
    __shared__ float red[2 * 32 * LN_MAX_PER_LANE];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int r0 = blockIdx.x * ROWS_PER, r1 = min(N, r0 + ROWS_PER);
    float dw[NV][V], db[NV][V];
    for (int j = 0; j < NV; j++)
        for (int k = 0; k < V; k++) dw[j][k] = db[j][k] = 0.0f;
    for (int row = r0 + warp; row < r1; row += nw) {
        size_t off = (size_t)row * C;
        float mu = mean[row], rs = rstd[row];
        float d[NV][V], xh[NV][V], wv[V];
        float dsum = 0.0f, dxsum = 0.0f;
        for (int j = 0; j < NV; j++) {
            int c = (lane + 32 * j) * V;
            if (c >= C) continue;
            load16(d[j], dout + off + c);
            load16(xh[j], inp + off + c);
            load16(wv, w + c);
            for (int k = 0; k < V; k++) {
                xh[j][k] = (xh[j][k] - mu) * rs;
                dw[j][k] += d[j][k] * xh[j][k];
                db[j][k] += d[j][k];
                float dn = wv[k] * d[j][k];
                dsum += dn;
                dxsum += dn * xh[j][k];
            }
        }
        dsum = warp_sum(dsum) / C;
        dxsum = warp_sum(dxsum) / C;
        for (int j = 0; j < NV; j++) {
            int c = (lane + 32 * j) * V;
            if (c >= C) continue;
            float g[V];
            load16(wv, w + c);
            load16(g, dinp + off + c);
            for (int k = 0; k < V; k++) g[k] += rs * (wv[k] * d[j][k] - dsum - xh[j][k] * dxsum);
            store16(dinp + off + c, g);
        }
    }
    // Ordered reduction over the warps: warp 0 writes, warps 1.. add, in turn.
    for (int k = 0; k < nw; k++) {
        if (warp == k)
            for (int j = 0; j < NV; j++) {
                int c = (lane + 32 * j) * V;
                if (c >= C) continue;
                for (int e = 0; e < V; e++) {
                    red[c + e] = k ? red[c + e] + dw[j][e] : dw[j][e];
                    red[C + c + e] = k ? red[C + c + e] + db[j][e] : db[j][e];
                }
            }
        __syncthreads();
    }
    float *pp = part + (size_t)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) pp[i] = red[i];
}

// Column sums in a fixed order: block (32 columns x 8 row lanes) over a slice
// of ROWS_PER rows writes one partial per column to part[blockIdx.y]; a second
// kernel adds the partials in order. With ln != 0 it sums dout*xhat (LayerNorm
// dw) into out0 and dout (db) into out1; otherwise dout into out0 (bias).
// Used for bias gradients when cuBLASLt's BGRADB epilogue is not available,
// and for LayerNorm rows too wide for the vectorised kernel.
template <typename T>
__global__ void colsum_partial_kernel(float *part, const T *dout, const T *inp, const float *mean, const float *rstd,
                                      int N, int OC, int ln)
{
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

__global__ void colsum_final_kernel(float *out0, float *out1, const float *part, int nparts, int OC)
{
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

// ---------------------------------------------------------------- bias
template <typename T> __global__ void add_bias_kernel(T *out, const T *bias, size_t total, int OC)
{
    constexpr int V = vec16<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= total) return;
    float x[V], b[V];
    load16(x, out + i);
    load16(b, bias + i % OC);
    for (int k = 0; k < V; k++) x[k] += b[k];
    store16(out + i, x);
}

// ---------------------------------------------------------------- classifier
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

// ---------------------------------------------------------------- optimizer
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

template <typename T> __global__ void cast_from_f32_kernel(T *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = from_f<T>(src[i]);
}
template <typename T> __global__ void cast_to_f32_kernel(float *dst, const T *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = to_f(src[i]);
}

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

__global__ void fill_f32_kernel(float *x, float v, size_t n) { GRID_STRIDE(i, n) x[i] = v; }

__global__ void scale_kernel(float *x, float a, size_t n) { GRID_STRIDE(i, n) x[i] *= a; }

__global__ void add_kernel(float *x, const float *y, size_t n) { GRID_STRIDE(i, n) x[i] += y[i]; }

__global__ void mean_kernel(float *out, const float *x, int n)
{
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] += acc / n;
}

// Host: the segmented token index of the embedding backward (see enc_csr):
// rows grouped by token (ascending tokens, ascending rows), then the
// segments of at most `seg` rows. counts: V ints of scratch. Returns the
// number of ints written (at most enc_csr_ints(N, seg)).
static inline int encoder_csr_build(int *csr, int *counts, const int *tokens, int N, int V, int seg)
{
    for (int v = 0; v < V; v++) counts[v] = 0;
    for (int i = 0; i < N; i++) counts[tokens[i]]++;
    int nseg = 0, nbig = 0, npart = 0;
    for (int v = 0, pos = 0; v < V; v++) {
        int c = counts[v];
        counts[v] = pos; // becomes the next free slot of token v
        pos += c;
        if (c == 0) continue;
        if (c <= seg) {
            nseg++;
        } else {
            nseg += (c + seg - 1) / seg;
            npart += (c + seg - 1) / seg;
            nbig++;
        }
    }
    int *rows = csr + 3;
    for (int i = 0; i < N; i++) rows[counts[tokens[i]]++] = i; // now counts[v] = end of token v
    csr[0] = nseg, csr[1] = nbig, csr[2] = npart;
    int *seg_tok = rows + N, *seg_start = seg_tok + nseg, *seg_dst = seg_start + nseg + 1;
    int *big_tok = seg_dst + nseg, *big_first = big_tok + nbig;
    int si = 0, bi = 0, pi = 0;
    for (int v = 0, st = 0; v < V; v++) {
        int en = counts[v], c = en - st;
        if (c > seg) {
            big_tok[bi] = v;
            big_first[bi++] = pi;
        }
        for (int r = st; c > 0 && r < en; r += seg) {
            seg_tok[si] = v;
            seg_start[si] = r;
            seg_dst[si++] = c > seg ? pi++ : -1;
        }
        st = en;
    }
    seg_start[nseg] = N;
    big_first[nbig] = npart;
    return (int)(big_first + nbig + 1 - csr);
}

#endif
