/* One request of the registry client (registry_int.h): libcurl with the
 * auth it is given, redirects limited to http(s), answers capped in memory
 * or handed to a callback, the headers the client acts on kept
 * (WWW-Authenticate for the auth dance in regauth.c, Docker-Content-Digest,
 * Retry-After, Content-Range). */
#include "registry_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* libcurl's receive buffer per transfer (its default is 16 KiB) */
#define HTTP_RECV_BUFFER (512L * 1024)

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct sink *s = ud;
    size_t n = size * nmemb;
    if (s->data) {
        /* Only a 200's or 206's body is data (not a redirect's, a 401's or
         * an error page). */
        long code = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200 && code != 206)
            return n;
        s->resp->status = code;
        int rc = s->data(s->ctx, s->resp, data, n);
        if (rc == 0)
            return n;
        if (rc > 0)
            s->done = true;
        return 0; /* ends the transfer (CURLE_WRITE_ERROR) */
    }
    if (n > s->max - s->len) {
        s->write_errno = EFBIG;
        return 0;
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16384;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) {
            s->write_errno = ENOMEM;
            return 0;
        }
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return n;
}

struct hdrs {
    char *challenge;
    size_t chsize;
    struct http_resp *resp;
};

/* The value of header key in the line data (n bytes), trimmed, into out;
 * false when the line is another header. */
static bool header_value(const char *data, size_t n, const char *key, char *out, size_t on)
{
    size_t kl = strlen(key);
    if (n <= kl || strncasecmp(data, key, kl) != 0)
        return false;
    size_t off = kl;
    while (off < n && (data[off] == ' ' || data[off] == '\t'))
        off++;
    size_t len = n - off;
    while (len && (data[off + len - 1] == '\r' || data[off + len - 1] == '\n' || data[off + len - 1] == ' '))
        len--;
    if (len >= on)
        len = on - 1;
    memcpy(out, data + off, len);
    out[len] = '\0';
    return true;
}

static size_t header_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct hdrs *h = ud;
    struct http_resp *resp = h->resp;
    size_t n = size * nmemb;
    char v[1024];
    /* A new response (after a redirect) starts with its status line. */
    if (n > 5 && !strncmp(data, "HTTP/", 5)) {
        h->challenge[0] = '\0';
        resp->digest[0] = '\0';
        resp->retry_after_s = -1;
        resp->has_range = false;
        resp->length = -1;
    } else if (header_value(data, n, "www-authenticate:", v, sizeof(v))) {
        snprintf(h->challenge, h->chsize, "%s", v);
    } else if (header_value(data, n, "docker-content-digest:", v, sizeof(v))) {
        if (strlen(v) < sizeof(resp->digest) && skiff_ref_valid_digest(v))
            memcpy(resp->digest, v, strlen(v) + 1);
    } else if (header_value(data, n, "retry-after:", v, sizeof(v))) {
        char *end;
        long secs = strtol(v, &end, 10);
        if (end != v && !*end && secs >= 0) {
            resp->retry_after_s = (double)secs;
        } else {
            time_t when = curl_getdate(v, NULL);
            if (when > 0)
                resp->retry_after_s = when > time(NULL) ? (double)(when - time(NULL)) : 0;
        }
    } else if (header_value(data, n, "content-range:", v, sizeof(v))) {
        unsigned long long first, last, total = 0;
        char star;
        if (sscanf(v, "bytes %llu-%llu/%llu", &first, &last, &total) == 3 ||
            sscanf(v, "bytes %llu-%llu/%c", &first, &last, &star) == 3) {
            resp->has_range = true;
            resp->range_first = first;
            resp->range_total = total;
        }
    } else if (header_value(data, n, "content-length:", v, sizeof(v))) {
        char *end;
        long long len = strtoll(v, &end, 10);
        if (end != v && !*end && len >= 0)
            resp->length = len;
    }
    return n;
}

struct xfer {
    const struct http_req *q;
};

/* Polled by libcurl about once a second, and more often while data flows. */
static int xferinfo_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const struct xfer *x = ud;
    return x->q->stop && x->q->stop(x->q->stop_ctx) ? 1 : 0;
}

bool skiff_registry_plain_http_ok(const struct skiff_config *cfg, const char *host)
{
    return cfg->allow_http || skiff_ref_is_loopback(host);
}

