// Causal self-attention, flash style: scores are computed 64 x 64 tiles at a
// time on tensor cores (WMMA: bf16/fp16 in, fp32 accumulate; TF32 for fp32),
// softmax is done online (running max and sum per query row) and only the
// per-row log-sum-exp is kept for the backward pass. Nothing T x T is stored.
//
// Layout: qkv is (B, T, 3C) exactly as the qkv matmul writes it, head h of q at
// columns [h*64, h*64+64), of k at C + h*64, of v at 2C + h*64, so no permute
// kernels are needed; out is (B, T, C) with head h at columns h*64.
//
// Forward: one block of 4 warps per (64-query tile, head, batch); warp w owns
// query rows w*16..w*16+15. Per 64-key tile: S = Q K^T (WMMA) -> warp scratch
// (fp32) -> each lane owns half a row (32 columns): scale, mask, online softmax,
// writes P (storage type) -> O += P V (WMMA) -> lanes fold it into their
// register accumulator with the running rescale.
//
// Backward (FlashAttention-2 ordering): one block per (64-key tile, head,
// batch), looping over the query tiles at and after the diagonal. Warp w owns
// keys w*16..+15: it recomputes S^T and P^T = exp(S^T - lse), gets dP^T = V dO^T,
// dS^T = P^T (dP^T - D) with D = rowsum(dO * O), accumulates dV += P^T dO and
// dK += dS^T Q in WMMA fragments (no rescaling needed), and dQ += dS K goes to
// an fp32 buffer with atomics (several key tiles contribute to one query).
#include <mma.h>

#include "kernels.cuh"

using namespace nvcuda;

#define HS 64     // head size this kernel is written for (all GPT-2 sizes use 64)
#define TILE 64   // queries / keys per tile
#define NWARP 4   // 4 warps x 16 rows = 64

template <typename T> struct mma_traits {
    typedef T in;
    static constexpr int K = 16;
    static constexpr int LD = HS + 8;  // padding against bank conflicts; multiple of 8
};
template <> struct mma_traits<float> {
    typedef wmma::precision::tf32 in;
    static constexpr int K = 8;
    static constexpr int LD = HS + 4;  // multiple of 4 for fp32 loads
};
#define LDF (HS + 4)  // fp32 scratch row stride

template <typename T, typename L>
using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, mma_traits<T>::K, typename mma_traits<T>::in, L>;
template <typename T, typename L>
using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, mma_traits<T>::K, typename mma_traits<T>::in, L>;
template <typename T>
using frag_c = wmma::fragment<wmma::accumulator, 16, 16, mma_traits<T>::K, float>;

// TF32 fragments are loaded from fp32 and must be rounded explicitly.
template <typename T, typename F> __device__ __forceinline__ void round_frag(F &f) {
    if constexpr (sizeof(T) == 4) {
        for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
    }
}

template <typename T, typename LA, typename LB>
__device__ __forceinline__ void mma_step(frag_c<T> &acc, const T *a, int lda, const T *b, int ldb) {
    frag_a<T, LA> fa;
    frag_b<T, LB> fb;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    round_frag<T>(fa);
    round_frag<T>(fb);
    wmma::mma_sync(acc, fa, fb, acc);
}

// Copies rows [t0, t0+64) of one head (64 elements each, row stride `stride`
// elements) into shared memory with 16-byte vectors; rows past Tn become zero.
template <typename T>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int t0, int Tn, size_t stride) {
    constexpr int LD = mma_traits<T>::LD;
    constexpr int VEC = 16 / sizeof(T);
    constexpr int PER_ROW = HS / VEC;
    for (int i = threadIdx.x; i < TILE * PER_ROW; i += blockDim.x) {
        int r = i / PER_ROW, c = (i % PER_ROW) * VEC;
        int4 v = make_int4(0, 0, 0, 0);
        if (t0 + r < Tn) v = *reinterpret_cast<const int4 *>(src + (size_t)(t0 + r) * stride + c);
        *reinterpret_cast<int4 *>(dst + r * LD + c) = v;
    }
}

