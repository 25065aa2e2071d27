/* llm.c's GPT-2 checkpoints (trainer/llmc.c), as `train --init-from`,
 * `sample --init-from` and the tests read them: a 256-int32 header (magic
 * 20240326, version 3 fp32 or 5 bf16, maxT, V, L, NH, C, Vp), then the
 * parameters in llm.c's order.
 * Input: byte 0 flags (bit 0 writes llm.c's magic over the header, bit 1
 * version 5 instead of 3 when bit 0 is set); the rest is FILE.bin.
 * Properties: a failure says why; a header peek accepts describes a
 * consistent model (gpt2_config_check) whose parameters fill the file
 * exactly; loading them into a buffer of that size then succeeds, and a
 * file written back (fp32) peeks as the same model. */
#include <stdlib.h>
#include <string.h>

#include "fuzzlib.h"
#include "llmc.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 + (1 << 18))
        return 0;
    size_t n = size - 1;
    uint8_t *file = (uint8_t *)fuzz_str(data + 1, n); /* a copy the target may write */
    if ((data[0] & 1) && n >= 8) {
        int32_t h[2] = {LLMC_MAGIC, data[0] & 2 ? LLMC_VERSION_BF16 : LLMC_VERSION_FP32};
        memcpy(file, h, sizeof(h));
    }
    const char *path = fuzz_write(0, "model.bin", file, n);
    free(file);

    struct gpt2_config cfg;
    int version = 0;
    skiff_err err = {0};
    int rc = llmc_peek(path, &cfg, &version, &err);
    fuzz_check_failure(rc, &err, "llmc_peek");
    if (rc < 0)
        return 0;
    FUZZ_CHECK(gpt2_config_check(&cfg, &err) == 0, "accepted shape fails the model check: %s", err.msg);
    FUZZ_CHECK(version == LLMC_VERSION_FP32 || version == LLMC_VERSION_BF16, "version %d accepted", version);
    size_t count = gpt2_param_layout(&cfg, NULL, NULL);
    size_t elem = version == LLMC_VERSION_FP32 ? 4 : 2;
    FUZZ_CHECK(count <= n / elem && LLMC_HEADER_BYTES + count * elem == n,
               "%zu parameters of %zu bytes accepted in a file of %zu bytes", count, elem, n);
    float *p = malloc(count * sizeof(float));
    if (!p)
        abort();
    rc = llmc_load(path, &cfg, p, &err);
    FUZZ_CHECK(rc == 0, "peek accepted, load refused: %s", err.msg);
    const char *out = fuzz_write(1, "again.bin", "", 0);
    rc = llmc_save(out, &cfg, p, LLMC_VERSION_FP32, &err);
    fuzz_check_failure(rc, &err, "llmc_save");
    struct gpt2_config again;
    if (rc == 0) {
        FUZZ_CHECK(llmc_peek(out, &again, &version, &err) == 0 && !memcmp(&again, &cfg, sizeof(cfg)) &&
                       version == LLMC_VERSION_FP32,
                   "a written checkpoint does not read back: %s", err.msg);
    }
    free(p);
    return 0;
}
