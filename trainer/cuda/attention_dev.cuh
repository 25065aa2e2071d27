#ifndef SKIFF_CUDA_ATTENTION_DEV_CUH
#define SKIFF_CUDA_ATTENTION_DEV_CUH
// Device code of attention.cu (kernels only, no launchers: tests/gpu/emu also
// compiles it for the CPU).
//
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
// per-key-tile fp32 partials that a second kernel sums in a fixed order (no
// atomics: several key tiles contribute to one query, and the sum must be
// bit-reproducible for save/resume).
#ifndef SKIFF_CUDA_EMU
#include <mma.h>
#endif

#include "common.cuh"

using namespace nvcuda;

#define TILE 64   // queries / keys per tile
#define NWARP 4   // 4 warps x 16 rows = 64

// Row strides in shared memory, padded against bank conflicts (WMMA wants a
// multiple of 8 elements for 16-bit types, 4 for fp32, and 32-byte aligned
// fragment pointers, which 16-row and K-column offsets then keep):
//   LDH for the (64, HS) tiles of Q, K, V, dO; LDS for the (64 x 64) score
//   tiles P, P^T, dS^T; LDF for the fp32 scratch each warp stores fragments to.
template <typename T> struct mma_traits {
    typedef T in;
    static constexpr int K = 16;
    static constexpr int PAD = 8;
};
template <> struct mma_traits<float> {
    typedef wmma::precision::tf32 in;
    static constexpr int K = 8;
    static constexpr int PAD = 4;
};
#define LDH (HS + mma_traits<T>::PAD)
#define LDS (TILE + mma_traits<T>::PAD)
#define LDF ((HS > TILE ? HS : TILE) + 4)

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


// Copies rows [t0, t0+64) of one head (HS elements each, row stride `stride`
// elements) into shared memory with 16-byte vectors; rows past Tn become zero.
template <typename T, int HS>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int t0, int Tn, size_t stride) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int PER_ROW = HS / VEC;
    for (int i = threadIdx.x; i < TILE * PER_ROW; i += blockDim.x) {
        int r = i / PER_ROW, c = (i % PER_ROW) * VEC;
        int4 v = make_int4(0, 0, 0, 0);
        if (t0 + r < Tn) v = *reinterpret_cast<const int4 *>(src + (size_t)(t0 + r) * stride + c);
        *reinterpret_cast<int4 *>(dst + r * LDH + c) = v;
    }
}

template <typename T, int HS> static size_t fwd_smem(void) {
    return (3 * TILE * LDH + NWARP * 16 * LDS) * sizeof(T) + NWARP * 16 * LDF * sizeof(float);
}

