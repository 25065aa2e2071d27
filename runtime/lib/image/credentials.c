/* The netrc-style credentials file of the registry client (registry.h:
 * skiff_credentials_lookup). Hand-written rather than libcurl's netrc
 * support (CURLOPT_NETRC): skiff decides itself which host gets which
 * entry (registry.h), where libcurl would look one up for every request's
 * host on its own. */
#include "registry_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
