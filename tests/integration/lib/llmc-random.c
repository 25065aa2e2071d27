/* A random GPT-2 checkpoint in llm.c's format, and random token shards, for
 * tests/integration/trainer-llmc.sh. Written independently of skiff-train's
 * own code (its own header writer, parameter sizes and generator), so the
 * test compares two implementations on a file neither of them made.
 *
 *   llmc-random ckpt OUT.bin SEED maxT V L NH C Vp [bf16|bf16-as-fp32]
 *       every parameter random (normal; LayerNorm gains around 1), padded
 *       vocabulary rows zero. bf16: version 5 with bf16 parameters;
 *       bf16-as-fp32: version 3 holding the same values widened to fp32.
 *   llmc-random shard OUT.bin SEED N V [P]
 *       N tokens uniform in [0, V), llm.c's shard header; with P, a random
 *       sequence of P tokens repeated (text a model can learn from in a few
 *       steps, so that training differences show in the loss).
 * Built by the test with gcc; no skiff headers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state;

static uint64_t next64(void)
{
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(void)
{
    return ((next64() >> 11) + 0.5) / 9007199254740992.0;
}

static float normal(float std)
{
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()) * std);
}

static FILE *out_file(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static int mode; /* 0 fp32, 1 bf16, 2 bf16 values as fp32 */

static void put(FILE *f, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (mode == 1) {
        uint16_t h = (uint16_t)(bits >> 16);
        fwrite(&h, 2, 1, f);
        return;
    }
    if (mode == 2)
        bits &= 0xffff0000u;
    fwrite(&bits, 4, 1, f);
}

/* count values: N(mean, std) each */
static void tensor(FILE *f, size_t count, float mean, float std)
{
    for (size_t i = 0; i < count; i++)
        put(f, mean + normal(std));
}

int main(int argc, char **argv)
{
    if (argc >= 6 && !strcmp(argv[1], "shard")) {
        state = strtoull(argv[3], NULL, 10);
        int32_t h[256] = {20240520, 1, atoi(argv[4])};
        int V = atoi(argv[5]), P = argc > 6 ? atoi(argv[6]) : 0;
        uint16_t *period = P > 0 ? malloc((size_t)P * 2) : NULL;
        for (int i = 0; i < P; i++)
            period[i] = (uint16_t)(next64() % (uint64_t)V);
        FILE *f = out_file(argv[2]);
        fwrite(h, 4, 256, f);
        for (int i = 0; i < h[2]; i++) {
            uint16_t t = P > 0 ? period[i % P] : (uint16_t)(next64() % (uint64_t)V);
            fwrite(&t, 2, 1, f);
        }
        free(period);
        return fclose(f) != 0;
    }
    if (argc < 10 || strcmp(argv[1], "ckpt")) {
        fprintf(stderr, "usage: llmc-random ckpt OUT.bin SEED maxT V L NH C Vp [bf16|bf16-as-fp32]\n"
                        "       llmc-random shard OUT.bin SEED N V [P]\n");
        return 2;
    }
    state = strtoull(argv[3], NULL, 10);
    size_t T = atoi(argv[4]), V = atoi(argv[5]), L = atoi(argv[6]), NH = atoi(argv[7]);
    size_t C = atoi(argv[8]), Vp = atoi(argv[9]);
    if (argc > 10)
        mode = !strcmp(argv[10], "bf16") ? 1 : 2;
    int32_t h[256] = {20240326,   mode == 1 ? 5 : 3, (int32_t)T, (int32_t)V,
                      (int32_t)L, (int32_t)NH,       (int32_t)C, (int32_t)Vp};
    FILE *f = out_file(argv[2]);
    fwrite(h, 4, 256, f);
    tensor(f, V * C, 0, 0.02f);         /* wte: real rows */
    tensor(f, (Vp - V) * C, 0, 0);      /* wte: padding rows are zero */
    tensor(f, T * C, 0, 0.01f);         /* wpe */
    tensor(f, L * C, 1, 0.1f);          /* ln1w */
    tensor(f, L * C, 0, 0.02f);         /* ln1b */
    tensor(f, L * 3 * C * C, 0, 0.02f); /* qkvw */
    tensor(f, L * 3 * C, 0, 0.02f);     /* qkvb */
    tensor(f, L * C * C, 0, 0.02f);     /* attprojw */
    tensor(f, L * C, 0, 0.02f);         /* attprojb */
    tensor(f, L * C, 1, 0.1f);          /* ln2w */
    tensor(f, L * C, 0, 0.02f);         /* ln2b */
    tensor(f, L * 4 * C * C, 0, 0.02f); /* fcw */
    tensor(f, L * 4 * C, 0, 0.02f);     /* fcb */
    tensor(f, L * C * 4 * C, 0, 0.02f); /* fcprojw */
    tensor(f, L * C, 0, 0.02f);         /* fcprojb */
    tensor(f, C, 1, 0.1f);              /* lnfw */
    tensor(f, C, 0, 0.02f);             /* lnfb */
    return fclose(f) != 0;
}
