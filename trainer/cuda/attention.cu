// Causal flash attention: launchers (kernels in attention_dev.cuh, 64-row
// tiles, and attention128_dev.cuh, 128-row tiles). Which tiles run:
// SKIFF_CUDA_ATTENTION=64 or 128 (default 64: on an H100 the 64-row
// kernels took 31.7 ms of a d12 B=64 step against the 128-row ones' 38.3,
// doc/benchmarks.md); both give the CPU reference's results on the
// emulation, and a GPU run times one against the other.
#include <stdlib.h>
#include <string.h>

#include "attention.cuh"
#include "attention128_dev.cuh"
#include "prof.cuh"

extern "C" {
#include "cuda_model.h"
}

size_t k_attention_scratch_floats(int B, int Tn, int C, int NH)
{
    (void)C;
    return (size_t)B * NH * Tn; // D = rowsum(dO * O)
}

// The tile height the launchers use for (T, HS): 64 unless
// SKIFF_CUDA_ATTENTION=128 and the 128-row kernels are built for it.
template <typename T, int HS> static int att_rows()
{
    if (!att128_cfg<T, HS>::fits) return ATT_ROWS;
    const char *v = getenv("SKIFF_CUDA_ATTENTION");
    return v && !strcmp(v, "128") ? ATT128_ROWS : ATT_ROWS;
}

// Launches `kernel` (dynamic shared memory sm) as one profiled op.
#define ATT_LAUNCH(key, kernel, grid, sm, s, ...)                                                                      \
    do {                                                                                                               \
        CUDA_CHECK(cudaFuncSetAttribute((const void *)&kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)); \
        TRY(cuda_prof_begin(s, key));                                                                                  \
        LAUNCH((kernel), grid, ATT_WARPS * 32, sm, s, __VA_ARGS__);                                                    \
        CUDA_CHECK_LAUNCH();                                                                                           \
        TRY(cuda_prof_end(s));                                                                                         \
    } while (0)

template <typename T, int HS>
static int attention_forward_hs(T *out, float *lse, const T *qkv, int B, int Tn, int C, int NH, cudaStream_t s,
                                skiff_err *err)
{
    float scale = 1.0f / sqrtf((float)HS);
    if constexpr (att128_cfg<T, HS>::fits) {
        if (att_rows<T, HS>() == ATT128_ROWS) {
            dim3 grid(ceil_div(Tn, ATT128_ROWS), NH, B);
            size_t sm = att128_cfg<T, HS>::fwd_smem();
            ATT_LAUNCH("attention fwd", (attention128_forward_kernel<T, HS>), grid, sm, s, out, lse, qkv, Tn, C, NH,
                       scale);
            return 0;
        }
    }
    dim3 grid(ceil_div(Tn, ATT_ROWS), NH, B);
    size_t sm = att_cfg<T, HS>::fwd_smem();
    ATT_LAUNCH("attention fwd", (attention_forward_kernel<T, HS>), grid, sm, s, out, lse, qkv, Tn, C, NH, scale);
    return 0;
}

template <typename T, int HS>
static int attention_backward_hs(T *dqkv, float *D, const T *dout, const T *qkv, const T *out, const float *lse, int B,
                                 int Tn, int C, int NH, cudaStream_t s, skiff_err *err)
{
    size_t rows = (size_t)B * Tn * NH, lanes = rows * (HS * sizeof(T) / 16);
    TRY(cuda_prof_begin(s, "attention rowdot"));
    LAUNCH((attention_rowdot_kernel<T, HS>), ceil_div(lanes, 256), 256, 0, s, D, dout, out, B, Tn, C, NH);
    CUDA_CHECK_LAUNCH();
    TRY(cuda_prof_end(s));
    float scale = 1.0f / sqrtf((float)HS);
    if constexpr (att128_cfg<T, HS>::fits) {
        if (att_rows<T, HS>() == ATT128_ROWS) {
            typedef att128_cfg<T, HS> cfg;
            dim3 grid(ceil_div(Tn, ATT128_ROWS), NH, B);
            size_t sm1 = cfg::dkdv_smem(), sm2 = cfg::dq_smem();
            ATT_LAUNCH("attention dkdv", (attention128_dkdv_kernel<T, HS>), grid, sm1, s, dqkv, dout, qkv, lse, D, Tn,
                       C, NH, scale);
            ATT_LAUNCH("attention dq", (attention128_dq_kernel<T, HS>), grid, sm2, s, dqkv, dout, qkv, lse, D, Tn, C,
                       NH, scale);
            return 0;
        }
    }
    typedef att_cfg<T, HS> cfg;
    dim3 grid(ceil_div(Tn, ATT_ROWS), NH, B);
    size_t sm1 = cfg::dkdv_smem(), sm2 = cfg::dq_smem();
    ATT_LAUNCH("attention dkdv", (attention_dkdv_kernel<T, HS>), grid, sm1, s, dqkv, dout, qkv, lse, D, Tn, C, NH,
               scale);
    ATT_LAUNCH("attention dq", (attention_dq_kernel<T, HS>), grid, sm2, s, dqkv, dout, qkv, lse, D, Tn, C, NH, scale);
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

template <typename T, int HS> static void smem_hs(size_t out[4])
{
    typedef att_cfg<T, HS> c64;
    typedef att128_cfg<T, HS> c128;
    int r = att_rows<T, HS>();
    out[0] = r == ATT128_ROWS ? c128::fwd_smem() : c64::fwd_smem();
    out[1] = r == ATT128_ROWS ? c128::dkdv_smem() : c64::dkdv_smem();
    out[2] = r == ATT128_ROWS ? c128::dq_smem() : c64::dq_smem();
    out[3] = (size_t)r;
}

template <typename T> static void smem_of(int hs, size_t out[4])
{
    switch (hs) {
    case 16: smem_hs<T, 16>(out); break;
    case 32: smem_hs<T, 32>(out); break;
    case 64: smem_hs<T, 64>(out); break;
    default: smem_hs<T, 128>(out); break;
    }
}

extern "C" void cuda_attention_smem(int prec, int hs, size_t out[4])
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
