/* Collective communication behind one vtable, so the training loop does not
 * care whether bytes move over a TCP ring (CPU, this file's backend), NCCL or
 * a host-staged path (trainer/cuda/).
 *
 * Semantics every backend keeps:
 *  - Every rank issues the same collectives in the same order (like MPI/NCCL).
 *  - Buffers are the backend's memory: host memory for the TCP backend,
 *    device memory for NCCL (with comm->stream as the CUDA stream).
 *  - allreduce_sum is in place. reduce_scatter and all_gather are in place on
 *    a buffer of n elements where n % world == 0: rank r owns the shard
 *    [r*n/world, (r+1)*n/world) (NCCL's in-place layout).
 *  - Reductions happen in an order fixed by (world, n), so the same inputs
 *    give bit-identical outputs on every run.
 *  - A dead or silent peer turns into an error naming the rank within
 *    comm->timeout_ms, never a hang.
 *  - Async operations run in issue order on one communication thread (TCP)
 *    or stream (NCCL); a synchronous call waits for earlier async ones first.
 * The tr_ prefix (trainer) keeps these apart from libskiff's skiff_ API: the
 * trainer links only the common error contract, not the container runtime. */
#ifndef SKIFF_TRAINER_COMM_H
#define SKIFF_TRAINER_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum tr_dtype { TR_F32 = 0, TR_BF16 = 1, TR_F16 = 2 };

/* Bytes of one element of dtype. */
size_t tr_dtype_size(enum tr_dtype t);

struct tr_comm;
struct tr_comm_req; /* an in-flight async collective */

struct tr_comm_ops {
    const char *name; /* "tcp", "nccl", "host-staged", "single" */
    int (*allreduce_sum)(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
    int (*reduce_scatter)(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
    int (*all_gather)(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
    int (*broadcast)(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err);
    int (*barrier)(struct tr_comm *c, skiff_err *err);
    /* Starts an all-reduce (op 0), reduce-scatter (op 1) or all-gather (op 2)
     * of buf and returns at once; *req must later be passed to wait exactly
     * once. */
    int (*start)(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, struct tr_comm_req **req,
                 skiff_err *err);
    int (*wait)(struct tr_comm *c, struct tr_comm_req *req, skiff_err *err);
    void (*destroy)(struct tr_comm *c);
    /* Optional (NULL when the backend has none): starts the same op on count
     * buffers as one request, e.g. one layer's gradient slices, which the
     * parameter layout does not keep contiguous. NCCL issues them inside one
     * ncclGroupStart/End; host-staged moves them as one buffer. */
    int (*start_group)(struct tr_comm *c, int op, void *const *bufs, const size_t *ns, int count, enum tr_dtype t,
                       struct tr_comm_req **req, skiff_err *err);
    /* Point to point with a neighbour in the group's ring (rank +- 1): sends
     * sbytes of sbuf to rank `to` while receiving rbytes into rbuf from rank
     * `from`, both at once, so two pipeline stages that exchange in both
     * directions (1F1B's send-forward-receive-backward) never wait for each
     * other. Either half may be absent (to or from -1). The receiver's
     * rbytes must equal the sender's sbytes (a stream, as NCCL's send/recv);
     * any other peer is refused (EINVAL) before anything moves, and leaves
     * the group usable. A NULL member: the backend has none (ENOTSUP). */
    int (*sendrecv)(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes, int from,
                    skiff_err *err);
};

#define TR_COMM_ALLREDUCE 0
#define TR_COMM_REDUCE_SCATTER 1
#define TR_COMM_ALL_GATHER 2

struct tr_comm_stats {
    double busy_s;       /* seconds the backend spent moving/reducing data */
    uint64_t bytes_sent; /* payload bytes this rank sent */
    uint64_t ops;        /* collectives completed */
};

struct tr_comm {
    const struct tr_comm_ops *ops;
    int rank, world, local_rank;
    int timeout_ms; /* per-operation progress timeout */
    void *stream;   /* CUDA stream for device backends; NULL for TCP */
    struct tr_comm_stats stats;
    void *impl; /* backend state */
};

/* Convenience wrappers: c->ops->X(c, ...). */
int tr_allreduce_sum(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
int tr_reduce_scatter(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
int tr_all_gather(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err);
int tr_broadcast(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err);
int tr_barrier(struct tr_comm *c, skiff_err *err);
int tr_comm_start(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, struct tr_comm_req **req,
                  skiff_err *err);
int tr_comm_wait(struct tr_comm *c, struct tr_comm_req *req, skiff_err *err);
void tr_comm_destroy(struct tr_comm *c); /* frees c too; NULL is fine */
/* ENOTSUP when the backend has no start_group. */
int tr_comm_start_group(struct tr_comm *c, int op, void *const *bufs, const size_t *ns, int count, enum tr_dtype t,
                        struct tr_comm_req **req, skiff_err *err);
/* sendrecv, and its halves. */
int tr_sendrecv(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes, int from,
                skiff_err *err);
int tr_send(struct tr_comm *c, const void *buf, size_t bytes, int to, skiff_err *err);
int tr_recv(struct tr_comm *c, void *buf, size_t bytes, int from, skiff_err *err);

struct tr_store;

/* The CPU backend: a ring of TCP connections (each rank connects to rank+1 and
 * accepts rank-1), addresses exchanged through the store. world == 1 gives a
 * backend whose collectives are no-ops. Chunked ring all-reduce =
 * reduce-scatter + all-gather: each rank sends 2(P-1)/P * S bytes.
 * Reductions are TR_F32 only; all-gather (a pure copy) takes every type. Each rank listens on the address it uses to
 * reach the store (so MASTER_ADDR on another node works), port chosen by the
 * kernel, and publishes it under "ring/RANK". */
int tr_comm_tcp_create(struct tr_store *store, int rank, int world, int local_rank, int timeout_ms,
                       struct tr_comm **out, skiff_err *err);

/* A sub-communicator (a process group, as torch.distributed.new_group):
 * the n ranks members[] of the world, in that order, with a ring of their
 * own; this process is members[me]. Inside it ranks count from 0 (c->rank =
 * me, c->world = n); errors name the peers by their world rank. `name`
 * keys the ring's addresses in the store ("tp/0/1") and must be the same on
 * every member and unique among the groups. Every rank creates its groups
 * in the same order, so no creation waits on a peer busy with another. */
int tr_comm_tcp_create_group(struct tr_store *store, const char *name, const int *members, int n, int me,
                             int local_rank, int timeout_ms, struct tr_comm **out, skiff_err *err);

#endif
