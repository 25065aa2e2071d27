// Device collective backends; see comm_cuda.cuh.
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "comm_cuda.cuh"

#define NCCL_CHECK(call)                                                                    \
    do {                                                                                    \
        ncclResult_t r_ = (call);                                                           \
        if (r_ != ncclSuccess)                                                              \
            return skiff_error(err, 0, "%s:%d: %s: %s%s%s", __FILE__, __LINE__, #call,       \
                               ncclGetErrorString(r_), ncclGetLastError(NULL)[0] ? ": " : "", \
                               ncclGetLastError(NULL));                                     \
    } while (0)

static size_t bytes_of(enum skiff_dtype t) { return t == SKIFF_F32 ? 4 : 2; }

// ---------------------------------------------------------------- NCCL
struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t compute, side;
};

struct skiff_comm_req {
    cudaEvent_t done;  // NCCL: recorded on the side stream after the collective
    struct skiff_comm *host_req_comm;
    struct skiff_comm_req *host_req;  // host-staged: the TCP request
    void *dev;                        // host-staged: device buffer and its staging copy
    float *pinned;
    size_t bytes;
    int own_pinned;
};

static ncclDataType_t nccl_type(enum skiff_dtype t) {
    return t == SKIFF_F32 ? ncclFloat32 : t == SKIFF_BF16 ? ncclBfloat16 : ncclFloat16;
}

// Orders the side stream after everything queued so far on the compute stream.
static int handoff(struct nccl_impl *n, skiff_err *err) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, n->compute));
    CUDA_CHECK(cudaStreamWaitEvent(n->side, e, 0));
    CUDA_CHECK(cudaEventDestroy(e));  // released once the GPU is past it
    return 0;
}

static int handback(struct nccl_impl *n, cudaEvent_t *done, skiff_err *err) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, n->side));
    if (done) {
        *done = e;
        return 0;
    }
    CUDA_CHECK(cudaStreamWaitEvent(n->compute, e, 0));
    CUDA_CHECK(cudaEventDestroy(e));
    return 0;
}

// Queues op on the side stream after the compute stream's work.
static int nccl_issue(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                      skiff_err *err) {
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    if (op == SKIFF_COMM_REDUCE_SCATTER && n % c->world)
        return skiff_error(err, 0, "reduce-scatter of %zu elements over %d ranks", n, c->world);
    TRY(handoff(im, err));
    size_t shard = n / c->world;
    char *b = (char *)buf;
    switch (op) {
    case SKIFF_COMM_ALLREDUCE:
        NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, im->comm, im->side));
        c->stats.bytes_sent += 2 * (c->world - 1) * n * bytes_of(t) / c->world;
        break;
    case SKIFF_COMM_REDUCE_SCATTER:  // in place: rank r keeps shard r
        NCCL_CHECK(ncclReduceScatter(buf, b + c->rank * shard * bytes_of(t), shard, nccl_type(t),
                                     ncclSum, im->comm, im->side));
        c->stats.bytes_sent += (c->world - 1) * shard * bytes_of(t);
        break;
    default:  // 2: all-gather, in place
        if (n % c->world)
            return skiff_error(err, 0, "all-gather of %zu elements over %d ranks", n, c->world);
        NCCL_CHECK(ncclAllGather(b + c->rank * shard * bytes_of(t), buf, shard, nccl_type(t),
                                 im->comm, im->side));
        c->stats.bytes_sent += (c->world - 1) * shard * bytes_of(t);
        break;
    }
    c->stats.ops++;
    return 0;
}

