/* Private to layer application (layer.h): layer.c parses the tar and
 * writes the entries; layerdec.c reads, hashes and decompresses the blob in
 * a thread of its own and streams the tar to it through a socketpair. */
#ifndef SKIFF_LAYER_INT_H
#define SKIFF_LAYER_INT_H

#include <stdbool.h>
#include <sys/types.h>

#include "digest.h"

#define READ_CHUNK (1 << 20)

/* The blob as the decoder reads it. */
struct skiff_layer_reader {
    int fd;
    char *buf;
    ssize_t pending; /* bytes in buf already read (and hashed), to hand out first */
    struct skiff_sha256 hash;
    bool hashing;
    unsigned long long bytes;
    /* A file still being downloaded: at its current end, wait for more. */
    int (*wait_more)(void *ctx, unsigned long long have);
    void *wait_ctx;
};

/* The blob is read, hashed and decompressed (libarchive filters, "raw"
 * format) by a second thread and streamed through a socketpair to this one,
 * which parses the tar and writes files: on two cores gzip/zstd decoding then
 * overlaps with the file writes instead of adding to them. */
struct skiff_layer_decoder {
    struct skiff_layer_reader r;
    int sock; /* write end */
    const char *path;
    char error[512];
    bool digest_checked;
    char got[SKIFF_DIGEST_LEN];
};

/* The decoder thread (pthread_create with a struct skiff_layer_decoder):
 * reads the blob to its end, decompresses it onto d->sock (then shuts it
 * down), hashes all of it; d->error and d->got say how it went. */
void *skiff_layer_decoder_main(void *arg);

#endif
