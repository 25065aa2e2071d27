/* llm.c-compatible token shards: loading (mmap), the seeded window order,
 * and writing. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "fdio.h"
#include "data.h"

struct data_shard {
    char *path;
    void *map;
    size_t map_len;
    const uint16_t *tokens;
    size_t ntok;
};

void data_loader_close(struct data_loader *l)
{
    for (size_t i = 0; i < l->num_shards; i++) {
        if (l->shards[i].map) munmap(l->shards[i].map, l->shards[i].map_len);
        free(l->shards[i].path);
    }
    free(l->shards);
    free(l->shard_first);
    free(l->perm);
    memset(l, 0, sizeof *l);
}

int data_shard_map(const char *path, struct data_shard_map *sm, skiff_err *err)
{
    memset(sm, 0, sizeof *sm);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skiff_error(err, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) return skiff_error(err, errno, "stat %s", path);
    if ((size_t)st.st_size < SKIFF_SHARD_HEADER_BYTES)
        return skiff_error(err, 0,
                           "%s: %lld bytes, shorter than the 1024-byte shard header "
                           "(make shards with `skiff-train tokenize`)",
                           path, (long long)st.st_size);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return skiff_error(err, errno, "mmap %s", path);
    sm->map = m;
    sm->map_len = (size_t)st.st_size;
    const int32_t *h = m;
    int rc = -1;
    if (h[0] != SKIFF_SHARD_MAGIC)
        skiff_error(err, 0,
                    "%s: bad magic %d (want %d: an llm.c token shard; make one with "
                    "`skiff-train tokenize`)",
                    path, h[0], SKIFF_SHARD_MAGIC);
    else if (h[1] != SKIFF_SHARD_VERSION)
        skiff_error(err, 0, "%s: shard version %d, this reader knows %d", path, h[1], SKIFF_SHARD_VERSION);
    else if (SKIFF_SHARD_HEADER_BYTES + (size_t)(uint32_t)h[2] * 2 != (size_t)st.st_size)
        skiff_error(err, 0,
                    "%s: header says %u tokens but the file holds %lld bytes of tokens "
                    "(truncated?)",
                    path, (uint32_t)h[2], (long long)st.st_size - SKIFF_SHARD_HEADER_BYTES);
    else
        rc = 0;
    if (rc < 0) {
        data_shard_unmap(sm);
        return -1;
    }
    sm->tokens = (const uint16_t *)((const char *)m + SKIFF_SHARD_HEADER_BYTES);
    sm->ntok = (uint32_t)h[2];
    return 0;
}

void data_shard_unmap(struct data_shard_map *sm)
{
    if (sm->map) munmap(sm->map, sm->map_len);
    memset(sm, 0, sizeof *sm);
}

static int map_shard(struct data_shard *s, const char *path, int vocab, skiff_err *err)
{
    struct data_shard_map sm;
    if (data_shard_map(path, &sm, err) < 0) return -1;
    s->map = sm.map;
    s->map_len = sm.map_len;
    s->tokens = sm.tokens;
    s->ntok = sm.ntok;
    for (size_t i = 0; i < s->ntok; i++)
        if (s->tokens[i] >= vocab)
            return skiff_error(err, 0,
                               "%s: token %u at %zu is outside the model's vocabulary "
                               "of %d (shards for another tokenizer?)",
                               path, s->tokens[i], i, vocab);
    return 0;
}

int data_loader_open(struct data_loader *l, const char *pattern, int B, int T, int vocab_size, uint64_t seed,
                     int shuffle, skiff_err *err)
{
    memset(l, 0, sizeof *l);
    l->B = B;
    l->T = T;
    l->seed = seed;
    l->shuffle = shuffle;
    l->epoch = -1;
    glob_t g;
    int gr = glob(pattern, GLOB_ERR, NULL, &g);
    if (gr == GLOB_NOMATCH)
        return skiff_error(err, 0,
                           "no shard matches '%s' (quote the glob so the shell does "
                           "not expand it; make shards with `skiff-train tokenize`)",
                           pattern);
    if (gr != 0) return skiff_error(err, errno, "glob %s", pattern);
    l->shards = calloc(g.gl_pathc, sizeof *l->shards);
    l->shard_first = calloc(g.gl_pathc + 1, sizeof *l->shard_first);
    if (!l->shards || !l->shard_first) {
        globfree(&g);
        data_loader_close(l);
        return skiff_error(err, ENOMEM, "loader");
    }
    l->num_shards = g.gl_pathc;
    for (size_t i = 0; i < g.gl_pathc; i++) { /* glob sorts: same order on every rank */
        l->shards[i].path = strdup(g.gl_pathv[i]);
        if (map_shard(&l->shards[i], g.gl_pathv[i], vocab_size, err) < 0) {
            globfree(&g);
            data_loader_close(l);
            return -1;
        }
        size_t w = l->shards[i].ntok > (size_t)T ? (l->shards[i].ntok - 1) / (size_t)T : 0;
        l->shard_first[i] = l->num_windows;
        l->num_windows += w;
    }
    l->shard_first[l->num_shards] = l->num_windows;
    globfree(&g);
    if (l->num_windows == 0) {
        data_loader_close(l);
        return skiff_error(err, 0, "'%s': no shard holds more than --seq %d tokens", pattern, T);
    }
    if (l->num_windows > UINT32_MAX) {
        data_loader_close(l);
        return skiff_error(err, 0, "'%s': more than 2^32 windows; use a larger --seq", pattern);
    }
    if (shuffle) {
        l->perm = malloc(l->num_windows * sizeof *l->perm);
        if (!l->perm) {
            data_loader_close(l);
            return skiff_error(err, ENOMEM, "window order of %zu", l->num_windows);
        }
    }
    return 0;
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Fisher-Yates with a generator seeded by (seed, epoch): every rank computes
 * the same order without talking, and a resumed run recomputes it. */
