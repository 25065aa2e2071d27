/* digest: sha256 content digests ("sha256:<64 hex>") as the registry API and
 * OCI layouts name blobs. OpenSSL's EVP does the hashing. */
#ifndef SKIFF_DIGEST_H
#define SKIFF_DIGEST_H

#include <stddef.h>

#include "error.h"

#define SKIFF_DIGEST_LEN 72 /* "sha256:" + 64 hex + NUL, rounded up */

struct skiff_sha256 {
    void *ctx; /* EVP_MD_CTX */
};

int skiff_sha256_init(struct skiff_sha256 *h, skiff_err *err);
void skiff_sha256_update(struct skiff_sha256 *h, const void *data, size_t len);
/* Writes "sha256:<hex>" to out and frees the context. */
void skiff_sha256_final(struct skiff_sha256 *h, char out[SKIFF_DIGEST_LEN]);
/* The 32 bytes of the digest into out and frees the context; -1 when
 * there was none. */
int skiff_sha256_final_raw(struct skiff_sha256 *h, unsigned char out[32]);
/* "sha256:<hex>" of the 32 bytes of a digest. */
void skiff_digest_text(const unsigned char md[32], char out[SKIFF_DIGEST_LEN]);
/* Frees the context without a result (error paths); safe twice. */
void skiff_sha256_abort(struct skiff_sha256 *h);

/* Digest of a memory buffer / of a whole file. */
int skiff_digest_buf(const void *data, size_t len, char out[SKIFF_DIGEST_LEN], skiff_err *err);
int skiff_digest_file(const char *path, char out[SKIFF_DIGEST_LEN], skiff_err *err);

#endif
