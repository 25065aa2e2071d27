/* llm.c's token shards: the loader that reads a run's windows from them, and
 * mapping and writing single shards (tokenize, decode). */
#ifndef SKIFF_TRAINER_DATA_H
#define SKIFF_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* llm.c shard format: a 1024-byte header of 256 int32 (magic 20240520,
 * version 1, token count), then count uint16 tokens. */
#define SKIFF_SHARD_MAGIC 20240520
#define SKIFF_SHARD_VERSION 1
#define SKIFF_SHARD_HEADER_BYTES 1024

/* The training stream: every (T+1)-token window at stride T inside each
 * shard, visited in a permutation seeded by (seed, epoch). Global step s,
 * micro-step k, rank r reads the B windows starting at window
 * s*G + (k*world + r)*B with G = B*K*world, so ranks are disjoint and a run
 * with the same global batch sees the same windows whatever world is. */
struct data_loader {
    int B, T;
    size_t num_shards;
    struct data_shard *shards;
    size_t num_windows;  /* over all shards */
    size_t *shard_first; /* first global window of each shard */
    uint32_t *perm;      /* permutation of this epoch (NULL: in order) */
    uint64_t seed;
    int shuffle;
    long epoch; /* epoch of perm */
};

/* Maps the shards matching glob (sorted) read-only; checks headers and that
 * every token < vocab_size. shuffle: 1 for train, 0 for val. */
int data_loader_open(struct data_loader *l, const char *glob, int B, int T, int vocab_size, uint64_t seed, int shuffle,
                     skiff_err *err);
void data_loader_close(struct data_loader *l);
/* Fills inputs/targets (B*T ints each) with the B windows starting at global
 * window index `first` (wrapping into later epochs). */
int data_loader_batch(struct data_loader *l, uint64_t first, int *inputs, int *targets, skiff_err *err);

/* One shard mapped read-only after checking its header (magic, version,
 * token count vs file size). */
struct data_shard_map {
    void *map;
    size_t map_len;
    const uint16_t *tokens;
    size_t ntok;
};
int data_shard_map(const char *path, struct data_shard_map *sm, skiff_err *err);
void data_shard_unmap(struct data_shard_map *sm);

/* Writes one llm.c shard atomically (tmp + rename). */
int data_write_shard(const char *path, const uint16_t *tokens, size_t n, skiff_err *err);

#endif
