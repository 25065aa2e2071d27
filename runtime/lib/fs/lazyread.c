/* Reads of a lazy image (fuse_int.h, lazy.h): a regular file of the
 * skeleton is the range [blocks_start, blocks_start + size) of the image's
 * data file. A read whose spans are there is answered at once, spliced
 * from the data file. Otherwise it waits, without holding a serving
 * thread: it is kept in a list, the missing spans are asked of the
 * fetcher, and the listener thread answers it when its spans come (DONE),
 * with EIO when one cannot be had (FAILED, the fetcher gone) or when
 * lazy_timeout passes, and with EINTR at once when the kernel interrupts
 * it (the reader got a signal: a killed task never waits for a fetch).
 * So every request is answered within lazy_timeout: a FUSE request left
 * unanswered would leave its reader unkillable (D state).
 *
 * Why a read that fails also writes a line to the reader's stderr: an
 * EIO says nothing of why. The line (at most one a second per process)
 * goes to fd 2 of the process that asked, which under srun is the task's
 * stderr, on srun's terminal; best effort. */
#include "fuse_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "lazy.h"

struct pending {
    struct pending *next;
    fuse_req_t req;
    uint64_t start, len; /* in the data file */
    uint32_t g0, g1;     /* its spans */
    double deadline;
    pid_t pid;
    bool late;
};

/* settle()'s failed span, or: */
enum { FAILED_NONE = -1, FAILED_ALL = -2 };

struct skiff_lazy_srv {
    struct lz_image *im;
    int chan, datafd;
    int timeout_s;
    pthread_mutex_t mu;
    struct pending *list;
    uint8_t *asked; /* spans asked of the fetcher and not answered yet */
    /* spans a read waited for in vain (when, in ms from the start, + 1):
     * for lazy_timeout after that, a read of them fails at once (the
     * kernel retries a failed readahead with a read of its own, which
     * would wait again) unless they come meanwhile */
    uint32_t *failed_at;
    double t0;
    char last_why[256];
    bool dead;     /* the fetcher is gone */
    char why[256]; /* and why, for the messages */
    pid_t told_pid;
    double told_at;
    pthread_t listener;
};

/* The line for the reader's stderr (f->ls->mu not held). */
static void tell(struct skiff_lazy_srv *ls, pid_t pid, const char *why)
{
    double now = skiff_now_ms();
    pthread_mutex_lock(&ls->mu);
    bool quiet = pid == ls->told_pid && now - ls->told_at < 1000;
    if (!quiet) {
        ls->told_pid = pid;
        ls->told_at = now;
    }
    pthread_mutex_unlock(&ls->mu);
    if (quiet || pid <= 0)
        return;
    char p[64], line[512];
    /* the reader's own open file when it is a regular file (a reopened one
     * would write at another offset, and the reader's next write over
     * this); else a description of our own, non-blocking (a full pipe
     * must never stall the thread that answers reads) */
    int fd = -1, pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        fd = (int)syscall(SYS_pidfd_getfd, pfd, 2, 0);
        close(pfd);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
            close(fd);
            fd = -1;
        }
    }
    snprintf(p, sizeof(p), "/proc/%d/fd/2", (int)pid);
    if (fd < 0)
        fd = open(p, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof(line), "skiff: lazy image: a read failed (EIO): %s\n", why);
    if (n > 0 && write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0) {
        /* best effort */
    }
    close(fd);
}

static bool spans_present(const struct skiff_lazy_srv *ls, uint32_t g0, uint32_t g1)
{
    for (uint32_t g = g0; g <= g1; g++)
        if (!skiff_lazy_present(ls->im, g))
            return false;
    return true;
}

/* The data, from the data file (spliced when the kernel can). */
static void reply_data(struct skiff_lazy_srv *ls, fuse_req_t req, uint64_t start, uint64_t len)
{
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bv.buf[0].fd = ls->datafd;
    bv.buf[0].pos = (off_t)start;
    fuse_reply_data(req, &bv, 0);
}

/* Takes p off the list (ls->mu held); false when it was not there. */
static bool unlink_pending(struct skiff_lazy_srv *ls, struct pending *p)
{
    for (struct pending **pp = &ls->list; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return true;
        }
    return false;
}

/* The kernel interrupted a waiting read (its reader got a signal). */
static void on_interrupt(fuse_req_t req, void *data)
{
    struct skiff_lazy_srv *ls = data;
    struct pending *found = NULL;
    pthread_mutex_lock(&ls->mu);
    for (struct pending *p = ls->list; p; p = p->next)
        if (p->req == req) {
            found = p;
            break;
        }
    if (found)
        unlink_pending(ls, found);
    pthread_mutex_unlock(&ls->mu);
    if (found) {
        fuse_reply_err(req, EINTR);
        free(found);
    }
}

/* Asks the fetcher for the spans of [g0, g1] not there and not asked yet
 * (ls->mu held): false when it cannot be asked (it is gone). */
