/* sha256mid: SHA-256 whose chaining state is read, and resumed, at the
 * message's 64-byte block boundaries (lazy images: one hash of a layer's
 * blob gives both its digest and the check of every span, lazy_int.h).
 *
 * SHA-256 is Merkle–Damgård: after the first 64k bytes of a message its
 * whole state is the eight 32-bit words h[0..7] (the chaining value) and
 * the count 64k. A run of bytes from offset a to offset b (both multiples
 * of 64) is then the bytes that take the state recorded at a to the one
 * recorded at b: finding other bytes that do is finding a second preimage
 * of SHA-256's compression chain. A run that ends the message is checked
 * against the message's digest instead (the padding is computed, not
 * recorded). */
#ifndef SKIFF_SHA256MID_H
#define SKIFF_SHA256MID_H

#include <openssl/sha.h>
#include <stddef.h>
#include <stdint.h>

#define SKIFF_SHA256_BLOCK 64u

/* A running SHA-256 (OpenSSL's context: its SHA-NI / AVX2 block code). */
struct skiff_sha256mid {
    SHA256_CTX c;
    uint64_t len; /* bytes fed so far */
};

void skiff_sha256mid_init(struct skiff_sha256mid *m);
void skiff_sha256mid_update(struct skiff_sha256mid *m, const void *data, size_t n);
/* The chaining value after the first (len & ~63) bytes fed. */
void skiff_sha256mid_state(const struct skiff_sha256mid *m, uint32_t h[8]);
/* The digest of every byte fed; m must be initialised again to be used. */
void skiff_sha256mid_final(struct skiff_sha256mid *m, unsigned char md[32]);

/* 0 when buf (n bytes, found at offset off of a message) takes SHA-256
 * from the chaining value from (at off) to to (at off + n); -1 when it
 * does not, or when off or n is not a multiple of 64. */
int skiff_sha256mid_check(const uint32_t from[8], uint64_t off, const void *buf, size_t n, const uint32_t to[8]);
/* 0 when buf (n bytes from offset off, a multiple of 64, to the message's
 * end) with the chaining value from at off gives the digest md; else -1. */
int skiff_sha256mid_check_end(const uint32_t from[8], uint64_t off, const void *buf, size_t n,
                              const unsigned char md[32]);

#endif
