// cuBLASLt wrappers; see matmul.cuh for the conventions.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.cuh"
#include "prof.cuh"

#define MAX_PLANS 128

struct mm_key {
    int m, n, k, ta, tb, lda, ldb, ldd;
    int in_type, out_type, epilogue, accumulate;
    int align_a, align_b, align_d, align_x; // pointer alignment the algorithm may assume
};

struct mm_plan {
    struct mm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    char note[112]; // shape, epilogue and the algorithm chosen, for the per-op profile
};

static const char *epilogue_name(int e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "other";
    }
}

// What the heuristic picked: algorithm id, tile, split-K (and its reduction
// scheme), stages; e.g. whether BGRADB into fp32 takes a split-K kernel.
static void describe_plan(struct mm_plan *p)
{
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, red = 0, stages = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    snprintf(p->note, sizeof(p->note), "%dx%dx%d %s%s algo %d tile %u splitK %d red %u stages %u", p->key.m, p->key.n,
             p->key.k, epilogue_name(p->key.epilogue), p->key.accumulate ? " +=" : "", (int)id, tile, (int)splitk, red,
             stages);
}

static int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % al)) al >>= 1;
    return al;
}

int mm_init(struct mm_ctx *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    c->workspace_size = MM_WORKSPACE_BYTES;
    CUDA_CHECK(cudaMalloc(&c->workspace, c->workspace_size));
    c->cap = MAX_PLANS;
    c->plans = (struct mm_plan *)calloc(c->cap, sizeof(struct mm_plan));
    if (!c->plans) return skiff_error(err, ENOMEM, "matmul plan cache");
    return 0;
}

void mm_fini(struct mm_ctx *c)
{
    for (int i = 0; i < c->nplans; i++) {
        cublasLtMatmulDescDestroy(c->plans[i].desc);
        cublasLtMatrixLayoutDestroy(c->plans[i].la);
        cublasLtMatrixLayoutDestroy(c->plans[i].lb);
        cublasLtMatrixLayoutDestroy(c->plans[i].ld);
    }
    free(c->plans);
    if (c->workspace) cudaFree(c->workspace);
    if (c->lt) cublasLtDestroy(c->lt);
    memset(c, 0, sizeof(*c));
}

// bias/aux: the pointers of the first call; the heuristic reads their values
// to decide which alignment it may assume (the key records that alignment).
static int make_plan(struct mm_ctx *c, const struct mm_key *k, const void *bias, void *aux, struct mm_plan **out,
                     skiff_err *err)
{
    for (int i = 0; i < c->nplans; i++)
        if (!memcmp(&c->plans[i].key, k, sizeof(*k))) {
            *out = &c->plans[i];
            return 0;
        }
    if (c->nplans == c->cap) return skiff_error(err, 0, "matmul plan cache full (%d shapes); raise MAX_PLANS", c->cap);
    struct mm_plan *p = &c->plans[c->nplans];
    memset(p, 0, sizeof(*p));
    p->key = *k;
    cudaDataType_t it = (cudaDataType_t)k->in_type, ot = (cudaDataType_t)k->out_type;
    cublasComputeType_t ct = it == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        cudaDataType_t bt = ot;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ald = k->ldd;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof(ald)));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    }
    // Stored shapes: A is (m x k) or, transposed, (k x m); B is (k x n) or (n x k).
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, it, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, it, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, ot, k->m, k->n, k->ldd));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    int rc = 0;
    uint64_t ws = c->workspace_size;
    uint32_t aa = k->align_a, ab = k->align_b, ad = k->align_d;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof(ad)) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad))) {
        rc = skiff_error(err, 0, "%s:%d: cublasLtMatmulPreferenceSetAttribute failed", __FILE__, __LINE__);
    } else {
        cublasStatus_t st =
            cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            rc = skiff_error(err, 0,
                             "%s:%d: cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d "
                             "transb=%d types %d->%d epilogue %d (status %d)",
                             __FILE__, __LINE__, k->m, k->n, k->k, k->ta, k->tb, k->in_type, k->out_type, k->epilogue,
                             (int)st);
            err->code = ENOTSUP; // the caller may fall back to separate kernels
        } else {
            p->algo = res.algo;
            describe_plan(p);
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (rc < 0) {
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->ld);
        return rc;
    }
    c->nplans++;
    *out = p;
    return 0;
}

