/* The registry API (registry.h): endpoints (a mirror first, then the
 * image's registry), manifests (GET, and HEAD for a tag's digest); blobs
 * are download.c's, the auth regauth.c's, one request reghttp.c's, the
 * credentials file credentials.c's (registry_int.h). */
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

/* One endpoint's GET (or HEAD) of a manifest, retried on transient
 * failures: 0 with an answer in resp (any status), -1 when none came. */
static int manifest_request(struct skiff_registry *r, struct endpoint *e, const char *url, bool head,
                            const struct skiff_fetch_opts *o, struct sink *s, struct http_resp *resp, skiff_err *err)
{
    struct retry rt;
    skiff_retry_init(&rt, r->cfg, o ? o : &r->defaults);
    for (;;) {
        struct http_req q = {.accept = accept_manifests, .head = head};
        skiff_retry_req(&rt, &q);
        s->len = 0;
        int rc = skiff_registry_authed_get(r, e, url, &q, s, resp, err);
        if (rc == 0 && !skiff_http_transient(resp))
            return 0;
        if (rc == 0) {
            char detail[512];
            registry_error_text(s, detail, sizeof(detail));
            skiff_error(err, 0, "%s %s: HTTP %ld%s", head ? "HEAD" : "GET", url, resp->status, detail);
        } else if (!skiff_http_transient(resp) || err->code == ECANCELED) {
            return -1;
        }
        if (skiff_retry_pause(&rt, "manifest", resp, err) < 0)
            return rc == 0 ? 0 : -1; /* no try left: the last answer stands */
    }
}

int skiff_registry_manifest(struct skiff_registry *r, const char *reference, char **body, size_t *len, char *media_type,
                            size_t mtlen, char digest[SKIFF_DIGEST_LEN], skiff_err *err)
{
    skiff_err first;
    skiff_err_clear(&first);
    for (int i = 0; i < r->nep; i++) {
        char url[2048];
        snprintf(url, sizeof(url), "%s/v2/%s/manifests/%s", r->ep[i].base, r->ref->repository, reference);
        struct sink s = {.max = MANIFEST_MAX, .what = "a manifest"};
        struct http_resp resp;
        skiff_err e;
        skiff_err_clear(&e);
        if (manifest_request(r, &r->ep[i], url, false, NULL, &s, &resp, &e) < 0) {
            free(s.buf);
            if (!first.msg[0])
                first = e;
            *err = e;
            continue; /* next endpoint (the mirror may be down) */
        }
        long status = resp.status;
        if (status != 200) {
            char detail[512];
            registry_error_text(&s, detail, sizeof(detail));
            free(s.buf);
            if (status == 404)
                skiff_error(&e, ENOENT, "manifest %s:%s not found on %s (HTTP 404%s); check the image name and tag",
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

int skiff_registry_manifest_digest(struct skiff_registry *r, const char *reference, char digest[SKIFF_DIGEST_LEN],
                                   const struct skiff_fetch_opts *o, skiff_err *err)
{
    for (int i = 0; i < r->nep; i++) {
        char url[2048];
        snprintf(url, sizeof(url), "%s/v2/%s/manifests/%s", r->ep[i].base, r->ref->repository, reference);
        struct sink s = {.max = MANIFEST_MAX, .what = "a manifest"};
        struct http_resp resp;
        skiff_err_clear(err);
        int rc = manifest_request(r, &r->ep[i], url, true, o, &s, &resp, err);
        free(s.buf);
        if (rc < 0)
            continue; /* next endpoint (the mirror may be down) */
        if (resp.status == 404) {
            skiff_error(err, ENOENT, "manifest %s:%s not found on %s (HTTP 404); check the image name and tag",
                        r->ref->repository, reference, r->ep[i].host);
            continue;
        }
        if (resp.status != 200) {
            skiff_error(err, 0, "manifest %s:%s on %s: HTTP %ld", r->ref->repository, reference, r->ep[i].host,
                        resp.status);
            continue;
        }
        r->cur = i;
        if (!resp.digest[0])
            return 0;
        snprintf(digest, SKIFF_DIGEST_LEN, "%s", resp.digest);
        return 1;
    }
    return -1;
}

void skiff_registry_set_defaults(struct skiff_registry *r, const struct skiff_fetch_opts *o)
{
    r->defaults = o ? *o : (struct skiff_fetch_opts){0};
}

int skiff_registry_dup(struct skiff_registry **out, const struct skiff_registry *r, skiff_err *err)
{
    struct skiff_registry *d = calloc(1, sizeof(*d));
    if (!d)
        return skiff_error(err, ENOMEM, "registry");
    *d = *r;
    d->curl = curl_easy_init();
    /* the token and credentials are the copy's own (close frees them) */
    for (int i = 0; i < d->nep; i++) {
        d->ep[i].tok.value = NULL;
        d->ep[i].cred = (struct skiff_credential){0};
    }
    for (int i = 0; i < d->nep; i++) {
        const struct endpoint *e = &r->ep[i];
        if ((e->tok.value && !(d->ep[i].tok.value = strdup(e->tok.value))) ||
            (e->cred.login && !(d->ep[i].cred.login = strdup(e->cred.login))) ||
            (e->cred.password && !(d->ep[i].cred.password = strdup(e->cred.password)))) {
            skiff_registry_close(d);
            return skiff_error(err, ENOMEM, "registry");
        }
    }
    if (!d->curl) {
        skiff_registry_close(d);
        return skiff_error(err, ENOMEM, "curl_easy_init");
    }
    *out = d;
    return 0;
}