static int nccl_allreduce(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    TRY(nccl_issue(c, SKIFF_COMM_ALLREDUCE, buf, n, t, err));
    return handback((struct nccl_impl *)c->impl, NULL, err);
}
static int nccl_reduce_scatter(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    TRY(nccl_issue(c, SKIFF_COMM_REDUCE_SCATTER, buf, n, t, err));
    return handback((struct nccl_impl *)c->impl, NULL, err);
}
static int nccl_all_gather(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    TRY(nccl_issue(c, 2, buf, n, t, err));
    return handback((struct nccl_impl *)c->impl, NULL, err);
}
static int nccl_broadcast(struct skiff_comm *c, void *buf, size_t bytes, int root, skiff_err *err) {
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    TRY(handoff(im, err));
    NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclChar, root, im->comm, im->side));
    c->stats.ops++;
    return handback(im, NULL, err);
}
static int nccl_barrier(struct skiff_comm *c, skiff_err *err) {
    // A one-float all-reduce through the stream, then a host wait: every rank
    // has reached this point when it returns.
    float *d;
    CUDA_CHECK(cudaMallocAsync((void **)&d, sizeof(float), ((struct nccl_impl *)c->impl)->compute));
    CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(float), ((struct nccl_impl *)c->impl)->compute));
    int rc = nccl_allreduce(c, d, 1, SKIFF_F32, err);
    cudaFreeAsync(d, ((struct nccl_impl *)c->impl)->compute);
    if (rc < 0) return rc;
    return cuda_comm_sync(c, err);
}
static int nccl_start(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                      struct skiff_comm_req **req, skiff_err *err) {
    struct skiff_comm_req *r = (struct skiff_comm_req *)calloc(1, sizeof(*r));
    if (!r) return skiff_error(err, ENOMEM, "comm request");
    if (nccl_issue(c, op, buf, n, t, err) < 0 || handback((struct nccl_impl *)c->impl, &r->done, err) < 0) {
        free(r);
        return -1;
    }
    *req = r;
    return 0;
}
static int nccl_wait(struct skiff_comm *c, struct skiff_comm_req *r, skiff_err *err) {
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    cudaError_t e = cudaStreamWaitEvent(im->compute, r->done, 0);
    cudaEventDestroy(r->done);
    free(r);
    CUDA_CHECK(e);
    return 0;
}
static void nccl_destroy(struct skiff_comm *c) {
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    if (im) {
        if (im->comm) ncclCommDestroy(im->comm);
        if (im->side) cudaStreamDestroy(im->side);
        free(im);
    }
    free(c);
}

static const struct skiff_comm_ops nccl_ops = {
    "nccl", nccl_allreduce, nccl_reduce_scatter, nccl_all_gather, nccl_broadcast,
    nccl_barrier, nccl_start, nccl_wait, nccl_destroy,
};

int cuda_comm_nccl_create(struct skiff_store *store, int rank, int world, int local_rank,
                          int timeout_ms, cudaStream_t compute, struct skiff_comm **out,
                          skiff_err *err) {
    ncclUniqueId id;
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        if (skiff_store_set(store, "nccl/id", &id, sizeof(id), err) < 0)
            return skiff_err_wrap(err, "publishing the NCCL id");
    } else {
        void *v = NULL;
        size_t len = 0;
        if (skiff_store_get(store, "nccl/id", &v, &len, err) < 0)
            return skiff_err_wrap(err, "waiting for rank 0's NCCL id");
        if (len != sizeof(id)) {
            free(v);
            return skiff_error(err, EPROTO, "NCCL id from the store has %zu bytes, expected %zu", len,
                               sizeof(id));
        }
        memcpy(&id, v, sizeof(id));
        free(v);
    }
    struct skiff_comm *c = (struct skiff_comm *)calloc(1, sizeof(*c));
    struct nccl_impl *im = (struct nccl_impl *)calloc(1, sizeof(*im));
    if (!c || !im) {
        free(c);
        free(im);
        return skiff_error(err, ENOMEM, "NCCL communicator");
    }
    c->ops = &nccl_ops;
    c->impl = im;
    c->rank = rank, c->world = world, c->local_rank = local_rank, c->timeout_ms = timeout_ms;
    c->stream = compute;
    im->compute = compute;
    cudaError_t ce = cudaStreamCreateWithFlags(&im->side, cudaStreamNonBlocking);
    ncclResult_t nr = ce == cudaSuccess ? ncclCommInitRank(&im->comm, world, id, rank) : ncclSuccess;
    if (ce != cudaSuccess || nr != ncclSuccess) {
        nccl_destroy(c);
        if (ce != cudaSuccess) return skiff_error(err, 0, "%s:%d: cudaStreamCreate: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
        return skiff_error(err, 0,
                           "%s:%d: ncclCommInitRank(rank %d of %d): %s %s (two ranks on one GPU? "
                           "set SKIFF_TRAIN_COMM=host-staged)",
                           __FILE__, __LINE__, rank, world, ncclGetErrorString(nr), ncclGetLastError(NULL));
    }
    *out = c;
    return 0;
}

// ---------------------------------------------------------------- host-staged
struct staged_impl {
    struct skiff_comm *host;
    cudaStream_t compute;
    float *pinned;  // grow-only staging buffer for synchronous calls
    size_t cap;
    // Async requests take their staging from a pinned arena (page-locking
    // per request costs ~ms): bump allocation, reset when none is in flight,
    // grown between steps to the high-water mark; overflow gets its own.
    char *arena;
    size_t arena_cap, arena_used, high;
    int outstanding;
};

static int staged_buf(struct staged_impl *s, size_t bytes, skiff_err *err) {
    if (bytes <= s->cap) return 0;
    if (s->pinned) cudaFreeHost(s->pinned);
    s->pinned = NULL;
    s->cap = 0;
    CUDA_CHECK(cudaMallocHost((void **)&s->pinned, bytes));
    s->cap = bytes;
    return 0;
}

