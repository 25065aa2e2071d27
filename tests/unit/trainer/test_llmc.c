/* llm.c's checkpoint format (trainer/llmc.c) and `train --init-from`: header
 * checks, fp32 round trip, bf16 widening, the shape taken from the file.
 * (Against llm.c itself: tests/integration/trainer-llmc.sh.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmc.h"
#include "ckpt.h"
#include "opts.h"
#include "scratch.h"

SCRATCH_SUITE(llmc, "skiff-llmc-test");

static const struct gpt2_config small = {
    .max_seq_len = 16, .vocab_size = 300, .padded_vocab_size = 320, .num_layers = 2, .num_heads = 2, .channels = 8};

static void hdr(int32_t h[LLMC_HEADER_INTS], int version, const struct gpt2_config *c)
{
    memset(h, 0, LLMC_HEADER_BYTES);
    h[0] = LLMC_MAGIC;
    h[1] = version;
    h[2] = c->max_seq_len;
    h[3] = c->vocab_size;
    h[4] = c->num_layers;
    h[5] = c->num_heads;
    h[6] = c->channels;
    h[7] = c->padded_vocab_size;
}

Test(llmc, header_checks_name_what_is_wrong)
{
    int32_t h[LLMC_HEADER_INTS];
    struct gpt2_config c;
    int v;
    skiff_err err;
    uint64_t n = gpt2_param_layout(&small, NULL, NULL), size = LLMC_HEADER_BYTES + 4 * n;
    hdr(h, 3, &small);
    cr_assert_eq(llmc_parse_header(h, size, &c, &v, &err), 0, "%s", err.msg);
    cr_assert(!memcmp(&c, &small, sizeof c) && v == 3);
    hdr(h, 5, &small);
    cr_assert_eq(llmc_parse_header(h, LLMC_HEADER_BYTES + 2 * n, &c, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v, 5);
    static const struct {
        int field, value;
        const char *msg;
    } bad[] = {
        {0, 20240520, "not llm.c's checkpoint magic"}, /* a shard's magic */
        {1, 4, "version 4"},
        {2, 0, "out of range"},
        {3, -1, "out of range"},
        {5, 3, "C is not a multiple of NH"},
        {7, 299, "out of range"}, /* Vp < V */
        {6, 1 << 20, "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdr(h, 3, &small);
        h[bad[i].field] = bad[i].value;
        cr_expect_eq(llmc_parse_header(h, size, &c, &v, &err), -1, "case %zu accepted", i);
        cr_expect(strstr(err.msg, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
    }
    hdr(h, 3, &small);
    cr_expect_eq(llmc_parse_header(h, size - 4, &c, &v, &err), -1);
    cr_expect(strstr(err.msg, "truncated") != NULL, "%s", err.msg);
    cr_expect_eq(llmc_parse_header(h, size + 4, &c, &v, &err), -1);
    cr_expect(strstr(err.msg, "needs") != NULL, "%s", err.msg);
}

Test(llmc, fp32_round_trip_and_bf16_widening)
{
    size_t n = gpt2_param_layout(&small, NULL, NULL);
    float *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((int)(i * 2654435761u % 2001) - 1000) * 1e-3f;
    char path[128];
    snprintf(path, sizeof path, "%s/a.bin", dir);
    skiff_err err;
    cr_assert_eq(llmc_save(path, &small, p, LLMC_VERSION_FP32, &err), 0, "%s", err.msg);
    struct gpt2_config c;
    int v;
    cr_assert_eq(llmc_peek(path, &c, &v, &err), 0, "%s", err.msg);
    cr_assert(!memcmp(&c, &small, sizeof c) && v == LLMC_VERSION_FP32);
    cr_assert_eq(llmc_load(path, &small, q, &err), 0, "%s", err.msg);
    cr_assert(!memcmp(p, q, n * sizeof *p), "fp32 round trip is exact");

    /* another shape is refused, naming both */
    struct gpt2_config other = small;
    other.num_layers = 3;
    cr_assert_eq(llmc_load(path, &other, q, &err), -1);
    cr_assert(strstr(err.msg, "L=2") && strstr(err.msg, "L=3"), "%s", err.msg);

    /* bf16: the upper 16 bits of each value */
    snprintf(path, sizeof path, "%s/b.bin", dir);
    FILE *f = fopen(path, "wb");
    int32_t h[LLMC_HEADER_INTS];
    hdr(h, 5, &small);
    fwrite(h, sizeof h, 1, f);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &p[i], 4);
        uint16_t top = (uint16_t)(bits >> 16);
        fwrite(&top, 2, 1, f);
    }
    fclose(f);
    cr_assert_eq(llmc_load(path, &small, q, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &p[i], 4);
        memcpy(&b, &q[i], 4);
        cr_assert_eq(b, a & 0xffff0000u, "value %zu", i);
    }
    /* --bf16 export: rounded to nearest even, read back as those values */
    snprintf(path, sizeof path, "%s/c.bin", dir);
    p[0] = 1.00390625f; /* 1 + 2^-8: exactly halfway, rounds to even (1.0) */
    p[1] = 1.01171875f; /* 1 + 3*2^-8: halfway, rounds up to 1 + 2^-6 */
    p[2] = -2.0f;
    cr_assert_eq(llmc_save(path, &small, p, LLMC_VERSION_BF16, &err), 0, "%s", err.msg);
    cr_assert_eq(llmc_peek(path, &c, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v, LLMC_VERSION_BF16);
    cr_assert_eq(llmc_load(path, &small, q, &err), 0, "%s", err.msg);
    cr_expect(q[0] == 1.0f && q[1] == 1.015625f && q[2] == -2.0f, "%g %g %g", q[0], q[1], q[2]);
    for (size_t i = 3; i < n; i++)
        cr_assert(fabsf(q[i] - p[i]) <= fabsf(p[i]) * 0x1p-8f, "value %zu: %g -> %g", i, p[i], q[i]);
    free(p);
    free(q);
}

