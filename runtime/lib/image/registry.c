/* The registry API (registry.h): endpoints (a mirror first, then the
 * image's registry), manifests and blobs; the auth is regauth.c, one GET
 * reghttp.c, the credentials file credentials.c (registry_int.h). */
#include "registry_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const accept_manifests = "Accept: application/vnd.oci.image.index.v1+json, "
                                            "application/vnd.docker.distribution.manifest.list.v2+json, "
                                            "application/vnd.oci.image.manifest.v1+json, "
                                            "application/vnd.docker.distribution.manifest.v2+json";

static void registry_error_text(const struct sink *s, char *out, size_t n)
{
    out[0] = '\0';
    if (!s->buf)
        return;
    json_error_t je;
    json_t *j = json_loadb(s->buf, s->len, 0, &je);
    json_t *e0 = json_array_get(json_object_get(j, "errors"), 0);
    const char *code = json_string_value(json_object_get(e0, "code"));
    const char *msg = json_string_value(json_object_get(e0, "message"));
    if (code || msg)
        snprintf(out, n, " (%s%s%s)", code ? code : "", code && msg ? ": " : "", msg ? msg : "");
    json_decref(j);
}

int skiff_registry_open(struct skiff_registry **out, const struct skiff_config *cfg, const struct skiff_ref *ref,
                        skiff_err *err)
{
    static bool curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
            return skiff_error(err, 0, "curl_global_init failed");
        curl_ready = true;
    }
    struct skiff_registry *r = calloc(1, sizeof(*r));
    if (!r)
        return skiff_error(err, ENOMEM, "registry");
    r->cfg = cfg;
    r->ref = ref;
    r->curl = curl_easy_init();
    if (!r->curl) {
        free(r);
        return skiff_error(err, ENOMEM, "curl_easy_init");
    }
    /* The mirror first. Each endpoint gets the credentials file's entry for
     * its own host: the mirror's for the mirror (any login), the image
     * registry's (as the reference names it, USER@ selecting the login) for
     * the registry. */
    const char *hosts[2] = {cfg->registry_mirror[0] ? cfg->registry_mirror : NULL, skiff_ref_endpoint(ref)};
    const char *cred_hosts[2] = {hosts[0], ref->registry};
    const char *users[2] = {"", ref->user};
    for (int i = 0; i < 2; i++) {
        if (!hosts[i])
            continue;
        struct endpoint *e = &r->ep[r->nep++];
        snprintf(e->host, sizeof(e->host), "%s", hosts[i]);
        snprintf(e->base, sizeof(e->base), "%s://%s", skiff_registry_plain_http_ok(cfg, hosts[i]) ? "http" : "https",
                 hosts[i]);
        e->user = users[i];
        int found = skiff_credentials_find(cfg, cred_hosts[i], e->user, &e->cred, err);
        if (found < 0) {
            skiff_registry_close(r);
            return skiff_err_wrap(err, "credentials for %s", cred_hosts[i]);
        }
        e->have_creds = found == 1;
    }
    if (ref->user[0] && !r->ep[r->nep - 1].have_creds) {
        skiff_registry_close(r);
        return skiff_error(err, 0, "no password for user '%s' at %s in %s (add 'machine %s login %s password ...')",
                           ref->user, ref->registry, cfg->credentials_file, ref->registry, ref->user);
    }
    *out = r;
    return 0;
}

void skiff_registry_close(struct skiff_registry *r)
{
    if (!r)
        return;
    if (r->curl)
        curl_easy_cleanup(r->curl);
    for (int i = 0; i < r->nep; i++) {
        skiff_registry_drop_token(&r->ep[i].tok);
        skiff_credential_clear(&r->ep[i].cred);
    }
    free(r);
}