static bool ask(struct skiff_lazy_srv *ls, uint32_t g0, uint32_t g1)
{
    for (uint32_t g = g0; g <= g1 && !ls->dead; g++) {
        if (ls->asked[g] || skiff_lazy_present(ls->im, g))
            continue;
        struct skiff_lazy_msg m = {.type = SKIFF_LAZY_NEED, .span = g};
        ssize_t r;
        while ((r = send(ls->chan, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 && errno == EINTR)
            ;
        if (r < 0 && errno != EAGAIN) {
            ls->dead = true;
            snprintf(ls->why, sizeof(ls->why), "the span fetcher is gone (%s)", strerror(errno));
        }
        /* (EAGAIN: a full channel; asked again when the listener looks) */
        if (r == (ssize_t)sizeof(m))
            ls->asked[g] = 1;
    }
    return !ls->dead;
}

/* Whether a missing span of [g0, g1] failed a read within lazy_timeout
 * (ls->mu held). */
static bool recently_failed(const struct skiff_lazy_srv *ls, uint32_t g0, uint32_t g1)
{
    double now = skiff_now_ms() - ls->t0;
    for (uint32_t g = g0; g <= g1; g++)
        if (ls->failed_at[g] && now < ls->failed_at[g] - 1 + ls->timeout_s * 1000.0 && !skiff_lazy_present(ls->im, g))
            return true;
    return false;
}

static void mark_failed(struct skiff_lazy_srv *ls, const struct pending *p, const char *why)
{
    uint32_t at = (uint32_t)(skiff_now_ms() - ls->t0) + 1;
    for (uint32_t g = p->g0; g <= p->g1; g++)
        if (!skiff_lazy_present(ls->im, g))
            ls->failed_at[g] = at;
    snprintf(ls->last_why, sizeof(ls->last_why), "%s", why);
}

void skiff_lazy_read(struct skiff_fuse *f, fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    struct skiff_lazy_srv *ls = f->lazy_srv;
    struct skiff_reader *r = &f->data[(uint64_t)off / f->meta.ll.fs.sb.block_size % f->ndata];
    sqfs_inode ibuf, *inode;
    uint64_t fstart = 0, fsize = 0;
    pthread_mutex_lock(&r->lock);
    inode = skiff_reader_handle_inode(r, ino, fi, &ibuf);
    bool ok = inode && S_ISREG(inode->base.mode);
    if (ok) {
        fstart = (uint64_t)inode->xtra.reg.start_block;
        fsize = (uint64_t)inode->xtra.reg.file_size;
    }
    pthread_mutex_unlock(&r->lock);
    if (!ok) {
        fuse_reply_err(req, inode ? EISDIR : EIO);
        return;
    }
    if ((uint64_t)off >= fsize || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    uint64_t len = fsize - (uint64_t)off < size ? fsize - (uint64_t)off : size;
    uint64_t start = fstart + (uint64_t)off;
    int64_t a = skiff_lazy_span_at(ls->im, start), b = skiff_lazy_span_at(ls->im, start + len - 1);
    if (a < 0 || b < 0 || spans_present(ls, (uint32_t)a, (uint32_t)b)) {
        /* (no span: the image's own files, there from the start) */
        reply_data(ls, req, start, len);
        return;
    }
    struct pending *p = calloc(1, sizeof(*p));
    if (!p) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    *p = (struct pending){.req = req, .start = start, .len = len, .g0 = (uint32_t)a, .g1 = (uint32_t)b};
    p->deadline = skiff_now_ms() + ls->timeout_s * 1000.0;
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    p->pid = ctx ? ctx->pid : 0;
    /* the interrupt callback first: when the kernel interrupts the read
     * before it is listed, the check below, under the lock the callback
     * takes, sees it */
    fuse_req_interrupt_func(req, on_interrupt, ls);
    pthread_mutex_lock(&ls->mu);
    bool interrupted = fuse_req_interrupted(req);
    bool failed_lately = recently_failed(ls, p->g0, p->g1);
    bool asked = !interrupted && !failed_lately && ask(ls, p->g0, p->g1);
    char why[256];
    snprintf(why, sizeof(why), "%s", failed_lately ? ls->last_why : ls->why);
    if (asked) {
        p->next = ls->list;
        ls->list = p;
    }
    pthread_mutex_unlock(&ls->mu);
    if (asked)
        return; /* the listener answers it */
    pid_t pid = p->pid;
    free(p);
    if (interrupted) {
        fuse_reply_err(req, EINTR);
        return;
    }
    tell(ls, pid, why);
    fuse_reply_err(req, EIO);
}

/* Answers the reads that can be answered: those whose spans are all
 * there; with EIO those that need span failed (or every one:
 * FAILED_ALL), those past their deadline, every one when the fetcher is
 * gone. */
static void settle(struct skiff_lazy_srv *ls, int64_t failed, const char *failed_why)
{
    struct pending *done = NULL, *gone = NULL;
    double now = skiff_now_ms();
    char why[256];
    pthread_mutex_lock(&ls->mu);
    snprintf(why, sizeof(why), "%s", ls->dead ? ls->why : failed_why ? failed_why : "");
    for (struct pending **pp = &ls->list; *pp;) {
        struct pending *p = *pp;
        bool ready = spans_present(ls, p->g0, p->g1);
        bool fail = !ready && (ls->dead || failed == FAILED_ALL || (failed >= p->g0 && failed <= p->g1));
        bool late = !ready && !fail && now >= p->deadline;
        if (ready || fail || late) {
            *pp = p->next;
            if (ready) {
                p->next = done;
                done = p;
            } else {
                p->late = late;
                p->next = gone;
                gone = p;
            }
            continue;
        }
        /* still waiting: make sure its spans are asked for */
        ask(ls, p->g0, p->g1);
        pp = &p->next;
    }
    pthread_mutex_unlock(&ls->mu);
    for (struct pending *p = done, *n; p; p = n) {
        n = p->next;
        reply_data(ls, p->req, p->start, p->len);
        free(p);
    }
    for (struct pending *p = gone, *n; p; p = n) {
        n = p->next;
        char msg[256];
        if (p->late)
            snprintf(msg, sizeof(msg),
                     "its data did not come within lazy_timeout=%d s (is the registry reachable? "
                     "image_mode=full imports the whole image before the job starts)",
                     ls->timeout_s);
        else
            snprintf(msg, sizeof(msg), "%s", why[0] ? why : "its data could not be fetched");
        pthread_mutex_lock(&ls->mu);
        mark_failed(ls, p, msg);
        pthread_mutex_unlock(&ls->mu);
        tell(ls, p->pid, msg);
        fuse_reply_err(p->req, EIO);
        free(p);
    }
}

static void *listener_main(void *arg)
{
    struct skiff_lazy_srv *ls = arg;
    for (;;) {
        struct pollfd pfd = {.fd = ls->chan, .events = POLLIN};
        int r = poll(&pfd, 1, ls->dead ? -1 : 250);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && !ls->dead) {
            struct skiff_lazy_msg m;
            ssize_t n = recv(ls->chan, &m, sizeof(m), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                pthread_mutex_lock(&ls->mu);
                ls->dead = true;
                snprintf(ls->why, sizeof(ls->why), "the span fetcher is gone");
                pthread_mutex_unlock(&ls->mu);
                settle(ls, FAILED_ALL, NULL);
                continue;
            }
            if (n == (ssize_t)sizeof(m) && m.span < skiff_lazy_nspans(ls->im)) {
                pthread_mutex_lock(&ls->mu);
                ls->asked[m.span] = 0;
                if (m.type == SKIFF_LAZY_DONE)
                    ls->failed_at[m.span] = 0;
                pthread_mutex_unlock(&ls->mu);
                if (m.type == SKIFF_LAZY_FAILED) {
                    m.text[sizeof(m.text) - 1] = '\0';
                    settle(ls, m.span, m.text[0] ? m.text : "its data could not be fetched");
                    continue;
                }
            }
        }
        settle(ls, FAILED_NONE, NULL);
    }
    return NULL;
}

int skiff_lazy_serve_init(struct skiff_fuse *f, struct lz_image *im, int chan, int timeout_s, skiff_err *err)
{
    struct skiff_lazy_srv *ls = calloc(1, sizeof(*ls));
    size_t n = skiff_lazy_nspans(im) ? skiff_lazy_nspans(im) : 1;
    if (ls) {
        ls->asked = calloc(n, 1);
        ls->failed_at = calloc(n, sizeof(*ls->failed_at));
    }
    if (!ls || !ls->asked || !ls->failed_at) {
        if (ls) {
            free(ls->asked);
            free(ls->failed_at);
        }
        free(ls);
        return skiff_error(err, ENOMEM, "lazy image");
    }
    ls->t0 = skiff_now_ms();
    ls->im = im;
    ls->chan = chan;
    ls->datafd = skiff_lazy_data_fd(im);
    ls->timeout_s = timeout_s > 0 ? timeout_s : 60;
    pthread_mutex_init(&ls->mu, NULL);
    f->lazy_srv = ls;
    return 0;
}

void skiff_lazy_serve_start(struct skiff_fuse *f)
{
    struct skiff_lazy_srv *ls = f->lazy_srv;
    if (ls && pthread_create(&ls->listener, NULL, listener_main, ls) != 0) {
        /* no listener: nothing can be waited for; every missing read fails */
        ls->dead = true;
        snprintf(ls->why, sizeof(ls->why), "no thread to wait for the span fetcher");
    }
}

int skiff_lazy_serve_fd(const struct skiff_fuse *f, int which)
{
    const struct skiff_lazy_srv *ls = f->lazy_srv;
    if (!ls)
        return -1;
    return which == 0 ? ls->chan : ls->datafd;
}

void skiff_lazy_serve_free(struct skiff_fuse *f)
{
    struct skiff_lazy_srv *ls = f->lazy_srv;
    if (!ls)
        return;
    close(ls->chan);
    pthread_mutex_destroy(&ls->mu);
    free(ls->asked);
    free(ls->failed_at);
    free(ls);
    f->lazy_srv = NULL;
}