bool skiff_http_transient(const struct http_resp *resp)
{
    switch (resp->rc) {
    case CURLE_OK:
        return resp->status == 408 || resp->status == 429 || (resp->status >= 500 && resp->status <= 599);
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP3:
        return true;
    default:
        return false;
    }
}

int skiff_registry_http_get(struct skiff_registry *r, const char *url, const struct http_req *q, const struct auth *a,
                            struct sink *s, struct http_resp *resp, skiff_err *err)
{
    static const struct http_req plain;
    if (!q)
        q = &plain;
    CURL *c = r->curl;
    curl_easy_reset(c);
    memset(resp, 0, sizeof(*resp));
    resp->retry_after_s = -1;
    resp->length = -1;
    s->curl = c;
    s->resp = resp;
    s->done = false;
    struct curl_slist *h = NULL;
    if (q->accept)
        h = curl_slist_append(h, q->accept);
    struct hdrs hd = {.challenge = r->challenge, .chsize = sizeof(r->challenge), .resp = resp};
    struct xfer x = {.q = q};
    r->challenge[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "skiff/" SKIFF_VERSION);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Blob redirects go to storage hosts: https only unless http was allowed. */
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, r->cfg->allow_http ? "http,https" : "https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)(r->cfg->connect_timeout_s ? r->cfg->connect_timeout_s : 30));
    /* a connection that sends nothing for stall_s is as good as dropped */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, q->stall_s > 0 ? q->stall_s : 60L);
    /* the sooner of the caller's deadline and transfer_timeout
     * (ENROOT_TRANSFER_TIMEOUT), per request */
    long tmo = q->timeout_ms;
    if (r->cfg->transfer_timeout_s > 0 && (tmo <= 0 || tmo > r->cfg->transfer_timeout_s * 1000L))
        tmo = r->cfg->transfer_timeout_s * 1000L;
    if (tmo > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, tmo);
    if (q->stop) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    }
    if (q->head)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    char range[64];
    if (q->ranged) {
        if (q->to)
            snprintf(range, sizeof(range), "%llu-%llu", q->from, q->to);
        else
            snprintf(range, sizeof(range), "%llu-", q->from);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* libcurl's default 16 KiB receive buffer made a 1 GB blob ~56,000
     * recv/poll/write rounds, each waking the layer's reader: a larger one
     * takes what the socket holds in one call (doc/benchmarks.md, issue 26) */
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, HTTP_RECV_BUFFER);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hd);
    if (!s->data) /* a Content-Length over the cap fails before the body */
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->max);
    if (a->kind == AUTH_BEARER) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, a->token);
    } else if (a->kind == AUTH_BASIC) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERNAME, a->login);
        curl_easy_setopt(c, CURLOPT_PASSWORD, a->password);
    }
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    /* libcurl keeps copies of the strings it was given until the next reset. */
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, NULL);
    curl_easy_setopt(c, CURLOPT_PASSWORD, NULL);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    if (rc == CURLE_WRITE_ERROR && s->done)
        rc = CURLE_OK; /* the callback had all it wanted */
    resp->rc = rc;
    if (rc != CURLE_OK) {
        if ((!s->data && s->write_errno == EFBIG) || rc == CURLE_FILESIZE_EXCEEDED)
            return skiff_error(err, 0, "GET %s: the answer is larger than %zu MiB, the limit for %s; refused", url,
                               s->max >> 20, s->what ? s->what : "it");
        if (s->write_errno)
            return skiff_error(err, s->write_errno, "GET %s", url);
        if (rc == CURLE_ABORTED_BY_CALLBACK)
            return skiff_error(err, ECANCELED, "GET %s: stopped", url);
        if (rc == CURLE_OPERATION_TIMEDOUT && !strstr(ebuf, "Operation too slow"))
            return skiff_error(err, ETIMEDOUT, "GET %s: %s", url, ebuf[0] ? ebuf : curl_easy_strerror(rc));
        if (rc == CURLE_OPERATION_TIMEDOUT)
            return skiff_error(err, ETIMEDOUT, "GET %s: nothing received for %ld s (the registry stalled)", url,
                               q->stall_s > 0 ? q->stall_s : 60L);
        return skiff_error(err, rc == CURLE_COULDNT_CONNECT ? ECONNREFUSED : 0, "GET %s: %s", url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    return 0;
}
