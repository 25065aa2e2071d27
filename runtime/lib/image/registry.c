#include "registry.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Caps on answers read into memory: manifests and indexes (and the error
 * JSON of any answer), and a token server's JSON. Blobs go to a file. */
#define MANIFEST_MAX (4u << 20)
#define TOKEN_MAX (1u << 20)

static const char *const accept_manifests = "Accept: application/vnd.oci.image.index.v1+json, "
                                            "application/vnd.docker.distribution.manifest.list.v2+json, "
                                            "application/vnd.oci.image.manifest.v1+json, "
                                            "application/vnd.docker.distribution.manifest.v2+json";

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
    char login[256], password[256];
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

/* ---- credentials ------------------------------------------------------ */

static char *next_token(char **p)
{
    char *s = *p;
    while (*s && isspace((unsigned char)*s))
        s++;
    if (!*s)
        return NULL;
    char *start = s;
    while (*s && !isspace((unsigned char)*s))
        s++;
    if (*s)
        *s++ = '\0';
    *p = s;
    return start;
}

int skiff_credentials_lookup(const char *path, const char *host, const char *user, char *login, size_t ln,
                             char *password, size_t pn, skiff_err *err)
{
    if (!path || !*path)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT || errno == EACCES ? 0 : skiff_error(err, errno, "open %s", path);
    /* netrc is a token stream; read it whole (it is small). */
    char *data = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&data, &size);
    char buf[4096];
    size_t n;
    while (m && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(f);
    if (!m)
        return skiff_error(err, ENOMEM, "read %s", path);
    fclose(m);
    char hostonly[256];
    snprintf(hostonly, sizeof(hostonly), "%s", host);
    char *colon = strrchr(hostonly, ':');
    if (colon && !strchr(hostonly, ']'))
        *colon = '\0';
    int found = 0;
    char *p = data, *t;
    bool in_match = false, is_default = false;
    char cl[256] = "", cp[256] = "";
    bool have_l = false, have_p = false;
    while (!found && (t = next_token(&p))) {
        bool starts = !strcmp(t, "machine") || !strcmp(t, "default");
        if (starts) {
            if (in_match && have_l && have_p && (!user || !*user || !strcmp(user, cl)))
                found = 1;
            if (found)
                break;
            in_match = false;
            have_l = have_p = false;
            if (!strcmp(t, "default")) {
                in_match = true;
                is_default = true;
            } else {
                char *mach = next_token(&p);
                in_match = mach && (!strcmp(mach, host) || !strcmp(mach, hostonly));
                is_default = false;
            }
        } else if (!strcmp(t, "login") || !strcmp(t, "password")) {
            /* (a keyword without its value ends the file: strcmp(NULL)
             * used to follow when "login" was the last word) */
            bool is_login = t[0] == 'l';
            const char *v = next_token(&p);
            if (!v)
                break;
            if (is_login)
                snprintf(cl, sizeof(cl), "%s", v);
            else
                snprintf(cp, sizeof(cp), "%s", v);
            have_l |= is_login;
            have_p |= !is_login;
        }
    }
    if (!found && in_match && have_l && have_p && (!user || !*user || !strcmp(user, cl)))
        found = 1;
    (void)is_default;
    if (found) {
        snprintf(login, ln, "%s", cl);
        snprintf(password, pn, "%s", cp);
    }
    explicit_bzero(cp, sizeof(cp));
    if (data)
        explicit_bzero(data, size);
    free(data);
    return found;
}

/* ---- HTTP ------------------------------------------------------------- */

struct sink {
    /* memory */
    char *buf;
    size_t len, cap, max; /* max: the answer's cap (bytes) */
    const char *what;     /* what is read, for the cap's error ("a manifest") */
    /* file */
    int fd;
    struct skiff_sha256 *hash;
    int write_errno;
    CURL *curl;
    unsigned long long written;
    int (*progress)(void *ctx, unsigned long long bytes);
    void *progress_ctx;
};

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

static bool plain_http_ok(const struct skiff_config *cfg, const char *host)
{
    return cfg->allow_http || skiff_ref_is_loopback(host);
}

enum auth_kind { AUTH_NONE, AUTH_BEARER, AUTH_BASIC };

struct auth {
    enum auth_kind kind;
    const char *token;            /* AUTH_BEARER */
    const char *login, *password; /* AUTH_BASIC */
};

/* One GET. Credentials go through libcurl's own auth options, never a custom
 * "Authorization:" header, and CURLOPT_UNRESTRICTED_AUTH stays off: libcurl
 * then sends them only while a redirect stays on the host, port and scheme
 * of url, so a blob redirect to a storage host gets none. */
