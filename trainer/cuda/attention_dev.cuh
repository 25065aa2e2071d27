#ifndef SKIFF_CUDA_ATTENTION_DEV_CUH
#define SKIFF_CUDA_ATTENTION_DEV_CUH
// Device code of attention.cu (kernels only, no launchers: tests/gpu/emu also
// compiles it for the CPU).
//
// Causal self-attention in FlashAttention-2's structure, on mma.sync tensor
// cores (mma_dev.cuh): bf16/fp16 m16n8k16, TF32 m16n8k8 for fp32 storage.
// Nothing T x T is stored; the forward keeps only the per-row log-sum-exp.
//
// Layout: qkv is (B, T, 3C) as the qkv matmul writes it: head h of q at
// columns [h*HS, h*HS+HS), of k at C + h*HS, of v at 2C + h*HS, so no permute
// kernels are needed; out and dq are (B, T, C)-strided the same way.
//
// Every kernel: 4 warps, each owning 16 rows of the block's 64-row tile. The
// scores of a warp's rows live in mma accumulator registers; a thread holds
// two rows (g and g+8 of its warp, g = lane/4), so row max and row sum take
// two shuffles inside the lane quad. The probabilities (and dS) go from the
// accumulators straight into the A operand of the next mma (a_from_c): no
// score tile ever passes through shared memory. K/V (or Q/dO) tiles are
// double buffered with cp.async: the next tile loads while this one is used.
// Shared rows are padded (mma_ops<T>::PAD) so ldmatrix and the TF32 loads
// are free of bank conflicts. Results are staged through the warp's own rows
// of shared memory and written with 16-byte stores.
//
// Forward: block = (64-query tile, head, batch), loops over key tiles 0..qt.
// Backward, deterministic without atomics or partial buffers:
//  - dK/dV: block = (64-key tile, head, batch), loops over the query tiles at
//    and after the diagonal; recomputes P^T and dS^T; dK, dV accumulate in
//    registers and are written once.
//  - dQ: block = (64-query tile, head, batch), loops over key tiles 0..qt;
//    recomputes P and dS; dQ accumulates in fp32 registers and is written
//    once, as T, into dqkv. This costs three more small matmuls per tile pair
//    than FA2's single pass, but the FA2 pass needs either float atomics on
//    dQ (not reproducible, and save -> resume must be bit-identical) or
//    per-key-tile partials (3.2 GB at d12, B=64, T=1024, and ~41 GB of
//    traffic per step to reduce them).
// Both need D = rowsum(dO * O) first (attention_rowdot_kernel).
#include "mma_dev.cuh"

#define ATT_ROWS 64 // rows of a block's tile: 4 warps x 16
#define ATT_WARPS 4

template <typename T, int HS> struct att_cfg {
    static constexpr int LD = HS + mma_ops<T>::PAD; // shared row stride, elements
    static constexpr int KS = mma_ops<T>::KS;
    static constexpr int NO = HS / 8; // accumulator tiles across the head
    // Width of the inner tile the backward kernels loop over: 64, or 32 for
    // HS = 128 so the accumulators fit in registers without spilling.
    static constexpr int W = HS > 64 ? 32 : 64;
    // Minimum-blocks hints for ptxas (0 = none: what ptxas picks by itself).
    // The fp32 (TF32) dK/dV kernel for HS = 32, left alone, is capped at 128
    // registers and spills 24 bytes; 2 lifts the cap (152 registers, no
    // spill). The hot 16-bit HS = 64 one takes 172 registers by itself, so
    // only 2 blocks (8 warps) fit an SM; 3 caps it at 168 with no spill
    // (ptxas, sm_90), and 3 blocks fit (registers and shared memory).
    static constexpr int DKDV_MIN_BLOCKS = sizeof(T) == 4 && HS == 32 ? 2 : sizeof(T) == 2 && HS == 64 ? 3 : 0;
    static size_t fwd_smem() { return (size_t)5 * ATT_ROWS * LD * sizeof(T); }
    static size_t dkdv_smem() { return (size_t)(2 * ATT_ROWS + 4 * W) * LD * sizeof(T) + 4 * W * sizeof(float); }
    static size_t dq_smem() { return (size_t)(2 * ATT_ROWS + 4 * W) * LD * sizeof(T); }
};