static int check_f32(enum skiff_dtype t, skiff_err *err) {
    if (t != SKIFF_F32)
        return skiff_error(err, 0, "host-staged collectives carry fp32 only (dtype %d)", (int)t);
    return 0;
}

// D2H, host op, H2D; `op` 0 all-reduce, 1 reduce-scatter, 2 all-gather.
static int staged_sync_op(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                          skiff_err *err) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    TRY(check_f32(t, err));
    size_t bytes = n * sizeof(float);
    TRY(staged_buf(s, bytes, err));
    CUDA_CHECK(cudaMemcpyAsync(s->pinned, buf, bytes, cudaMemcpyDeviceToHost, s->compute));
    CUDA_CHECK(cudaStreamSynchronize(s->compute));
    double t0 = skiff_now_s();
    int rc = op == 0   ? skiff_allreduce_sum(s->host, s->pinned, n, t, err)
             : op == 1 ? skiff_reduce_scatter(s->host, s->pinned, n, t, err)
                       : skiff_all_gather(s->host, s->pinned, n, t, err);
    c->stats.busy_s += skiff_now_s() - t0;
    c->stats.ops++;
    if (rc < 0) return rc;
    CUDA_CHECK(cudaMemcpyAsync(buf, s->pinned, bytes, cudaMemcpyHostToDevice, s->compute));
    CUDA_CHECK(cudaStreamSynchronize(s->compute));  // pinned buffer is reused next call
    return 0;
}

static int staged_allreduce(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    return staged_sync_op(c, 0, buf, n, t, err);
}
static int staged_reduce_scatter(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    return staged_sync_op(c, 1, buf, n, t, err);
}
static int staged_all_gather(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t, skiff_err *err) {
    return staged_sync_op(c, 2, buf, n, t, err);
}
static int staged_broadcast(struct skiff_comm *c, void *buf, size_t bytes, int root, skiff_err *err) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    TRY(staged_buf(s, bytes, err));
    CUDA_CHECK(cudaMemcpyAsync(s->pinned, buf, bytes, cudaMemcpyDeviceToHost, s->compute));
    CUDA_CHECK(cudaStreamSynchronize(s->compute));
    TRY(skiff_broadcast(s->host, s->pinned, bytes, root, err));
    CUDA_CHECK(cudaMemcpyAsync(buf, s->pinned, bytes, cudaMemcpyHostToDevice, s->compute));
    CUDA_CHECK(cudaStreamSynchronize(s->compute));
    c->stats.ops++;
    return 0;
}
static int staged_barrier(struct skiff_comm *c, skiff_err *err) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    CUDA_CHECK(cudaStreamSynchronize(s->compute));
    return skiff_barrier(s->host, err);
}
// Async: the device->host copy happens now (the host waits for the compute
// stream up to this point), the TCP ring works on its own thread while the
// caller queues more GPU work, and wait copies the result back.
static int staged_start(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                        struct skiff_comm_req **req, skiff_err *err) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    TRY(check_f32(t, err));
    struct skiff_comm_req *r = (struct skiff_comm_req *)calloc(1, sizeof(*r));
    if (!r) return skiff_error(err, ENOMEM, "comm request");
    r->dev = buf;
    r->bytes = n * sizeof(float);
    size_t need = (r->bytes + 255) & ~(size_t)255;
    s->high += need;
    cudaError_t e = cudaSuccess;
    if (s->arena_used + need <= s->arena_cap) {
        r->pinned = (float *)(s->arena + s->arena_used);
        s->arena_used += need;
    } else {
        r->own_pinned = 1;
        e = cudaMallocHost((void **)&r->pinned, r->bytes);
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(r->pinned, buf, r->bytes, cudaMemcpyDeviceToHost, s->compute);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->compute);
    if (e != cudaSuccess) {
        if (r->own_pinned && r->pinned) cudaFreeHost(r->pinned);
        free(r);
        return skiff_error(err, 0, "%s:%d: staging %zu bytes: %s", __FILE__, __LINE__, n * sizeof(float),
                           cudaGetErrorString(e));
    }
    if (skiff_comm_start(s->host, op, r->pinned, n, t, &r->host_req, err) < 0) {
        if (r->own_pinned) cudaFreeHost(r->pinned);
        free(r);
        return -1;
    }
    s->outstanding++;
    *req = r;
    return 0;
}

