/* See records.h. */
#include "records.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

int skiff_rec_put(struct skiff_recbuf *b, char tag, const char *s, skiff_err *err)
{
    size_t n = strlen(s) + 2;
    if (b->len + n > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + n;
        char *np = realloc(b->p, cap);
        if (!np)
            return skiff_error(err, ENOMEM, "records");
        b->p = np;
        b->cap = cap;
    }
    b->p[b->len] = tag;
    memcpy(b->p + b->len + 1, s, n - 1);
    b->len += n;
    return 0;
}

int skiff_rec_putf(struct skiff_recbuf *b, char tag, skiff_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return skiff_error(err, ENOMEM, "records");
    int rc = skiff_rec_put(b, tag, s, err);
    free(s);
    return rc;
}

void skiff_recbuf_free(struct skiff_recbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

int skiff_rec_next(const char *p, size_t len, size_t *off, char *tag, const char **s)
{
    if (*off >= len)
        return 0;
    size_t i = *off;
    *tag = p[i++];
    size_t sl = strnlen(p + i, len - i);
    if (sl == len - i)
        return -1;
    *s = p + i;
    *off = i + sl + 1;
    return 1;
}

/* Whether data[0..len) ends with a complete record tagged end. Records
 * are scanned from the start each time: replies are small, and a tag byte
 * inside a string must not count. */
static bool has_end(const char *data, size_t len, char end)
{
    size_t off = 0;
    char tag;
    const char *s;
    int r;
    while ((r = skiff_rec_next(data, len, &off, &tag, &s)) == 1)
        if (tag == end)
            return true;
    return false;
}

int skiff_rec_read_fd(int fd, size_t max, int timeout_ms, char end, char **out, size_t *len, bool *timed_out,
                      skiff_err *err)
{
    return skiff_rec_read_fd_cb(fd, max, timeout_ms, end, NULL, NULL, out, len, timed_out, err);
}

int skiff_rec_read_fd_cb(int fd, size_t max, int timeout_ms, char end, skiff_rec_seen_fn seen, void *ctx, char **out,
                         size_t *len, bool *timed_out, skiff_err *err)
{
    double deadline = timeout_ms > 0 ? skiff_now_ms() + timeout_ms : 0;
    const struct skiff_rec_watch w = {.seen = seen, .ctx = ctx};
    return skiff_rec_read_fd_until(fd, max, &deadline, end, &w, out, len, timed_out, err);
}

int skiff_rec_read_fd_until(int fd, size_t max, const double *deadline_ms, char end, const struct skiff_rec_watch *w,
                            char **out, size_t *len, bool *timed_out, skiff_err *err)
{
    skiff_rec_seen_fn seen = w ? w->seen : NULL;
    int tick = w && w->stop && w->tick_ms > 0 ? w->tick_ms : -1;
    size_t scanned = 0; /* records before this offset were passed to seen */
    *out = NULL;
    *len = 0;
    if (timed_out)
        *timed_out = false;
    size_t cap = 0, n = 0;
    char *data = NULL;
    double t0 = skiff_now_ms();
    for (;;) {
        if (tick > 0 && w->stop(w->ctx, err)) {
            free(data);
            return -1;
        }
        int wait = tick;
        double deadline = *deadline_ms;
        if (deadline) {
            double left = deadline - skiff_now_ms();
            if (left <= 0) {
                free(data);
                if (timed_out)
                    *timed_out = true;
                return skiff_error(err, ETIMEDOUT, "no complete answer within %.0f s", (deadline - t0) / 1000);
            }
            int until = left > INT_MAX ? INT_MAX : (int)left + 1;
            wait = tick > 0 && tick < until ? tick : until;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, wait);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0) {
            int e = errno;
            free(data);
            return skiff_error(err, e, "wait for an answer");
        }
        if (pr == 0)
            continue;
        if (n + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 16384;
            if (ncap > max + 4096 + 1)
                ncap = max + 4096 + 1;
            char *nd = realloc(data, ncap);
            if (!nd) {
                free(data);
                return skiff_error(err, ENOMEM, "read an answer");
            }
            data = nd;
            cap = ncap;
        }
        ssize_t r = read(fd, data + n, cap - n - 1);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r < 0) {
            int e = errno;
            free(data);
            return skiff_error(err, e, "read an answer");
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            free(data);
            return skiff_error(err, EMSGSIZE, "answer longer than %zu bytes", max);
        }
        if (seen) {
            char tag;
            const char *str;
            while (skiff_rec_next(data, n, &scanned, &tag, &str) == 1)
                seen(tag, str, w->ctx);
        }
        if (end && memchr(data + n - (size_t)r, end, (size_t)r) && has_end(data, n, end))
            break;
    }
    if (!data && !(data = malloc(1)))
        return skiff_error(err, ENOMEM, "read an answer");
    data[n] = '\0';
    *out = data;
    *len = n;
    return 0;
}

int skiff_rec_pid(const char *s)
{
    if (!s || *s < '1' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > INT_MAX)
        return -1;
    return (int)v;
}
