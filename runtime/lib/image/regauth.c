/* The registry client's auth (registry_int.h, the rules in registry.h):
 * WWW-Authenticate challenges, bearer tokens from token servers, basic auth,
 * and who may get which credentials. */
#include "registry_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Extracts key="value" from a WWW-Authenticate challenge. */
static void challenge_param(const char *ch, const char *key, char *out, size_t n)
{
    out[0] = '\0';
    size_t kl = strlen(key);
    for (const char *p = ch; (p = strcasestr(p, key)); p += kl) {
        if (p != ch && p[-1] != ' ' && p[-1] != ',')
            continue;
        if (p[kl] != '=')
            continue;
        const char *v = p + kl + 1;
        size_t len;
        if (*v == '"') {
            v++;
            const char *e = strchr(v, '"');
            len = e ? (size_t)(e - v) : strlen(v);
        } else {
            len = strcspn(v, ", ");
        }
        if (len >= n)
            len = n - 1;
        memcpy(out, v, len);
        out[len] = '\0';
        return;
    }
}

void skiff_registry_drop_token(struct bearer *t)
{
    if (t->value) {
        explicit_bzero(t->value, strlen(t->value));
        free(t->value);
    }
    memset(t, 0, sizeof(*t));
}

/* A token realm's URL as libcurl itself parses it (what it will connect to,
 * so no parser differs from the one that decides who gets credentials). */
struct realm_url {
    char scheme[16];
    char host[256];      /* as libcurl has it: lower case, [v6] in brackets */
    char authority[300]; /* host[:port], the port only when the URL has one */
    long port;           /* the URL's port, or the scheme's default */
    bool userinfo;       /* a user name or password in the URL */
};

static int parse_realm(const char *realm, struct realm_url *out)
{
    memset(out, 0, sizeof(*out));
    CURLU *u = curl_url();
    if (!u)
        return -1;
    char *scheme = NULL, *host = NULL, *port = NULL, *user = NULL, *pw = NULL;
    int rv = -1;
    if (curl_url_set(u, CURLUPART_URL, realm, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0] ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
        goto out;
    out->userinfo = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
                    curl_url_get(u, CURLUPART_PASSWORD, &pw, 0) == CURLUE_OK;
    snprintf(out->scheme, sizeof(out->scheme), "%s", scheme);
    snprintf(out->host, sizeof(out->host), "%s", host);
    out->port = strtol(port, NULL, 10);
    curl_free(port);
    port = NULL;
    if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK)
        snprintf(out->authority, sizeof(out->authority), "%s:%s", host, port);
    else
        snprintf(out->authority, sizeof(out->authority), "%s", host);
    rv = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(user);
    curl_free(pw);
    curl_url_cleanup(u);
    return rv;
}

/* HOST of HOST[:PORT] ([v6] keeps its brackets). */
static void host_only(const char *hostport, char *out, size_t n)
{
    snprintf(out, n, "%s", hostport);
    char *colon = strrchr(out, ':');
    if (colon && !strchr(colon, ']') && (out[0] != '[' || colon[-1] == ']'))
        *colon = '\0';
}

bool skiff_registry_realm_same_host(const char *endpoint, const char *realm)
{
    struct realm_url ru;
    if (parse_realm(realm, &ru) < 0 || ru.userinfo)
        return false;
    char host[256];
    host_only(endpoint, host, sizeof(host));
    if (!strcasecmp(host, ru.host))
        return true;
    /* Docker Hub's registry names its token server on another host. */
    return !strcasecmp(host, "registry-1.docker.io") && !strcmp(ru.scheme, "https") &&
           !strcmp(ru.host, "auth.docker.io") && ru.port == 443;
}