int skiff_registry_manifest(struct skiff_registry *r, const char *reference, char **body, size_t *len, char *media_type,
                            size_t mtlen, char digest[SKIFF_DIGEST_LEN], skiff_err *err)
{
    skiff_err first;
    skiff_err_clear(&first);
    for (int i = 0; i < r->nep; i++) {
        char url[2048];
        snprintf(url, sizeof(url), "%s/v2/%s/manifests/%s", r->ep[i].base, r->ref->repository, reference);
        struct sink s = {.fd = -1, .max = MANIFEST_MAX, .what = "a manifest"};
        long status = 0;
        skiff_err e;
        skiff_err_clear(&e);
        if (skiff_registry_authed_get(r, &r->ep[i], url, accept_manifests, &s, &status, &e) < 0) {
            free(s.buf);
            if (!first.msg[0])
                first = e;
            *err = e;
            continue; /* next endpoint (the mirror may be down) */
        }
        if (status != 200) {
            char detail[512];
            registry_error_text(&s, detail, sizeof(detail));
            free(s.buf);
            if (status == 404)
                skiff_error(&e, 0, "manifest %s:%s not found on %s (HTTP 404%s); check the image name and tag",
                            r->ref->repository, reference, r->ep[i].host, detail);
            else
                skiff_error(&e, 0, "manifest %s:%s on %s: HTTP %ld%s", r->ref->repository, reference, r->ep[i].host,
                            status, detail);
            *err = e;
            continue;
        }
        if (!s.buf) {
            *err = e;
            skiff_error(err, 0, "manifest %s: empty answer from %s", reference, r->ep[i].host);
            continue;
        }
        if (skiff_digest_buf(s.buf, s.len, digest, err) < 0) {
            free(s.buf);
            return -1;
        }
        if (!strncmp(reference, "sha256:", 7) && strcmp(reference, digest) != 0) {
            free(s.buf);
            return skiff_error(err, 0, "manifest digest mismatch from %s: asked for %s, got %s", r->ep[i].host,
                               reference, digest);
        }
        char *ct = NULL;
        curl_easy_getinfo(r->curl, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(media_type, mtlen, "%s", ct ? ct : "");
        char *semi = strchr(media_type, ';');
        if (semi)
            *semi = '\0';
        r->cur = i;
        *body = s.buf;
        *len = s.len;
        return 0;
    }
    return -1;
}

int skiff_registry_blob(struct skiff_registry *r, const char *digest, int fd, skiff_err *err)
{
    return skiff_registry_blob_progress(r, digest, fd, NULL, NULL, err);
}

int skiff_registry_blob_progress(struct skiff_registry *r, const char *digest, int fd,
                                 int (*progress)(void *ctx, unsigned long long bytes), void *ctx, skiff_err *err)
{
    for (int k = 0; k < r->nep; k++) {
        int i = (r->cur + k) % r->nep;
        char url[2048];
        snprintf(url, sizeof(url), "%s/v2/%s/blobs/%s", r->ep[i].base, r->ref->repository, digest);
        if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
            return skiff_error(err, errno, "truncate blob file");
        struct skiff_sha256 h;
        if (skiff_sha256_init(&h, err) < 0)
            return -1;
        /* A retry (next endpoint) rewrites the file from the start; the bytes
         * are the same, as blobs are content-addressed. */
        if (progress && progress(ctx, 0) != 0) {
            skiff_sha256_abort(&h);
            return skiff_error(err, ECANCELED, "blob %s", digest);
        }
        struct sink s = {.fd = fd, .hash = &h, .curl = r->curl, .progress = progress, .progress_ctx = ctx};
        long status = 0;
        if (skiff_registry_authed_get(r, &r->ep[i], url, NULL, &s, &status, err) < 0) {
            skiff_sha256_abort(&h);
            if (s.write_errno == ECANCELED)
                return -1;
            continue;
        }
        if (status != 200) {
            skiff_sha256_abort(&h);
            skiff_error(err, status == 404 ? ENOENT : 0, "blob %s on %s: HTTP %ld", digest, r->ep[i].host, status);
            continue;
        }
        char got[SKIFF_DIGEST_LEN];
        skiff_sha256_final(&h, got);
        if (strcmp(got, digest) != 0)
            return skiff_error(err, 0, "blob %s from %s: digest mismatch (got %s)", digest, r->ep[i].host, got);
        return 0;
    }
    return -1;
}
