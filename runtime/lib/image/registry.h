/* registry: a client for the registry HTTP API v2 (libcurl): manifests with
 * Accept headers for Docker v2 schema 2, OCI, manifest lists and OCI indexes;
 * blobs and byte ranges of blobs, retried and resumed, with their sha256
 * checked; bearer-token and basic
 * auth with credentials from a netrc-style file (cfg->credentials_file).
 * Plain http is used only for loopback registries or with allow_http; a
 * registry_mirror, when set, is asked first.
 * Credentials stay with their host: each endpoint (mirror, registry) gets the
 * credentials file's entry for its own host, a bearer token is sent only to
 * the endpoint that asked for it, a token server gets the endpoint's
 * credentials only when it is on the endpoint's host (else its own entry, if
 * any), and libcurl drops them all on a redirect to another host. Answers
 * read into memory are capped (manifests 4 MiB, token answers 1 MiB). */
#ifndef SKIFF_REGISTRY_H
#define SKIFF_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "digest.h"
#include "error.h"
#include "ref.h"

struct skiff_registry;

int skiff_registry_open(struct skiff_registry **out, const struct skiff_config *cfg, const struct skiff_ref *ref,
                        skiff_err *err);
void skiff_registry_close(struct skiff_registry *r);

/* How hard a transfer tries. Every request of the client is retried on a
 * transient failure: a connection refused, reset or stalled (no byte for
 * cfg->stall_timeout seconds), an answer cut short, HTTP 408, 429 or 5xx;
 * after a pause that doubles each time (from backoff_ms, at most 30 s, with
 * random jitter so that the nodes of a cluster do not come back together),
 * or what the registry's Retry-After asks. A blob or range picks up where
 * the last try stopped (Range: bytes=N-). Nothing else is retried (HTTP
 * 404, 401, 403, a digest mismatch): the next endpoint is tried, or it
 * fails. A connection refused (or a host name that does not resolve) gets
 * two retries at most: a restarting registry, not a wrong name or a dead
 * one, is worth waiting for. A zeroed struct (or NULL) means the defaults. */
struct skiff_fetch_opts {
    int retries;        /* tries after the first (per endpoint); 0: cfg->transfer_retries; < 0: none */
    double deadline_ms; /* skiff_now_ms() at which it gives up (no pause runs past it); 0: none */
    double backoff_ms;  /* the first pause; 0: 1000 */
    /* polled about once a second and while pausing; true stops the
     * transfer (ECANCELED) */
    bool (*stop)(void *ctx);
    void *stop_ctx;
    /* told before each pause: what failed (the attempt's error) and how long
     * it waits; NULL: nothing told */
    void (*retrying)(void *ctx, const char *what, int attempt, double wait_s, const char *why);
    void *retry_ctx;
    /* skiff_registry_blob_range: a registry (or a proxy in front of it)
     * that ignores Range is an error (err->code ENOTSUP) instead of being
     * read past off: lazy images fetch small ranges of large blobs */
    bool need_ranges;
};

/* A second handle on the same registry for another thread: the endpoints,
 * their credentials and tokens copied, a connection of its own. A handle is
 * used by one thread at a time. */
int skiff_registry_dup(struct skiff_registry **out, const struct skiff_registry *r, skiff_err *err);

/* What the requests that take no struct skiff_fetch_opts of their own (the
 * manifest's GET, skiff_registry_blob) and those given NULL use from now on:
 * an import's deadline bounds its manifest and image config too. A dup'ed
 * handle starts with its original's. */
void skiff_registry_set_defaults(struct skiff_registry *r, const struct skiff_fetch_opts *o);

/* GETs the manifest named by reference (a tag or a digest) of the ref's
 * repository. *body is malloc'd (NUL-terminated); media_type is the
 * Content-Type; digest is the sha256 of the body, checked against reference
 * when that is a digest. */
int skiff_registry_manifest(struct skiff_registry *r, const char *reference, char **body, size_t *len, char *media_type,
                            size_t mtlen, char digest[SKIFF_DIGEST_LEN], skiff_err *err);

