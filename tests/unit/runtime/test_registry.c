#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry.h"

/* Which token servers may get the credentials held for an endpoint. */
Test(registry, realm_same_host)
{
    /* the endpoint's host, any port, either scheme */
    cr_assert(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com/token"));
    cr_assert(skiff_registry_realm_same_host("reg.example.com:5000", "https://reg.example.com:5001/auth"));
    cr_assert(skiff_registry_realm_same_host("REG.example.com:5000", "https://reg.EXAMPLE.com/auth?x=1"));
    cr_assert(skiff_registry_realm_same_host("127.0.0.1:5000", "http://127.0.0.1:5001/token"));
    cr_assert(skiff_registry_realm_same_host("[::1]:5000", "http://[::1]:5001/token"));
    cr_assert(skiff_registry_realm_same_host("[::1]", "http://[::1]/token"));
    /* Docker Hub's token server, pinned */
    cr_assert(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io/token"));
    cr_assert(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io:443/token"));
    cr_assert_not(skiff_registry_realm_same_host("registry-1.docker.io", "http://auth.docker.io/token"));
    cr_assert_not(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io:8443/token"));
    cr_assert_not(skiff_registry_realm_same_host("mirror.example.com", "https://auth.docker.io/token"));
    /* other hosts, look-alikes and tricks */
    cr_assert_not(skiff_registry_realm_same_host("127.0.0.1:5000", "http://localhost:5000/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://auth.example.com/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com.evil.net/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://evil.net/reg.example.com"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com@evil.net/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://u:p@reg.example.com/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "not a url"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", ""));
    cr_assert_not(skiff_registry_realm_same_host("[::1]:5000", "http://127.0.0.1:5000/token"));
}

static struct skiff_credential cred;
static skiff_err err;

/* skiff_credentials_lookup of skiff's own file format (enroot = false) */
static int lookup(const char *path, const char *host, const char *user)
{
    skiff_credential_clear(&cred);
    return skiff_credentials_lookup(path, host, user, false, &cred, &err);
}

/* A temp file holding text; its path (static buffer). */
static const char *file_with(const char *text)
{
    static char p[64];
    snprintf(p, sizeof(p), "/tmp/skiff-test-creds.XXXXXX");
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

/* A mirror is looked up under its own host: the image registry's entry never
 * matches it (a port-less entry is for every port of that host). */
Test(registry, credentials_per_endpoint_host)
{
    const char *p = file_with("machine reg.example.com:5000 login alice password pw-reg\n"
                              "machine mirror.example.com login m password pw-mirror\n");
    cr_assert_eq(lookup(p, "reg.example.com:5000", ""), 1);
    cr_assert_str_eq(cred.password, "pw-reg");
    cr_assert_eq(lookup(p, "reg.example.com:6000", ""), 0);
    cr_assert_eq(lookup(p, "reg.example.com", ""), 0);
    cr_assert_eq(lookup(p, "mirror.example.com:5000", ""), 1);
    cr_assert_str_eq(cred.password, "pw-mirror");
    cr_assert_eq(lookup(p, "auth.example.com", ""), 0);
    unlink(p);
}

Test(credentials, netrc_lookup)
{
    const char *p = file_with("machine nvcr.io login $oauthtoken password tok1\n"
                              "machine reg:5000\n  login alice\n  password pw-a\n"
                              "machine reg:5000 login bob password pw-b\n"
                              "default login anon password anonpw\n");
    cr_assert_eq(lookup(p, "nvcr.io", ""), 1);
    cr_assert_str_eq(cred.login, "$oauthtoken");
    cr_assert_str_eq(cred.password, "tok1");
    cr_assert_eq(lookup(p, "reg:5000", ""), 1);
    cr_assert_str_eq(cred.login, "alice");
    cr_assert_eq(lookup(p, "reg:5000", "bob"), 1);
    cr_assert_str_eq(cred.password, "pw-b");
    cr_assert_eq(lookup(p, "other.io", ""), 1);
    cr_assert_str_eq(cred.login, "anon");
    cr_assert_eq(lookup(p, "reg:5000", "carol"), 0);
    cr_assert_eq(lookup("/nonexistent/creds", "x", ""), 0);
    unlink(p);
}

/* Found by tests/fuzz/fuzz_registry.c: a credentials file ending in
 * "login" (or "password") without its value made the lookup call
 * strcmp(NULL, ...): skiff import died with SIGSEGV. */
Test(credentials, netrc_keyword_at_the_end)
{
    static const char *const files[] = {"machine reg login alice password pw\nmachine other login",
                                        "machine reg login alice password", "login"};
    for (size_t i = 0; i < 3; i++) {
        const char *p = file_with(files[i]);
        int rc = lookup(p, "reg", "");
        cr_assert_eq(rc, i == 0 ? 1 : 0, "'%s': %d", files[i], rc);
        unlink(p);
    }
}

/* Registry tokens are long (ECR ~2-4 KB, ACR > 1 KB): found whole, where a
 * 256-byte buffer once cut them at 255. */
Test(credentials, no_length_limit)
{
    char tok[4097], login[1025];
    memset(tok, 'T', sizeof(tok) - 1);
    tok[sizeof(tok) - 1] = '\0';
    memset(login, 'L', sizeof(login) - 1);
    login[sizeof(login) - 1] = '\0';
    char text[6000];
    snprintf(text, sizeof(text), "machine ecr.example.com login %s password %s\n", login, tok);
    const char *p = file_with(text);
    cr_assert_eq(lookup(p, "ecr.example.com", ""), 1);
    cr_assert_eq(strlen(cred.password), 4096);
    cr_assert_str_eq(cred.password, tok);
    cr_assert_str_eq(cred.login, login);
    unlink(p);
}

/* enroot's file: a password starting with '$' comes from the environment
 * ($NAME, ${NAME}, with text around), the login never does ($oauthtoken
 * is NGC's literal login); skiff's own file takes it as written. */
Test(credentials, enroot_password_substitution)
{
    const char *p = file_with("machine nvcr.io login $oauthtoken password $ENROOT_PASSWORD\n"
                              "machine a.io login u password ${TOK}-x$TOK\n"
                              "machine b.io login u password lit$eral\n"
                              "machine c.io login u password $UNSET_VAR\n");
    const char *const env[] = {"ENROOT_PASSWORD=secret-from-job", "TOK=t0", NULL};
    skiff_credentials_env(env);
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_lookup(p, "nvcr.io", "", true, &cred, &err), 1, "%s", err.msg);
    cr_assert_str_eq(cred.login, "$oauthtoken");
    cr_assert_str_eq(cred.password, "secret-from-job");
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_lookup(p, "a.io", "", true, &cred, &err), 1, "%s", err.msg);
    cr_assert_str_eq(cred.password, "t0-xt0");
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_lookup(p, "b.io", "", true, &cred, &err), 1);
    cr_assert_str_eq(cred.password, "lit$eral", "only a password that starts with '$' is substituted");
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_lookup(p, "c.io", "", true, &cred, &err), -1);
    cr_assert(strstr(err.msg, "UNSET_VAR") && strstr(err.msg, "not set"), "%s", err.msg);
    cr_assert_null(cred.password);
    /* skiff's own file: literal */
    cr_assert_eq(lookup(p, "nvcr.io", ""), 1);
    cr_assert_str_eq(cred.password, "$ENROOT_PASSWORD");
    skiff_credentials_env(NULL);
    unlink(p);
}

/* $(...) and `...` would run a program at every import: refused, with
 * what to write instead. */
Test(credentials, enroot_command_substitution_is_refused)
{
    static const char *const files[] = {"machine gcr.io login oauth2accesstoken password $(gcloud auth token)\n",
                                        "machine x.io login u password $`id`\n"};
    for (size_t i = 0; i < 2; i++) {
        const char *p = file_with(files[i]);
        skiff_credential_clear(&cred);
        const char *host = i ? "x.io" : "gcr.io";
        cr_assert_eq(skiff_credentials_lookup(p, host, "", true, &cred, &err), -1);
        cr_assert(strstr(err.msg, "command substitution"), "%s", err.msg);
        cr_assert_null(strstr(err.msg, "Invalid argument"));
        unlink(p);
    }
}

/* skiff's file first; enroot's only for a host skiff's has no entry for. */
Test(credentials, skiff_file_first_then_enroot)
{
    char dir[] = "/tmp/skiff-test-enrootcfg.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    struct skiff_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.credentials_file, sizeof(cfg.credentials_file), "%s",
             file_with("machine both.io login s password from-skiff\n"));
    snprintf(cfg.enroot_config_path, sizeof(cfg.enroot_config_path), "%s", dir);
    char ep[128];
    snprintf(ep, sizeof(ep), "%s/.credentials", dir);
    FILE *f = fopen(ep, "w");
    fputs("machine both.io login e password from-enroot\nmachine only-enroot.io login e password $PW\n", f);
    fclose(f);
    const char *const env[] = {"PW=pw-e", NULL};
    skiff_credentials_env(env);
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_find(&cfg, "both.io", "", &cred, &err), 1);
    cr_assert_str_eq(cred.password, "from-skiff");
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_find(&cfg, "only-enroot.io", "", &cred, &err), 1, "%s", err.msg);
    cr_assert_str_eq(cred.password, "pw-e");
    skiff_credential_clear(&cred);
    cr_assert_eq(skiff_credentials_find(&cfg, "none.io", "", &cred, &err), 0);
    skiff_credentials_env(NULL);
    unlink(cfg.credentials_file);
    unlink(ep);
    rmdir(dir);
}
