/* GPT-2's BPE (trainer/bpe.c): the compact vocabulary file `--tokenizer`
 * loads, the merge rules `tokenizer-import` reads, and encoding any text.
 * Input: byte 0 flags (bit 0: the rest is a vocab.bpe rules file, imported
 * against a fixed small encoder.json; else a compact file image; bit 1 writes
 * a good magic and version over the image), then the file, then "@@TEXT@@"
 * and a text to encode with what loaded.
 * Properties: a failure says why; with a vocabulary that loads, the
 * pre-split cuts the text into non-empty pieces that cover it, encoding
 * gives tokens below the vocabulary and never the end-of-text token, and
 * the tokens' bytes are the text again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "fuzzlib.h"

/* 256 one-byte tokens in GPT-2's byte alphabet, a few joined ones, EOT */
static const char *encoder_json(void)
{
    static char path[4200];
    if (path[0])
        return path;
    size_t cap = 1 << 14, n = 0;
    char *j = malloc(cap);
    if (!j)
        abort();
    n += (size_t)snprintf(j + n, cap - n, "{");
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, k = 0;
        for (int c = 0; c < b; c++)
            k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
        n += (size_t)snprintf(j + n, cap - n, "\"\\u%04x\": %d, ", printable ? b : 256 + k, b);
    }
    n += (size_t)snprintf(j + n, cap - n,
                          "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"ab\": 259, "
                          "\"aba\": 260, \"<|endoftext|>\": 261}");
    snprintf(path, sizeof(path), "%s", fuzz_write(2, "encoder.json", j, n));
    free(j);
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 + (1 << 18))
        return 0;
    struct fuzz_part part[2];
    size_t np = fuzz_split(data + 1, size - 1, "@@TEXT@@", part, 2);
    (void)np;
    const uint8_t *text = np == 2 ? part[1].p : (const uint8_t *)"";
    size_t tlen = np == 2 ? part[1].len : 0;
    skiff_err err = {0};
    struct bpe *b = NULL;
    if (data[0] & 1) {
        const char *merges = fuzz_write(0, "vocab.bpe", part[0].p, part[0].len);
        const char *out = fuzz_write(1, "out.bin", "", 0);
        int rc = bpe_import(encoder_json(), merges, out, &err);
        fuzz_check_failure(rc, &err, "bpe_import");
        if (rc == 0) {
            b = bpe_load(out, &err);
            FUZZ_CHECK(b, "an imported vocabulary does not load: %s", err.msg);
        }
    } else {
        uint8_t *img = malloc(part[0].len ? part[0].len : 1);
        if (!img)
            abort();
        memcpy(img, part[0].p, part[0].len);
        if ((data[0] & 2) && part[0].len >= 12) {
            uint32_t version = BPE_VERSION;
            memcpy(img, BPE_MAGIC, 8);
            memcpy(img + 8, &version, 4);
        }
        b = bpe_load_mem(img, part[0].len, &err);
        fuzz_check_failure(b ? 0 : -1, &err, "bpe_load_mem");
        free(img);
    }
    if (!b)
        return 0;

    for (size_t pos = 0; pos < tlen;) {
        size_t end = bpe_presplit((const char *)text, tlen, pos);
        FUZZ_CHECK(end > pos && end <= tlen, "piece at %zu ends at %zu of %zu", pos, end, tlen);
        pos = end;
    }
    uint16_t *tok = NULL;
    size_t n = 0, cap = 0;
    FUZZ_CHECK(bpe_encode(b, (const char *)text, tlen, &tok, &n, &cap, &err) == 0, "encode: %s", err.msg);
    uint8_t *back = malloc(tlen + 1);
    if (!back)
        abort();
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const unsigned char *s = bpe_token(b, tok[i], &len);
        FUZZ_CHECK(s && tok[i] != bpe_eot(b), "token %u at %zu (vocabulary %d, EOT %d)", tok[i], i, bpe_vocab_size(b),
                   bpe_eot(b));
        FUZZ_CHECK(at + len <= tlen, "the tokens hold more bytes than the text's %zu", tlen);
        memcpy(back + at, s, len);
        at += len;
    }
    FUZZ_CHECK(at == tlen && !memcmp(back, text, tlen), "decode(encode(text)) differs (%zu of %zu bytes)", at, tlen);
    free(back);
    free(tok);
    bpe_free(b);
    return 0;
}
