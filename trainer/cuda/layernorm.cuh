// Residual add + LayerNorm forward (fused, one warp per row) and the
// LayerNorm backward in one pass with deterministic dw/db. Kernels and
// launchers; N rows of C channels.
#ifndef SKIFF_CUDA_LAYERNORM_CUH
#define SKIFF_CUDA_LAYERNORM_CUH

#include "common.cuh"
#include "colsum.cuh"

#include <type_traits>

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

// ---------------------------------------------------------------- launchers

// Calls f(std::integral_constant<int, NV>) for the runtime nv in 1..MAX, so a
// kernel templated on the vectors per lane can be picked at launch.
template <int MAX> struct nv_dispatch {
    template <class F> static void run(int nv, F f)
    {
        if (nv == MAX)
            f(std::integral_constant<int, MAX>());
        else
            nv_dispatch<MAX - 1>::run(nv, f);
    }
};
template <> struct nv_dispatch<0> {
    template <class F> static void run(int, F) {}
};

// Vectors per lane for a warp-per-row kernel over C, or 0 when the row is
// wider than LN_MAX_PER_LANE floats per lane.
template <typename T> static int row_nv(int C)
{
    int v = vec16<T>::N, nv = (C / v + 31) / 32;
    return C % v == 0 && nv * v <= LN_MAX_PER_LANE ? nv : 0;
}

// res_out = a + b (skipped when b is NULL: then a is the residual), ln_out =
// LayerNorm(res_out) * w + bias; mean/rstd (N) kept for the backward pass.
template <typename T>
int k_residual_layernorm_forward(T *res_out, T *ln_out, float *mean, float *rstd, const T *a, const T *b, const T *w,
                                 const T *bias, int N, int C, cudaStream_t s, skiff_err *err)
{
    int nv = row_nv<T>(C);
    if (nv) {
        nv_dispatch<LN_MAX_PER_LANE / 4>::run(nv, [&](auto k) {
            constexpr int NV = decltype(k)::value;
            if constexpr (NV * vec16<T>::N <= LN_MAX_PER_LANE)
                LAUNCH((residual_layernorm_forward_vec_kernel<T, NV>), ceil_div(N, 8), 256, 0, s, res_out, ln_out, mean,
                       rstd, a, b, w, bias, N, C);
        });
    } else {
        LAUNCH((residual_layernorm_forward_kernel<T>), ceil_div(N, 8), 256, 0, s, res_out, ln_out, mean, rstd, a, b, w,
               bias, N, C);
    }
    CUDA_CHECK_LAUNCH();
    return 0;
}

// dinp += LayerNorm'(dout); dw, db += (fp32). scratch: k_colsum_scratch_floats(N, C).
template <typename T>
int k_layernorm_backward(T *dinp, float *dw, float *db, float *scratch, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C, cudaStream_t s, skiff_err *err)
{
    int nv = row_nv<T>(C);
    if (!nv) { // wide rows: two kernels, reading dout and inp twice
        LAUNCH((layernorm_backward_kernel<T>), ceil_div(N, 8), 256, 0, s, dinp, dout, inp, w, mean, rstd, N, C);
        CUDA_CHECK_LAUNCH();
        return colsum(dw, db, scratch, dout, inp, mean, rstd, N, C, s, err);
    }
    unsigned nb = ceil_div(N, ROWS_PER);
    nv_dispatch<LN_MAX_PER_LANE / 4>::run(nv, [&](auto k) {
        constexpr int NV = decltype(k)::value;
        if constexpr (NV * vec16<T>::N <= LN_MAX_PER_LANE)
            LAUNCH((layernorm_backward_vec_kernel<T, NV>), nb, 256, 0, s, dinp, scratch, dout, inp, w, mean, rstd, N,
                   C);
    });
    CUDA_CHECK_LAUNCH();
    LAUNCH((colsum_final_kernel), ceil_div(C, 256), 256, 0, s, dw, db, scratch, nb, C);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
