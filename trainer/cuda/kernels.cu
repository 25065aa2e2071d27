// The model's own kernels except attention (attention.cu). One thread block
// layout per kernel, chosen for the shapes of GPT-2 (C = 768..1600, Vp = 50304);
// all arithmetic in fp32, storage in T.
#include "kernels.cuh"
#include "kernels_dev.cuh"

#include <type_traits>

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

template <typename T>
int k_encoder_forward(T *out, const int *tokens, const T *wte, const T *wpe, int B, int Tn, int C, cudaStream_t s,
                      skiff_err *err)
{
    size_t nvec = (size_t)B * Tn * C / vec16<T>::N;
    LAUNCH((encoder_forward_kernel<T>), ceil_div(nvec, 256), 256, 0, s, out, tokens, wte, wpe, Tn, C, nvec);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_encoder_csr(int *csr, int *counts, const int *tokens, int N, int V)
{
    return encoder_csr_build(csr, counts, tokens, N, V, ENC_SEG);
}
size_t k_encoder_csr_ints(int N) { return enc_csr_ints(N, ENC_SEG); }
size_t k_encoder_scratch_floats(int N, int C) { return (size_t)(2 * (N / ENC_SEG) + 2) * C; }

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

size_t k_colsum_scratch_floats(int N, int OC) { return (size_t)ceil_div(N, ROWS_PER) * 2 * OC; }

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

template <typename T> int k_gelu_forward(T *out, const T *inp, size_t n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((gelu_forward_kernel), ceil_div(n / vec16<T>::N, 256), 256, 0, s, out, inp, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T> int k_gelu_backward(T *dinout, const T *inp, size_t n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((gelu_backward_kernel), ceil_div(n / vec16<T>::N, 256), 256, 0, s, dinout, inp, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T> int k_add_bias(T *out, const T *bias, int N, int OC, cudaStream_t s, skiff_err *err)
{
    size_t total = (size_t)N * OC;
    LAUNCH((add_bias_kernel), ceil_div(total / vec16<T>::N, 256), 256, 0, s, out, bias, total, OC);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T>
int k_bias_backward(float *dbias, float *scratch, const T *dout, int N, int OC, cudaStream_t s, skiff_err *err)
{
    return colsum<T>(dbias, NULL, scratch, dout, NULL, NULL, NULL, N, OC, s, err);
}

template <typename T>
int k_fused_classifier(T *logits, float *losses, const int *targets, float dloss, int N, int V, int Vp, cudaStream_t s,
                       skiff_err *err)
{
    LAUNCH((fused_classifier_kernel), N, BIG_BLOCK, 0, s, logits, losses, targets, dloss, V, Vp);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T>
int k_adamw(float *master, T *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
            float beta2, float eps, float wd, float grad_scale, const float *norm2, float clip, float bc1, float bc2,
            cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((adamw_kernel), grid_blocks(n), 256, 0, s, master, param, grad, m, v, n, lr, beta1, beta2, eps, wd,
           grad_scale, norm2, clip, bc1, bc2);
    CUDA_CHECK_LAUNCH();
    return 0;
}

template <typename T> int k_cast_from_f32(T *dst, const float *src, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((cast_from_f32_kernel), grid_blocks(n), 256, 0, s, dst, src, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}
template <typename T> int k_cast_to_f32(float *dst, const T *src, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((cast_to_f32_kernel), grid_blocks(n), 256, 0, s, dst, src, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

size_t k_norm_scratch_floats(void) { return NORM_BLOCKS; }

int k_norm_squared(float *out, float *scratch, const float *g, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((norm_partial_kernel), NORM_BLOCKS, BIG_BLOCK / 2, 0, s, scratch, g, n);
    CUDA_CHECK_LAUNCH();
    LAUNCH((norm_final_kernel), 1, NORM_BLOCKS, 0, s, out, scratch);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_scale_f32(float *x, float a, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((scale_kernel), grid_blocks(n), 256, 0, s, x, a, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_fill_f32(float *x, float v, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((fill_f32_kernel), grid_blocks(n), 256, 0, s, x, v, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_strided_sum(float *out, const float *x, int n, int stride, cudaStream_t s, skiff_err *err)
{
    LAUNCH((strided_sum_kernel), 1, 1, 0, s, out, x, n, stride);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_add_f32(float *x, const float *y, size_t n, cudaStream_t s, skiff_err *err)
{
    if (n == 0) return 0;
    LAUNCH((add_kernel), grid_blocks(n), 256, 0, s, x, y, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

int k_mean(float *out, const float *x, int n, cudaStream_t s, skiff_err *err)
{
    LAUNCH((mean_kernel), 1, BIG_BLOCK, 0, s, out, x, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

// ---------------------------------------------------------------- instances
#define INSTANTIATE(T)                                                                                                 \
    template int k_encoder_forward<T>(T *, const int *, const T *, const T *, int, int, int, cudaStream_t,             \
                                      skiff_err *);                                                                    \
    template int k_encoder_backward<T>(float *, float *, float *, const T *, const int *, int, int, int, int, int,     \
                                       cudaStream_t, skiff_err *);                                                     \
    template int k_residual_layernorm_forward<T>(T *, T *, float *, float *, const T *, const T *, const T *,          \
                                                 const T *, int, int, cudaStream_t, skiff_err *);                      \
    template int k_layernorm_backward<T>(T *, float *, float *, float *, const T *, const T *, const T *,              \
                                         const float *, const float *, int, int, cudaStream_t, skiff_err *);           \
    template int k_gelu_forward<T>(T *, const T *, size_t, cudaStream_t, skiff_err *);                                 \
    template int k_gelu_backward<T>(T *, const T *, size_t, cudaStream_t, skiff_err *);                                \
    template int k_add_bias<T>(T *, const T *, int, int, cudaStream_t, skiff_err *);                                   \
    template int k_bias_backward<T>(float *, float *, const T *, int, int, cudaStream_t, skiff_err *);                 \
    template int k_fused_classifier<T>(T *, float *, const int *, float, int, int, int, cudaStream_t, skiff_err *);    \
    template int k_adamw<T>(float *, T *, const float *, float *, float *, size_t, float, float, float, float, float,  \
                            float, const float *, float, float, float, cudaStream_t, skiff_err *);                     \
    template int k_cast_from_f32<T>(T *, const float *, size_t, cudaStream_t, skiff_err *);                            \
    template int k_cast_to_f32<T>(float *, const T *, size_t, cudaStream_t, skiff_err *);

INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(fp16)