static void make_epoch(struct data_loader *l, long epoch)
{
    size_t n = l->num_windows;
    for (size_t i = 0; i < n; i++) l->perm[i] = (uint32_t)i;
    uint64_t s = l->seed * 0xD1342543DE82EF95ull + (uint64_t)epoch * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(mix(&s) % (i + 1));
        uint32_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
    l->epoch = epoch;
}

int data_loader_batch(struct data_loader *l, uint64_t first, int *inputs, int *targets, skiff_err *err)
{
    (void)err;
    for (int b = 0; b < l->B; b++) {
        uint64_t g = first + (uint64_t)b;
        long epoch = (long)(g / l->num_windows);
        size_t w = (size_t)(g % l->num_windows);
        if (l->shuffle) {
            if (epoch != l->epoch) make_epoch(l, epoch);
            w = l->perm[w];
        }
        /* binary search for the shard */
        size_t lo = 0, hi = l->num_shards;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (l->shard_first[mid] <= w)
                lo = mid;
            else
                hi = mid;
        }
        const uint16_t *tok = l->shards[lo].tokens + (w - l->shard_first[lo]) * (size_t)l->T;
        for (int t = 0; t < l->T; t++) {
            inputs[b * l->T + t] = tok[t];
            targets[b * l->T + t] = tok[t + 1];
        }
    }
    return 0;
}

struct shard_write {
    const int32_t *h;
    const uint16_t *tokens;
    size_t n;
};

static int fill_shard(int fd, void *ctx)
{
    const struct shard_write *w = ctx;
    if (skiff_write_all(fd, w->h, SKIFF_SHARD_HEADER_BYTES) < 0) return -1;
    return skiff_write_all(fd, w->tokens, w->n * sizeof *w->tokens);
}

int data_write_shard(const char *path, const uint16_t *tokens, size_t n, skiff_err *err)
{
    if (n > INT32_MAX) return skiff_error(err, 0, "%s: %zu tokens is too many for one shard", path, n);
    int32_t h[SKIFF_SHARD_HEADER_BYTES / 4] = {SKIFF_SHARD_MAGIC, SKIFF_SHARD_VERSION, (int32_t)n};
    struct shard_write w = {h, tokens, n};
    return skiff_atomic_write_file(path, NULL, fill_shard, &w, err) < 0 ? skiff_err_wrap(err, "shard") : 0;
}