// Queues cp.async copies of rows [t0, t0+rows) of one head (HS elements, row
// stride `stride`) into dst (row stride ld); rows past Tn become zeros.
template <typename T, int HS>
__device__ __forceinline__ void att_load_rows(T *dst, int ld, const T *src, size_t stride, int t0, int rows, int Tn)
{
    constexpr int VEC = 16 / sizeof(T), PER = HS / VEC;
    for (int i = threadIdx.x; i < rows * PER; i += blockDim.x) {
        int r = i / PER, c = (i % PER) * VEC;
        bool ok = t0 + r < Tn;
        cp_async16(dst + r * ld + c, src + (size_t)(ok ? t0 + r : 0) * stride + c, ok);
    }
}

// Writes this warp's 16 rows x HS accumulator (acc[NO][4], times rs[0] for
// row g and rs[1] for row g+8) to global rows [r0, r0+16) through the warp's
// own 16 rows of shared memory `stage`, 16 bytes per store.
template <typename T, int HS>
__device__ __forceinline__ void att_store_rows(T *dst, size_t stride, int r0, int Tn, T *stage, const float (*acc)[4],
                                               const float rs[2])
{
    constexpr int LD = att_cfg<T, HS>::LD, NO = HS / 8, VEC = 16 / sizeof(T), PER = HS / VEC;
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < NO; j++)
        for (int i = 0; i < 4; i++)
            stage[(g + (i >> 1) * 8) * LD + 8 * j + 2 * t + (i & 1)] = from_f<T>(acc[j][i] * rs[i >> 1]);
    __syncwarp();
    for (int i = lane; i < 16 * PER; i += 32) {
        int r = i / PER, c = (i % PER) * VEC;
        if (r0 + r < Tn)
            *reinterpret_cast<int4 *>(dst + (size_t)(r0 + r) * stride + c) =
                *reinterpret_cast<const int4 *>(stage + r * LD + c);
    }
}

// The dK/dV passes' query tile qt of width W into buffer buf: Q and dO rows
// (cp.async), and per row lse * lse_mul and D (0 past the sequence end).
template <typename T, int HS>
__device__ __forceinline__ void att_load_q_tile(T *Qs, T *dOs, float *Ls, float *Ds, int ld, int W, int qt, int buf,
                                                const T *qbase, size_t stride, const T *dbase, int C,
                                                const float *lse_b, const float *D_b, float lse_mul, int Tn)
{
    att_load_rows<T, HS>(Qs + buf * W * ld, ld, qbase, stride, qt * W, W, Tn);
    att_load_rows<T, HS>(dOs + buf * W * ld, ld, dbase, (size_t)C, qt * W, W, Tn);
    for (int i = threadIdx.x; i < W; i += blockDim.x) {
        bool in = qt * W + i < Tn;
        Ls[buf * W + i] = in ? lse_b[qt * W + i] * lse_mul : 0.0f;
        Ds[buf * W + i] = in ? D_b[qt * W + i] : 0.0f;
    }
}

// Quad (4 lanes sharing g) reductions.
__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// acc (16 rows x 8*NT) = A rows [ar, ar+16) of `as` times B^T where B rows
// [0, 8*NT) of `bs` are the n dimension, k over HS (S = Q K^T and friends).
template <typename T, int HS, int NT>
__device__ __forceinline__ void att_mma_nt(float (*acc)[4], const T *as, int ar, const T *bs)
{
    using M = mma_ops<T>;
    constexpr int LD = att_cfg<T, HS>::LD;
    for (int j = 0; j < NT; j++)
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    for (int kk = 0; kk < HS; kk += M::KS) {
        uint32_t a[4];
        M::load_a(a, as, LD, ar, kk);
        for (int j = 0; j < NT; j += 2) {
            uint32_t b[2][2];
            M::load_b_nt(b, bs, LD, 8 * j, kk);
            M::mma(acc[j], a, b[0]);
            M::mma(acc[j + 1], a, b[1]);
        }
    }
}

// acc (16 x HS) += P (16 x 8*NT, in accumulator registers) times rows
// [0, 8*NT) of `bs` (k) across HS columns (n): O += P V, dQ += dS K, ...
template <typename T, int HS, int NT>
__device__ __forceinline__ void att_mma_pn(float (*acc)[4], const float (*p)[4], const T *bs)
{
    using M = mma_ops<T>;
    constexpr int LD = att_cfg<T, HS>::LD, TPK = M::KS / 8; // accumulator tiles per k step
    for (int kk = 0; kk < 8 * NT; kk += M::KS) {
        uint32_t a[4];
        M::a_from_c(a, p[kk / 8], p[kk / 8 + TPK - 1]);
        for (int j = 0; j < HS / 8; j += 2) {
            uint32_t b[2][2];
            M::load_b_nn(b, bs, LD, kk, 8 * j);
            M::mma(acc[j], a, b[0]);
            M::mma(acc[j + 1], a, b[1]);
        }
    }
}