/* train_opts_parse of a fixed command line plus up to four more words */
static int parse(struct train_opts *o, skiff_err *err, const char *a1, const char *a2, const char *a3, const char *a4)
{
    const char *words[] = {"train", "--data", "x", "--batch", "1", "--seq", "8", "--steps", "1", a1, a2, a3, a4};
    static char *argv[14];
    int argc = 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0] && words[i]; i++)
        argv[argc++] = strdup(words[i]); /* getopt may permute; the test leaks them */
    argv[argc] = NULL;
    return train_opts_parse(argc, argv, o, err);
}

Test(llmc, init_from_gives_the_shape_and_fills_the_weights)
{
    char path[128];
    snprintf(path, sizeof path, "%s/gpt2_small.bin", dir);
    size_t n = gpt2_param_layout(&small, NULL, NULL);
    float *p = calloc(n, sizeof *p), *q = calloc(n, sizeof *q);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)i;
    skiff_err err;
    cr_assert_eq(llmc_save(path, &small, p, LLMC_VERSION_FP32, &err), 0);

    struct train_opts o;
    cr_assert_eq(parse(&o, &err, "--init-from", path, NULL, NULL), 0, "%s", err.msg);
    cr_assert(!memcmp(&o.cfg, &small, sizeof small), "shape from the file");
    cr_assert_str_eq(o.model, "gpt2_small.bin");
    cr_assert_eq(train_init_params(&o, 0, q, &err), 0, "%s", err.msg);
    cr_assert(!memcmp(p, q, n * sizeof *p), "rank 0 reads the weights");
    cr_assert_eq(train_init_params(&o, 1, q, &err), 0);
    cr_assert_eq(q[5], 0.0f, "other ranks wait for rank 0's broadcast");

    cr_assert_eq(parse(&o, &err, "--init-from", path, "--model", "tiny"), -1);
    cr_assert(strstr(err.msg, "but --model tiny") != NULL, "%s", err.msg);
    cr_assert_eq(parse(&o, &err, NULL, NULL, NULL, NULL), -1);
    cr_assert(strstr(err.msg, "--model NAME or --init-from FILE.bin is required"), "%s", err.msg);
    /* llm.c's optimizer and data order as flags */
    cr_assert_eq(parse(&o, &err, "--model", "tiny", "--beta2", "0.999"), 0, "%s", err.msg);
    cr_assert_float_eq(o.beta2, 0.999f, 1e-7);
    cr_assert_eq(parse(&o, &err, "--model", "tiny", "--data-order", "sequential"), 0);
    cr_assert_eq(o.sequential, 1);
    cr_assert_eq(parse(&o, &err, "--model", "tiny", "--data-order", "random"), -1);
    cr_assert_eq(parse(&o, &err, "--model", "tiny", "--beta1", "1"), -1);
    free(p);
    free(q);
}
