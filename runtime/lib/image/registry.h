/* registry: a client for the registry HTTP API v2 (libcurl): manifests with
 * Accept headers for Docker v2 schema 2, OCI, manifest lists and OCI indexes;
 * blobs streamed to a file with their sha256 checked; bearer-token and basic
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

/* GETs the manifest named by reference (a tag or a digest) of the ref's
 * repository. *body is malloc'd (NUL-terminated); media_type is the
 * Content-Type; digest is the sha256 of the body, checked against reference
 * when that is a digest. */
int skiff_registry_manifest(struct skiff_registry *r, const char *reference, char **body, size_t *len, char *media_type,
                            size_t mtlen, char digest[SKIFF_DIGEST_LEN], skiff_err *err);

/* Downloads blob digest into the open file fd, verifying its sha256. */
int skiff_registry_blob(struct skiff_registry *r, const char *digest, int fd, skiff_err *err);

/* Same, calling progress(ctx, bytes written so far) after each write (and
 * with 0 when a download starts over from another endpoint); a non-zero
 * return cancels the download. */
int skiff_registry_blob_progress(struct skiff_registry *r, const char *digest, int fd,
                                 int (*progress)(void *ctx, unsigned long long bytes), void *ctx, skiff_err *err);

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
