// Device collective backends; see comm_cuda.cuh.
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_cuda.cuh"

#define NCCL_CHECK(call)                                                                                               \
    do {                                                                                                               \
        ncclResult_t r_ = (call);                                                                                      \
        if (r_ != ncclSuccess)                                                                                         \
            return skiff_error(err, 0, "%s:%d: %s: %s%s%s", __FILE__, __LINE__, #call, ncclGetErrorString(r_),         \
                               ncclGetLastError(NULL)[0] ? ": " : "", ncclGetLastError(NULL));                         \
    } while (0)

static size_t bytes_of(enum tr_dtype t) { return tr_dtype_size(t); }

// The communicator is non-blocking (ncclConfig_t.blocking = 0), so that its
// creation can be bounded: NCCL then returns ncclInProgress from a call that
// still connects (init, a first collective, ncclGroupEnd) and the caller
// polls the communicator's state. Returns that state once it settles, or
// ncclInProgress when timeout_ms passed first.
static ncclResult_t nccl_settle(ncclComm_t comm, ncclResult_t r, int timeout_ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (r == ncclInProgress) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000.0 + (t.tv_nsec - t0.tv_nsec) / 1e6 > timeout_ms) return ncclInProgress;
        usleep(500);
        ncclResult_t a = ncclCommGetAsyncError(comm, &r);
        if (a != ncclSuccess) return a;
    }
    return r;
}

// NCCL_CHECK for a call on communicator im->comm: settled first.
#define NCCL_COMM_CHECK(c, im, call)                                                                                   \
    do {                                                                                                               \
        ncclResult_t r_ = nccl_settle((im)->comm, (call), (c)->timeout_ms);                                            \
        if (r_ != ncclSuccess)                                                                                         \
            return skiff_error(err, 0, "%s:%d: %s: %s%s%s", __FILE__, __LINE__, #call,                                 \
                               r_ == ncclInProgress ? "not done within --timeout" : ncclGetErrorString(r_),            \
                               ncclGetLastError(NULL)[0] ? ": " : "", ncclGetLastError(NULL));                         \
    } while (0)

// First member of every backend's impl, so cuda_comm_sync works on any of them.
struct dev_base {
    cudaStream_t compute;
    cudaEvent_t sync_ev;    // recorded by cuda_comm_sync, polled with the timeout
    struct tr_comm *linked; // cuda_comm_link: another group on the same stream
};

static int base_init(struct dev_base *b, cudaStream_t compute, skiff_err *err)
{
    b->compute = compute;
    CUDA_CHECK(cudaEventCreateWithFlags(&b->sync_ev, cudaEventDisableTiming));
    return 0;
}
static void base_fini(struct dev_base *b)
{
    if (b->sync_ev) cudaEventDestroy(b->sync_ev);
}

// ---------------------------------------------------------------- NCCL
// Events are created once and reused: a handoff event can be recorded again
// as soon as cudaStreamWaitEvent has returned (the wait captured the earlier
// record), and each in-flight request owns one `done` event until its wait.
// Requests come from a free list, so a step creates and destroys nothing.
struct tr_comm_req {
    cudaEvent_t done; // NCCL: recorded on the side stream after the collective
    struct tr_comm_req *next_free;
    struct tr_comm_req *next_all;
    // host-staged
    struct tr_comm_req *host_req; // the TCP request
    int nseg;
    void *dev[16]; // device buffers and their offsets in pinned
    size_t seg_bytes[16], seg_off[16];
    char *pinned;
    size_t bytes;
    int own_pinned;
};

struct nccl_impl {
    struct dev_base base;
    ncclComm_t comm;
    cudaStream_t side;
    cudaEvent_t handoff_ev, back_ev;
    struct tr_comm_req *free_reqs, *all_reqs;
};

static ncclDataType_t nccl_type(enum tr_dtype t)
{
    return t == TR_F32 ? ncclFloat32 : t == TR_BF16 ? ncclBfloat16 : ncclFloat16;
}

