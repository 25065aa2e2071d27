// Causal flash attention: launchers (kernels in attention_dev.cuh).
#include "kernels.cuh"
#include "attention_dev.cuh"

size_t k_attention_scratch_floats(int B, int Tn, int C, int NH) {
    return (size_t)ceil_div(Tn, TILE) * B * Tn * C + (size_t)B * NH * Tn;
}

template <typename T, int HS>
static int attention_forward_hs(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH,
                                cudaStream_t s, skiff_err *err) {
    size_t sm = fwd_smem<T, HS>();
    CUDA_CHECK(cudaFuncSetAttribute((const void *)&attention_forward_kernel<T, HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid(ceil_div(Tn, TILE), NH, B);
    LAUNCH((attention_forward_kernel<T, HS>), grid, NWARP * 32, sm, s, out, lse, qkv, Tn, C, NH, 1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T, int HS>
static int attention_backward_hs(T *dqkv, float *dq, float *D, const T *dout, const T *qkv,
                                 const float *lse, int B, int Tn, int C, int NH, cudaStream_t s,
                                 skiff_err *err) {
    size_t sm = bwd_smem<T, HS>();
    CUDA_CHECK(cudaFuncSetAttribute((const void *)&attention_backward_kernel<T, HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid(ceil_div(Tn, TILE), NH, B);
    LAUNCH((attention_backward_kernel<T, HS>), grid, NWARP * 32, sm, s, dqkv, dq, dout, qkv, lse, D, Tn, C, NH, 1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return 0;
}

static int head_size(int C, int NH, skiff_err *err) {
    int hs = (NH > 0 && C % NH == 0) ? C / NH : 0;
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
        return skiff_error(err, 0,
                           "CUDA attention supports head sizes 16, 32, 64 and 128 "
                           "(n_embd / n_head), got %d / %d",
                           C, NH);
    return hs;
}

template <typename T>
int k_attention_forward(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH,
                        cudaStream_t s, skiff_err *err) {
    int hs = head_size(C, NH, err);
    if (hs < 0) return -1;
    switch (hs) {
    case 16: return attention_forward_hs<T, 16>(out, lse, qkv, B, Tn, C, NH, s, err);
    case 32: return attention_forward_hs<T, 32>(out, lse, qkv, B, Tn, C, NH, s, err);
    case 64: return attention_forward_hs<T, 64>(out, lse, qkv, B, Tn, C, NH, s, err);
    default: return attention_forward_hs<T, 128>(out, lse, qkv, B, Tn, C, NH, s, err);
    }
}

template <typename T>
int k_attention_backward(T *dqkv, float *scratch, const T *dout, const T *qkv, const T *out,
                         const float *lse, int B, int Tn, int C, int NH, cudaStream_t s,
                         skiff_err *err) {
    int hs = head_size(C, NH, err);
    if (hs < 0) return -1;
    float *dq = scratch;
    float *D = scratch + (size_t)ceil_div(Tn, TILE) * B * Tn * C;
    size_t rows = (size_t)B * Tn * NH;
    LAUNCH((attention_rowdot_kernel<T>), ceil_div(rows * 32, 256), 256, 0, s, D, dout, out, B, Tn, C, NH);
    CUDA_CHECK_LAUNCH();
    switch (hs) {
    case 16: TRY(attention_backward_hs<T, 16>(dqkv, dq, D, dout, qkv, lse, B, Tn, C, NH, s, err)); break;
    case 32: TRY(attention_backward_hs<T, 32>(dqkv, dq, D, dout, qkv, lse, B, Tn, C, NH, s, err)); break;
    case 64: TRY(attention_backward_hs<T, 64>(dqkv, dq, D, dout, qkv, lse, B, Tn, C, NH, s, err)); break;
    default: TRY(attention_backward_hs<T, 128>(dqkv, dq, D, dout, qkv, lse, B, Tn, C, NH, s, err)); break;
    }
    size_t total = (size_t)B * Tn * C;
    LAUNCH((dq_reduce_kernel<T>), ceil_div(total, 256), 256, 0, s, dqkv, dq, total, Tn, C);
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
