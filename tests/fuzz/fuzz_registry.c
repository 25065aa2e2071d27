/* What a registry (or a token server) answers and what skiff reads of it
 * (runtime/lib/image/registry.c, reghttp.c, regauth.c, credentials.c):
 * WWW-Authenticate challenges as libcurl hands over header lines (and
 * the others the client acts on: Docker-Content-Digest, Retry-After,
 * Content-Range, Content-Length), the
 * realm URL that decides who gets credentials, a
 * token server's JSON, registry error JSON, and the netrc-style credentials
 * file. The parsers are static: this file includes those files.
 * Byte 0 mod 4 picks: 0 header lines (then the challenge's realm, service
 * and scope), 1 "ENDPOINT\nREALM", 2 credentials ("HOST USER\n" then the
 * file), 3 an error or token answer (JSON).
 * Properties: a header value is kept whole or cut at the buffer, never past
 * it; each challenge parameter is a piece of the challenge; a token stored
 * for a challenge matches that challenge (else it would be refetched on
 * every request); a realm with a user name or password in it never gets
 * credentials; credentials found are a login and a password written in the
 * file for that host (or default). */
#include "../../runtime/lib/image/credentials.c"
#include "../../runtime/lib/image/regauth.c"
#include "../../runtime/lib/image/reghttp.c"
#include "../../runtime/lib/image/registry.c"

#include "fuzzlib.h"

static bool piece_of(const char *part, const char *whole)
{
    return !*part || strstr(whole, part);
}

static void headers(char *text)
{
    char challenge[1024] = "";
    struct http_resp resp;
    memset(&resp, 0, sizeof(resp));
    struct hdrs h = {.challenge = challenge, .chsize = sizeof(challenge), .resp = &resp};
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        size_t n = strlen(l);
        char *line = malloc(n + 2); /* as libcurl passes it: with CRLF, not NUL-terminated */
        memcpy(line, l, n);
        memcpy(line + n, "\r\n", 2);
        FUZZ_CHECK(header_cb(line, 1, n + 2, &h) == n + 2, "header_cb did not take the line");
        free(line);
        FUZZ_CHECK(strlen(challenge) < sizeof(challenge), "challenge overflows");
        /* what the transfers act on: a digest is a sha256 digest or nothing,
         * a Retry-After a time to wait, never a negative one */
        FUZZ_CHECK(!resp.digest[0] || skiff_ref_valid_digest(resp.digest), "bad Docker-Content-Digest kept: %s",
                   resp.digest);
        FUZZ_CHECK(resp.retry_after_s == -1 || resp.retry_after_s >= 0, "negative Retry-After");
        FUZZ_CHECK(resp.length >= -1, "negative Content-Length");
    }
    char realm[1024], service[256], scope[640];
    challenge_param(challenge, "realm", realm, sizeof(realm));
    challenge_param(challenge, "service", service, sizeof(service));
    challenge_param(challenge, "scope", scope, sizeof(scope));
    FUZZ_CHECK(strlen(realm) < sizeof(realm) && strlen(service) < sizeof(service) && strlen(scope) < sizeof(scope),
               "a parameter overflows");
    FUZZ_CHECK(piece_of(realm, challenge) && piece_of(service, challenge) && piece_of(scope, challenge),
               "a parameter that is not in the challenge");
    /* the token fetch_token would store for this challenge */
    struct bearer tok;
    memset(&tok, 0, sizeof(tok));
    tok.value = strdup("t");
    snprintf(tok.realm, sizeof(tok.realm), "%s", realm);
    snprintf(tok.service, sizeof(tok.service), "%s", service);
    snprintf(tok.scope, sizeof(tok.scope), "%s", scope[0] ? scope : "repository:library/x:pull");
    FUZZ_CHECK(token_matches(&tok, challenge), "the token issued for '%s' does not match it", challenge);
    skiff_registry_drop_token(&tok);
}

static void realm(char *text)
{
    char *nl = strchr(text, '\n');
    if (!nl)
        return;
    *nl = '\0';
    const char *endpoint = text, *url = nl + 1;
    bool same = skiff_registry_realm_same_host(endpoint, url);
    struct realm_url ru;
    if (parse_realm(url, &ru) == 0) {
        FUZZ_CHECK(!(same && ru.userinfo), "realm '%s' with user info gets credentials", url);
        char host[256];
        host_only(endpoint, host, sizeof(host));
        FUZZ_CHECK(!same || !strcasecmp(host, ru.host) || !strcmp(ru.host, "auth.docker.io"),
                   "realm host '%s' is not endpoint '%s'", ru.host, endpoint);
    } else {
        FUZZ_CHECK(!same, "realm '%s' that libcurl cannot parse gets credentials", url);
    }
}

static bool token_in(const char *file, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = file; (p = strstr(p, tok)); p++)
        if ((p == file || isspace((unsigned char)p[-1])) && (!p[n] || isspace((unsigned char)p[n])))
            return true;
    return false;
}

static void credentials(char *text)
{
    char *nl = strchr(text, '\n');
    if (!nl)
        return;
    *nl = '\0';
    char *user = strchr(text, ' ');
    if (user)
        *user++ = '\0';
    const char *file = nl + 1;
    const char *path = fuzz_write(0, "credentials", file, strlen(file));
    struct skiff_credential c = {0};
    skiff_err err = {0};
    /* both formats: skiff's, and enroot's ('$' passwords substituted) */
    bool enroot = (text[0] & 1) != 0;
    int rc = skiff_credentials_lookup(path, text, user, enroot, &c, &err);
    fuzz_check_failure(rc, &err, "skiff_credentials_lookup");
    if (rc == 1) {
        FUZZ_CHECK(c.login[0] && c.password, "empty login found");
        FUZZ_CHECK(token_in(file, c.login), "login '%s' is not in the file", c.login);
        FUZZ_CHECK(enroot || token_in(file, c.password), "password not in the file");
        FUZZ_CHECK(!user || !*user || !strcmp(user, c.login), "login '%s' found for user '%s'", c.login, user);
        FUZZ_CHECK(strstr(file, "machine") || strstr(file, "default"), "credentials without an entry");
    }
    skiff_credential_clear(&c);
}

static void answer(const uint8_t *data, size_t size)
{
    struct sink s = {.max = 1 << 20};
    s.buf = malloc(size + 1);
    memcpy(s.buf, data, size);
    s.buf[size] = '\0';
    s.len = size;
    char out[300];
    registry_error_text(&s, out, sizeof(out));
    FUZZ_CHECK(strlen(out) < sizeof(out), "error text overflows");
    free(s.buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    int mode = data[0] & 3;
    if (mode == 3) {
        answer(data + 1, size - 1);
        return 0;
    }
    char *s = fuzz_str(data + 1, size - 1);
    if (mode == 0)
        headers(s);
    else if (mode == 1)
        realm(s);
    else
        credentials(s);
    free(s);
    return 0;
}