template <typename T, int HS>
__global__ void __launch_bounds__(NWARP * 32)
    attention_forward_kernel(T *out, float *lse, const T *qkv, int Tn, int C, int NH, float scale) {
    constexpr int K = mma_traits<T>::K;
    constexpr int NF = HS / 16;  // fragments across the head dimension
    constexpr int HALF = HS / 2; // output columns per lane
    DYN_SMEM(smem);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + TILE * LDH;
    T *Vs = Ks + TILE * LDH;
    T *Ps = Vs + TILE * LDH + warp * 16 * LDS;
    float *Sf = reinterpret_cast<float *>(Vs + TILE * LDH + NWARP * 16 * LDS) + warp * 16 * LDF;

    int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first
    int h = blockIdx.y, b = blockIdx.z;
    int q0 = qt * TILE;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    load_tile<T, HS>(Qs, base, q0, Tn, stride);

    // Lane owns query row r of its warp: score columns [s0, s0+32), output
    // columns [o0, o0+HALF).
    int r = lane >> 1, s0 = (lane & 1) * 32, o0 = (lane & 1) * HALF;
    int qi = q0 + warp * 16 + r;
    float o[HALF];
    for (int i = 0; i < HALF; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        __syncthreads();  // previous K/V tile no longer read
        load_tile<T, HS>(Ks, base + C, k0, Tn, stride);
        load_tile<T, HS>(Vs, base + 2 * C, k0, Tn, stride);
        __syncthreads();

        frag_c<T> acc[4];
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < HS; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Qs + warp * 16 * LDH + kk, LDH,
                                                              Ks + j * 16 * LDH + kk, LDH);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();

        float s[32], mx = -INFINITY;
        for (int i = 0; i < 32; i++) {
            int kj = k0 + s0 + i;
            s[i] = (kj <= qi && kj < Tn) ? Sf[r * LDF + s0 + i] * scale : -INFINITY;
            mx = fmaxf(mx, s[i]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mn = fmaxf(m, mx);  // finite: key 0 of tile 0 is never masked
        float alpha = __expf(m - mn);
        float sum = 0.0f;
        for (int i = 0; i < 32; i++) {
            float p = __expf(s[i] - mn);
            sum += p;
            Ps[r * LDS + s0 + i] = from_f<T>(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = mn;
        for (int i = 0; i < HALF; i++) o[i] *= alpha;
        __syncwarp();

        frag_c<T> pv[NF];
        for (int j = 0; j < NF; j++) wmma::fill_fragment(pv[j], 0.0f);
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < NF; j++)
                mma_step<T, wmma::row_major, wmma::row_major>(pv[j], Ps + kk, LDS, Vs + kk * LDH + j * 16, LDH);
        for (int j = 0; j < NF; j++) wmma::store_matrix_sync(Sf + j * 16, pv[j], LDF, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < HALF; i++) o[i] += Sf[r * LDF + o0 + i];
        __syncwarp();
    }
    if (qi < Tn) {
        T *orow = out + ((size_t)b * Tn + qi) * C + h * HS + o0;
        float inv = 1.0f / l;
        for (int i = 0; i < HALF; i++) orow[i] = from_f<T>(o[i] * inv);
        if (o0 == 0) lse[((size_t)b * NH + h) * Tn + qi] = m + logf(l);
    }
}

// D[b,h,t] = sum_d dO * O, one warp per (row, head).
template <typename T>
__global__ void attention_rowdot_kernel(float *D, const T *dout, const T *out, int B, int Tn, int C,
                                        int NH) {
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (w >= (size_t)B * Tn * NH) return;
    int HS = C / NH;
    int h = (int)(w % NH);
    size_t bt = w / NH;
    const T *d = dout + bt * C + h * HS, *o = out + bt * C + h * HS;
    float acc = 0.0f;
    for (int i = lane; i < HS; i += 32) acc += to_f(d[i]) * to_f(o[i]);
    acc = warp_sum(acc);
    if (lane == 0) {
        size_t b = bt / Tn, t = bt % Tn;
        D[(b * NH + h) * Tn + t] = acc;
    }
}

template <typename T, int HS> static size_t bwd_smem(void) {
    return (4 * TILE * LDH + TILE * LDS + NWARP * 16 * LDS) * sizeof(T) +
           NWARP * 16 * LDF * sizeof(float) + 2 * TILE * sizeof(float);
}

template <typename T, int HS>
__global__ void __launch_bounds__(NWARP * 32)
    attention_backward_kernel(T *dqkv, float *dq, const T *dout, const T *qkv, const float *lse,
                              const float *D, int Tn, int C, int NH, float scale) {
    constexpr int K = mma_traits<T>::K;
    constexpr int NF = HS / 16;
    constexpr int HALF = HS / 2;
    DYN_SMEM(smem);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Ks = reinterpret_cast<T *>(smem);
    T *Vs = Ks + TILE * LDH;
    T *Qs = Vs + TILE * LDH;
    T *dOs = Qs + TILE * LDH;
    T *dSt = dOs + TILE * LDH;  // (64 keys, 64 queries), shared by the block
    T *Pt = dSt + TILE * LDS + warp * 16 * LDS;
    float *fbase = reinterpret_cast<float *>(dSt + TILE * LDS + NWARP * 16 * LDS);
    float *Sf = fbase + warp * 16 * LDF;
    float *lse_s = fbase + NWARP * 16 * LDF;
    float *D_s = lse_s + TILE;

    int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;  // small kt = most work: first
    int k0 = kt * TILE, nq = (Tn + TILE - 1) / TILE;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    const T *dbase = dout + (size_t)b * Tn * C + h * HS;
    const float *lse_b = lse + ((size_t)b * NH + h) * Tn;
    const float *D_b = D + ((size_t)b * NH + h) * Tn;
    load_tile<T, HS>(Ks, base + C, k0, Tn, stride);
    load_tile<T, HS>(Vs, base + 2 * C, k0, Tn, stride);

    frag_c<T> dK[NF], dV[NF];
    for (int j = 0; j < NF; j++) {
        wmma::fill_fragment(dK[j], 0.0f);
        wmma::fill_fragment(dV[j], 0.0f);
    }
    // Lane owns key row r of its warp: score columns [s0, s0+32) (queries),
    // head columns [o0, o0+HALF).
    int r = lane >> 1, s0 = (lane & 1) * 32, o0 = (lane & 1) * HALF;
    int kj = k0 + warp * 16 + r;

    for (int qt = kt; qt < nq; qt++) {
        int q0 = qt * TILE;
        __syncthreads();  // Qs, dOs, dSt of the previous tile no longer read
        load_tile<T, HS>(Qs, base, q0, Tn, stride);
        load_tile<T, HS>(dOs, dbase, q0, Tn, (size_t)C);
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
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Ks + warp * 16 * LDH + kk, LDH,
                                                              Qs + j * 16 * LDH + kk, LDH);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        float p[32];
        for (int i = 0; i < 32; i++) {
            int qi = q0 + s0 + i;
            p[i] = (kj <= qi && qi < Tn) ? __expf(Sf[r * LDF + s0 + i] * scale - lse_s[s0 + i]) : 0.0f;
            Pt[r * LDS + s0 + i] = from_f<T>(p[i]);
        }
        __syncwarp();

        // dP^T (16 keys x 64 queries) = V_w dO^T
        for (int j = 0; j < 4; j++) wmma::fill_fragment(acc[j], 0.0f);
        for (int kk = 0; kk < HS; kk += K)
            for (int j = 0; j < 4; j++)
                mma_step<T, wmma::row_major, wmma::col_major>(acc[j], Vs + warp * 16 * LDH + kk, LDH,
                                                              dOs + j * 16 * LDH + kk, LDH);
        for (int j = 0; j < 4; j++) wmma::store_matrix_sync(Sf + j * 16, acc[j], LDF, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < 32; i++) {
            // d(loss)/d(q.k) with the softmax scale folded in: dQ = dS K, dK = dS^T Q.
            float ds = p[i] * (Sf[r * LDF + s0 + i] - D_s[s0 + i]) * scale;
            dSt[(warp * 16 + r) * LDS + s0 + i] = from_f<T>(ds);
        }
        __syncwarp();

        // dV_w += P^T dO ; dK_w += dS^T Q   (k runs over the 64 queries)
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < NF; j++) {
                mma_step<T, wmma::row_major, wmma::row_major>(dV[j], Pt + kk, LDS, dOs + kk * LDH + j * 16, LDH);
                mma_step<T, wmma::row_major, wmma::row_major>(dK[j], dSt + warp * 16 * LDS + kk, LDS,
                                                              Qs + kk * LDH + j * 16, LDH);
            }
        __syncthreads();  // dSt complete

        // dQ rows w*16.. (16 queries x HS) = dS K, reading dS(q, key) = dSt[key][q]
        frag_c<T> dq_f[NF];
        for (int j = 0; j < NF; j++) wmma::fill_fragment(dq_f[j], 0.0f);
        for (int kk = 0; kk < TILE; kk += K)
            for (int j = 0; j < NF; j++)
                mma_step<T, wmma::col_major, wmma::row_major>(dq_f[j], dSt + kk * LDS + warp * 16, LDS,
                                                              Ks + kk * LDH + j * 16, LDH);
        for (int j = 0; j < NF; j++) wmma::store_matrix_sync(Sf + j * 16, dq_f[j], LDF, wmma::mem_row_major);
        __syncwarp();
        // This block's contribution to dQ goes to its own partial slice (key
        // tile kt); dq_reduce_kernel adds the slices in order: no atomics, so
        // the backward pass is bit-reproducible.
        int qi = q0 + warp * 16 + r;
        if (qi < Tn) {
            float *dst = dq + (size_t)kt * gridDim.z * Tn * C + ((size_t)b * Tn + qi) * C + h * HS + o0;
            const float *src = Sf + r * LDF + o0;
            for (int i = 0; i < HALF; i += 4)
                *reinterpret_cast<float4 *>(dst + i) = make_float4(src[i], src[i + 1], src[i + 2], src[i + 3]);
        }
        __syncwarp();
    }

    // dK, dV of this warp's 16 keys go straight to dqkv: no other block owns them.
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < NF; j++)
            wmma::store_matrix_sync(Sf + j * 16, pass ? dV[j] : dK[j], LDF, wmma::mem_row_major);
        __syncwarp();
        if (kj < Tn) {
            T *dst = dqkv + ((size_t)b * Tn + kj) * stride + (pass ? 2 : 1) * C + h * HS + o0;
            for (int i = 0; i < HALF; i++) dst[i] = from_f<T>(Sf[r * LDF + o0 + i]);
        }
        __syncwarp();
    }
}

// dQ[b,t] = sum over key tiles kt <= t/64 of the partials, in order.
template <typename T>
__global__ void dq_reduce_kernel(T *dqkv, const float *dq, size_t total, int Tn, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t row = i / C;
    int c = (int)(i % C);
    int t = (int)(row % Tn);
    float acc = 0.0f;
    for (int kt = 0; kt <= t / TILE; kt++) acc += dq[(size_t)kt * total + i];
    dqkv[row * 3 * C + c] = from_f<T>(acc);
}

#endif