// D (m x n, col-major, ldd) = op(A) op(B) [+ D when accumulate] with epilogue.
static int lt_matmul(struct mm_ctx *c, void *d, const void *a, const void *b, int m, int n, int k, int ta, int tb,
                     int lda, int ldb, int ldd, cudaDataType_t it, cudaDataType_t ot, cublasLtEpilogue_t epi,
                     const void *bias, void *aux, int accumulate, cudaStream_t s, skiff_err *err)
{
    struct mm_key key;
    memset(&key, 0, sizeof(key));
    key.m = m, key.n = n, key.k = k, key.ta = ta, key.tb = tb;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.in_type = it, key.out_type = ot, key.epilogue = epi, key.accumulate = accumulate;
    key.align_a = align_of(a), key.align_b = align_of(b), key.align_d = align_of(d);
    key.align_x = bias ? align_of(bias) : 0;
    if (aux && key.align_x > align_of(aux)) key.align_x = align_of(aux);
    struct mm_plan *p = NULL;
    TRY(make_plan(c, &key, bias, aux, &p, err));
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux)
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cuda_prof_note("%s", p->note);
    CUBLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &alpha, a, p->la, b, p->lb, &beta, d, p->ld, d, p->ld, &p->algo,
                                c->workspace, c->workspace_size, s));
    return 0;
}

template <typename T>
int mm_forward(struct mm_ctx *c, T *out, T *gelu_pre, const T *inp, const T *w, const T *bias, int N, int C, int OC,
               cudaStream_t s, skiff_err *err)
{
    cudaDataType_t t = dtype_of<T>::cuda;
    cublasLtEpilogue_t epi = gelu_pre ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : bias   ? CUBLASLT_EPILOGUE_BIAS
                                      : CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu_pre && !bias) return skiff_error(err, 0, "mm_forward: the GELU epilogue needs a bias");
    return lt_matmul(c, out, w, inp, OC, N, C, 1, 0, C, C, OC, t, t, epi, bias, gelu_pre, 0, s, err);
}

// A fused epilogue cuBLASLt has no algorithm for (ENOTSUP from make_plan) is
// switched off for the rest of the run: the caller then does that step with
// its own kernel.
static int fused_or_plain(int *off, int rc, skiff_err *err)
{
    if (rc == 0 || err->code != ENOTSUP) return rc;
    *off = 1;
    fprintf(stderr, "skiff-train: %s; using separate kernels instead\n", err->msg);
    return 1;
}

template <typename T>
int mm_backward_data(struct mm_ctx *c, T *dinp, const T *dout, const T *w, const T *gelu_pre, int N, int C, int OC,
                     cudaStream_t s, int *fused, skiff_err *err)
{
    cudaDataType_t t = dtype_of<T>::cuda;
    *fused = 0;
    if (gelu_pre && !c->no_dgelu) {
        int rc = lt_matmul(c, dinp, w, dout, C, N, OC, 0, 0, C, OC, C, t, t, CUBLASLT_EPILOGUE_DGELU, NULL,
                           (void *)gelu_pre, 0, s, err);
        rc = fused_or_plain(&c->no_dgelu, rc, err);
        if (rc <= 0) {
            *fused = rc == 0;
            return rc;
        }
    }
    return lt_matmul(c, dinp, w, dout, C, N, OC, 0, 0, C, OC, C, t, t, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, s,
                     err);
}

