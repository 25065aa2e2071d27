/* Private to the registry client (registry.h): what its files share.
 * registry.c is the registry API (open, manifests, blobs, endpoints);
 * regauth.c the auth dance (WWW-Authenticate challenges, token servers and
 * who may get which credentials); reghttp.c one GET through libcurl, its
 * answer capped in memory or streamed to a file; credentials.c the
 * netrc-style credentials file. */
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
    int cur; /* endpoint that served the manifest */
    char challenge[1024];
};

/* Where an answer goes: memory, at most max bytes (fd < 0), or the open
 * file fd, hashed on the way (a blob). */
struct sink {
    /* memory */
    char *buf;
    size_t len, cap, max; /* max: the answer's cap (bytes) */
    const char *what;     /* what is read, for the cap's error ("a manifest") */
    /* file */
    int fd;
    struct skiff_sha256 *hash;
    int write_errno;
    bool may_pass; /* the GET failed in a way a later try may not (regauth.c's retries) */
    CURL *curl;
    unsigned long long written;
    int (*progress)(void *ctx, unsigned long long bytes);
    void *progress_ctx;
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

/* One GET. Credentials go through libcurl's own auth options, never a custom
 * "Authorization:" header, and CURLOPT_UNRESTRICTED_AUTH stays off: libcurl
 * then sends them only while a redirect stays on the host, port and scheme
 * of url, so a blob redirect to a storage host gets none. */
int skiff_registry_http_get(struct skiff_registry *r, const char *url, const char *accept, const struct auth *a,
                            struct sink *s, long *status, skiff_err *err);

/* ---- regauth.c ---- */

/* Forgets a token (its bytes wiped). */
void skiff_registry_drop_token(struct bearer *t);

/* GET from endpoint e with the auth dance: anonymous (or e's cached token)
 * first, then what e's 401 challenge asks for. Only e's own token and
 * credentials are ever sent to it. */
int skiff_registry_authed_get(struct skiff_registry *r, struct endpoint *e, const char *url, const char *accept,
                              struct sink *s, long *status, skiff_err *err);

#endif