static int req_get(struct nccl_impl *im, struct tr_comm_req **out, skiff_err *err)
{
    struct tr_comm_req *r = im->free_reqs;
    if (r) {
        im->free_reqs = r->next_free;
    } else {
        r = (struct tr_comm_req *)calloc(1, sizeof(*r));
        if (!r) return skiff_error(err, ENOMEM, "comm request");
        cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(r);
            return skiff_error(err, 0, "%s:%d: cudaEventCreateWithFlags: %s", __FILE__, __LINE__,
                               cudaGetErrorString(e));
        }
        r->next_all = im->all_reqs;
        im->all_reqs = r;
    }
    *out = r;
    return 0;
}

static void req_put(struct nccl_impl *im, struct tr_comm_req *r)
{
    r->next_free = im->free_reqs;
    im->free_reqs = r;
}

static int nccl_alive(const struct tr_comm *c, const struct nccl_impl *im, skiff_err *err)
{
    if (!im->comm)
        return skiff_error(err, 0, "rank %d: the NCCL communicator was aborted after an earlier failure", c->rank);
    return 0;
}

// Orders the side stream after everything queued so far on the compute stream.
static int handoff(struct nccl_impl *n, skiff_err *err)
{
    CUDA_CHECK(cudaEventRecord(n->handoff_ev, n->base.compute));
    CUDA_CHECK(cudaStreamWaitEvent(n->side, n->handoff_ev, 0));
    return 0;
}

// Orders the compute stream after everything queued so far on the side stream.
static int handback(struct nccl_impl *n, skiff_err *err)
{
    CUDA_CHECK(cudaEventRecord(n->back_ev, n->side));
    CUDA_CHECK(cudaStreamWaitEvent(n->base.compute, n->back_ev, 0));
    return 0;
}

// Queues op on the side stream (the caller did the handoff).
static int nccl_issue(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    if (op != TR_COMM_ALLREDUCE && n % c->world)
        return skiff_error(err, 0, "sharded collective of %zu elements over %d ranks", n, c->world);
    size_t shard = n / c->world;
    char *b = (char *)buf;
    switch (op) {
    case TR_COMM_ALLREDUCE:
        NCCL_COMM_CHECK(c, im, ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, im->comm, im->side));
        c->stats.bytes_sent += 2 * (c->world - 1) * n * bytes_of(t) / c->world;
        break;
    case TR_COMM_REDUCE_SCATTER: // in place: rank r keeps shard r
        NCCL_COMM_CHECK(c, im,
                        ncclReduceScatter(buf, b + c->rank * shard * bytes_of(t), shard, nccl_type(t), ncclSum,
                                          im->comm, im->side));
        c->stats.bytes_sent += (c->world - 1) * shard * bytes_of(t);
        break;
    default: // 2: all-gather, in place
        NCCL_COMM_CHECK(c, im,
                        ncclAllGather(b + c->rank * shard * bytes_of(t), buf, shard, nccl_type(t), im->comm, im->side));
        c->stats.bytes_sent += (c->world - 1) * shard * bytes_of(t);
        break;
    }
    c->stats.ops++;
    return 0;
}

