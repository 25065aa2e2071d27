/* Private to layer application (layer.h): layer.c parses the tar and
 * writes the entries; layerdec.c reads, hashes and decompresses the blob in
 * a thread of its own and hands the tar to it in buffers (a pipe in memory). */
#ifndef SKIFF_LAYER_INT_H
#define SKIFF_LAYER_INT_H

#include <archive.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

#include "digest.h"
#include "error.h"

struct archive_entry;

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

/* The decoded tar, from the decoder thread to the tar reader: a ring of
 * LAYER_PIPE_BUFS buffers of READ_CHUNK bytes that the decoder fills (inflate
 * writes into them) and libarchive reads in place, so no byte is copied on
 * the way (a socketpair copied each twice: ~12 % of an import's CPU). */
#define LAYER_PIPE_BUFS 4
struct skiff_layer_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *buf[LAYER_PIPE_BUFS];
    size_t len[LAYER_PIPE_BUFS];
    unsigned head, full; /* the oldest full buffer; how many are full */
    bool reading;        /* the reader holds buf[head] (returned on its next read) */
    bool writer_done, reader_done;
};

int skiff_layer_pipe_init(struct skiff_layer_pipe *p);
void skiff_layer_pipe_destroy(struct skiff_layer_pipe *p);
/* The decoder: a buffer to fill (NULL once the reader has stopped), then
 * pushed with its length; done when nothing more comes. */
char *skiff_layer_pipe_get(struct skiff_layer_pipe *p);
void skiff_layer_pipe_push(struct skiff_layer_pipe *p, size_t len);
void skiff_layer_pipe_writer_done(struct skiff_layer_pipe *p);
/* The reader: libarchive's read callback (client data: the pipe), and
 * done when it stops reading (the decoder then stops). */
la_ssize_t skiff_layer_pipe_read(struct archive *a, void *ud, const void **out);
void skiff_layer_pipe_reader_done(struct skiff_layer_pipe *p);

/* The blob is read, hashed and decompressed (libarchive filters, "raw"
 * format) by a second thread and handed through the pipe to this one,
 * which parses the tar and writes files: on two cores gzip/zstd decoding then
 * overlaps with the file writes instead of adding to them. */
struct skiff_layer_decoder {
    struct skiff_layer_reader r;
    struct skiff_layer_pipe *pipe;
    const char *path;
    char error[512];
    bool digest_checked;
    char got[SKIFF_DIGEST_LEN];
};

/* What the extraction policy makes of one tar entry, before anything is
 * written: the one place that decides which entries are refused, skipped
 * or changed. layer.c carries a plan out on a real tree; the lazy index
 * (lazyindex.c) records it and lazytree.c carries it out on a tree in
 * memory, so both apply the same policy. */
enum skiff_entry_kind {
    SKIFF_ENTRY_ROOT,     /* the root itself ("./"): nothing to do, its mode stays */
    SKIFF_ENTRY_SKIPPED,  /* a device node, socket or unknown type: counted, not made */
    SKIFF_ENTRY_WHITEOUT, /* .wh.NAME: NAME goes */
    SKIFF_ENTRY_OPAQUE,   /* .wh..wh..opq: the directory is emptied */
    SKIFF_ENTRY_HARDLINK, /* a link to target (normalised, not the root) */
    SKIFF_ENTRY_DIR,
    SKIFF_ENTRY_REG,
    SKIFF_ENTRY_SYMLINK, /* target as given: it resolves inside the container */
    SKIFF_ENTRY_FIFO,
};

#define SKIFF_ENTRY_PATH_MAX 4096

struct skiff_entry_plan {
    enum skiff_entry_kind kind;
    const char *raw;                   /* the name as the tar has it, for messages */
    char path[SKIFF_ENTRY_PATH_MAX];   /* normalised: no leading '/', no "." or "" components */
    char parent[SKIFF_ENTRY_PATH_MAX]; /* path's directory ("" for the root) */
    const char *base;                  /* path's last component (into path) */
    const char *victim;                /* WHITEOUT: the name that goes (into path) */
    char target[SKIFF_ENTRY_PATH_MAX]; /* HARDLINK: normalised target; SYMLINK: as given */
    const char *link_raw;              /* HARDLINK: the target as the tar has it */
    mode_t mode;                       /* permission bits; set-id gone unless a directory */
    bool setid_stripped;
    unsigned long xattrs; /* extended attributes the entry had (all dropped) */
    uid_t uid;            /* the entry's own ids (applied only with SKIFF_LAYER_OWNERS, as root) */
    gid_t gid;
    time_t mtime;
    long long size; /* REG: the file's size */
};

/* Plans entry e of a layer applied with flags (layer.h): fills p, or fails
 * (err) for an entry that refuses the whole layer ('..', a bad whiteout or
 * hardlink name). */
int skiff_layer_plan_entry(struct archive_entry *e, unsigned flags, struct skiff_entry_plan *p, skiff_err *err);

/* The messages of the checks that depend on the tree an entry goes into,
 * the same whichever tree carries the plan out. */
int skiff_layer_err_through_symlink(skiff_err *err, const char *entry, const char *path);
int skiff_layer_err_missing(skiff_err *err, const char *entry, const char *path);
int skiff_layer_err_link_target(skiff_err *err, int errnum, const char *entry, const char *target);
int skiff_layer_err_link_dir(skiff_err *err, const char *entry, const char *target);

/* The decoder thread (pthread_create with a struct skiff_layer_decoder):
 * reads the blob to its end, decompresses it into d->pipe (then
 * marks the writer done), hashes all of it; d->error and d->got say how it went. */
void *skiff_layer_decoder_main(void *arg);

#endif
