// Column sums in a fixed order (no atomics: bit-reproducible): bias
// gradients when cuBLASLt's BGRADB epilogue is not available, and
// LayerNorm's dw/db for rows too wide for its vectorised backward.
#ifndef SKIFF_CUDA_COLSUM_CUH
#define SKIFF_CUDA_COLSUM_CUH

#include "common.cuh"

// Rows per block of the column sums (and of the LayerNorm backward's partials).
#define ROWS_PER 256

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

// ---------------------------------------------------------------- launchers

// Scratch floats the column sums of N rows of OC columns need (one partial
// row pair per ROWS_PER rows); also what k_layernorm_backward needs.
inline size_t k_colsum_scratch_floats(int N, int OC) { return (size_t)ceil_div(N, ROWS_PER) * 2 * OC; }

template <typename T>
static int colsum(float *out0, float *out1, float *scratch, const T *dout, const T *inp, const float *mean,
                  const float *rstd, int N, int OC, cudaStream_t s, skiff_err *err)
{
    dim3 grid(ceil_div(OC, 32), ceil_div(N, ROWS_PER));
    LAUNCH((colsum_partial_kernel), grid, dim3(32, 8), 0, s, scratch, dout, inp, mean, rstd, N, OC, inp != NULL);
    CUDA_CHECK_LAUNCH();
    LAUNCH((colsum_final_kernel), ceil_div(OC, 256), 256, 0, s, out0, out1, scratch, grid.y, OC);
    CUDA_CHECK_LAUNCH();
    return 0;
}

// dbias (OC) += column sums of dout (N,OC). scratch: k_colsum_scratch_floats(N, OC).
// Column sums run in a fixed order (no atomics): results are bit-reproducible.
template <typename T>
int k_bias_backward(float *dbias, float *scratch, const T *dout, int N, int OC, cudaStream_t s, skiff_err *err)
{
    return colsum<T>(dbias, NULL, scratch, dout, NULL, NULL, NULL, N, OC, s, err);
}

#endif
