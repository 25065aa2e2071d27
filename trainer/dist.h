/* The env:// rendezvous of `skiff-train train` (torchrun's variables): which
 * rank this process is, how many there are, and rank 0's key-value store
 * (store.h) through which the collectives find each other. */
#ifndef SKIFF_TRAINER_DIST_H
#define SKIFF_TRAINER_DIST_H

#include "error.h"
#include "store.h"

struct train_dist {
    int rank, world, local_rank;
    char master_addr[256];
    int master_port;
    struct tr_store *store; /* NULL when world == 1 */
};

/* Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (all absent:
 * one process); rank 0 hosts the store; all ranks rendezvous (timeout_ms). */
int train_dist_init(struct train_dist *d, int timeout_ms, skiff_err *err);
void train_dist_fini(struct train_dist *d);

#endif
