// Device backends of the collective interface in trainer/comm.h. Buffers are
// device memory; every operation is ordered after the work already queued on
// the compute stream given at creation and before work queued after it, so
// the training loop never blocks the host on communication except in
// cuda_comm_sync / cuda_comm_wait_event, which poll with the timeout.
//  - "nccl": one NCCL communicator; the ncclUniqueId travels through the env://
//    store (key "nccl/id"). All NCCL work runs on a dedicated stream: async
//    starts hand off with events (compute -> comm stream), waits make the
//    compute stream wait for the bucket's event, so gradient buckets reduce
//    while the backward pass goes on. A group (one layer's gradient slices)
//    is one ncclGroupStart/End; events and requests are reused, not created
//    per call.
//  - "host-staged": device -> pinned host copy, the CPU TCP ring, host ->
//    device. For several ranks on one GPU (NCCL refuses two ranks per device)
//    and as a reference for the NCCL path. Reductions fp32 only (like the
//    ring); all-gathers any type.
//  - "single": world 1, every collective is a no-op.
#ifndef SKIFF_CUDA_COMM_CUH
#define SKIFF_CUDA_COMM_CUH

#include "common.cuh"

extern "C" {
#include "comm.h"
#include "store.h"
}

int cuda_comm_nccl_create(struct tr_store *store, int rank, int world, int local_rank, int timeout_ms,
                          cudaStream_t compute, struct tr_comm **out, skiff_err *err);
// The same for a process group (tensor- or data-parallel): rank and world
// inside the group; its rank 0 publishes the group's ncclUniqueId under
// "nccl/id/NAME" (NAME the same on every member, unique among groups).
int cuda_comm_nccl_create_group(struct tr_store *store, const char *name, int rank, int world, int local_rank,
                                int timeout_ms, cudaStream_t compute, struct tr_comm **out, skiff_err *err);
// Takes ownership of host (a TCP comm from tr_comm_tcp_create).
int cuda_comm_staged_create(struct tr_comm *host, cudaStream_t compute, struct tr_comm **out, skiff_err *err);
int cuda_comm_single_create(cudaStream_t compute, int timeout_ms, struct tr_comm **out, skiff_err *err);

// Waits until event e (recorded on any stream) has completed. It polls, so a
// stream stuck behind a collective of a dead peer becomes an error naming the
// rank after comm->timeout_ms instead of a hang; with NCCL the communicator
// is aborted then (and at once on an asynchronous NCCL error), so the stuck
// kernels return and the process can exit. `what` starts the message.
int cuda_comm_wait_event(struct tr_comm *c, cudaEvent_t e, const char *what, skiff_err *err);
// Waits until everything queued on the compute stream so far is done, the
// same way.
int cuda_comm_sync(struct tr_comm *c, skiff_err *err);
// Groups on one compute stream (--tp: the data-parallel and the
// tensor-parallel group; --pp: the stages' groups too): c's waits also
// watch other's NCCL communicator, and the groups linked from other in
// turn (a chain, or a ring back to c, at most 8), and abort them all on a
// failure or timeout, as the stream can be stuck behind any one's
// collective. other must outlive c's waits.
void cuda_comm_link(struct tr_comm *c, struct tr_comm *other);

#endif
