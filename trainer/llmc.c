/* llm.c's GPT-2 checkpoint format: see llmc.h. */
#include "llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "fdio.h"

/* Far above any GPT-2 (124M: maxT 1024, Vp 50304, L 12, C 768; 1.5B: L 48,
 * C 1600), low enough that the parameter count cannot overflow. */
#define MAX_T (1 << 20)
#define MAX_V (1 << 24)
#define MAX_L (1 << 12)
#define MAX_C (1 << 16)

void llmc_shape_str(const struct gpt2_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "maxT=%d V=%d L=%d NH=%d C=%d Vp=%d", c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads,
             c->channels, c->padded_vocab_size);
}

int llmc_parse_header(const int32_t h[LLMC_HEADER_INTS], uint64_t file_bytes, struct gpt2_config *cfg, int *version,
                      skiff_err *err)
{
    if (h[0] != LLMC_MAGIC) return skiff_error(err, 0, "magic %d is not llm.c's checkpoint magic %d", h[0], LLMC_MAGIC);
    if (h[1] != LLMC_VERSION_FP32 && h[1] != LLMC_VERSION_BF16)
        return skiff_error(err, 0,
                           "llm.c checkpoint version %d: this build reads 3 (fp32) and "
                           "5 (bf16)",
                           h[1]);
    struct gpt2_config c = {.max_seq_len = h[2],
                            .vocab_size = h[3],
                            .num_layers = h[4],
                            .num_heads = h[5],
                            .channels = h[6],
                            .padded_vocab_size = h[7]};
    char shape[160];
    llmc_shape_str(&c, shape, sizeof shape);
    if (c.max_seq_len <= 0 || c.max_seq_len > MAX_T || c.vocab_size <= 0 || c.vocab_size > MAX_V || c.num_layers <= 0 ||
        c.num_layers > MAX_L || c.channels <= 0 || c.channels > MAX_C || c.num_heads <= 0 ||
        c.padded_vocab_size < c.vocab_size || c.padded_vocab_size > MAX_V)
        return skiff_error(err, 0, "header shape %s is out of range", shape);
    if (c.channels % c.num_heads) return skiff_error(err, 0, "header shape %s: C is not a multiple of NH", shape);
    uint64_t n = gpt2_param_layout(&c, NULL, NULL);
    uint64_t want = LLMC_HEADER_BYTES + n * (h[1] == LLMC_VERSION_FP32 ? 4 : 2);
    if (file_bytes != want)
        return skiff_error(err, 0, "%llu bytes, but shape %s in %s needs %llu (%llu parameters)%s",
                           (unsigned long long)file_bytes, shape, h[1] == 3 ? "fp32" : "bf16", (unsigned long long)want,
                           (unsigned long long)n, file_bytes < want ? ": truncated?" : "");
    *cfg = c;
    *version = h[1];
    return 0;
}

static int open_checked(const char *path, struct gpt2_config *cfg, int *version, skiff_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skiff_error(err, errno, "open %s", path);
    struct stat st;
    int32_t h[LLMC_HEADER_INTS];
    if (fstat(fd, &st) < 0) {
        skiff_error(err, errno, "stat %s", path);
    } else if (!S_ISREG(st.st_mode) || st.st_size < LLMC_HEADER_BYTES) {
        skiff_error(err, 0, "%s: not an llm.c checkpoint (shorter than its 1024-byte header)", path);
    } else if (skiff_read_all(fd, h, sizeof h) < 0) {
        skiff_error(err, errno, "read %s", path);
    } else if (llmc_parse_header(h, (uint64_t)st.st_size, cfg, version, err) < 0) {
        skiff_err_wrap(err, "%s", path);
    } else {
        return fd;
    }
    close(fd);
    return -1;
}

int llmc_peek(const char *path, struct gpt2_config *cfg, int *version, skiff_err *err)
{
    int fd = open_checked(path, cfg, version, err);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

int llmc_load(const char *path, const struct gpt2_config *want, float *params, skiff_err *err)
{
    struct gpt2_config c;
    int version;
    cleanup_close int fd = open_checked(path, &c, &version, err);
    if (fd < 0) return -1;
    if (memcmp(&c, want, sizeof c)) {
        char a[160], b[160];
        llmc_shape_str(&c, a, sizeof a);
        llmc_shape_str(want, b, sizeof b);
        return skiff_error(err, 0, "%s holds %s, this run wants %s", path, a, b);
    }
    size_t n = gpt2_param_layout(&c, NULL, NULL);
    if (version == LLMC_VERSION_FP32) {
        if (skiff_read_all(fd, params, n * sizeof(float)) < 0) return skiff_error(err, errno, "read %s", path);
        return 0;
    }
    /* bf16: the upper half of an fp32; read in pieces, widen in place from
     * the end of each piece */
    enum { PIECE = 1 << 20 };
    uint16_t *buf = malloc(PIECE * sizeof *buf);
    if (!buf) return skiff_error(err, ENOMEM, "%s", path);
    for (size_t i = 0; i < n; i += PIECE) {
        size_t k = n - i < PIECE ? n - i : PIECE;
        if (skiff_read_all(fd, buf, k * sizeof *buf) < 0) {
            free(buf);
            return skiff_error(err, errno, "read %s", path);
        }
        for (size_t j = 0; j < k; j++) {
            uint32_t bits = (uint32_t)buf[j] << 16;
            memcpy(&params[i + j], &bits, sizeof bits);
        }
    }
    free(buf);
    return 0;
}

static uint16_t to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
}

struct llmc_write {
    const int32_t *h;
    const float *params;
    size_t n;
    int version;
};

static int fill_llmc(int fd, void *ctx)
{
    const struct llmc_write *w = ctx;
    if (skiff_write_all(fd, w->h, LLMC_HEADER_BYTES) < 0) return -1;
    if (w->version == LLMC_VERSION_FP32) return skiff_write_all(fd, w->params, w->n * sizeof(float));
    enum { PIECE = 1 << 16 };
    uint16_t buf[PIECE];
    for (size_t i = 0; i < w->n; i += PIECE) {
        size_t k = w->n - i < PIECE ? w->n - i : PIECE;
        for (size_t j = 0; j < k; j++) buf[j] = to_bf16(w->params[i + j]);
        if (skiff_write_all(fd, buf, k * sizeof *buf) < 0) return -1;
    }
    return 0;
}

int llmc_save(const char *path, const struct gpt2_config *cfg, const float *params, int version, skiff_err *err)
{
    int32_t h[LLMC_HEADER_INTS] = {LLMC_MAGIC,      version,        cfg->max_seq_len, cfg->vocab_size,
                                   cfg->num_layers, cfg->num_heads, cfg->channels,    cfg->padded_vocab_size};
    struct llmc_write w = {h, params, gpt2_param_layout(cfg, NULL, NULL), version};
    return skiff_atomic_write_file(path, NULL, fill_llmc, &w, err);
}