template <typename T> static size_t fwd_smem(void) {
    constexpr int LD = mma_traits<T>::LD;
    return (3 * TILE * LD + NWARP * 16 * LD) * sizeof(T) + NWARP * 16 * LDF * sizeof(float);
}

template <typename T>
__global__ void __launch_bounds__(NWARP * 32)
    attention_forward_kernel(T *out, float *lse, const T *qkv, int Tn, int C, int NH, float scale) {
    constexpr int LD = mma_traits<T>::LD;
    constexpr int K = mma_traits<T>::K;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + TILE * LD;
    T *Vs = Ks + TILE * LD;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Ps = Vs + TILE * LD + warp * 16 * LD;
    float *Sf = reinterpret_cast<float *>(Vs + TILE * LD + NWARP * 16 * LD) + warp * 16 * LDF;

    int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first
    int h = blockIdx.y, b = blockIdx.z;
    int q0 = qt * TILE;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    load_tile(Qs, base, q0, Tn, stride);

    int r = lane >> 1, c0 = (lane & 1) * 32;
    int qi = q0 + warp * 16 + r;
    float o[32];
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        __syncthreads();  // previous K/V tile no longer read
        load_tile(Ks, base + C, k0, Tn, stride);
        load_tile(Vs, base + 2 * C, k0, Tn, stride);
        __syncthreads();

        frag_c<T> acc[4];
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < HS; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Qs + warp * 16 * LD + kk, LD,
                                                              Ks + j * 16 * LD + kk, LD);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();

        float s[32], mx = -INFINITY;
        for (int i = 0; i < 32; i++) {
            int kj = k0 + c0 + i;
            s[i] = (kj <= qi && kj < Tn) ? Sf[r * LDF + c0 + i] * scale : -INFINITY;
            mx = fmaxf(mx, s[i]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mn = fmaxf(m, mx);  // finite: key 0 of tile 0 is never masked
        float alpha = __expf(m - mn);
        float sum = 0.0f;
        for (int i = 0; i < 32; i++) {
            float p = __expf(s[i] - mn);
            sum += p;
            Ps[r * LD + c0 + i] = from_f<T>(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = mn;
        for (int i = 0; i < 32; i++) o[i] *= alpha;
        __syncwarp();

        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::row_major>(acc[j], Ps + kk, LD, Vs + kk * LD + j * 16, LD);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < 32; i++) o[i] += Sf[r * LDF + c0 + i];
        __syncwarp();
    }
    if (qi < Tn) {
        T *orow = out + ((size_t)b * Tn + qi) * C + h * HS + c0;
        float inv = 1.0f / l;
        for (int i = 0; i < 32; i++) orow[i] = from_f<T>(o[i] * inv);
        if (c0 == 0) lse[((size_t)b * NH + h) * Tn + qi] = m + logf(l);
    }
}

// D[b,h,t] = sum_d dO * O, one warp per (row, head).
template <typename T>
__global__ void attention_rowdot_kernel(float *D, const T *dout, const T *out, int B, int Tn, int C, int NH) {
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (w >= (size_t)B * Tn * NH) return;
    int h = (int)(w % NH);
    size_t bt = w / NH;
    const T *d = dout + bt * C + h * HS, *o = out + bt * C + h * HS;
    float acc = to_f(d[lane]) * to_f(o[lane]) + to_f(d[lane + 32]) * to_f(o[lane + 32]);
    acc = warp_sum(acc);
    if (lane == 0) {
        size_t b = bt / Tn, t = bt % Tn;
        D[(b * NH + h) * Tn + t] = acc;
    }
}

template <typename T> static size_t bwd_smem(void) {
    constexpr int LD = mma_traits<T>::LD;
    return (5 * TILE * LD + NWARP * 16 * LD) * sizeof(T) + NWARP * 16 * LDF * sizeof(float) +
           2 * TILE * sizeof(float);
}

template <typename T>
__global__ void __launch_bounds__(NWARP * 32)
    attention_backward_kernel(T *dqkv, float *dq, const T *dout, const T *qkv, const float *lse,
                              const float *D, int Tn, int C, int NH, float scale) {
    constexpr int LD = mma_traits<T>::LD;
    constexpr int K = mma_traits<T>::K;
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Ks = reinterpret_cast<T *>(smem);
    T *Vs = Ks + TILE * LD;
    T *Qs = Vs + TILE * LD;
    T *dOs = Qs + TILE * LD;
    T *dSt = dOs + TILE * LD;  // (64 keys, 64 queries), whole block
    T *Pt = dSt + TILE * LD + warp * 16 * LD;
    float *Sf = reinterpret_cast<float *>(dSt + TILE * LD + NWARP * 16 * LD) + warp * 16 * LDF;
    float *lse_s = reinterpret_cast<float *>(dSt + TILE * LD + NWARP * 16 * LD) + NWARP * 16 * LDF;
    float *D_s = lse_s + TILE;

    int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int k0 = kt * TILE, nq = (Tn + TILE - 1) / TILE;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    const T *dbase = dout + (size_t)b * Tn * C + h * HS;
    const float *lse_b = lse + ((size_t)b * NH + h) * Tn;
    const float *D_b = D + ((size_t)b * NH + h) * Tn;
    load_tile(Ks, base + C, k0, Tn, stride);
    load_tile(Vs, base + 2 * C, k0, Tn, stride);

    frag_c<T> dK[4], dV[4];
    for (int j = 0; j < 4; j++) {
        wmma::fill_fragment(dK[j], 0.0f);
        wmma::fill_fragment(dV[j], 0.0f);
    }
    int r = lane >> 1, c0 = (lane & 1) * 32;
    int kj = k0 + warp * 16 + r;

    for (int qt = kt; qt < nq; qt++) {
        int q0 = qt * TILE;
        __syncthreads();  // Qs, dOs, dSt of the previous tile no longer read
        load_tile(Qs, base, q0, Tn, stride);
        load_tile(dOs, dbase, q0, Tn, (size_t)C);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            bool in = q0 + i < Tn;
            lse_s[i] = in ? lse_b[q0 + i] : 0.0f;
            D_s[i] = in ? D_b[q0 + i] : 0.0f;
        }
        __syncthreads();

        // S^T (16 keys x 64 queries) = K_w Q^T
        frag_c<T> acc[4];
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < HS; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Ks + warp * 16 * LD + kk, LD,
                                                              Qs + j * 16 * LD + kk, LD);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        float p[32];
        for (int i = 0; i < 32; i++) {
            int qi = q0 + c0 + i;
            p[i] = (kj <= qi && qi < Tn) ? __expf(Sf[r * LDF + c0 + i] * scale - lse_s[c0 + i]) : 0.0f;
            Pt[r * LD + c0 + i] = from_f<T>(p[i]);
        }
        __syncwarp();

        // dP^T (16 keys x 64 queries) = V_w dO^T
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < HS; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Vs + warp * 16 * LD + kk, LD,
                                                              dOs + j * 16 * LD + kk, LD);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < 32; i++) {
            float ds = p[i] * (Sf[r * LDF + c0 + i] - D_s[c0 + i]) * scale;
            dSt[(warp * 16 + r) * LD + c0 + i] = from_f<T>(ds);
        }
        __syncwarp();

        // dV_w += P^T dO ; dK_w += dS^T Q   (k runs over the 64 queries)
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < 4; j++) {
                mma_step<T, wmma::row_major, wmma::row_major>(dV[j], Pt + kk, LD, dOs + kk * LD + j * 16, LD);
                mma_step<T, wmma::row_major, wmma::row_major>(dK[j], dSt + warp * 16 * LD + kk, LD,
                                                              Qs + kk * LD + j * 16, LD);
            }
        __syncthreads();  // dSt complete

        // dQ rows w*16.. (16 queries x 64 dims) = dS K ; dS(q, key) = dSt[key][q]
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::col_major, wmma::row_major>(acc[j], dSt + kk * LD + warp * 16, LD,
                                                              Ks + kk * LD + j * 16, LD);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        int qi = q0 + warp * 16 + r;
        if (qi < Tn) {
            float *dst = dq + ((size_t)b * Tn + qi) * C + h * HS + c0;
            const float *src = Sf + r * LDF + c0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            for (int i = 0; i < 32; i += 4)
                atomicAdd(reinterpret_cast<float4 *>(dst + i), make_float4(src[i], src[i + 1], src[i + 2], src[i + 3]));
#else
            for (int i = 0; i < 32; i++) atomicAdd(dst + i, src[i]);
#endif
        }
        __syncwarp();
    }

    // dK, dV of this warp's 16 keys straight into dqkv: no other block owns them.
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < 4; j++)
            wmma::store_matrix_sync(Sf + j * 16, pass ? dV[j] : dK[j], LDF, wmma::mem_row_major);
        __syncwarp();
        if (kj < Tn) {
            T *dst = dqkv + ((size_t)b * Tn + kj) * stride + (pass ? 2 : 1) * C + h * HS + c0;
            for (int i = 0; i < 32; i++) dst[i] = from_f<T>(Sf[r * LDF + c0 + i]);
        }
        __syncwarp();
    }
}

