// Stand-ins for the CUDA runtime, cuBLASLt and NCCL entry points skiff-train
// uses, so the whole CUDA path (trainer/cuda/*.cu compiled with
// SKIFF_CUDA_EMU) links and runs on a CPU: build/emu/bin/skiff-train and
// build/emu/tests/gpu/gpu_tool (`make cuda-emu`). Device memory is host
// memory, every stream is synchronous (kernels run when launched, through
// cuda_emu.h), events are no-ops, cuBLASLt is a plain fp32-accumulating GEMM
// with the BIAS, GELU_AUX_BIAS, DGELU and BGRADB epilogues (as the cuBLASLt
// documentation describes them) and TF32 input rounding, and NCCL
// reports itself unavailable (ranks use the host-staged backend). This checks
// the host logic (model wiring, training loop, ZeRO, checkpoints, fp16 loss
// scaling, host-staged collectives, the test scripts) — not speed, not the
// real libraries.
#include "cuda_emu.h"

#include <cublasLt.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>

#include <atomic>

extern "C" {
#include "clock.h"
}

static std::atomic<size_t> emu_bytes{0};

static void *emu_alloc(size_t n)
{
    void *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (p) emu_bytes += n;
    return p;
}

extern "C" {
// ---------------------------------------------------------------- runtime
cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = emu_alloc(n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind)
{
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind, cudaStream_t)
{
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n)
{
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t)
{
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot)
{
    *tot = (size_t)80 << 30;
    *fr = *tot - emu_bytes;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n)
{
    *n = getenv("SKIFF_EMU_NO_GPU") ? 0 : 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CPU emulation of sm_90");
    p->major = 9;
    p->minor = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *s, int len, int)
{
    snprintf(s, len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = (cudaStream_t)emu_alloc(8);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
// Streams are synchronous, so an event completes when it is recorded: it
// keeps the host time of its record, and the elapsed time between two is
// the host time the emulated work between them took (gpu_tool bench --ops
// runs its per-op table on the emulation that way).
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = (cudaEvent_t)emu_alloc(sizeof(double));
    *(double *)*e = 0;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t)
{
    *(double *)e = skiff_now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(*(const double *)b - *(const double *)a);
    return cudaSuccess;
}

// ---------------------------------------------------------------- cuBLASLt
struct emu_desc {
    cublasComputeType_t ct;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
    void *aux;
    int64_t auxld;
};
struct emu_layout {
    cudaDataType t;
    uint64_t rows, cols;
    int64_t ld;
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = (cublasLtHandle_t)emu_alloc(8);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t)
{
    emu_desc *e = (emu_desc *)calloc(1, sizeof(emu_desc));
    e->ct = ct, e->ta = e->tb = CUBLAS_OP_N, e->epi = CUBLASLT_EPILOGUE_DEFAULT;
    *d = (cublasLtMatmulDesc_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
    emu_desc *e = (emu_desc *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&e->ta, buf, n); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&e->tb, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&e->epi, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&e->bias, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&e->aux, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: memcpy(&e->auxld, buf, n); break;
    default: break; // bias type: always the output type here
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    emu_layout *e = (emu_layout *)calloc(1, sizeof(emu_layout));
    e->t = t, e->rows = rows, e->cols = cols, e->ld = ld;
    *l = (cublasLtMatrixLayout_t)e;
    return (int64_t)rows > ld ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t)emu_alloc(8);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t)
{
    return CUBLAS_STATUS_SUCCESS;
}
// SKIFF_EMU_NO_FUSED_EPILOGUES=1: no algorithm for the DGELU and BGRADB
// epilogues, as a cuBLASLt without them would answer (tests the fallback).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t r[],
                                              int *count)
{
    const emu_desc *e = (const emu_desc *)desc;
    const char *nf = getenv("SKIFF_EMU_NO_FUSED_EPILOGUES");
    if (nf && !strcmp(nf, "1") && (e->epi == CUBLASLT_EPILOGUE_DGELU || e->epi == CUBLASLT_EPILOGUE_BGRADB)) {
        *count = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&r[0], 0, sizeof(r[0]));
    r[0].state = CUBLAS_STATUS_SUCCESS;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// The stand-in has one algorithm: id 0, no split-K.
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *,
                                                    cublasLtMatmulAlgoConfigAttributes_t a, void *buf, size_t n,
                                                    size_t *written)
{
    memset(buf, 0, n);
    if (a == CUBLASLT_ALGO_CONFIG_SPLITK_NUM && n >= sizeof(int32_t)) *(int32_t *)buf = 1;
    *written = n;
    return CUBLAS_STATUS_SUCCESS;
}

static float ld_el(const void *p, cudaDataType t, size_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return __half2float(((const __half *)p)[i]);
    }
}
static void st_el(void *p, cudaDataType t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = v; break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    default: ((__half *)p)[i] = __float2half_rn(v); break;
    }
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t)
{
    const emu_desc *e = (const emu_desc *)desc;
    const emu_layout *a = (const emu_layout *)Ad, *b = (const emu_layout *)Bd, *c = (const emu_layout *)Cd,
                     *d = (const emu_layout *)Dd;
    int ta = e->ta == CUBLAS_OP_T, tb = e->tb == CUBLAS_OP_T;
    size_t m = d->rows, n = d->cols, k = ta ? a->rows : a->cols;
    if ((ta ? a->cols : a->rows) != m || (tb ? b->cols : b->rows) != k || (tb ? b->rows : b->cols) != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool tf32 = e->ct == CUBLAS_COMPUTE_32F_FAST_TF32;
    float al = *(const float *)alpha, be = *(const float *)beta;
    // op(A) as an m x k and op(B) as a k x n fp32 copy
    std::vector<float> opa(m * k), opb(k * n);
    for (size_t i = 0; i < m; i++)
        for (size_t q = 0; q < k; q++) {
            float v = ld_el(A, a->t, ta ? q + i * a->ld : i + q * a->ld);
            opa[i * k + q] = tf32 ? emu_round_tf32(v) : v;
        }
    for (size_t q = 0; q < k; q++)
        for (size_t j = 0; j < n; j++) {
            float v = ld_el(B, b->t, tb ? j + q * b->ld : q + j * b->ld);
            opb[q * n + j] = tf32 ? emu_round_tf32(v) : v;
        }
#pragma omp parallel for
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            float s = 0.0f;
            for (size_t q = 0; q < k; q++) s += opa[i * k + q] * opb[q * n + j];
            float v = al * s;
            if (be != 0.0f) v += be * ld_el(C, c->t, i + j * c->ld);
            if (e->epi == CUBLASLT_EPILOGUE_BIAS || e->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
                v += ld_el(e->bias, d->t, i);
            if (e->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                st_el(e->aux, d->t, i + j * e->auxld, v);
                v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
            }
            if (e->epi == CUBLASLT_EPILOGUE_DGELU) { // GELU'(aux) times the product (tanh form)
                float x = ld_el(e->aux, d->t, i + j * e->auxld);
                float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), th = tanhf(u);
                v *= 0.5f * (1.0f + th) +
                     0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
            }
            st_el(D, d->t, i + j * d->ld, v);
        }
    // BGRADB: the bias gradient is the sum of op(B) over k, one value per
    // column of D, in the output type, overwritten.
    if (e->epi == CUBLASLT_EPILOGUE_BGRADB)
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (size_t q = 0; q < k; q++) acc += ld_el(B, b->t, tb ? j + q * b->ld : q + j * b->ld);
            st_el((void *)e->bias, d->t, j, acc);
        }
    return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------- NCCL
