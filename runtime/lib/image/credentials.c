/* The netrc-style credentials files of the registry client (registry.h:
 * skiff_credentials_find, skiff_credentials_lookup): skiff's own
 * credentials_file, and enroot's $ENROOT_CONFIG_PATH/.credentials for a
 * host skiff's has no entry for. Hand-written rather than libcurl's netrc
 * support (CURLOPT_NETRC): skiff decides itself which host gets which
 * entry (registry.h), where libcurl would look one up for every request's
 * host on its own; and enroot's file has its own rule for passwords that
 * start with '$' (substitute_password). Logins and passwords have no length
 * limit: they are copies on the heap (registry tokens of ECR or ACR are
 * 1-4 KB; a fixed buffer once cut them at 255 bytes). */
#include "registry_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

/* A credentials file is a few entries; anything bigger is not one. */
#define CREDENTIALS_MAX (1u << 20)

static const char *const *cred_env;

void skiff_credentials_env(const char *const *envp)
{
    cred_env = envp;
}

/* NAME's value (len bytes of name) in the environment set with
 * skiff_credentials_env, or the process's. */
static const char *env_value(const char *name, size_t len)
{
    if (!cred_env) {
        char n[256];
        if (len >= sizeof(n))
            return NULL;
        memcpy(n, name, len);
        n[len] = '\0';
        return getenv(n);
    }
    for (size_t i = 0; cred_env[i]; i++)
        if (!strncmp(cred_env[i], name, len) && cred_env[i][len] == '=')
            return cred_env[i] + len + 1;
    return NULL;
}

void skiff_credential_clear(struct skiff_credential *c)
{
    if (c->password) {
        explicit_bzero(c->password, strlen(c->password));
        free(c->password);
    }
    free(c->login);
    c->login = c->password = NULL;
}

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

/* enroot's rule for a password that starts with '$': the shell expands it
 * (enroot runs `echo` on the rest of the line). skiff substitutes $NAME
 * and ${NAME} from the environment (a job's ENROOT_PASSWORD, exported with
 * sbatch --export) and refuses command substitution, $(...) and `...`:
 * skiff runs no shell (doc/SECURITY.md), and a credentials file that runs
 * programs would run them in every import of every step, on every node.
 * An unset variable is an error rather than an empty password. */
static int substitute_password(const char *path, const char *host, const char *v, char **out, skiff_err *err)
{
    if (v[0] != '$')
        return (*out = strdup(v)) ? 0 : skiff_error(err, ENOMEM, "credentials");
    if (strchr(v, '`') || strstr(v, "$("))
        return skiff_error(err, 0,
                           "%s: the password of machine %s is a command substitution, which skiff does not run "
                           "(it runs no shell): write the password, or $VARIABLE with it in the environment",
                           path, host);
    size_t cap = strlen(v) + 1, n = 0;
    char *s = malloc(cap);
    if (!s)
        return skiff_error(err, ENOMEM, "credentials");
    for (const char *p = v; *p;) {
        if (*p != '$') {
            s[n++] = *p++;
            continue;
        }
        bool brace = p[1] == '{';
        const char *name = p + 1 + brace;
        size_t len = 0;
        while (name[len] == '_' || isalnum((unsigned char)name[len]))
            len++;
        if (!len || isdigit((unsigned char)name[0]) || (brace && name[len] != '}')) {
            explicit_bzero(s, n);
            free(s);
            return skiff_error(err, 0, "%s: the password of machine %s has a '$' that starts no variable name", path,
                               host);
        }
        const char *val = env_value(name, len);
        if (!val) {
            explicit_bzero(s, n);
            free(s);
            return skiff_error(err, 0,
                               "%s: the password of machine %s is $%.*s, which is not set in the environment "
                               "(export it, or pass it to the job: sbatch --export=...,%.*s)",
                               path, host, (int)len, name, (int)len, name);
        }
        size_t vl = strlen(val);
        char *ns = realloc(s, cap + vl);
        if (!ns) {
            explicit_bzero(s, n);
            free(s);
            return skiff_error(err, ENOMEM, "credentials");
        }
        s = ns;
        cap += vl;
        memcpy(s + n, val, vl);
        n += vl;
        p = name + len + brace;
    }
    s[n] = '\0';
    *out = s;
    return 0;
}

int skiff_credentials_lookup(const char *path, const char *host, const char *user, bool enroot,
                             struct skiff_credential *out, skiff_err *err)
{
    *out = (struct skiff_credential){0};
    if (!path || !*path)
        return 0;
    size_t size = 0;
    char *data = skiff_read_file(path, 0, CREDENTIALS_MAX, &size, err);
    if (!data)
        return err->code == ENOENT || err->code == EACCES ? 0 : skiff_err_wrap(err, "credentials");
    const char *colon = strrchr(host, ':');
    size_t hostonly = colon && !strchr(host, ']') ? (size_t)(colon - host) : strlen(host);
    /* netrc is a token stream: "machine H" or "default" starts an entry,
     * "login L" and "password P" fill it, anywhere on its lines */
    int found = 0;
    char *p = data, *t, *cl = NULL, *cp = NULL;
    const char *mach = NULL;
    bool in_match = false;
    for (;;) {
        t = next_token(&p);
        bool ends = !t || !strcmp(t, "machine") || !strcmp(t, "default");
        if (ends && in_match && cl && cp && (!user || !*user || !strcmp(user, cl))) {
            found = 1;
            break;
        }
        if (!t)
            break;
        if (ends) {
            cl = cp = NULL;
            if (!strcmp(t, "default")) {
                in_match = true;
                mach = host;
            } else {
                mach = next_token(&p);
                in_match =
                    mach && (!strcmp(mach, host) || (strlen(mach) == hostonly && !strncmp(mach, host, hostonly)));
            }
        } else if (!strcmp(t, "login") || !strcmp(t, "password")) {
            /* (a keyword without its value ends the file: strcmp(NULL)
             * used to follow when "login" was the last word) */
            char *v = next_token(&p);
            if (!v) {
                found = in_match && cl && cp && (!user || !*user || !strcmp(user, cl));
                break;
            }
            if (t[0] == 'l')
                cl = v;
            else
                cp = v;
        }
    }
    int rv = found;
    if (found) {
        out->login = strdup(cl);
        if (!out->login)
            rv = skiff_error(err, ENOMEM, "credentials");
        else if (enroot && substitute_password(path, mach, cp, &out->password, err) < 0)
            rv = -1;
        else if (!enroot && !(out->password = strdup(cp)))
            rv = skiff_error(err, ENOMEM, "credentials");
        if (rv < 0)
            skiff_credential_clear(out);
    }
    explicit_bzero(data, size);
    free(data);
    return rv;
}

int skiff_credentials_find(const struct skiff_config *cfg, const char *host, const char *user,
                           struct skiff_credential *out, skiff_err *err)
{
    int rc = skiff_credentials_lookup(cfg->credentials_file, host, user, false, out, err);
    if (rc != 0 || !cfg->enroot_config_path[0])
        return rc;
    char enroot[SKIFF_PATH_MAX + 16];
    if (skiff_fmt_path(enroot, sizeof(enroot), err, "%s/.credentials", cfg->enroot_config_path) < 0)
        return -1;
    return skiff_credentials_lookup(enroot, host, user, true, out, err);
}