template <typename T, int HS>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_forward_kernel(T *out, float *lse, const T *qkv, int Tn, int C, int NH, float scale)
{
    typedef att_cfg<T, HS> cfg;
    constexpr int LD = cfg::LD, NO = cfg::NO;
    DYN_SMEM(smem);
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + ATT_ROWS * LD;     // [2][64][LD]
    T *Vs = Ks + 2 * ATT_ROWS * LD; // [2][64][LD]
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int qt = gridDim.x - 1 - blockIdx.x; // longest rows first
    int h = blockIdx.y, b = blockIdx.z, q0 = qt * ATT_ROWS;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    att_load_rows<T, HS>(Qs, LD, base, stride, q0, ATT_ROWS, Tn);
    att_load_rows<T, HS>(Ks, LD, base + C, stride, 0, ATT_ROWS, Tn);
    att_load_rows<T, HS>(Vs, LD, base + 2 * C, stride, 0, ATT_ROWS, Tn);
    cp_async_commit();

    float o[NO][4], s[8][4];
    for (int j = 0; j < NO; j++)
        for (int i = 0; i < 4; i++) o[j][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    for (int kt = 0; kt <= qt; kt++) {
        int cur = kt & 1, k0 = kt * ATT_ROWS;
        if (kt < qt) { // the buffer being filled was last read before the barrier ending kt-1
            att_load_rows<T, HS>(Ks + (cur ^ 1) * ATT_ROWS * LD, LD, base + C, stride, k0 + ATT_ROWS, ATT_ROWS, Tn);
            att_load_rows<T, HS>(Vs + (cur ^ 1) * ATT_ROWS * LD, LD, base + 2 * C, stride, k0 + ATT_ROWS, ATT_ROWS, Tn);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Kc = Ks + cur * ATT_ROWS * LD, *Vc = Vs + cur * ATT_ROWS * LD;
        att_mma_nt<T, HS, 8>(s, Qs, warp * 16, Kc);

        bool mask = kt == qt || k0 + ATT_ROWS > Tn;
        float mx[2] = {-INFINITY, -INFINITY};
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 4; i++) {
                int key = k0 + 8 * j + 2 * t + (i & 1);
                float v = s[j][i] * scale;
                if (mask && (key > row[i >> 1] || key >= Tn)) v = -INFINITY;
                s[j][i] = v;
                mx[i >> 1] = fmaxf(mx[i >> 1], v);
            }
        float alpha[2];
        for (int r = 0; r < 2; r++) {
            float mn = fmaxf(m[r], quad_max(mx[r])); // finite: key k0 <= row is never masked
            alpha[r] = __expf(m[r] - mn);
            m[r] = mn;
            l[r] *= alpha[r];
        }
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 4; i++) {
                float p = __expf(s[j][i] - m[i >> 1]);
                s[j][i] = p;
                l[i >> 1] += p; // per-thread part; the quad's parts are added at the end
            }
        for (int j = 0; j < NO; j++)
            for (int i = 0; i < 4; i++) o[j][i] *= alpha[i >> 1];
        att_mma_pn<T, HS, 8>(o, s, Vc);
        __syncthreads(); // K/V buffer `cur` is free for the prefetch of kt+2
    }
    float inv[2];
    for (int r = 0; r < 2; r++) {
        l[r] = quad_sum(l[r]);
        inv[r] = 1.0f / l[r];
        if (t == 0 && row[r] < Tn) lse[((size_t)b * NH + h) * Tn + row[r]] = m[r] + logf(l[r]);
    }
    // Each warp read only its own 16 rows of Qs: stage the output there.
    att_store_rows<T, HS>(out + (size_t)b * Tn * C + h * HS, (size_t)C, q0 + warp * 16, Tn, Qs + warp * 16 * LD, o,
                          inv);
}