static const char *const no_nccl = "NCCL is not available in the CPU emulation (use host-staged)";
const char *ncclGetErrorString(ncclResult_t) { return no_nccl; }
const char *ncclGetLastError(ncclComm_t) { return ""; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static std::atomic<unsigned> n{0};
    memset(id, 0, sizeof(*id));
    unsigned long long key = ((unsigned long long)getpid() << 20) ^ n++;
    memcpy(id->internal, &key, sizeof key);
    return ncclSuccess;
}
// A non-blocking communicator's creation, as NCCL does it across processes:
// ncclInProgress until every rank of the id has called init (a marker file
// per rank in /tmp, named by the id, which ncclGetUniqueId fills with its
// pid and a counter), then ncclInvalidUsage: the collectives themselves are
// not emulated. SKIFF_EMU_NCCL_INIT_KILL=R: rank R SIGKILLs itself in init,
// a peer that dies after the id exchange (tests/gpu/peer-death.sh).
struct ncclComm {
    char mark[128], prefix[112];
    int nranks;
};
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
    const char *kill_rank = getenv("SKIFF_EMU_NCCL_INIT_KILL");
    if (kill_rank && atoi(kill_rank) == rank) raise(SIGKILL);
    *comm = NULL;
    if (!cfg || cfg->blocking) return ncclInvalidUsage;
    ncclComm *c = new ncclComm;
    unsigned long long key;
    memcpy(&key, id.internal, sizeof key);
    snprintf(c->prefix, sizeof c->prefix, "/tmp/skiff-emu-nccl-%llx.", key);
    snprintf(c->mark, sizeof c->mark, "%s%d", c->prefix, rank);
    c->nranks = n;
    FILE *f = fopen(c->mark, "w");
    if (f) fclose(f);
    *comm = c;
    return ncclInProgress;
}
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) { return ncclInvalidUsage; }
static void emu_comm_free(ncclComm_t c)
{
    if (!c) return;
    unlink(c->mark);
    delete c;
}
ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    emu_comm_free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c)
{
    emu_comm_free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    *r = ncclSuccess;
    if (!c) return ncclSuccess;
    for (int i = 0; i < c->nranks; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%d", c->prefix, i);
        if (access(p, F_OK) != 0) {
            *r = ncclInProgress;
            return ncclSuccess;
        }
    }
    *r = ncclInvalidUsage; // everyone joined; no emulated collectives
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
{
    return ncclInvalidUsage;
}
ncclResult_t ncclReduceScatter(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
{
    return ncclInvalidUsage;
}
ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)
{
    return ncclInvalidUsage;
}
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)
{
    return ncclInvalidUsage;
}
}
