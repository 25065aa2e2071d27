// Token and position embedding: out = wte[token] + wpe[t], and its
// deterministic backward (rows grouped by token on the host, no atomics).
// Kernels and their launchers, like every layer header here (see README.md);
// shapes as in llm.c: N = B*T rows, C channels, V vocabulary.
#ifndef SKIFF_CUDA_ENCODER_CUH
#define SKIFF_CUDA_ENCODER_CUH

#include "common.cuh"

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

// ---------------------------------------------------------------- launchers

// out (N,C) = wte[tokens] + wpe[t]
template <typename T>
int k_encoder_forward(T *out, const int *tokens, const T *wte, const T *wpe, int B, int Tn, int C, cudaStream_t s,
                      skiff_err *err)
{
    size_t nvec = (size_t)B * Tn * C / vec16<T>::N;
    LAUNCH((encoder_forward_kernel<T>), ceil_div(nvec, 256), 256, 0, s, out, tokens, wte, wpe, Tn, C, nvec);
    CUDA_CHECK_LAUNCH();
    return 0;
}

inline int k_encoder_csr(int *csr, int *counts, const int *tokens, int N, int V)
{
    return encoder_csr_build(csr, counts, tokens, N, V, ENC_SEG);
}
inline size_t k_encoder_csr_ints(int N) { return enc_csr_ints(N, ENC_SEG); }
inline size_t k_encoder_scratch_floats(int N, int C) { return (size_t)(2 * (N / ENC_SEG) + 2) * C; }

template <typename T>
int k_encoder_backward(float *dwte, float *dwpe, float *scratch, const T *dout, const int *csr, int nseg, int nbig,
                       int B, int Tn, int C, cudaStream_t s, skiff_err *err)
{
    int N = B * Tn, per = C / vec16<T>::N;
    LAUNCH((encoder_backward_seg_kernel<T>), dim3(nseg, ceil_div(per, 128)), 128, 0, s, dwte, scratch, dout, csr, N, C);
    CUDA_CHECK_LAUNCH();
    if (nbig) {
        LAUNCH((encoder_backward_big_kernel), dim3(nbig, ceil_div(C, 256)), 256, 0, s, dwte, scratch, csr, N, C);
        CUDA_CHECK_LAUNCH();
    }
    LAUNCH((encoder_backward_wpe_kernel<T>), ceil_div((size_t)Tn * per, 256), 256, 0, s, dwpe, dout, B, Tn, C);
    CUDA_CHECK_LAUNCH();
    return 0;
}

#endif
