/* The tokenizers of skiff-train (tokenize, sample, decode): the byte
 * tokenizer (token = byte, vocabulary 256, EOT 0) and GPT-2's BPE (bpe.h,
 * vocabulary 50257, EOT 50256 = <|endoftext|>), behind one interface. */
#ifndef SKIFF_TRAINER_TOKENIZER_H
#define SKIFF_TRAINER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "error.h"

/* The byte tokenizer: token = byte value (vocab 256). Byte 0 (NUL, absent
 * from text) is the end-of-text token that separates documents. */
#define SKIFF_BYTE_EOT 0
size_t tok_encode_bytes(const char *text, size_t len, uint16_t *out);

/* File name of the converted GPT-2 vocabulary (scripts/fetch-gpt2-bpe). */
#define SKIFF_GPT2_BPE_FILE "gpt2-bpe.bin"

struct tokenizer {
    struct bpe *bpe; /* NULL: the byte tokenizer */
    int vocab;       /* 256, or the BPE file's vocabulary */
    int eot;         /* SKIFF_BYTE_EOT, or the BPE file's end-of-text token */
    char name[32];   /* "bytes", "gpt2" or "bpe" (a file given by path) */
    char path[4096]; /* the BPE file ("" for bytes) */
};

/* Finds the GPT-2 vocabulary: $SKIFF_GPT2_BPE, then
 * DIR_OF_SKIFF_TRAIN/../share/skiff/gpt2-bpe.bin (the build tree and an
 * installed tree alike), then $(PREFIX)/share/skiff/gpt2-bpe.bin. Returns 1
 * and fills path when found; 0 with the places looked at in where. */
int tokenizer_find_gpt2(char *path, size_t n, char *where, size_t wn);

/* 1 when name can name a tokenizer: bytes, gpt2, or a path (a '/' or
 * ".bin" in it); else a usage error, worded by TOKENIZER_NAME_ERROR. */
int tokenizer_name_ok(const char *name);
#define TOKENIZER_NAME_ERROR "--tokenizer '%s': use bytes, gpt2 or the path of a converted BPE file"

/* name: "bytes", "gpt2" (found as above; a clear error says how to get it
 * when it is missing) or the path of a compact BPE file. */
int tokenizer_open(struct tokenizer *t, const char *name, skiff_err *err);
void tokenizer_close(struct tokenizer *t);

/* Appends the tokens of text to *out (realloc'd; *n used, *cap allocated).
 * Never emits EOT. */
int tokenizer_encode(struct tokenizer *t, const char *text, size_t len, uint16_t **out, size_t *n, size_t *cap,
                     skiff_err *err);

/* The bytes of token id (NULL when out of range). */
const unsigned char *tokenizer_token(const struct tokenizer *t, int id, size_t *len);

#endif