static void staged_release(struct staged_impl *s, struct skiff_comm_req *r) {
    if (r->own_pinned) cudaFreeHost(r->pinned);
    free(r);
    if (--s->outstanding > 0) return;
    s->arena_used = 0;
    if (s->high > s->arena_cap) {  // nothing in flight: grow for the next step
        if (s->arena) cudaFreeHost(s->arena);
        s->arena = NULL;
        s->arena_cap = 0;
        if (cudaMallocHost((void **)&s->arena, s->high) == cudaSuccess) s->arena_cap = s->high;
    }
    s->high = 0;
}
static int staged_wait(struct skiff_comm *c, struct skiff_comm_req *r, skiff_err *err) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    double t0 = skiff_now_s();
    int rc = skiff_comm_wait(s->host, r->host_req, err);
    c->stats.busy_s += skiff_now_s() - t0;
    c->stats.ops++;
    cudaError_t e = cudaSuccess;
    if (rc == 0) {
        e = cudaMemcpyAsync(r->dev, r->pinned, r->bytes, cudaMemcpyHostToDevice, s->compute);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->compute);
    }
    staged_release(s, r);
    if (rc < 0) return rc;
    CUDA_CHECK(e);
    return 0;
}
static void staged_destroy(struct skiff_comm *c) {
    struct staged_impl *s = (struct staged_impl *)c->impl;
    if (s) {
        skiff_comm_destroy(s->host);
        if (s->pinned) cudaFreeHost(s->pinned);
        if (s->arena) cudaFreeHost(s->arena);
        free(s);
    }
    free(c);
}

static const struct skiff_comm_ops staged_ops = {
    "host-staged", staged_allreduce, staged_reduce_scatter, staged_all_gather, staged_broadcast,
    staged_barrier, staged_start, staged_wait, staged_destroy,
};

int cuda_comm_staged_create(struct skiff_comm *host, cudaStream_t compute, struct skiff_comm **out,
                            skiff_err *err) {
    struct skiff_comm *c = (struct skiff_comm *)calloc(1, sizeof(*c));
    struct staged_impl *s = (struct staged_impl *)calloc(1, sizeof(*s));
    if (!c || !s) {
        free(c);
        free(s);
        skiff_comm_destroy(host);
        return skiff_error(err, ENOMEM, "host-staged communicator");
    }
    s->host = host;
    s->compute = compute;
    c->ops = &staged_ops;
    c->impl = s;
    c->rank = host->rank, c->world = host->world, c->local_rank = host->local_rank;
    c->timeout_ms = host->timeout_ms;
    c->stream = compute;
    *out = c;
    return 0;
}

// ---------------------------------------------------------------- single
static int single_op(struct skiff_comm *, void *, size_t, enum skiff_dtype, skiff_err *) { return 0; }
static int single_bcast(struct skiff_comm *, void *, size_t, int, skiff_err *) { return 0; }
static int single_barrier(struct skiff_comm *, skiff_err *) { return 0; }
static int single_start(struct skiff_comm *, int, void *, size_t, enum skiff_dtype,
                        struct skiff_comm_req **req, skiff_err *) {
    *req = NULL;
    return 0;
}
static int single_wait(struct skiff_comm *, struct skiff_comm_req *, skiff_err *) { return 0; }
static void single_destroy(struct skiff_comm *c) { free(c); }

static const struct skiff_comm_ops single_ops = {
    "single", single_op, single_op, single_op, single_bcast,
    single_barrier, single_start, single_wait, single_destroy,
};

int cuda_comm_single_create(cudaStream_t compute, struct skiff_comm **out, skiff_err *err) {
    struct skiff_comm *c = (struct skiff_comm *)calloc(1, sizeof(*c));
    if (!c) return skiff_error(err, ENOMEM, "communicator");
    c->ops = &single_ops;
    c->world = 1;
    c->stream = compute;
    *out = c;
    return 0;
}

int cuda_comm_sync(struct skiff_comm *c, skiff_err *err) {
    cudaStream_t s = (cudaStream_t)c->stream;
    if (c->ops != &nccl_ops) {
        CUDA_CHECK(cudaStreamSynchronize(s));
        return 0;
    }
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, s));
    double t0 = skiff_now_s();
    for (;;) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) {
            cudaEventDestroy(e);
            CUDA_CHECK(q);
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(im->comm, &async);
        double waited = skiff_now_s() - t0;
        if (async != ncclSuccess || waited * 1000 > c->timeout_ms) {
            // Abort so the stuck kernels return; the process exits after this.
            ncclCommAbort(im->comm);
            im->comm = NULL;
            cudaEventDestroy(e);
            if (async != ncclSuccess)
                return skiff_error(err, 0, "NCCL failed on rank %d: %s", c->rank, ncclGetErrorString(async));
            return skiff_error(err, ETIMEDOUT,
                               "rank %d: GPU work with NCCL collectives did not finish within %.1f s "
                               "(a peer rank died or stopped issuing collectives); communicator aborted",
                               c->rank, c->timeout_ms / 1000.0);
        }
        usleep(waited < 0.01 ? 20 : 1000);
    }
    CUDA_CHECK(cudaEventDestroy(e));
    return 0;
}