/* The digest of the manifest reference names, asked with a HEAD (which
 * Docker Hub does not count against its pull limits): 1 with digest set
 * from Docker-Content-Digest, 0 when the registry answered without that
 * header (ask with skiff_registry_manifest), -1 on error (err->code ENOENT:
 * no such manifest). o NULL: the defaults. */
int skiff_registry_manifest_digest(struct skiff_registry *r, const char *reference, char digest[SKIFF_DIGEST_LEN],
                                   const struct skiff_fetch_opts *o, skiff_err *err);

/* Where the bytes of a blob go: called with consecutive pieces, never the
 * same byte twice (a retry resumes after the last byte handed over);
 * non-zero stops the transfer with that error (errno set). */
typedef int (*skiff_blob_sink)(void *ctx, const void *buf, size_t n);

/* Bytes [off, off + len) of blob digest (len 0: to its end), handed to sink
 * in order, retried and resumed as struct skiff_fetch_opts says. A registry
 * that ignores Range (a 200 with the whole blob) is read past off; one that
 * answers another range than asked is an error. The bytes are not checked
 * against the digest (only a whole blob can be): skiff_registry_blob_fetch
 * does that. */
int skiff_registry_blob_range(struct skiff_registry *r, const char *digest, unsigned long long off,
                              unsigned long long len, skiff_blob_sink sink, void *ctx, const struct skiff_fetch_opts *o,
                              skiff_err *err);

/* Downloads blob digest into fd (written from its start; size: the
 * manifest's, 0 if unknown), retried and resumed from the bytes already
 * written and hashed, its sha256 checked at the end (a mismatch is
 * err->code EBADMSG). progress(ctx, bytes so far), if not NULL, after
 * each write; non-zero cancels. */
int skiff_registry_blob_fetch(struct skiff_registry *r, const char *digest, unsigned long long size, int fd,
                              int (*progress)(void *ctx, unsigned long long bytes), void *ctx,
                              const struct skiff_fetch_opts *o, skiff_err *err);

/* skiff_registry_blob_fetch with the defaults and no size. */
int skiff_registry_blob(struct skiff_registry *r, const char *digest, int fd, skiff_err *err);

/* A login and password, each as long as the file has it (on the heap;
 * skiff_credential_clear wipes the password and frees both). */
struct skiff_credential {
    char *login, *password;
};
void skiff_credential_clear(struct skiff_credential *c);

/* Looks up login and password for host in the netrc-style file at path
 * ("machine HOST[:PORT] login USER password PASS", "default ..."; an entry
 * without a port is for every port of that host); when user is non-empty
 * only an entry with that login matches. With enroot, the file is enroot's
 * and a password starting with '$' is substituted from the environment
 * ($NAME, ${NAME}; command substitution is refused: credentials.c).
 * Returns 1 when found (out filled), 0 when not (a missing or unreadable
 * file is not an error), -1 on error. */
int skiff_credentials_lookup(const char *path, const char *host, const char *user, bool enroot,
                             struct skiff_credential *out, skiff_err *err);

/* host's entry in cfg->credentials_file, else in enroot's
 * cfg->enroot_config_path/.credentials. 1 found, 0 none, -1 error. */
int skiff_credentials_find(const struct skiff_config *cfg, const char *host, const char *user,
                           struct skiff_credential *out, skiff_err *err);

/* The environment a '$' password in enroot's file is substituted from:
 * envp (K=V, NULL-terminated; it must outlive the lookups), or NULL for the
 * process's own (the CLI). The plugin's helper passes the job's. */
void skiff_credentials_env(const char *const *envp);

/* Whether a token server at the URL realm may get the credentials held for
 * endpoint (HOST[:PORT]): its host is the endpoint's (any port), or it is
 * https://auth.docker.io for registry-1.docker.io. False for a realm that is
 * not a URL or has a user name or password in it. */
bool skiff_registry_realm_same_host(const char *endpoint, const char *realm);

#endif
