/* One GET of the registry client (registry_int.h): libcurl with the auth
 * it is given, redirects limited to http(s), answers capped in memory or
 * streamed to a file and hashed on the way, the WWW-Authenticate header
 * kept for the auth dance (regauth.c). */
#include "registry_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct sink *s = ud;
    size_t n = size * nmemb;
    if (s->fd >= 0) {
        /* Only a 200's body is blob data (a reader may be streaming the file). */
        long code = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200)
            return n;
        size_t left = n;
        const char *p = data;
        while (left) {
            ssize_t w = write(s->fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                s->write_errno = errno;
                return 0;
            }
            p += w;
            left -= (size_t)w;
        }
        if (s->hash)
            skiff_sha256_update(s->hash, data, n);
        s->written += n;
        if (s->progress && s->progress(s->progress_ctx, s->written) != 0) {
            s->write_errno = ECANCELED;
            return 0;
        }
        return n;
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
};

static size_t header_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct hdrs *h = ud;
    size_t n = size * nmemb;
    /* A new response (after a redirect) starts with its status line. */
    if (n > 5 && !strncmp(data, "HTTP/", 5))
        h->challenge[0] = '\0';
    static const char key[] = "www-authenticate:";
    if (n > sizeof(key) && !strncasecmp(data, key, sizeof(key) - 1)) {
        size_t off = sizeof(key) - 1;
        while (off < n && (data[off] == ' ' || data[off] == '\t'))
            off++;
        size_t len = n - off;
        while (len && (data[off + len - 1] == '\r' || data[off + len - 1] == '\n'))
            len--;
        if (len >= h->chsize)
            len = h->chsize - 1;
        memcpy(h->challenge, data + off, len);
        h->challenge[len] = '\0';
    }
    return n;
}

bool skiff_registry_plain_http_ok(const struct skiff_config *cfg, const char *host)
{
    return cfg->allow_http || skiff_ref_is_loopback(host);
}

/* One GET. Credentials go through libcurl's own auth options, never a custom
 * "Authorization:" header, and CURLOPT_UNRESTRICTED_AUTH stays off: libcurl
 * then sends them only while a redirect stays on the host, port and scheme
 * of url, so a blob redirect to a storage host gets none. */
int skiff_registry_http_get(struct skiff_registry *r, const char *url, const char *accept, const struct auth *a,
                            struct sink *s, long *status, skiff_err *err)
{
    CURL *c = r->curl;
    curl_easy_reset(c);
    s->may_pass = false;
    struct curl_slist *h = NULL;
    if (accept)
        h = curl_slist_append(h, accept);
    struct hdrs hd = {.challenge = r->challenge, .chsize = sizeof(r->challenge)};
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
    if (r->cfg->transfer_timeout_s > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)r->cfg->transfer_timeout_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hd);
    if (s->fd < 0) /* a Content-Length over the cap fails before the body */
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
    if (rc != CURLE_OK) {
        if ((s->fd < 0 && s->write_errno == EFBIG) || rc == CURLE_FILESIZE_EXCEEDED)
            return skiff_error(err, 0, "GET %s: the answer is larger than %zu MiB, the limit for %s; refused", url,
                               s->max >> 20, s->what ? s->what : "it");
        if (s->write_errno)
            return skiff_error(err, s->write_errno, "GET %s", url);
        /* what curl --retry (enroot's ENROOT_TRANSFER_RETRIES) tries again,
         * and a refused connection or a cut transfer as well */
        s->may_pass = rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_PARTIAL_FILE ||
                      rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING;
        return skiff_error(err, rc == CURLE_COULDNT_CONNECT ? ECONNREFUSED : 0, "GET %s: %s", url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return 0;
}
