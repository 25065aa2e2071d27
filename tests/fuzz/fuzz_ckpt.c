/* skiff-train checkpoints (trainer/ckpt.c): a 256-byte header (magic
 * SKIFFCK1, version, model config, world, ZeRO stage, step, data position,
 * parameter count, optimizer range), the parameters, AdamW m and v. The
 * trainer's resume, `skiff-train sample` and `skiff-train compare` read
 * them: peek at the header, allocate what it says, load.
 * Input: byte 0 bit 0 writes a good magic and version over the header;
 * the rest is DIR/rank-0.ckpt.
 * Properties: a failure says why; a header peek accepts describes a model
 * whose parameters fit its parameter count, an optimizer range inside it,
 * and a file that holds them; loading into buffers of the sizes it
 * says then succeeds, and reading the model's parameters from them stays in
 * bounds (what sample and compare do). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "fuzzlib.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 + (1 << 18))
        return 0;
    size_t n = size - 1;
    uint8_t *file = (uint8_t *)fuzz_str(data + 1, n); /* a copy the target may write */
    if ((data[0] & 1) && n >= 12) {
        int32_t version = 1;
        memcpy(file, "SKIFFCK1", 8);
        memcpy(file + 8, &version, 4);
    }
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/ckpt", fuzz_dir());
    mkdir(dir, 0700);
    fuzz_write(0, "ckpt/rank-0.ckpt", file, n);
    free(file);

    struct train_ckpt ck;
    memset(&ck, 0, sizeof(ck));
    skiff_err err = {0};
    int rc = train_ckpt_peek(dir, &ck, &err);
    fuzz_check_failure(rc, &err, "train_ckpt_peek");
    if (rc < 0)
        return 0;
    size_t layout = gpt2_param_layout(&ck.cfg, NULL, NULL);
    FUZZ_CHECK(layout <= ck.num_params, "a model of %zu parameters in a checkpoint of %zu", layout, ck.num_params);
    FUZZ_CHECK(ck.opt_off <= ck.num_params && ck.opt_len <= ck.num_params - ck.opt_off,
               "optimizer range %zu+%zu outside %zu parameters", ck.opt_off, ck.opt_len, ck.num_params);
    FUZZ_CHECK(ck.opt_len <= n / 8, "an optimizer range of %zu in a file of %zu bytes", ck.opt_len, n);
    int32_t has_params;
    memcpy(&has_params, data + 1 + 12, 4);
    /* a ZeRO-3 file holds its shard of the parameters (opt_len), others all */
    size_t held = ck.zero == 3 ? ck.opt_len : ck.num_params;
    FUZZ_CHECK(!has_params || held <= n / 4, "%zu parameters in a file of %zu bytes", held, n);
    if (!has_params)
        return 0; /* sample and compare stop at "holds no parameters" */

    /* what sample and compare do next */
    struct train_ckpt want = ck;
    want.params = calloc(ck.num_params ? ck.num_params : 1, sizeof(float));
    want.m = calloc(ck.opt_len ? ck.opt_len : 1, sizeof(float));
    want.v = calloc(ck.opt_len ? ck.opt_len : 1, sizeof(float));
    if (!want.params || !want.m || !want.v)
        abort();
    rc = train_ckpt_load(dir, &want, &err);
    fuzz_check_failure(rc, &err, "train_ckpt_load");
    if (rc == 0) {
        volatile float sum = 0;
        for (size_t i = 0; i < layout; i++)
            sum += want.params[i];
        (void)sum;
    }
    free(want.params);
    free(want.m);
    free(want.v);
    return 0;
}
