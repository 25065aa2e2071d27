/* A small TCP key-value store for rendezvous, hosted by rank 0 (torch's
 * TCPStore idea): set/get/wait on string keys with binary values. Ranks use it
 * to check in, to exchange ring neighbour addresses (CPU) and the
 * ncclUniqueId (GPU). Every wait has a timeout and its error says which
 * keys (so which ranks) are missing and for how long we waited. */
#ifndef SKIFF_TRAINER_STORE_H
#define SKIFF_TRAINER_STORE_H

#include <stddef.h>

#include "error.h"

struct tr_store;

/* Rank 0 (is_server) listens on addr:port (addr may be a name; "" or "*" =
 * all addresses) and serves until tr_store_close; every rank, rank 0
 * included, connects as a client, retrying until timeout_ms. */
int tr_store_open(const char *addr, int port, int is_server, int timeout_ms, struct tr_store **out, skiff_err *err);
void tr_store_close(struct tr_store *s); /* NULL is fine */

int tr_store_set(struct tr_store *s, const char *key, const void *val, size_t len, skiff_err *err);
/* Waits until key exists (up to the store's timeout), then returns a malloc'd
 * copy of its value (NUL-terminated for convenience; *len excludes the NUL). */
int tr_store_get(struct tr_store *s, const char *key, void **val, size_t *len, skiff_err *err);
/* Waits until every key exists (up to the store's timeout); on timeout the
 * error lists the keys still missing. */
int tr_store_wait(struct tr_store *s, const char *const *keys, size_t n, skiff_err *err);
/* 1 when key exists now, 0 when not, -1 on error. Never waits. */
int tr_store_check(struct tr_store *s, const char *key, skiff_err *err);
/* Atomically adds delta to the integer stored at key (missing = 0); returns the
 * new value in *out. */
int tr_store_add(struct tr_store *s, const char *key, long delta, long *out, skiff_err *err);

/* The local address of the store connection (the interface that reaches rank
 * 0), for publishing our own listening addresses. */
const char *tr_store_local_addr(const struct tr_store *s);
int tr_store_timeout_ms(const struct tr_store *s);

/* Rendezvous: each rank sets "rank/R" = hostname; then waits for all ranks.
 * On timeout the error names the ranks that never arrived ("rendezvous: ranks
 * 2,3 of 4 did not check in within 5.0 s"). */
int tr_store_rendezvous(struct tr_store *s, int rank, int world, skiff_err *err);

#endif
