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
 *    or stream (NCCL); a synchronous call waits for earlier async ones first. */
#ifndef SKIFF_TRAINER_COMM_H
#define SKIFF_TRAINER_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum skiff_dtype { SKIFF_F32 = 0, SKIFF_BF16 = 1, SKIFF_F16 = 2 };

/* Bytes of one element of dtype. */
size_t skiff_dtype_size(enum skiff_dtype t);

struct skiff_comm;
struct skiff_comm_req; /* an in-flight async collective */

struct skiff_comm_ops {
    const char *name; /* "tcp", "nccl", "host-staged", "single" */
    int (*allreduce_sum)(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                         skiff_err *err);
    int (*reduce_scatter)(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                          skiff_err *err);
    int (*all_gather)(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                      skiff_err *err);
    int (*broadcast)(struct skiff_comm *c, void *buf, size_t bytes, int root, skiff_err *err);
    int (*barrier)(struct skiff_comm *c, skiff_err *err);
    /* Starts an all-reduce (op 0) or reduce-scatter (op 1) of buf and returns at
     * once; *req must later be passed to wait exactly once. */
    int (*start)(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                 struct skiff_comm_req **req, skiff_err *err);
    int (*wait)(struct skiff_comm *c, struct skiff_comm_req *req, skiff_err *err);
    void (*destroy)(struct skiff_comm *c);
};

#define SKIFF_COMM_ALLREDUCE 0
#define SKIFF_COMM_REDUCE_SCATTER 1

struct skiff_comm_stats {
    double busy_s;       /* seconds the backend spent moving/reducing data */
    uint64_t bytes_sent; /* payload bytes this rank sent */
    uint64_t ops;        /* collectives completed */
};

struct skiff_comm {
    const struct skiff_comm_ops *ops;
    int rank, world, local_rank;
    int timeout_ms;   /* per-operation progress timeout */
    void *stream;     /* CUDA stream for device backends; NULL for TCP */
    struct skiff_comm_stats stats;
    void *impl;       /* backend state */
};

/* Convenience wrappers: c->ops->X(c, ...). */
int skiff_allreduce_sum(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                        skiff_err *err);
int skiff_reduce_scatter(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                         skiff_err *err);
int skiff_all_gather(struct skiff_comm *c, void *buf, size_t n, enum skiff_dtype t,
                     skiff_err *err);
int skiff_broadcast(struct skiff_comm *c, void *buf, size_t bytes, int root, skiff_err *err);
int skiff_barrier(struct skiff_comm *c, skiff_err *err);
int skiff_comm_start(struct skiff_comm *c, int op, void *buf, size_t n, enum skiff_dtype t,
                     struct skiff_comm_req **req, skiff_err *err);
int skiff_comm_wait(struct skiff_comm *c, struct skiff_comm_req *req, skiff_err *err);
void skiff_comm_destroy(struct skiff_comm *c); /* frees c too; NULL is fine */

struct skiff_store;

/* The CPU backend: a ring of TCP connections (each rank connects to rank+1 and
 * accepts rank-1), addresses exchanged through the store. world == 1 gives a
 * backend whose collectives are no-ops. Chunked ring all-reduce =
 * reduce-scatter + all-gather: each rank sends 2(P-1)/P * S bytes.
 * Only SKIFF_F32 is supported. Each rank listens on the address it uses to
 * reach the store (so MASTER_ADDR on another node works), port chosen by the
 * kernel, and publishes it under "ring/RANK". */
int skiff_comm_tcp_create(struct skiff_store *store, int rank, int world, int local_rank,
                          int timeout_ms, struct skiff_comm **out, skiff_err *err);

#endif
