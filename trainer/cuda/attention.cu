// Causal flash attention: launchers (kernels in attention_dev.cuh).
#include "attention.cuh"
#include "attention_dev.cuh"

extern "C" {
#include "cuda_model.h"
}

size_t k_attention_scratch_floats(int B, int Tn, int C, int NH)
{
    (void)C;
    return (size_t)B * NH * Tn; // D = rowsum(dO * O)
}

template <typename T, int HS>
static int attention_forward_hs(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH, cudaStream_t s,
                                skiff_err *err)
{
    size_t sm = att_cfg<T, HS>::fwd_smem();
    CUDA_CHECK(cudaFuncSetAttribute((const void *)&attention_forward_kernel<T, HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid(ceil_div(Tn, ATT_ROWS), NH, B);
    LAUNCH((attention_forward_kernel<T, HS>), grid, ATT_WARPS * 32, sm, s, out, lse, qkv, Tn, C, NH,
           1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T, int HS>
static int attention_backward_hs(T *dqkv, float *D, const T *dout, const T *qkv, const T *out, const float *lse, int B,
                                 int Tn, int C, int NH, cudaStream_t s, skiff_err *err)
{
    typedef att_cfg<T, HS> cfg;
    size_t rows = (size_t)B * Tn * NH, lanes = rows * (HS * sizeof(T) / 16);
    LAUNCH((attention_rowdot_kernel<T, HS>), ceil_div(lanes, 256), 256, 0, s, D, dout, out, B, Tn, C, NH);
    CUDA_CHECK_LAUNCH();
    float scale = 1.0f / sqrtf((float)HS);
    dim3 grid(ceil_div(Tn, ATT_ROWS), NH, B);
    size_t sm = cfg::dkdv_smem();
    CUDA_CHECK(cudaFuncSetAttribute((const void *)&attention_dkdv_kernel<T, HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    LAUNCH((attention_dkdv_kernel<T, HS>), grid, ATT_WARPS * 32, sm, s, dqkv, dout, qkv, lse, D, Tn, C, NH, scale);
    CUDA_CHECK_LAUNCH();
    sm = cfg::dq_smem();
    CUDA_CHECK(cudaFuncSetAttribute((const void *)&attention_dq_kernel<T, HS>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    LAUNCH((attention_dq_kernel<T, HS>), grid, ATT_WARPS * 32, sm, s, dqkv, dout, qkv, lse, D, Tn, C, NH, scale);
    CUDA_CHECK_LAUNCH();
    return 0;
}

static int head_size(int C, int NH, skiff_err *err)
{
    int hs = (NH > 0 && C % NH == 0) ? C / NH : 0;
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
        return skiff_error(err, 0,
                           "CUDA attention supports head sizes 16, 32, 64 and 128 "
                           "(n_embd / n_head), got %d / %d",
                           C, NH);
    return hs;
}

template <typename T>
int k_attention_forward(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH, cudaStream_t s, skiff_err *err)
{
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
int k_attention_backward(T *dqkv, float *scratch, const T *dout, const T *qkv, const T *out, const float *lse, int B,
                         int Tn, int C, int NH, cudaStream_t s, skiff_err *err)
{
    int hs = head_size(C, NH, err);
    if (hs < 0) return -1;
    switch (hs) {
    case 16: return attention_backward_hs<T, 16>(dqkv, scratch, dout, qkv, out, lse, B, Tn, C, NH, s, err);
    case 32: return attention_backward_hs<T, 32>(dqkv, scratch, dout, qkv, out, lse, B, Tn, C, NH, s, err);
    case 64: return attention_backward_hs<T, 64>(dqkv, scratch, dout, qkv, out, lse, B, Tn, C, NH, s, err);
    default: return attention_backward_hs<T, 128>(dqkv, scratch, dout, qkv, out, lse, B, Tn, C, NH, s, err);
    }
}

template <typename T> static void smem_of(int hs, size_t out[3])
{
    switch (hs) {
    case 16:
        out[0] = att_cfg<T, 16>::fwd_smem(), out[1] = att_cfg<T, 16>::dkdv_smem(), out[2] = att_cfg<T, 16>::dq_smem();
        break;
    case 32:
        out[0] = att_cfg<T, 32>::fwd_smem(), out[1] = att_cfg<T, 32>::dkdv_smem(), out[2] = att_cfg<T, 32>::dq_smem();
        break;
    case 64:
        out[0] = att_cfg<T, 64>::fwd_smem(), out[1] = att_cfg<T, 64>::dkdv_smem(), out[2] = att_cfg<T, 64>::dq_smem();
        break;
    default:
        out[0] = att_cfg<T, 128>::fwd_smem(), out[1] = att_cfg<T, 128>::dkdv_smem(),
        out[2] = att_cfg<T, 128>::dq_smem();
        break;
    }
}

extern "C" void cuda_attention_smem(int prec, int hs, size_t out[3])
{
    if (prec == SKIFF_CUDA_FP32)
        smem_of<float>(hs, out);
    else if (prec == SKIFF_CUDA_BF16)
        smem_of<bf16>(hs, out);
    else
        smem_of<fp16>(hs, out);
}

#define INSTANTIATE(T)                                                                                                 \
    template int k_attention_forward<T>(T *, float *, const T *, int, int, int, int, cudaStream_t, skiff_err *);       \
    template int k_attention_backward<T>(T *, float *, const T *, const T *, const T *, const float *, int, int, int,  \
                                         int, cudaStream_t, skiff_err *);
INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(fp16)
