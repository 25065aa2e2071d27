// Device backends of the collective interface in trainer/comm.h. Buffers are
// device memory; every operation is ordered after the work already queued on
// the compute stream given at creation and before work queued after it, so
// the training loop never blocks the host on communication except in
// cuda_comm_sync.
//  - "nccl": one NCCL communicator; the ncclUniqueId travels through the env://
//    store (key "nccl/id"). All NCCL work runs on a dedicated stream: async
//    starts hand off with events (compute -> comm stream), waits make the
//    compute stream wait for the bucket's event, so gradient buckets reduce
//    while the backward pass goes on.
//  - "host-staged": device -> pinned host copy, the CPU TCP ring, host ->
//    device. For several ranks on one GPU (NCCL refuses two ranks per device)
//    and as a reference for the NCCL path. SKIFF_F32 only (like the ring).
//  - "single": world 1, every collective is a no-op.
#ifndef SKIFF_CUDA_COMM_CUH
#define SKIFF_CUDA_COMM_CUH

#include "common.cuh"

extern "C" {
#include "comm.h"
#include "store.h"
}

int cuda_comm_nccl_create(struct skiff_store *store, int rank, int world, int local_rank,
                          int timeout_ms, cudaStream_t compute, struct skiff_comm **out,
                          skiff_err *err);
// Takes ownership of host (a TCP comm from skiff_comm_tcp_create).
int cuda_comm_staged_create(struct skiff_comm *host, cudaStream_t compute, struct skiff_comm **out,
                            skiff_err *err);
int cuda_comm_single_create(cudaStream_t compute, struct skiff_comm **out, skiff_err *err);

// Waits until everything queued on the compute stream (communication
// included) is done. For NCCL it polls, so a dead peer becomes an error after
// comm->timeout_ms (the communicator is aborted) instead of a hang.
int cuda_comm_sync(struct skiff_comm *c, skiff_err *err);

#endif