template <typename T>
__global__ void dq_store_kernel(T *dqkv, const float *dq, size_t total, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t row = i / C;
    int c = (int)(i % C);
    dqkv[row * 3 * C + c] = from_f<T>(dq[i]);
}

static int check_shape(int C, int NH, skiff_err *err) {
    if (NH <= 0 || C % NH != 0 || C / NH != HS)
        return skiff_error(err, EINVAL,
                           "CUDA attention needs head size %d (n_embd / n_head), got %d / %d; "
                           "use a model with n_embd = 64 * n_head",
                           HS, C, NH);
    return 0;
}

template <typename T>
int k_attention_forward(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH,
                        cudaStream_t s, skiff_err *err) {
    TRY(check_shape(C, NH, err));
    size_t sm = fwd_smem<T>();
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid(ceil_div(Tn, TILE), NH, B);
    attention_forward_kernel<T><<<grid, NWARP * 32, sm, s>>>(out, lse, qkv, Tn, C, NH, rsqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T>
int k_attention_backward(T *dqkv, float *scratch, const T *dout, const T *qkv, const T *out,
                         const float *lse, int B, int Tn, int C, int NH, cudaStream_t s,
                         skiff_err *err) {
    TRY(check_shape(C, NH, err));
    float *dq = scratch;
    float *D = scratch + (size_t)B * Tn * C;
    CUDA_CHECK(cudaMemsetAsync(dq, 0, (size_t)B * Tn * C * sizeof(float), s));
    size_t rows = (size_t)B * Tn * NH;
    attention_rowdot_kernel<T><<<ceil_div(rows * 32, 256), 256, 0, s>>>(D, dout, out, B, Tn, C, NH);
    CUDA_CHECK_LAUNCH();
    size_t sm = bwd_smem<T>();
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid(ceil_div(Tn, TILE), NH, B);
    attention_backward_kernel<T><<<grid, NWARP * 32, sm, s>>>(dqkv, dq, dout, qkv, lse, D, Tn, C, NH,
                                                              rsqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    size_t total = (size_t)B * Tn * C;
    dq_store_kernel<T><<<ceil_div(total, 256), 256, 0, s>>>(dqkv, dq, total, C);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#define INSTANTIATE(T)                                                                        \
    template int k_attention_forward<T>(T *, float *, const T *, int, int, int, int,           \
                                        cudaStream_t, skiff_err *);                           \
    template int k_attention_backward<T>(T *, float *, const T *, const T *, const T *,        \
                                         const float *, int, int, int, int, cudaStream_t,      \
                                         skiff_err *);
INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(fp16)
