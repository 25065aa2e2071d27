/* llm.c token shards as the trainer reads them (trainer/data.c): a
 * 1024-byte header (magic 20240520, version 1, token count) and uint16
 * tokens, mapped and cut into (T+1)-token windows.
 * Input: byte 0 flags (bit 0 shuffle, bit 1 two shards, bit 2 write a good
 * magic, version and count over the file's header), byte 1 T (1..64),
 * byte 2 B (1..4), byte 3 the vocabulary and first window; then the file.
 * Properties: a failure says why; an accepted shard holds exactly its
 * header's count, every token below the vocabulary; the loader has as many
 * windows as the shards hold; a batch is the windows it names (in order,
 * or through a permutation of this epoch), read from the file's bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzlib.h"
#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4 || size > 4 + (1 << 17))
        return 0;
    bool shuffle = data[0] & 1, two = data[0] & 2, fix = data[0] & 4;
    int T = data[1] % 64 + 1, B = data[2] % 4 + 1;
    static const int vocabs[] = {256, 50257, 65536, 1000};
    int vocab = vocabs[data[3] & 3];
    uint64_t first = data[3] >> 2;
    size_t n = size - 4;
    uint8_t *file = malloc(n ? n : 1);
    if (!file)
        abort();
    memcpy(file, data + 4, n);
    if (fix && n >= SKIFF_SHARD_HEADER_BYTES) {
        int32_t h[3] = {SKIFF_SHARD_MAGIC, SKIFF_SHARD_VERSION, (int32_t)((n - SKIFF_SHARD_HEADER_BYTES) / 2)};
        memcpy(file, h, sizeof(h));
    }
    fuzz_write(0, "shard_000.bin", file, n);
    char pattern[4200];
    snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", fuzz_dir());
    if (two)
        fuzz_write(1, "shard_001.bin", file, n);
    else
        remove(fuzz_write(1, "shard_001.bin", "", 0));

    struct data_loader l;
    skiff_err err = {0};
    int rc = data_loader_open(&l, pattern, B, T, vocab, 1337, shuffle, &err);
    fuzz_check_failure(rc, &err, "data_loader_open");
    if (rc == 0) {
        size_t ntok = (n - SKIFF_SHARD_HEADER_BYTES) / 2;
        int32_t count;
        memcpy(&count, file + 8, 4);
        FUZZ_CHECK(n >= SKIFF_SHARD_HEADER_BYTES && (size_t)(uint32_t)count == ntok &&
                       SKIFF_SHARD_HEADER_BYTES + 2 * ntok == n,
                   "a shard of %zu bytes with count %d accepted", n, count);
        const uint8_t *tok = file + SKIFF_SHARD_HEADER_BYTES;
        for (size_t i = 0; i < ntok; i++)
            FUZZ_CHECK((tok[2 * i] | tok[2 * i + 1] << 8) < vocab, "token %zu is outside the vocabulary", i);
        size_t per = ntok > (size_t)T ? (ntok - 1) / (size_t)T : 0;
        FUZZ_CHECK(l.num_shards == (two ? 2u : 1u) && l.num_windows == per * l.num_shards, "%zu windows, want %zu",
                   l.num_windows, per * l.num_shards);
        int *in = calloc((size_t)B * T, sizeof(int)), *tg = calloc((size_t)B * T, sizeof(int));
        if (!in || !tg)
            abort();
        FUZZ_CHECK(data_loader_batch(&l, first, in, tg, &err) == 0, "batch: %s", err.msg);
        if (shuffle) {
            char *seen = calloc(l.num_windows, 1);
            for (size_t i = 0; i < l.num_windows; i++) {
                FUZZ_CHECK(l.perm[i] < l.num_windows && !seen[l.perm[i]], "not a permutation at %zu", i);
                seen[l.perm[i]] = 1;
            }
            free(seen);
        }
        /* windows of the last epoch the batch touched; the earlier ones are
         * checked when the batch stays in one epoch */
        long last_epoch = (long)((first + (uint64_t)B - 1) / l.num_windows);
        for (int b = 0; b < B; b++) {
            uint64_t g = first + (uint64_t)b;
            if (shuffle && (long)(g / l.num_windows) != last_epoch)
                continue;
            size_t w = (size_t)(g % l.num_windows);
            if (shuffle)
                w = l.perm[w];
            size_t in_shard = w % per; /* both shards hold the same tokens */
            for (int t = 0; t < T; t++) {
                size_t k = in_shard * (size_t)T + (size_t)t;
                int x = tok[2 * k] | tok[2 * k + 1] << 8, y = tok[2 * k + 2] | tok[2 * k + 3] << 8;
                FUZZ_CHECK(in[b * T + t] == x && tg[b * T + t] == y, "batch %d position %d: window %zu differs", b, t,
                           w);
            }
        }
        free(in);
        free(tg);
        data_loader_close(&l);
    }
    free(file);
    return 0;
}
