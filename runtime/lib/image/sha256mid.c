/* SHA-256 with its chaining state read and resumed (sha256mid.h).
 *
 * OpenSSL 3 hides the state behind EVP, which has no call that gives or
 * sets it; the low-level SHA256_Init/Update/Final (deprecated in 3.0, still
 * there, and running the same SHA-NI / AVX2 block code as EVP) work on a
 * SHA256_CTX whose fields are public: h[8], the bit count Nl/Nh, the
 * partial block and its length. This file alone uses them, so the
 * deprecation is silenced here only, not for the project. Writing SHA-256
 * by hand instead would give up that block code, which is most of the
 * index pass's hashing time. */
#define OPENSSL_SUPPRESS_DEPRECATED

#include "sha256mid.h"

#include <string.h>

void skiff_sha256mid_init(struct skiff_sha256mid *m)
{
    SHA256_Init(&m->c);
    m->len = 0;
}

void skiff_sha256mid_update(struct skiff_sha256mid *m, const void *data, size_t n)
{
    if (n) {
        SHA256_Update(&m->c, data, n);
        m->len += n;
    }
}

void skiff_sha256mid_state(const struct skiff_sha256mid *m, uint32_t h[8])
{
    /* (the partial block, m->c.num bytes, is not in h yet) */
    memcpy(h, m->c.h, 8 * sizeof(uint32_t));
}

void skiff_sha256mid_final(struct skiff_sha256mid *m, unsigned char md[32])
{
    SHA256_Final(md, &m->c);
}

/* A context as it stands after off bytes (a multiple of 64) of a message
 * whose chaining value there is h. */
static int resume(SHA256_CTX *c, const uint32_t h[8], uint64_t off)
{
    if (off % SKIFF_SHA256_BLOCK || off >> 60)
        return -1;
    SHA256_Init(c);
    memcpy(c->h, h, sizeof(c->h));
    c->Nl = (SHA_LONG)(off << 3);
    c->Nh = (SHA_LONG)(off >> 29);
    return 0;
}

int skiff_sha256mid_check(const uint32_t from[8], uint64_t off, const void *buf, size_t n, const uint32_t to[8])
{
    SHA256_CTX c;
    if (n % SKIFF_SHA256_BLOCK || resume(&c, from, off) < 0)
        return -1;
    SHA256_Update(&c, buf, n);
    return c.num == 0 && memcmp(c.h, to, sizeof(c.h)) == 0 ? 0 : -1;
}

int skiff_sha256mid_check_end(const uint32_t from[8], uint64_t off, const void *buf, size_t n,
                              const unsigned char md[32])
{
    SHA256_CTX c;
    unsigned char got[SHA256_DIGEST_LENGTH];
    if (resume(&c, from, off) < 0)
        return -1;
    SHA256_Update(&c, buf, n);
    SHA256_Final(got, &c);
    return memcmp(got, md, sizeof(got)) == 0 ? 0 : -1;
}