static int fetch_token(struct skiff_registry *r, struct endpoint *e, const char *challenge, skiff_err *err)
{
    char realm[1024], service[256], scope[640];
    challenge_param(challenge, "realm", realm, sizeof(realm));
    challenge_param(challenge, "service", service, sizeof(service));
    challenge_param(challenge, "scope", scope, sizeof(scope));
    if (!realm[0])
        return skiff_error(err, 0, "%s asked for a bearer token without a realm", e->host);
    if (!scope[0])
        snprintf(scope, sizeof(scope), "repository:%s:pull", r->ref->repository);
    struct realm_url ru;
    if (parse_realm(realm, &ru) < 0)
        return skiff_error(err, 0, "%s names a token realm that is not a URL: %s", e->host, realm);
    if (ru.userinfo)
        return skiff_error(err, 0, "%s names a token realm with a user name or password in its URL; refused", e->host);
    if (strcmp(ru.scheme, "https") != 0 &&
        !(!strcmp(ru.scheme, "http") && skiff_registry_plain_http_ok(r->cfg, ru.authority)))
        return skiff_error(err, 0, "token realm %s is not https (set allow_http = yes to allow it)", realm);
    /* Whose credentials the token server gets: the endpoint's when it is on
     * the endpoint's host, else only the credentials file's entry for the
     * realm's own host. */
    struct auth a = {.kind = AUTH_NONE};
    struct skiff_credential realm_cred = {0};
    const char *cred_host = NULL; /* whose entry was sent */
    bool withheld = false;        /* the endpoint's were not */
    if (e->have_creds && skiff_registry_realm_same_host(e->host, realm)) {
        a = (struct auth){.kind = AUTH_BASIC, .login = e->cred.login, .password = e->cred.password};
        cred_host = e->host;
    } else {
        int found = skiff_credentials_find(r->cfg, ru.authority, e->user, &realm_cred, err);
        if (found < 0)
            return skiff_err_wrap(err, "credentials for token realm %s", ru.authority);
        if (found) {
            a = (struct auth){.kind = AUTH_BASIC, .login = realm_cred.login, .password = realm_cred.password};
            cred_host = ru.authority;
        }
        withheld = !found && e->have_creds;
    }
    CURL *c = r->curl;
    char *es = curl_easy_escape(c, service, 0), *esc = curl_easy_escape(c, scope, 0);
    char url[2048];
    snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?", es ? es : "",
             esc ? esc : "");
    curl_free(es);
    curl_free(esc);
    struct sink s = {.max = TOKEN_MAX, .what = "a token server's answer"};
    struct http_resp resp;
    int rv = skiff_registry_http_get(r, url, NULL, &a, &s, &resp, err);
    long status = resp.status;
    skiff_credential_clear(&realm_cred);
    if (rv < 0) {
        free(s.buf);
        return skiff_err_wrap(err, "token for %s", e->host);
    }
    if (status != 200) {
        free(s.buf);
        if ((status == 401 || status == 403) && cred_host)
            return skiff_error(err, 0,
                               "token server %s refused (HTTP %ld): check the login and password "
                               "for %s in the credentials file",
                               realm, status, cred_host);
        if ((status == 401 || status == 403) && withheld)
            return skiff_error(err, 0,
                               "token server %s refused (HTTP %ld): it is not on %s, so the "
                               "credentials for %s were not sent; add 'machine %s login USER password "
                               "PASS' to the credentials file to log in there",
                               realm, status, e->host, e->host, ru.authority);
        if (status == 401 || status == 403)
            return skiff_error(err, 0,
                               "token server %s refused (HTTP %ld): add 'machine %s login USER "
                               "password PASS' to the credentials file",
                               realm, status, e->host);
        return skiff_error(err, 0, "token server %s: HTTP %ld", realm, status);
    }
    json_error_t je;
    json_t *j = json_loadb(s.buf ? s.buf : "", s.len, 0, &je);
    if (s.buf)
        explicit_bzero(s.buf, s.len);
    free(s.buf);
    const char *tok = NULL;
    if (j) {
        tok = json_string_value(json_object_get(j, "token"));
        if (!tok)
            tok = json_string_value(json_object_get(j, "access_token"));
    }
    if (!tok || !tok[0]) {
        json_decref(j);
        return skiff_error(err, 0, "token server %s: no token in the answer", realm);
    }
    skiff_registry_drop_token(&e->tok);
    e->tok.value = strdup(tok);
    json_decref(j);
    if (!e->tok.value)
        return skiff_error(err, ENOMEM, "token");
    snprintf(e->tok.realm, sizeof(e->tok.realm), "%s", realm);
    snprintf(e->tok.service, sizeof(e->tok.service), "%s", service);
    snprintf(e->tok.scope, sizeof(e->tok.scope), "%s", scope);
    return 0;
}

/* Whether the challenge asks for what tok was issued for. */
static bool token_matches(const struct bearer *tok, const char *challenge)
{
    char realm[1024], service[256], scope[640];
    challenge_param(challenge, "realm", realm, sizeof(realm));
    challenge_param(challenge, "service", service, sizeof(service));
    challenge_param(challenge, "scope", scope, sizeof(scope));
    return tok->value && !strcmp(realm, tok->realm) && !strcmp(service, tok->service) &&
           (!scope[0] || !strcmp(scope, tok->scope));
}

int skiff_registry_authed_get(struct skiff_registry *r, struct endpoint *e, const char *url, const struct http_req *q,
                              struct sink *s, struct http_resp *resp, skiff_err *err)
{
    struct auth a = {.kind = AUTH_NONE};
    if (e->tok.value)
        a = (struct auth){.kind = AUTH_BEARER, .token = e->tok.value};
    bool fresh_token = false; /* a cached token may have expired: renew it once */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (skiff_registry_http_get(r, url, q, &a, s, resp, err) < 0)
            return -1;
        if (resp->status != 401)
            return 0;
        s->len = 0; /* the 401's body (a callback never gets one) */
        if (!strncasecmp(r->challenge, "Bearer", 6) && !fresh_token) {
            /* A token for another realm, service or scope is of no use here. */
            if (!token_matches(&e->tok, r->challenge))
                skiff_registry_drop_token(&e->tok);
            if (fetch_token(r, e, r->challenge, err) < 0)
                return -1;
            a = (struct auth){.kind = AUTH_BEARER, .token = e->tok.value};
            fresh_token = true;
        } else if (!strncasecmp(r->challenge, "Basic", 5) && a.kind != AUTH_BASIC && e->have_creds) {
            a = (struct auth){.kind = AUTH_BASIC, .login = e->cred.login, .password = e->cred.password};
        } else {
            break;
        }
    }
    if (resp->status == 401 && e->have_creds)
        return skiff_error(err, 0,
                           "%s: authentication required (HTTP 401): the credentials for %s "
                           "in the credentials file were refused",
                           url, e->host);
    if (resp->status == 401)
        return skiff_error(err, 0,
                           "%s: authentication required (HTTP 401): add 'machine %s login USER "
                           "password PASS' to the credentials file (credentials_file)",
                           url, e->host);
    return 0;
}
