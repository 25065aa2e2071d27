#include "digest.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int skiff_sha256_init(struct skiff_sha256 *h, skiff_err *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        h->ctx = NULL;
        return skiff_error(err, ENOMEM, "sha256 init");
    }
    h->ctx = ctx;
    return 0;
}

void skiff_sha256_update(struct skiff_sha256 *h, const void *data, size_t len)
{
    if (h->ctx)
        EVP_DigestUpdate(h->ctx, data, len);
}

int skiff_sha256_final_raw(struct skiff_sha256 *h, unsigned char out[32])
{
    unsigned int n = 0;
    int ok = h->ctx && EVP_DigestFinal_ex(h->ctx, out, &n) == 1 && n == 32;
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
    return ok ? 0 : -1;
}

void skiff_digest_text(const unsigned char md[32], char out[SKIFF_DIGEST_LEN])
{
    int off = snprintf(out, SKIFF_DIGEST_LEN, "sha256:");
    for (unsigned i = 0; i < 32; i++)
        off += snprintf(out + off, (size_t)(SKIFF_DIGEST_LEN - off), "%02x", md[i]);
}

void skiff_sha256_final(struct skiff_sha256 *h, char out[SKIFF_DIGEST_LEN])
{
    unsigned char md[32];
    out[0] = '\0';
    if (skiff_sha256_final_raw(h, md) < 0)
        return;
    skiff_digest_text(md, out);
}

void skiff_sha256_abort(struct skiff_sha256 *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

int skiff_digest_buf(const void *data, size_t len, char out[SKIFF_DIGEST_LEN], skiff_err *err)
{
    struct skiff_sha256 h;
    if (skiff_sha256_init(&h, err) < 0)
        return -1;
    skiff_sha256_update(&h, data, len);
    skiff_sha256_final(&h, out);
    return 0;
}

int skiff_digest_file(const char *path, char out[SKIFF_DIGEST_LEN], skiff_err *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    struct skiff_sha256 h;
    if (skiff_sha256_init(&h, err) < 0)
        return -1;
    cleanup_free char *buf = malloc(1 << 20);
    if (!buf) {
        skiff_sha256_abort(&h);
        return skiff_error(err, ENOMEM, "digest %s", path);
    }
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            skiff_sha256_abort(&h);
            return skiff_error(err, e, "read %s", path);
        }
        if (n == 0)
            break;
        skiff_sha256_update(&h, buf, (size_t)n);
    }
    skiff_sha256_final(&h, out);
    return 0;
}
