/* Private to the registry client (registry.h): what its files share.
 * registry.c is the registry API (open, manifests, blobs, endpoints);
 * regauth.c the auth dance (WWW-Authenticate challenges, token servers and
 * who may get which credentials); reghttp.c one GET through libcurl, its
 * answer capped in memory or handed to a callback; download.c blobs and
 * byte ranges of blobs, retried and resumed; credentials.c the netrc-style
 * credentials file. */
#ifndef SKIFF_REGISTRY_INT_H
#define SKIFF_REGISTRY_INT_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "digest.h"
#include "error.h"
#include "ref.h"
#include "registry.h"

/* Caps on answers read into memory: manifests and indexes (and the error
 * JSON of any answer), and a token server's JSON. Blobs go to a file. */
#define MANIFEST_MAX (4u << 20)
#define TOKEN_MAX (1u << 20)

/* A bearer token, kept by the endpoint whose challenge asked for it and never
 * sent anywhere else; realm, service and scope say what issued it for what. */
struct bearer {
    char *value;
    char realm[1024], service[256], scope[640];
};

/* The mirror or the image's registry. Each has its own credentials (the
 * credentials file's entry for its host) and its own token: nothing one
 * endpoint was given or issued is sent to the other. */
struct endpoint {
    char host[256];   /* HOST[:PORT] */
    char base[320];   /* scheme://host */
    const char *user; /* login the entry must have ("" = any) */
    struct skiff_credential cred;
    bool have_creds;
    struct bearer tok;
};

struct skiff_registry {
    const struct skiff_config *cfg;
    const struct skiff_ref *ref;
    CURL *curl;
    struct endpoint ep[2];
    int nep;
    int cur;                          /* endpoint that served the manifest */
    struct skiff_fetch_opts defaults; /* for requests given no options (skiff_registry_set_defaults) */
    char challenge[1024];
};

/* Where an answer goes: memory, at most max bytes (data == NULL), or the
 * callback data, which gets the body of a 200 or 206 answer (never that of
 * a redirect, a 401 or an error) and returns 0 to go on, 1 when it has all
 * it wants (the transfer ends there, a success) or -1 with write_errno set. */
struct http_resp;
struct sink {
    /* memory */
    char *buf;
    size_t len, cap, max; /* max: the answer's cap (bytes) */
    const char *what;     /* what is read, for the cap's error ("a manifest") */
    /* callback */
    int (*data)(void *ctx, const struct http_resp *resp, const char *buf, size_t n);
    void *ctx;
    int write_errno;
    bool done; /* data returned 1 */
    /* (set by skiff_registry_http_get) */
    CURL *curl;
    struct http_resp *resp;
};

/* What a request asks beyond its URL. */
struct http_req {
    const char *accept;          /* "Accept: ..." header, or NULL */
    bool head;                   /* HEAD instead of GET */
    bool ranged;                 /* send "Range: bytes=from-[to]" */
    unsigned long long from, to; /* to: last byte, inclusive; 0 = to the end */
    long timeout_ms;             /* the whole request; 0 = none */
    long stall_s;                /* no byte for this long cuts it (0: 60) */
    bool (*stop)(void *ctx);     /* polled about once a second: true cuts it */
    void *stop_ctx;
};

/* What came back besides the body. */
struct http_resp {
    long status;
    CURLcode rc;                    /* libcurl's result (CURLE_OK for any HTTP status) */
    char digest[SKIFF_DIGEST_LEN];  /* Docker-Content-Digest, when it is a sha256 digest */
    double retry_after_s;           /* Retry-After (seconds or a date); < 0 when absent */
    bool has_range;                 /* Content-Range came */
    unsigned long long range_first; /* its first byte */
    unsigned long long range_total; /* its total ("*": 0) */
    long long length;               /* Content-Length, -1 when absent */
};

/* What one GET sends to prove who it is. */
enum auth_kind { AUTH_NONE, AUTH_BEARER, AUTH_BASIC };

struct auth {
    enum auth_kind kind;
    const char *token;            /* AUTH_BEARER */
    const char *login, *password; /* AUTH_BASIC */
};

/* ---- reghttp.c ---- */

/* Whether plain http may be used for host: loopback, or allow_http. */
bool skiff_registry_plain_http_ok(const struct skiff_config *cfg, const char *host);

/* One request (GET, or HEAD with q->head). Credentials go through
 * libcurl's own auth options, never a custom "Authorization:" header, and
 * CURLOPT_UNRESTRICTED_AUTH stays off: libcurl then sends them only while a
 * redirect stays on the host, port and scheme of url, so a blob redirect to
 * a storage host gets none. -1 when no HTTP answer came (resp->rc says why:
 * skiff_http_transient tells a dropped connection from the rest) or the
 * sink failed; an HTTP error status is resp->status, not a failure. */
int skiff_registry_http_get(struct skiff_registry *r, const char *url, const struct http_req *q, const struct auth *a,
                            struct sink *s, struct http_resp *resp, skiff_err *err);

/* Whether a failed request is worth another try: a connection refused,
 * reset or stalled, an answer cut short (rc), HTTP 408, 429 or 5xx. */
bool skiff_http_transient(const struct http_resp *resp);

/* ---- download.c ---- */

/* The tries of one request (struct skiff_fetch_opts). */
struct retry {
    struct skiff_fetch_opts o;
    int retries; /* tries after the first */
    int attempt; /* retries made */
    long stall_s;
};

void skiff_retry_init(struct retry *rt, const struct skiff_config *cfg, const struct skiff_fetch_opts *o);

/* q's stall limit, stop poll and timeout (what is left to the deadline). */
void skiff_retry_req(const struct retry *rt, struct http_req *q);

/* Whether the caller asked to stop. */
bool skiff_retry_stopped(const struct retry *rt);

/* After a transient failure (err holds it): pauses before the next try
 * and returns 0 (err cleared), or -1 when no try is left (err kept, with
 * a note when the deadline is why) or the caller stopped it (ECANCELED). */
int skiff_retry_pause(struct retry *rt, const char *what, const struct http_resp *resp, skiff_err *err);

/* ---- regauth.c ---- */

/* Forgets a token (its bytes wiped). */
void skiff_registry_drop_token(struct bearer *t);

/* GET from endpoint e with the auth dance: anonymous (or e's cached token)
 * first, then what e's 401 challenge asks for. Only e's own token and
 * credentials are ever sent to it. */
int skiff_registry_authed_get(struct skiff_registry *r, struct endpoint *e, const char *url, const struct http_req *q,
                              struct sink *s, struct http_resp *resp, skiff_err *err);

#endif