// D[b,h,t] = sum_d dO * O: a group of HS/VEC lanes per (row, head), 16-byte loads.
template <typename T, int HS>
__global__ void attention_rowdot_kernel(float *D, const T *dout, const T *out, int B, int Tn, int C, int NH)
{
    constexpr int VEC = 16 / sizeof(T), G = HS / VEC; // lanes per (row, head), a power of 2 <= 32
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t w = i / G;
    int sub = (int)(i % G);
    bool ok = w < (size_t)B * Tn * NH;
    float acc = 0.0f;
    if (ok) {
        int h = (int)(w % NH);
        size_t bt = w / NH;
        int4 dv = *reinterpret_cast<const int4 *>(dout + bt * C + h * HS + sub * VEC);
        int4 ov = *reinterpret_cast<const int4 *>(out + bt * C + h * HS + sub * VEC);
        const T *d = reinterpret_cast<const T *>(&dv), *o = reinterpret_cast<const T *>(&ov);
        for (int k = 0; k < VEC; k++) acc += to_f(d[k]) * to_f(o[k]);
    }
    for (int off = G / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (ok && sub == 0) {
        int h = (int)(w % NH);
        size_t bt = w / NH, b = bt / Tn, tt = bt % Tn;
        D[(b * NH + h) * Tn + tt] = acc;
    }
}

// dK, dV for one 64-key tile: loops over query tiles (width W) from the
// diagonal to the end. Warp w owns keys w*16..w*16+15 and computes S^T =
// K Q^T for them, so P^T and dS^T are in its registers as A operands of
// dV += P^T dO and dK += dS^T Q.
template <typename T, int HS>
__global__ void __launch_bounds__(ATT_WARPS * 32, att_cfg<T, HS>::DKDV_MIN_BLOCKS)
    attention_dkdv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *D, int Tn, int C, int NH,
                          float scale)
{
    typedef att_cfg<T, HS> cfg;
    constexpr int LD = cfg::LD, NO = cfg::NO, W = cfg::W, NT = W / 8;
    DYN_SMEM(smem);
    T *Ks = reinterpret_cast<T *>(smem);
    T *Vs = Ks + ATT_ROWS * LD;
    T *Qs = Vs + ATT_ROWS * LD;                              // [2][W][LD]
    T *dOs = Qs + 2 * W * LD;                                // [2][W][LD]
    float *Ls = reinterpret_cast<float *>(dOs + 2 * W * LD); // [2][W] lse
    float *Ds = Ls + 2 * W;                                  // [2][W] D
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z; // small kt = most work: first
    int k0 = kt * ATT_ROWS, nq = (Tn + W - 1) / W, qfirst = k0 / W;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    const T *dbase = dout + (size_t)b * Tn * C + h * HS;
    const float *lse_b = lse + ((size_t)b * NH + h) * Tn, *D_b = D + ((size_t)b * NH + h) * Tn;
    att_load_rows<T, HS>(Ks, LD, base + C, stride, k0, ATT_ROWS, Tn);
    att_load_rows<T, HS>(Vs, LD, base + 2 * C, stride, k0, ATT_ROWS, Tn);
    auto load_q = [&](int qt, int buf) {
        att_load_q_tile<T, HS>(Qs, dOs, Ls, Ds, LD, W, qt, buf, base, stride, dbase, C, lse_b, D_b, 1.0f, Tn);
    };
    load_q(qfirst, 0);
    cp_async_commit();

    float dk[NO][4], dv[NO][4], p[NT][4], ds[NT][4];
    for (int j = 0; j < NO; j++)
        for (int i = 0; i < 4; i++) dk[j][i] = dv[j][i] = 0.0f;
    int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

    for (int qt = qfirst; qt < nq; qt++) {
        int cur = (qt - qfirst) & 1, q0 = qt * W;
        if (qt + 1 < nq) {
            load_q(qt + 1, cur ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Qc = Qs + cur * W * LD, *dOc = dOs + cur * W * LD;
        const float *Lc = Ls + cur * W, *Dc = Ds + cur * W;
        att_mma_nt<T, HS, NT>(p, Ks, warp * 16, Qc);   // S^T
        att_mma_nt<T, HS, NT>(ds, Vs, warp * 16, dOc); // dP^T
        bool mask = q0 < k0 + ATT_ROWS || q0 + W > Tn;
        for (int j = 0; j < NT; j++)
            for (int i = 0; i < 4; i++) {
                int qc = 8 * j + 2 * t + (i & 1), q = q0 + qc;
                float pv = __expf(p[j][i] * scale - Lc[qc]);
                if (mask && (q < key[i >> 1] || q >= Tn)) pv = 0.0f;
                p[j][i] = pv;
                // d(loss)/d(q.k) with the softmax scale folded in
                ds[j][i] = pv * (ds[j][i] - Dc[qc]) * scale;
            }
        att_mma_pn<T, HS, NT>(dv, p, dOc); // dV += P^T dO
        att_mma_pn<T, HS, NT>(dk, ds, Qc); // dK += dS^T Q
        __syncthreads();
    }
    // Each warp read only its own 16 rows of Ks and Vs: stage there.
    float one[2] = {1.0f, 1.0f};
    T *drow = dqkv + (size_t)b * Tn * stride + h * HS;
    att_store_rows<T, HS>(drow + C, stride, k0 + warp * 16, Tn, Ks + warp * 16 * LD, dk, one);
    att_store_rows<T, HS>(drow + 2 * C, stride, k0 + warp * 16, Tn, Vs + warp * 16 * LD, dv, one);
}

// dQ for one 64-query tile: loops over key tiles (width W) up to the
// diagonal, recomputing P and dS; dQ += dS K stays in registers.
template <typename T, int HS>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_dq_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *D, int Tn, int C, int NH,
                        float scale)
{
    typedef att_cfg<T, HS> cfg;
    constexpr int LD = cfg::LD, NO = cfg::NO, W = cfg::W, NT = W / 8;
    DYN_SMEM(smem);
    T *Qs = reinterpret_cast<T *>(smem);
    T *dOs = Qs + ATT_ROWS * LD;
    T *Ks = dOs + ATT_ROWS * LD; // [2][W][LD]
    T *Vs = Ks + 2 * W * LD;     // [2][W][LD]
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int qt = gridDim.x - 1 - blockIdx.x; // longest rows first
    int h = blockIdx.y, b = blockIdx.z, q0 = qt * ATT_ROWS;
    int nk = (q0 + ATT_ROWS < Tn ? q0 + ATT_ROWS : Tn);
    nk = (nk + W - 1) / W;
    size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * Tn * stride + h * HS;
    const T *dbase = dout + (size_t)b * Tn * C + h * HS;
    att_load_rows<T, HS>(Qs, LD, base, stride, q0, ATT_ROWS, Tn);
    att_load_rows<T, HS>(dOs, LD, dbase, (size_t)C, q0, ATT_ROWS, Tn);
    att_load_rows<T, HS>(Ks, LD, base + C, stride, 0, W, Tn);
    att_load_rows<T, HS>(Vs, LD, base + 2 * C, stride, 0, W, Tn);
    cp_async_commit();

    int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float L[2], Dr[2];
    for (int r = 0; r < 2; r++) {
        bool in = row[r] < Tn;
        L[r] = in ? lse[((size_t)b * NH + h) * Tn + row[r]] : 0.0f;
        Dr[r] = in ? D[((size_t)b * NH + h) * Tn + row[r]] : 0.0f;
    }
    float dq[NO][4], p[NT][4], ds[NT][4];
    for (int j = 0; j < NO; j++)
        for (int i = 0; i < 4; i++) dq[j][i] = 0.0f;

    for (int kt = 0; kt < nk; kt++) {
        int cur = kt & 1, k0 = kt * W;
        if (kt + 1 < nk) {
            att_load_rows<T, HS>(Ks + (cur ^ 1) * W * LD, LD, base + C, stride, k0 + W, W, Tn);
            att_load_rows<T, HS>(Vs + (cur ^ 1) * W * LD, LD, base + 2 * C, stride, k0 + W, W, Tn);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Kc = Ks + cur * W * LD, *Vc = Vs + cur * W * LD;
        att_mma_nt<T, HS, NT>(p, Qs, warp * 16, Kc);   // S
        att_mma_nt<T, HS, NT>(ds, dOs, warp * 16, Vc); // dP
        bool mask = k0 + W > q0 || k0 + W > Tn;
        for (int j = 0; j < NT; j++)
            for (int i = 0; i < 4; i++) {
                int r = i >> 1, k = k0 + 8 * j + 2 * t + (i & 1);
                float pv = __expf(p[j][i] * scale - L[r]);
                if (mask && (k > row[r] || k >= Tn)) pv = 0.0f;
                ds[j][i] = pv * (ds[j][i] - Dr[r]) * scale;
            }
        att_mma_pn<T, HS, NT>(dq, ds, Kc); // dQ += dS K
        __syncthreads();
    }
    float one[2] = {1.0f, 1.0f};
    att_store_rows<T, HS>(dqkv + (size_t)b * Tn * stride + h * HS, stride, q0 + warp * 16, Tn, Qs + warp * 16 * LD, dq,
                          one);
}

#endif