static int nccl_sync_op(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    TRY(nccl_alive(c, im, err));
    TRY(handoff(im, err));
    TRY(nccl_issue(c, op, buf, n, t, err));
    return handback(im, err);
}
static int nccl_allreduce(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return nccl_sync_op(c, TR_COMM_ALLREDUCE, buf, n, t, err);
}
static int nccl_reduce_scatter(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return nccl_sync_op(c, TR_COMM_REDUCE_SCATTER, buf, n, t, err);
}
static int nccl_all_gather(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return nccl_sync_op(c, 2, buf, n, t, err);
}
static int nccl_broadcast(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    TRY(nccl_alive(c, im, err));
    TRY(handoff(im, err));
    NCCL_COMM_CHECK(c, im, ncclBroadcast(buf, buf, bytes, ncclChar, root, im->comm, im->side));
    c->stats.ops++;
    return handback(im, err);
}
static int nccl_barrier(struct tr_comm *c, skiff_err *err)
{
    // A one-float all-reduce through the stream, then a polled host wait:
    // every rank has reached this point when it returns.
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    float *d;
    CUDA_CHECK(cudaMallocAsync((void **)&d, sizeof(float), im->base.compute));
    cudaError_t e = cudaMemsetAsync(d, 0, sizeof(float), im->base.compute);
    int rc = e == cudaSuccess
                 ? nccl_allreduce(c, d, 1, TR_F32, err)
                 : skiff_error(err, 0, "%s:%d: cudaMemsetAsync: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    cudaFreeAsync(d, im->base.compute);
    if (rc < 0) return rc;
    return cuda_comm_sync(c, err);
}

static int nccl_start_group(struct tr_comm *c, int op, void *const *bufs, const size_t *ns, int count, enum tr_dtype t,
                            struct tr_comm_req **req, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    TRY(nccl_alive(c, im, err));
    TRY(handoff(im, err));
    NCCL_CHECK(ncclGroupStart());
    int rc = 0;
    for (int i = 0; i < count && rc == 0; i++) rc = nccl_issue(c, op, bufs[i], ns[i], t, err);
    ncclResult_t ge = ncclGroupEnd(); // closes the group on failure too
    if (rc < 0) return rc;
    ge = nccl_settle(im->comm, ge, c->timeout_ms);
    if (ge != ncclSuccess)
        return skiff_error(err, 0, "%s:%d: ncclGroupEnd: %s", __FILE__, __LINE__,
                           ge == ncclInProgress ? "not done within --timeout" : ncclGetErrorString(ge));
    struct tr_comm_req *r = NULL;
    TRY(req_get(im, &r, err));
    cudaError_t e = cudaEventRecord(r->done, im->side);
    if (e != cudaSuccess) {
        req_put(im, r);
        return skiff_error(err, 0, "%s:%d: cudaEventRecord: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    *req = r;
    return 0;
}
static int nccl_start(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, struct tr_comm_req **req,
                      skiff_err *err)
{
    return nccl_start_group(c, op, &buf, &n, 1, t, req, err);
}
static int nccl_wait(struct tr_comm *c, struct tr_comm_req *r, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    cudaError_t e = cudaStreamWaitEvent(im->base.compute, r->done, 0);
    req_put(im, r);
    CUDA_CHECK(e);
    return 0;
}
static void nccl_destroy(struct tr_comm *c)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    if (im) {
        if (im->comm) ncclCommDestroy(im->comm);
        if (im->side) cudaStreamDestroy(im->side);
        if (im->handoff_ev) cudaEventDestroy(im->handoff_ev);
        if (im->back_ev) cudaEventDestroy(im->back_ev);
        for (struct tr_comm_req *r = im->all_reqs, *nx; r; r = nx) {
            nx = r->next_all;
            cudaEventDestroy(r->done);
            free(r);
        }
        base_fini(&im->base);
        free(im);
    }
    free(c);
}

// A ring neighbour (rank +- 1) or -1, as the TCP ring's sendrecv allows
// (comm.h): the pipeline only talks to the next and the previous stage.
static int check_peer(const struct tr_comm *c, int peer, const char *what, skiff_err *err)
{
    int P = c->world, r = c->rank;
    if (peer < 0) return 0;
    if (P > 1 && (peer == (r + 1) % P || peer == (r + P - 1) % P)) return 0;
    return skiff_error(err, EINVAL, "%s rank %d of a group of %d from rank %d: only ring neighbours (rank +-1) %s",
                       what, peer, P, r, P > 1 ? "exchange directly" : "exist, and a group of 1 has none");
}

// Point to point (pipeline stages): one ncclSend and one ncclRecv in one
// group on the side stream, so two neighbours that exchange in both
// directions at once do not wait for each other; ordered after the compute
// stream's work and before what it queues next, as the collectives are.
static int nccl_sendrecv(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes,
                         int from, skiff_err *err)
{
    struct nccl_impl *im = (struct nccl_impl *)c->impl;
    TRY(check_peer(c, to, "send to", err));
    TRY(check_peer(c, from, "receive from", err));
    if (to < 0 && from < 0) return 0;
    TRY(nccl_alive(c, im, err));
    TRY(handoff(im, err));
    NCCL_CHECK(ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    if (to >= 0) r = ncclSend(sbuf, sbytes, ncclChar, to, im->comm, im->side);
    if (from >= 0 && (r == ncclSuccess || r == ncclInProgress))
        r = ncclRecv(rbuf, rbytes, ncclChar, from, im->comm, im->side);
    ncclResult_t ge = ncclGroupEnd(); // closes the group on failure too
    if (r == ncclSuccess || r == ncclInProgress) r = ge;
    r = nccl_settle(im->comm, r, c->timeout_ms);
    if (r != ncclSuccess)
        return skiff_error(err, 0, "%s:%d: rank %d: ncclSend/ncclRecv (to %d, from %d): %s", __FILE__, __LINE__,
                           c->rank, to, from,
                           r == ncclInProgress ? "not done within --timeout" : ncclGetErrorString(r));
    if (to >= 0) c->stats.bytes_sent += sbytes;
    c->stats.ops++;
    return handback(im, err);
}

static const struct tr_comm_ops nccl_ops = {
    "nccl",     nccl_allreduce, nccl_reduce_scatter, nccl_all_gather,  nccl_broadcast, nccl_barrier,
    nccl_start, nccl_wait,      nccl_destroy,        nccl_start_group, nccl_sendrecv,
};

int cuda_comm_nccl_create(struct tr_store *store, int rank, int world, int local_rank, int timeout_ms,
                          cudaStream_t compute, struct tr_comm **out, skiff_err *err)
{
    return cuda_comm_nccl_create_group(store, NULL, rank, world, local_rank, timeout_ms, compute, out, err);
}

// A process group's communicator is a communicator of its own, created with
// ncclCommInitRankConfig from an id its rank 0 publishes under the group's
// key, rather than ncclCommSplit of a world communicator (NCCL >= 2.18 has
// both): no world communicator whose buffers and connections nothing else
// uses, each group's creation is bounded by the same non-blocking config
// and --timeout as the world's (a split is a collective over the parent,
// bounded the same way only once the parent exists), and the CPU emulation's
// NCCL covers it as it covers the world's.
int cuda_comm_nccl_create_group(struct tr_store *store, const char *name, int rank, int world, int local_rank,
                                int timeout_ms, cudaStream_t compute, struct tr_comm **out, skiff_err *err)
{
    ncclUniqueId id;
    char key[96];
    snprintf(key, sizeof(key), name ? "nccl/id/%s" : "nccl/id", name);
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        if (tr_store_set(store, key, &id, sizeof(id), err) < 0)
            return skiff_err_wrap(err, "publishing the NCCL id (%s)", key);
    } else {
        void *v = NULL;
        size_t len = 0;
        if (tr_store_get(store, key, &v, &len, err) < 0)
            return skiff_err_wrap(err, "waiting for rank 0's NCCL id (%s)", key);
        if (len != sizeof(id)) {
            free(v);
            return skiff_error(err, EPROTO, "NCCL id from the store has %zu bytes, expected %zu", len, sizeof(id));
        }
        memcpy(&id, v, sizeof(id));
        free(v);
    }
    struct tr_comm *c = (struct tr_comm *)calloc(1, sizeof(*c));
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
    cudaError_t ce = cudaStreamCreateWithFlags(&im->side, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&im->handoff_ev, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&im->back_ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        nccl_destroy(c);
        return skiff_error(err, 0, "%s:%d: NCCL side stream: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
    }
    if (base_init(&im->base, compute, err) < 0) {
        nccl_destroy(c);
        return -1;
    }
    // Non-blocking, so a peer that dies after the id exchange costs rank 0
    // the timeout, not a hang in ncclCommInitRank: the communicator is
    // aborted and the error says what happened.
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t nr = ncclCommInitRankConfig(&im->comm, world, id, rank, &cfg);
    if (im->comm) nr = nccl_settle(im->comm, nr, timeout_ms);
    if (nr != ncclSuccess) {
        if (im->comm) ncclCommAbort(im->comm);
        im->comm = NULL;
        nccl_destroy(c);
        if (nr == ncclInProgress)
            return skiff_error(err, ETIMEDOUT,
                               "the NCCL communicator of %d ranks%s%s%s was not ready within --timeout %.1f s (a "
                               "peer rank died or stopped after the id exchange); communicator aborted",
                               world, name ? " (group " : "", name ? name : "", name ? ")" : "", timeout_ms / 1000.0);
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
    struct dev_base base;
    struct tr_comm *host;
    char *pinned; // grow-only staging buffer for synchronous calls
    size_t cap;
    // Async requests take their staging from a pinned arena (page-locking
    // per request costs ~ms): bump allocation, reset when none is in flight,
    // grown between steps to the high-water mark; overflow gets its own.
    char *arena;
    size_t arena_cap, arena_used, high;
    int outstanding;
};

static int staged_buf(struct staged_impl *s, size_t bytes, skiff_err *err)
{
    if (bytes <= s->cap) return 0;
    if (s->pinned) cudaFreeHost(s->pinned);
    s->pinned = NULL;
    s->cap = 0;
    CUDA_CHECK(cudaMallocHost((void **)&s->pinned, bytes));
    s->cap = bytes;
    return 0;
}

// The host-staged path waits on the compute stream itself; it never queues
// NCCL work, so the stream cannot be stuck behind a dead peer, but the wait
// is polled with the timeout all the same.
static int staged_drain(struct tr_comm *c, skiff_err *err) { return cuda_comm_sync(c, err); }

// D2H, host op, H2D; `op` 0 all-reduce, 1 reduce-scatter, 2 all-gather.
// Reductions are fp32 (like the ring); the all-gather moves any type.
static int staged_sync_op(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    size_t bytes = n * bytes_of(t);
    TRY(staged_buf(s, bytes, err));
    CUDA_CHECK(cudaMemcpyAsync(s->pinned, buf, bytes, cudaMemcpyDeviceToHost, s->base.compute));
    TRY(staged_drain(c, err));
    double t0 = skiff_now_ms();
    int rc = op == 0   ? tr_allreduce_sum(s->host, s->pinned, n, t, err)
             : op == 1 ? tr_reduce_scatter(s->host, s->pinned, n, t, err)
                       : tr_all_gather(s->host, s->pinned, n, t, err);
    c->stats.busy_s += (skiff_now_ms() - t0) / 1000;
    c->stats.ops++;
    if (rc < 0) return rc;
    CUDA_CHECK(cudaMemcpyAsync(buf, s->pinned, bytes, cudaMemcpyHostToDevice, s->base.compute));
    return staged_drain(c, err); // the pinned buffer is reused by the next call
}

static int staged_allreduce(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return staged_sync_op(c, 0, buf, n, t, err);
}
static int staged_reduce_scatter(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return staged_sync_op(c, 1, buf, n, t, err);
}
static int staged_all_gather(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return staged_sync_op(c, 2, buf, n, t, err);
}
static int staged_broadcast(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    TRY(staged_buf(s, bytes, err));
    CUDA_CHECK(cudaMemcpyAsync(s->pinned, buf, bytes, cudaMemcpyDeviceToHost, s->base.compute));
    TRY(staged_drain(c, err));
    TRY(tr_broadcast(s->host, s->pinned, bytes, root, err));
    CUDA_CHECK(cudaMemcpyAsync(buf, s->pinned, bytes, cudaMemcpyHostToDevice, s->base.compute));
    TRY(staged_drain(c, err));
    c->stats.ops++;
    return 0;
}
static int staged_barrier(struct tr_comm *c, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    TRY(staged_drain(c, err));
    return tr_barrier(s->host, err);
}

static void staged_release(struct staged_impl *s, struct tr_comm_req *r)
{
    if (r->own_pinned) cudaFreeHost(r->pinned);
    free(r);
    if (--s->outstanding > 0) return;
    s->arena_used = 0;
    if (s->high > s->arena_cap) { // nothing in flight: grow for the next step
        if (s->arena) cudaFreeHost(s->arena);
        s->arena = NULL;
        s->arena_cap = 0;
        if (cudaMallocHost((void **)&s->arena, s->high) == cudaSuccess) s->arena_cap = s->high;
    }
    s->high = 0;
}

// Async: the device->host copies happen now (the host waits for the compute
// stream up to this point), the TCP ring works on its own thread while the
// caller queues more GPU work, and wait copies the result back. A group is
// staged back to back and reduced as one buffer. Reductions are fp32; an
// all-gather (ZeRO-3's weights in the storage type) moves any type.
static int staged_start_group(struct tr_comm *c, int op, void *const *bufs, const size_t *ns, int count,
                              enum tr_dtype t, struct tr_comm_req **req, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    if (t != TR_F32 && op != TR_COMM_ALL_GATHER) return skiff_error(err, 0, "host-staged reductions carry fp32 only");
    if (count > 16) return skiff_error(err, 0, "host-staged group of %d buffers (at most 16)", count);
    struct tr_comm_req *r = (struct tr_comm_req *)calloc(1, sizeof(*r));
    if (!r) return skiff_error(err, ENOMEM, "comm request");
    size_t n = 0, es = bytes_of(t);
    r->nseg = count;
    for (int i = 0; i < count; i++) {
        r->dev[i] = bufs[i];
        r->seg_off[i] = n * es;
        r->seg_bytes[i] = ns[i] * es;
        n += ns[i];
    }
    r->bytes = n * es;
    size_t need = (r->bytes + 255) & ~(size_t)255;
    s->high += need;
    s->outstanding++;
    cudaError_t e = cudaSuccess;
    if (s->arena_used + need <= s->arena_cap) {
        r->pinned = s->arena + s->arena_used;
        s->arena_used += need;
    } else {
        r->own_pinned = 1;
        e = cudaMallocHost((void **)&r->pinned, r->bytes ? r->bytes : 1);
        if (e != cudaSuccess) r->pinned = NULL;
    }
    for (int i = 0; i < count && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(r->pinned + r->seg_off[i], bufs[i], r->seg_bytes[i], cudaMemcpyDeviceToHost,
                            s->base.compute);
    int rc = e == cudaSuccess ? staged_drain(c, err)
                              : skiff_error(err, 0, "%s:%d: staging %zu bytes: %s", __FILE__, __LINE__, r->bytes,
                                            cudaGetErrorString(e));
    if (rc == 0) rc = tr_comm_start(s->host, op, r->pinned, n, t, &r->host_req, err);
    if (rc < 0) {
        staged_release(s, r);
        return -1;
    }
    *req = r;
    return 0;
}
static int staged_start(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, struct tr_comm_req **req,
                        skiff_err *err)
{
    return staged_start_group(c, op, &buf, &n, 1, t, req, err);
}

static int staged_wait(struct tr_comm *c, struct tr_comm_req *r, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    double t0 = skiff_now_ms();
    int rc = tr_comm_wait(s->host, r->host_req, err);
    c->stats.busy_s += (skiff_now_ms() - t0) / 1000;
    c->stats.ops++;
    cudaError_t e = cudaSuccess;
    for (int i = 0; rc == 0 && i < r->nseg && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(r->dev[i], r->pinned + r->seg_off[i], r->seg_bytes[i], cudaMemcpyHostToDevice,
                            s->base.compute);
    if (rc == 0 && e != cudaSuccess)
        rc = skiff_error(err, 0, "%s:%d: unstaging: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    if (rc == 0) rc = staged_drain(c, err); // the staging memory is reused after this
    staged_release(s, r);
    return rc;
}
static void staged_destroy(struct tr_comm *c)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    if (s) {
        tr_comm_destroy(s->host);
        if (s->pinned) cudaFreeHost(s->pinned);
        if (s->arena) cudaFreeHost(s->arena);
        base_fini(&s->base);
        free(s);
    }
    free(c);
}

// Point to point through the host: the send half copied device -> pinned,
// the TCP ring's sendrecv (which checks the peers), the received half
// pinned -> device. One pinned buffer holds both halves.
static int staged_sendrecv(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes,
                           int from, skiff_err *err)
{
    struct staged_impl *s = (struct staged_impl *)c->impl;
    size_t sb = to >= 0 ? sbytes : 0, rb = from >= 0 ? rbytes : 0;
    if (to < 0 && from < 0) return 0;
    TRY(staged_buf(s, sb + rb, err));
    if (sb) CUDA_CHECK(cudaMemcpyAsync(s->pinned, sbuf, sb, cudaMemcpyDeviceToHost, s->base.compute));
    TRY(staged_drain(c, err)); // also: the device work that fills or still reads rbuf is done
    double t0 = skiff_now_ms();
    int rc = tr_sendrecv(s->host, sb ? s->pinned : NULL, sb, to, rb ? s->pinned + sb : NULL, rb, from, err);
    c->stats.busy_s += (skiff_now_ms() - t0) / 1000;
    if (rc < 0) return rc;
    c->stats.bytes_sent += sb;
    c->stats.ops++;
    if (!rb) return 0;
    CUDA_CHECK(cudaMemcpyAsync(rbuf, s->pinned + sb, rb, cudaMemcpyHostToDevice, s->base.compute));
    return staged_drain(c, err); // the pinned buffer is reused by the next call
}

static const struct tr_comm_ops staged_ops = {
    "host-staged", staged_allreduce, staged_reduce_scatter, staged_all_gather,  staged_broadcast, staged_barrier,
    staged_start,  staged_wait,      staged_destroy,        staged_start_group, staged_sendrecv,
};

int cuda_comm_staged_create(struct tr_comm *host, cudaStream_t compute, struct tr_comm **out, skiff_err *err)
{
    struct tr_comm *c = (struct tr_comm *)calloc(1, sizeof(*c));
    struct staged_impl *s = (struct staged_impl *)calloc(1, sizeof(*s));
    if (!c || !s) {
        free(c);
        free(s);
        tr_comm_destroy(host);
        return skiff_error(err, ENOMEM, "host-staged communicator");
    }
    s->host = host;
    c->ops = &staged_ops;
    c->impl = s;
    c->rank = host->rank, c->world = host->world, c->local_rank = host->local_rank;
    c->timeout_ms = host->timeout_ms;
    c->stream = compute;
    if (base_init(&s->base, compute, err) < 0) {
        staged_destroy(c);
        return -1;
    }
    *out = c;
    return 0;
}

// ---------------------------------------------------------------- single
static int single_op(struct tr_comm *, void *, size_t, enum tr_dtype, skiff_err *) { return 0; }
static int single_bcast(struct tr_comm *, void *, size_t, int, skiff_err *) { return 0; }
static int single_barrier(struct tr_comm *, skiff_err *) { return 0; }
static int single_start(struct tr_comm *, int, void *, size_t, enum tr_dtype, struct tr_comm_req **req, skiff_err *)
{
    *req = NULL;
    return 0;
}
static int single_start_group(struct tr_comm *, int, void *const *, const size_t *, int, enum tr_dtype,
                              struct tr_comm_req **req, skiff_err *)
{
    *req = NULL;
    return 0;
}
static int single_wait(struct tr_comm *, struct tr_comm_req *, skiff_err *) { return 0; }
static void single_destroy(struct tr_comm *c)
{
    struct dev_base *b = (struct dev_base *)c->impl;
    if (b) {
        base_fini(b);
        free(b);
    }
    free(c);
}

/* sendrecv (the last member): a group of one has no neighbour; tr_sendrecv
 * says so (ENOTSUP) */
static const struct tr_comm_ops single_ops = {
    "single",     single_op,   single_op,      single_op,          single_bcast, single_barrier,
    single_start, single_wait, single_destroy, single_start_group, NULL,
};

int cuda_comm_single_create(cudaStream_t compute, int timeout_ms, struct tr_comm **out, skiff_err *err)
{
    struct tr_comm *c = (struct tr_comm *)calloc(1, sizeof(*c));
    struct dev_base *b = (struct dev_base *)calloc(1, sizeof(*b));
    if (!c || !b) {
        free(c);
        free(b);
        return skiff_error(err, ENOMEM, "communicator");
    }
    c->ops = &single_ops;
    c->impl = b;
    c->world = 1;
    c->timeout_ms = timeout_ms;
    c->stream = compute;
    if (base_init(b, compute, err) < 0) {
        single_destroy(c);
        return -1;
    }
    *out = c;
    return 0;
}

// ---------------------------------------------------------------- waiting
void cuda_comm_link(struct tr_comm *c, struct tr_comm *other) { ((struct dev_base *)c->impl)->linked = other; }

static int is_nccl(const struct tr_comm *c) { return c && c->ops == &nccl_ops; }
static struct tr_comm *linked(const struct tr_comm *c) { return ((const struct dev_base *)c->impl)->linked; }

// c and the groups linked from it (cuda_comm_link: a chain or a ring of
// the groups on one compute stream), at most CHAIN_MAX, each once.
#define CHAIN_MAX 8
static int chain(struct tr_comm *c, struct tr_comm *g[CHAIN_MAX])
{
    int n = 0;
    for (struct tr_comm *x = c; x && n < CHAIN_MAX; x = linked(x)) {
        if (n > 0 && x == c) break;
        g[n++] = x;
    }
    return n;
}

// c's and its linked groups' NCCL communicators aborted, so the stuck
// kernels of any return (the process exits after this).
static void nccl_abort_all(struct tr_comm *c)
{
    struct tr_comm *g[CHAIN_MAX];
    int n = chain(c, g);
    for (int i = 0; i < n; i++)
        if (is_nccl(g[i])) {
            struct nccl_impl *im = (struct nccl_impl *)g[i]->impl;
            if (im->comm) ncclCommAbort(im->comm);
            im->comm = NULL;
        }
}

// Between polls: an asynchronous NCCL error (a peer's connection broke) on
// c or a linked group fails the wait at once.
static int nccl_health(void *ctx, skiff_err *err)
{
    struct tr_comm *c = (struct tr_comm *)ctx, *g[CHAIN_MAX];
    int n = chain(c, g);
    for (int i = 0; i < n; i++) {
        if (!is_nccl(g[i])) continue;
        struct nccl_impl *im = (struct nccl_impl *)g[i]->impl;
        if (!im->comm) continue;
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(im->comm, &a);
        if (a == ncclSuccess || a == ncclInProgress) continue;
        nccl_abort_all(c);
        return skiff_error(err, 0, "rank %d: NCCL failed%s: %s; communicator aborted", g[i]->rank,
                           i ? " (a linked process group)" : "", ncclGetErrorString(a));
    }
    return 0;
}

int cuda_comm_wait_event(struct tr_comm *c, cudaEvent_t e, const char *what, skiff_err *err)
{
    struct tr_comm *g[CHAIN_MAX];
    int nccl = 0, n = chain(c, g);
    for (int i = 0; i < n; i++) nccl |= is_nccl(g[i]);
    if (cuda_poll_event(e, c->timeout_ms, nccl ? nccl_health : NULL, c, what, err) == 0) return 0;
    if (nccl && err->code == ETIMEDOUT) {
        nccl_abort_all(c);
        skiff_error(err, 0,
                    "rank %d: %s: GPU work with NCCL collectives did not finish within %.1f s (a peer "
                    "rank died or stopped issuing collectives); communicator aborted",
                    c->rank, what, c->timeout_ms / 1000.0);
        err->code = ETIMEDOUT;
    }
    return -1;
}

int cuda_comm_sync(struct tr_comm *c, skiff_err *err)
{
    struct dev_base *b = (struct dev_base *)c->impl;
    CUDA_CHECK(cudaEventRecord(b->sync_ev, b->compute));
    return cuda_comm_wait_event(c, b->sync_ev, "waiting for the GPU", err);
}
