/* Tagged records: the wire format between a container's holder and its
 * starter, the state file `skiff exec` reads, and the request/reply between
 * the SPANK plugin (root) and its user-side helper (plugin/helper/).
 *
 * A record is one tag byte followed by a NUL-terminated string. A buffer of
 * records has no header: it ends where the data ends. Readers bound what
 * they accept: skiff_rec_read_fd caps the size and the time, and
 * skiff_rec_next refuses a record that is not terminated. */
#ifndef SKIFF_RECORDS_H
#define SKIFF_RECORDS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

struct skiff_recbuf {
    char *p;
    size_t len, cap;
};

/* Appends record (tag, s). s must not contain a NUL (it ends the record). */
int skiff_rec_put(struct skiff_recbuf *b, char tag, const char *s, skiff_err *err);
int skiff_rec_putf(struct skiff_recbuf *b, char tag, skiff_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void skiff_recbuf_free(struct skiff_recbuf *b);

/* The record at *off of p[0..len): 1 with *tag and *s (pointing into p),
 * 0 at the end, -1 when the data ends inside a record. *off moves on. */
int skiff_rec_next(const char *p, size_t len, size_t *off, char *tag, const char **s);

/* Reads fd into a new buffer until EOF, or until a record with tag `end`
 * has been read in full (end = 0: EOF only), for at most timeout_ms
 * (<= 0: no limit) and at most max bytes. The buffer holds *len bytes and
 * a NUL after them. -1 with err set on timeout, on more than max bytes, or
 * on a read error; *timed_out tells the first apart when non-NULL. */
int skiff_rec_read_fd(int fd, size_t max, int timeout_ms, char end, char **out, size_t *len, bool *timed_out,
                      skiff_err *err);

/* skiff_rec_read_fd, calling seen(tag, s, ctx) for each record as soon as
 * it has arrived in full (progress records of a long answer; s points into
 * a buffer that moves: copy what must be kept). */
typedef void (*skiff_rec_seen_fn)(char tag, const char *s, void *ctx);
int skiff_rec_read_fd_cb(int fd, size_t max, int timeout_ms, char end, skiff_rec_seen_fn seen, void *ctx, char **out,
                         size_t *len, bool *timed_out, skiff_err *err);

/* What a reader tells and asks its caller while it waits (all optional). */
struct skiff_rec_watch {
    skiff_rec_seen_fn seen; /* each record as soon as it has arrived in full */
    /* asked at least every tick_ms (> 0) while the reader waits: true ends
     * the read, with err (which it fills) as the reader's error */
    bool (*stop)(void *ctx, skiff_err *err);
    int tick_ms;
    void *ctx;
};

/* skiff_rec_read_fd_cb until *deadline_ms (skiff_now_ms's clock; 0: none),
 * which w->seen may move while it reads (the plugin's user_init: within a
 * bound it fixed itself), telling and asking w (or NULL) as it says. */
int skiff_rec_read_fd_until(int fd, size_t max, const double *deadline_ms, char end, const struct skiff_rec_watch *w,
                            char **out, size_t *len, bool *timed_out, skiff_err *err);

/* Parses a decimal pid ("123"): > 0, or -1 for anything else. */
int skiff_rec_pid(const char *s);

#endif