template <typename T>
int mm_backward_weight(struct mm_ctx *c, float *dw, float *dbias, const T *inp, const T *dout, int N, int C, int OC,
                       cudaStream_t s, int *fused, skiff_err *err)
{
    cudaDataType_t t = dtype_of<T>::cuda;
    *fused = 0;
    if (dbias && !c->no_bgradb) {
        int rc = lt_matmul(c, dw, inp, dout, C, OC, N, 0, 1, C, OC, C, t, CUDA_R_32F, CUBLASLT_EPILOGUE_BGRADB, dbias,
                           NULL, 1, s, err);
        rc = fused_or_plain(&c->no_bgradb, rc, err);
        if (rc <= 0) {
            *fused = rc == 0;
            return rc;
        }
    }
    return lt_matmul(c, dw, inp, dout, C, OC, N, 0, 1, C, OC, C, t, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL,
                     1, s, err);
}

// Small values from a hash of the index: zeros would let the GPU run cooler
// (and faster) than on real data.
__global__ void fill_kernel(bf16 *x, size_t n, uint32_t seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((float)(h & 0xffff) / 65536.0f - 0.5f);
}

int mm_bench_bf16(struct mm_ctx *c, int m, int n, int k, int iters, double *tflops, skiff_err *err)
{
    bf16 *a = NULL, *b = NULL, *d = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t ce = cudaSuccess;
    int rc = -1;
    float ms = 0.0f;
    if (cudaMalloc(&a, (size_t)m * k * sizeof(bf16)) || cudaMalloc(&b, (size_t)k * n * sizeof(bf16)) ||
        cudaMalloc(&d, (size_t)m * n * sizeof(bf16)) || cudaEventCreate(&e0) || cudaEventCreate(&e1)) {
        skiff_error(err, ENOMEM, "%s:%d: GEMM benchmark: cannot allocate %dx%dx%d buffers", __FILE__, __LINE__, m, n,
                    k);
        goto out;
    }
    LAUNCH((fill_kernel), ceil_div((size_t)m * k, 256), 256, 0, 0, a, (size_t)m * k, 1);
    LAUNCH((fill_kernel), ceil_div((size_t)k * n, 256), 256, 0, 0, b, (size_t)k * n, 2);
    if (cudaGetLastError() != cudaSuccess) {
        skiff_error(err, 0, "%s:%d: fill kernel failed", __FILE__, __LINE__);
        goto out;
    }
    for (int i = 0; i < 3; i++)
        if (lt_matmul(c, d, a, b, m, n, k, 1, 0, k, k, m, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                      NULL, 0, 0, err) < 0)
            goto out;
    // A benchmark on one device with no peer: a blocking wait is fine here.
    if ((ce = cudaEventRecord(e0, 0)) != cudaSuccess) goto cuda_fail;
    for (int i = 0; i < iters; i++)
        if (lt_matmul(c, d, a, b, m, n, k, 1, 0, k, k, m, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                      NULL, 0, 0, err) < 0)
            goto out;
    if ((ce = cudaEventRecord(e1, 0)) != cudaSuccess || (ce = cudaEventSynchronize(e1)) != cudaSuccess ||
        (ce = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess)
        goto cuda_fail;
    *tflops = 2.0 * m * n * (double)k * iters / (ms * 1e-3) / 1e12;
    rc = 0;
    goto out;
cuda_fail:
    skiff_error(err, 0, "%s:%d: GEMM benchmark: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return rc;
}

#define INSTANTIATE(T)                                                                                                 \
    template int mm_forward<T>(struct mm_ctx *, T *, T *, const T *, const T *, const T *, int, int, int,              \
                               cudaStream_t, skiff_err *);                                                             \
    template int mm_backward_data<T>(struct mm_ctx *, T *, const T *, const T *, const T *, int, int, int,             \
                                     cudaStream_t, int *, skiff_err *);                                                \
    template int mm_backward_weight<T>(struct mm_ctx *, float *, float *, const T *, const T *, int, int, int,         \
                                       cudaStream_t, int *, skiff_err *);
INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(fp16)
