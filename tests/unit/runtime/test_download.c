/* The registry client's transfers (registry.h, struct skiff_fetch_opts)
 * against a scripted HTTP server on 127.0.0.1 in a thread of the test: a
 * blob served with Range, and the failures of real networks one by one
 * (429 with Retry-After, a connection reset at 50 % and 90 %, a stall, 503
 * for ever, a registry that ignores Range, wrong bytes, 404, a deadline, a
 * caller that stops). Each case checks the bytes that came out and what
 * the server was asked. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "digest.h"
#include "ref.h"
#include "registry.h"
#include "registry_int.h" /* (dup_copies_the_credentials looks inside) */

#define BLOB_SIZE (256u * 1024u)
#define MAX_REQ 64

enum fault { F_NONE, F_429, F_RESET, F_STALL, F_503, F_404, F_WRONG, F_NO_RANGE_RESET, F_NO_DIGEST };

static struct {
    int lfd, port;
    pthread_t tid;
    unsigned char blob[BLOB_SIZE];
    char digest[SKIFF_DIGEST_LEN];
    enum fault fault;
    int fault_times;         /* how many requests get the fault (then served well) */
    int fault_pct;           /* where a reset or stall cuts the body */
    const char *retry_after; /* sent with 429 */
    atomic_int nreq;
    char ranges[MAX_REQ][64]; /* each request's Range header ("" = none) */
    char methods[MAX_REQ][8];
    atomic_ullong body_bytes; /* blob bytes sent in all */
} srv;

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void reset_close(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* RST, not FIN */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static void serve_one(int fd)
{
    char req[4096];
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        ssize_t r = recv(fd, req + got, sizeof(req) - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[got] = '\0';
    int n = atomic_fetch_add(&srv.nreq, 1);
    char method[8] = "";
    sscanf(req, "%7s", method);
    unsigned long long from = 0, to = BLOB_SIZE - 1;
    bool ranged = false;
    const char *rh = strcasestr(req, "\r\nRange: bytes=");
    if (n < MAX_REQ) {
        snprintf(srv.methods[n], sizeof(srv.methods[n]), "%s", method);
        srv.ranges[n][0] = '\0';
    }
    if (rh) {
        rh += strlen("\r\nRange: bytes=");
        if (n < MAX_REQ)
            snprintf(srv.ranges[n], sizeof(srv.ranges[n]), "%.*s", (int)strcspn(rh, "\r"), rh);
        char *end;
        from = strtoull(rh, &end, 10);
        if (*end == '-' && end[1] >= '0' && end[1] <= '9')
            to = strtoull(end + 1, NULL, 10);
        ranged = true;
    }
    char h[512];
    bool faulty = n < srv.fault_times;
    if (strstr(req, "/manifests/")) {
        const char *body = "{}";
        int w = snprintf(h, sizeof(h),
                         "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n%s%s%s"
                         "Content-Length: 2\r\nConnection: close\r\n\r\n",
                         srv.fault == F_NO_DIGEST ? "" : "Docker-Content-Digest: ",
                         srv.fault == F_NO_DIGEST ? "" : srv.digest, srv.fault == F_NO_DIGEST ? "" : "\r\n");
        send_all(fd, h, (size_t)w);
        if (strcmp(method, "HEAD") != 0)
            send_all(fd, body, 2);
        close(fd);
        return;
    }
    if (faulty && srv.fault == F_429) {
        int w = snprintf(h, sizeof(h),
                         "HTTP/1.1 429 Too Many Requests\r\n%s%s%sContent-Length: 0\r\nConnection: close\r\n\r\n",
                         srv.retry_after ? "Retry-After: " : "", srv.retry_after ? srv.retry_after : "",
                         srv.retry_after ? "\r\n" : "");
        send_all(fd, h, (size_t)w);
        close(fd);
        return;
    }
    if ((faulty && srv.fault == F_503) || srv.fault == F_404) {
        int code = srv.fault == F_404 ? 404 : 503;
        int w = snprintf(h, sizeof(h), "HTTP/1.1 %d Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", code);
        send_all(fd, h, (size_t)w);
        close(fd);
        return;
    }
    if (srv.fault == F_NO_RANGE_RESET)
        ranged = false, from = 0, to = BLOB_SIZE - 1; /* a registry that ignores Range */
    if (to >= BLOB_SIZE)
        to = BLOB_SIZE - 1;
    size_t len = (size_t)(to - from + 1);
    int w = ranged ? snprintf(h, sizeof(h),
                              "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %llu-%llu/%u\r\n"
                              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                              from, to, BLOB_SIZE, len)
                   : snprintf(h, sizeof(h), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", len);
    send_all(fd, h, (size_t)w);
    unsigned char *body = srv.blob + from;
    unsigned char wrong[BLOB_SIZE];
    if (srv.fault == F_WRONG) {
        memcpy(wrong, srv.blob, BLOB_SIZE);
        wrong[BLOB_SIZE / 2] ^= 0xff;
        body = wrong + from;
    }
    if (faulty && (srv.fault == F_RESET || srv.fault == F_STALL || srv.fault == F_NO_RANGE_RESET)) {
        /* the cut is at fault_pct of the blob, whatever the range asked */
        size_t cut = (size_t)BLOB_SIZE * (size_t)srv.fault_pct / 100;
        size_t part = cut > from ? (size_t)(cut - from) : 0;
        if (part > len)
            part = len;
        send_all(fd, body, part);
        atomic_fetch_add(&srv.body_bytes, part);
        if (srv.fault == F_STALL)
            sleep(3); /* longer than the client's stall_timeout (1 s) */
        reset_close(fd);
        return;
    }
    send_all(fd, body, len);
    atomic_fetch_add(&srv.body_bytes, len);
    close(fd);
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(srv.lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        serve_one(fd);
    }
}

static struct skiff_config cfg;
static struct skiff_ref ref;
static struct skiff_registry *reg;

static void start(enum fault f, int times, int pct)
{
    for (size_t i = 0; i < BLOB_SIZE; i++)
        srv.blob[i] = (unsigned char)((i * 2654435761u) >> 13);
    skiff_err err;
    cr_assert_eq(skiff_digest_buf(srv.blob, BLOB_SIZE, srv.digest, &err), 0);
    srv.fault = f;
    srv.fault_times = times;
    srv.fault_pct = pct;
    srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(srv.lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    getsockname(srv.lfd, (struct sockaddr *)&a, &al);
    srv.port = ntohs(a.sin_port);
    cr_assert_eq(listen(srv.lfd, 16), 0);
    cr_assert_eq(pthread_create(&srv.tid, NULL, server_main, NULL), 0);

    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    cfg.stall_timeout_s = 1;
    cfg.transfer_retries = 5;
    char uri[128];
    snprintf(uri, sizeof(uri), "docker://127.0.0.1:%d/test/blob:1", srv.port);
    cr_assert_eq(skiff_ref_parse(uri, NULL, &ref, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_registry_open(&reg, &cfg, &ref, &err), 0, "%s", err.msg);
}

/* quick pauses: the policy is the same, the test shorter */
static const struct skiff_fetch_opts fast = {.backoff_ms = 20};

struct buf {
    unsigned char *p;
    size_t len;
};

static int to_buf(void *ctx, const void *data, size_t n)
{
    struct buf *b = ctx;
    cr_assert_leq(b->len + n, BLOB_SIZE, "more bytes than the blob has");
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static int fetch_file(const struct skiff_fetch_opts *o, skiff_err *err, unsigned char *out)
{
    char p[] = "/tmp/skiff-test-dl.XXXXXX";
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    unlink(p);
    int rc = skiff_registry_blob_fetch(reg, srv.digest, BLOB_SIZE, fd, NULL, NULL, o, err);
    if (rc == 0) {
        cr_assert_eq(pread(fd, out, BLOB_SIZE + 1, 0), (ssize_t)BLOB_SIZE);
    }
    close(fd);
    return rc;
}

Test(download, range_in_the_middle)
{
    start(F_NONE, 0, 0);
    static unsigned char out[BLOB_SIZE];
    struct buf b = {out, 0};
    skiff_err err;
    cr_assert_eq(skiff_registry_blob_range(reg, srv.digest, 1000, 5000, to_buf, &b, &fast, &err), 0, "%s", err.msg);
    cr_assert_eq(b.len, 5000);
    cr_assert_eq(memcmp(out, srv.blob + 1000, 5000), 0);
    cr_assert_eq(srv.nreq, 1);
    cr_assert_str_eq(srv.ranges[0], "1000-5999");
}

Test(download, whole_blob_asks_no_range)
{
    start(F_NONE, 0, 0);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_eq(memcmp(out, srv.blob, BLOB_SIZE), 0);
    cr_assert_eq(srv.nreq, 1);
    cr_assert_str_eq(srv.ranges[0], "");
}

static void resumed_after_reset(int pct)
{
    start(F_RESET, 1, pct);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_eq(memcmp(out, srv.blob, BLOB_SIZE), 0);
    cr_assert_eq(srv.nreq, 2);
    /* the second request starts where the first was cut, not at 0 */
    unsigned long long second = strtoull(srv.ranges[1], NULL, 10);
    cr_assert_gt(second, 0, "range %s", srv.ranges[1]);
    cr_assert_leq(second, (unsigned long long)BLOB_SIZE * (unsigned)pct / 100);
    /* (a reset may drop what the client's kernel had not handed over yet,
     * so the resume may start before the cut) */
}

Test(download, reset_at_50_percent_resumes)
{
    resumed_after_reset(50);
}

Test(download, reset_at_90_percent_resumes)
{
    resumed_after_reset(90);
}

Test(download, a_429_storm_is_waited_out)
{
    start(F_429, 4, 0);
    srv.retry_after = "0";
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_eq(memcmp(out, srv.blob, BLOB_SIZE), 0);
    cr_assert_eq(srv.nreq, 5);
}

Test(download, retry_after_is_honoured)
{
    start(F_429, 1, 0);
    srv.retry_after = "1";
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    double t0 = skiff_now_ms();
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_geq(skiff_now_ms() - t0, 950, "did not wait the second Retry-After asked for");
    cr_assert_eq(srv.nreq, 2);
}

Test(download, a_stall_counts_as_a_drop)
{
    start(F_STALL, 1, 30);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_eq(memcmp(out, srv.blob, BLOB_SIZE), 0);
    cr_assert_eq(srv.nreq, 2);
    cr_assert_gt(strtoull(srv.ranges[1], NULL, 10), 0);
}

Test(download, a_registry_that_ignores_range)
{
    start(F_NO_RANGE_RESET, 1, 50);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), 0, "%s", err.msg);
    cr_assert_eq(memcmp(out, srv.blob, BLOB_SIZE), 0);
    cr_assert_eq(srv.nreq, 2);
}

Test(download, a_range_from_a_registry_that_ignores_range)
{
    start(F_NO_RANGE_RESET, 0, 0);
    static unsigned char out[BLOB_SIZE];
    struct buf b = {out, 0};
    skiff_err err;
    cr_assert_eq(skiff_registry_blob_range(reg, srv.digest, 70000, 100, to_buf, &b, &fast, &err), 0, "%s", err.msg);
    cr_assert_eq(b.len, 100);
    cr_assert_eq(memcmp(out, srv.blob + 70000, 100), 0);
}

Test(download, gives_up_after_the_retries)
{
    start(F_503, 1000, 0);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    struct skiff_fetch_opts o = fast;
    o.retries = 3;
    cr_assert_eq(fetch_file(&o, &err, out), -1);
    cr_assert_eq(srv.nreq, 4);
    cr_assert(strstr(err.msg, "HTTP 503") && strstr(err.msg, "gave up after 4 tries"), "%s", err.msg);
}

/* The pauses a fetch announced (skiff_fetch_opts.retrying): how many, and
 * how long they were to last in all. */
struct pauses {
    int n;
    double total_ms;
};

static void count_pause(void *ctx, const char *what, int attempt, double wait_s, const char *why)
{
    (void)what, (void)attempt, (void)why;
    struct pauses *p = ctx;
    p->n++;
    p->total_ms += wait_s * 1000.0;
}

/* A deadline's bounds without a window of the clock: the pauses taken all
 * ended before the deadline, so together they fit between the start and
 * it (the policy's own rule: no pause that would end past it); each was
 * waited in full (the lower bound); and the run ended long before an
 * unbounded one would (the generous ceiling, FAR_MS: a deadline ignored
 * means the backoff's doubling pauses, over 15 s for the cases here). */
#define FAR_MS 10000.0
static void deadline_held(const struct pauses *ps, double window_ms, double took_ms, const skiff_err *err)
{
    cr_assert(strstr(err->msg, "deadline"), "%s", err->msg);
    cr_assert_leq(ps->total_ms, window_ms, "%d pauses of %.0f ms in all: some ended past the deadline", ps->n,
                  ps->total_ms);
    cr_assert_geq(took_ms, ps->total_ms, "%.0f ms, less than the %d pauses' %.0f ms", took_ms, ps->n, ps->total_ms);
    cr_assert_lt(took_ms, FAR_MS, "ran far past the deadline: %.0f ms", took_ms);
}

Test(download, the_deadline_bounds_the_pauses)
{
    start(F_503, 1000, 0);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    struct pauses ps = {0};
    double t0 = skiff_now_ms();
    struct skiff_fetch_opts o = {
        .backoff_ms = 400, .retries = 50, .deadline_ms = t0 + 1500, .retrying = count_pause, .retry_ctx = &ps};
    cr_assert_eq(fetch_file(&o, &err, out), -1);
    deadline_held(&ps, 1500, skiff_now_ms() - t0, &err);
}

Test(download, the_handles_defaults_bound_a_request_without_options)
{
    /* an import's manifest and image config take no options of their own:
     * its deadline reaches them through the handle */
    start(F_503, 1000, 0);
    char p[] = "/tmp/skiff-test-dl.XXXXXX";
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    unlink(p);
    skiff_err err;
    struct pauses ps = {0};
    double t0 = skiff_now_ms();
    /* (without them: the configuration's 5 retries, 1 s backoff, no deadline) */
    skiff_registry_set_defaults(
        reg,
        &(struct skiff_fetch_opts){.retries = 50, .deadline_ms = t0 + 1500, .retrying = count_pause, .retry_ctx = &ps});
    cr_assert_eq(skiff_registry_blob(reg, srv.digest, fd, &err), -1);
    close(fd);
    deadline_held(&ps, 1500, skiff_now_ms() - t0, &err);
}

Test(download, wrong_bytes_are_a_digest_mismatch)
{
    start(F_WRONG, 0, 0);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), -1);
    cr_assert_eq(err.code, EBADMSG);
    cr_assert(strstr(err.msg, "digest mismatch"), "%s", err.msg);
    cr_assert_eq(srv.nreq, 1, "a wrong blob is not fetched again");
}

Test(download, not_found_is_not_retried)
{
    start(F_404, 0, 0);
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    cr_assert_eq(fetch_file(&fast, &err, out), -1);
    cr_assert_eq(err.code, ENOENT, "%s", err.msg);
    cr_assert_eq(srv.nreq, 1);
}

static bool stop_now(void *ctx)
{
    return atomic_load((atomic_int *)ctx) != 0;
}

static void note_retry(void *ctx, const char *what, int attempt, double wait_s, const char *why)
{
    (void)what, (void)attempt, (void)wait_s, (void)why;
    atomic_store((atomic_int *)ctx, 1);
}

Test(download, a_caller_that_stops)
{
    start(F_503, 1000, 0);
    atomic_int flag = 0;
    /* a pause of 15-30 s (the backoff's cap): cut short, the run ends far
     * sooner; waited out, it would take at least 15 s */
    struct skiff_fetch_opts o = {.backoff_ms = 30000,
                                 .retries = 5,
                                 .stop = stop_now,
                                 .stop_ctx = &flag,
                                 .retrying = note_retry,
                                 .retry_ctx = &flag};
    static unsigned char out[BLOB_SIZE + 1];
    skiff_err err;
    double t0 = skiff_now_ms();
    cr_assert_eq(fetch_file(&o, &err, out), -1);
    double took = skiff_now_ms() - t0;
    cr_assert_eq(err.code, ECANCELED, "%s", err.msg);
    cr_assert_eq(atomic_load(&flag), 1, "no pause began");
    cr_assert_lt(took, FAR_MS, "the pause did not see the stop: %.0f ms", took);
}

Test(download, head_gives_the_digest)
{
    start(F_NONE, 0, 0);
    char d[SKIFF_DIGEST_LEN];
    skiff_err err;
    cr_assert_eq(skiff_registry_manifest_digest(reg, "1", d, NULL, &err), 1, "%s", err.msg);
    cr_assert_str_eq(d, srv.digest);
    cr_assert_str_eq(srv.methods[0], "HEAD");
}

Test(download, head_without_the_header)
{
    start(F_NO_DIGEST, 0, 0);
    char d[SKIFF_DIGEST_LEN];
    skiff_err err;
    cr_assert_eq(skiff_registry_manifest_digest(reg, "1", d, NULL, &err), 0, "%s", err.msg);
}

/* A second handle works on its own connection (the parallel fetcher's). */
Test(download, dup_fetches_too)
{
    start(F_NONE, 0, 0);
    struct skiff_registry *r2;
    skiff_err err;
    cr_assert_eq(skiff_registry_dup(&r2, reg, &err), 0, "%s", err.msg);
    static unsigned char out[BLOB_SIZE];
    struct buf b = {out, 0};
    cr_assert_eq(skiff_registry_blob_range(r2, srv.digest, 0, 0, to_buf, &b, &fast, &err), 0, "%s", err.msg);
    cr_assert_eq(b.len, BLOB_SIZE);
    skiff_registry_close(r2);
}

/* A dup'ed handle has its own copy of the credentials: closing both frees
 * each once (they were shared, and freed twice, when credentials became
 * heap strings). */
Test(download, dup_copies_the_credentials)
{
    start(F_NONE, 0, 0);
    char path[] = "/tmp/skiff-test-creds.XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    dprintf(fd, "machine 127.0.0.1:%d login alice password s3cret\n", srv.port);
    close(fd);
    snprintf(cfg.credentials_file, sizeof(cfg.credentials_file), "%s", path);
    skiff_err err;
    struct skiff_registry *r1, *r2;
    cr_assert_eq(skiff_registry_open(&r1, &cfg, &ref, &err), 0, "%s", err.msg);
    unlink(path);
    cr_assert_eq(skiff_registry_dup(&r2, r1, &err), 0, "%s", err.msg);
    const struct endpoint *e1 = &r1->ep[r1->nep - 1], *e2 = &r2->ep[r2->nep - 1];
    cr_assert(e1->have_creds && e2->have_creds);
    cr_assert_str_eq(e2->cred.login, "alice");
    cr_assert_str_eq(e2->cred.password, "s3cret");
    cr_assert(e2->cred.login != e1->cred.login && e2->cred.password != e1->cred.password, "shared, freed twice");
    skiff_registry_close(r2);
    static unsigned char out[BLOB_SIZE];
    struct buf b = {out, 0};
    cr_assert_eq(skiff_registry_blob_range(r1, srv.digest, 0, 0, to_buf, &b, &fast, &err), 0, "%s", err.msg);
    cr_assert_eq(b.len, BLOB_SIZE);
    skiff_registry_close(r1);
}