static int http_get(struct skiff_registry *r, const char *url, const char *accept, const struct auth *a, struct sink *s,
                    long *status, skiff_err *err)
{
    CURL *c = r->curl;
    curl_easy_reset(c);
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
        return skiff_error(err, rc == CURLE_COULDNT_CONNECT ? ECONNREFUSED : 0, "GET %s: %s", url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

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

static void drop_token(struct bearer *t)
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
    if (strcmp(ru.scheme, "https") != 0 && !(!strcmp(ru.scheme, "http") && plain_http_ok(r->cfg, ru.authority)))
        return skiff_error(err, 0, "token realm %s is not https (set allow_http = yes to allow it)", realm);
    /* Whose credentials the token server gets: the endpoint's when it is on
     * the endpoint's host, else only the credentials file's entry for the
     * realm's own host. */
    struct auth a = {.kind = AUTH_NONE};
    char login[256] = "", password[256] = "";
    const char *cred_host = NULL; /* whose entry was sent */
    bool withheld = false;        /* the endpoint's were not */
    if (e->have_creds && skiff_registry_realm_same_host(e->host, realm)) {
        a = (struct auth){.kind = AUTH_BASIC, .login = e->login, .password = e->password};
        cred_host = e->host;
    } else {
        int found = skiff_credentials_lookup(r->cfg->credentials_file, ru.authority, e->user, login, sizeof(login),
                                             password, sizeof(password), err);
        if (found < 0)
            return skiff_err_wrap(err, "credentials for token realm %s", ru.authority);
        if (found) {
            a = (struct auth){.kind = AUTH_BASIC, .login = login, .password = password};
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
    struct sink s = {.fd = -1, .max = TOKEN_MAX, .what = "a token server's answer"};
    long status = 0;
    int rv = http_get(r, url, NULL, &a, &s, &status, err);
    explicit_bzero(password, sizeof(password));
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
    drop_token(&e->tok);
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

/* GET from endpoint e with the auth dance: anonymous (or e's cached token)
 * first, then what e's 401 challenge asks for. Only e's own token and
 * credentials are ever sent to it. */
static int authed_get(struct skiff_registry *r, struct endpoint *e, const char *url, const char *accept, struct sink *s,
                      long *status, skiff_err *err)
{
    struct auth a = {.kind = AUTH_NONE};
    if (e->tok.value)
        a = (struct auth){.kind = AUTH_BEARER, .token = e->tok.value};
    bool fresh_token = false; /* a cached token may have expired: renew it once */
    for (int attempt = 0; attempt < 3; attempt++) {
        off_t start = s->fd >= 0 ? lseek(s->fd, 0, SEEK_CUR) : 0;
        if (http_get(r, url, accept, &a, s, status, err) < 0)
            return -1;
        if (*status != 401)
            return 0;
        /* Throw away the 401 body. */
        if (s->fd >= 0) {
            if (ftruncate(s->fd, start) < 0 || lseek(s->fd, start, SEEK_SET) < 0)
                return skiff_error(err, errno, "truncate");
        } else {
            s->len = 0;
        }
        if (!strncasecmp(r->challenge, "Bearer", 6) && !fresh_token) {
            /* A token for another realm, service or scope is of no use here. */
            if (!token_matches(&e->tok, r->challenge))
                drop_token(&e->tok);
            if (fetch_token(r, e, r->challenge, err) < 0)
                return -1;
            a = (struct auth){.kind = AUTH_BEARER, .token = e->tok.value};
            fresh_token = true;
        } else if (!strncasecmp(r->challenge, "Basic", 5) && a.kind != AUTH_BASIC && e->have_creds) {
            a = (struct auth){.kind = AUTH_BASIC, .login = e->login, .password = e->password};
        } else {
            break;
        }
    }
    if (*status == 401 && e->have_creds)
        return skiff_error(err, 0,
                           "%s: authentication required (HTTP 401): the credentials for %s "
                           "in the credentials file were refused",
                           url, e->host);
    if (*status == 401)
        return skiff_error(err, 0,
                           "%s: authentication required (HTTP 401): add 'machine %s login USER "
                           "password PASS' to the credentials file (credentials_file)",
                           url, e->host);
    return 0;
}

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
        snprintf(e->base, sizeof(e->base), "%s://%s", plain_http_ok(cfg, hosts[i]) ? "http" : "https", hosts[i]);
        e->user = users[i];
        int found = skiff_credentials_lookup(cfg->credentials_file, cred_hosts[i], e->user, e->login, sizeof(e->login),
                                             e->password, sizeof(e->password), err);
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
        drop_token(&r->ep[i].tok);
        explicit_bzero(r->ep[i].password, sizeof(r->ep[i].password));
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
        if (authed_get(r, &r->ep[i], url, accept_manifests, &s, &status, &e) < 0) {
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
        if (authed_get(r, &r->ep[i], url, NULL, &s, &status, err) < 0) {
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
