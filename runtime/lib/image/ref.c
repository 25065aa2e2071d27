#include "ref.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One path component of a repository: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
 * (the distribution reference grammar). */
static bool valid_component(const char *s, size_t len)
{
    size_t i = 0;
    if (len == 0 || !is_lower_alnum(s[0]))
        return false;
    while (i < len) {
        while (i < len && is_lower_alnum(s[i]))
            i++;
        if (i == len)
            return true;
        size_t sep = i;
        if (s[i] == '.') {
            i++;
        } else if (s[i] == '_') {
            i++;
            if (i < len && s[i] == '_')
                i++;
        } else if (s[i] == '-') {
            while (i < len && s[i] == '-')
                i++;
        } else {
            return false;
        }
        if (i == len || !is_lower_alnum(s[i]) || i == sep)
            return false;
    }
    return true;
}

static bool valid_repository(const char *s)
{
    if (!*s || strlen(s) > 255)
        return false;
    const char *p = s;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (!valid_component(p, len))
            return false;
        if (!slash)
            return true;
        p = slash + 1;
    }
}

static bool valid_tag(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 128)
        return false;
    if (!(isalnum((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
            return false;
    return true;
}

bool skiff_ref_valid_digest(const char *d)
{
    if (strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* host[:port] or [ipv6][:port]; host is letters, digits, '.', '-'. */
static bool valid_registry(const char *s)
{
    const char *port = NULL;
    if (*s == '[') {
        const char *end = strchr(s, ']');
        if (!end || end == s + 1)
            return false;
        for (const char *p = s + 1; p < end; p++)
            if (!(isxdigit((unsigned char)*p) || *p == ':' || *p == '.'))
                return false;
        if (end[1] == ':')
            port = end + 2;
        else if (end[1])
            return false;
    } else {
        const char *p = s;
        if (!*p || *p == '.' || *p == '-')
            return false;
        for (; *p && *p != ':'; p++)
            if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-'))
                return false;
        if (*p == ':')
            port = p + 1;
    }
    if (port) {
        if (!*port || strlen(port) > 5)
            return false;
        for (const char *p = port; *p; p++)
            if (!isdigit((unsigned char)*p))
                return false;
    }
    return strlen(s) < 256;
}

static bool is_docker_hub(const char *registry)
{
    return !strcmp(registry, "docker.io") || !strcmp(registry, "index.docker.io") ||
           !strcmp(registry, "registry-1.docker.io");
}

const char *skiff_ref_endpoint(const struct skiff_ref *ref)
{
    if (!strcmp(ref->registry, "docker.io") || !strcmp(ref->registry, "index.docker.io"))
        return "registry-1.docker.io";
    return ref->registry;
}

bool skiff_ref_is_loopback(const char *registry)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", registry);
    if (host[0] == '[') {
        char *end = strchr(host, ']');
        if (!end)
            return false;
        *end = '\0';
        return !strcmp(host + 1, "::1");
    }
    char *colon = strchr(host, ':');
    if (colon)
        *colon = '\0';
    if (!strcmp(host, "localhost"))
        return true;
    unsigned a, b, c, d;
    char extra;
    if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4)
        return a == 127 && b < 256 && c < 256 && d < 256;
    return false;
}

#define COPY(dst, src, what)                                                                                           \
    do {                                                                                                               \
        if (snprintf(dst, sizeof(dst), "%s", src) >= (int)sizeof(dst))                                                 \
            return skiff_error(err, ENAMETOOLONG, "%s too long", what);                                                \
    } while (0)

static int parse_docker(const char *s, const char *default_registry, struct skiff_ref *ref, skiff_err *err)
{
    char buf[1024];
    if (!*s)
        return skiff_error(err, 0, "empty image name");
    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return skiff_error(err, ENAMETOOLONG, "image reference too long");
    char *p = buf;

    /* USER@: an '@' not followed by "sha256:" before any '#' or '/'. */
    char *at = strchr(p, '@');
    if (at && strncmp(at + 1, "sha256:", 7) != 0) {
        *at = '\0';
        if (!*p)
            return skiff_error(err, 0, "'%s': empty user name before '@'", s);
        for (char *q = p; *q; q++)
            if (!(isalnum((unsigned char)*q) || strchr("._-$", *q)))
                return skiff_error(err, 0, "'%s': bad character '%c' in user name", s, *q);
        COPY(ref->user, p, "user name");
        p = at + 1;
    }

    char *hash = strchr(p, '#');
    if (hash) {
        *hash = '\0';
        if (!valid_registry(p))
            return skiff_error(err, 0, "'%s': bad registry '%s' (want HOST[:PORT] before '#')", s, p);
        COPY(ref->registry, p, "registry");
        p = hash + 1;
    } else {
        /* docker's rule: a first component with '.' or ':' or "localhost" is
         * a registry. */
        char *slash = strchr(p, '/');
        if (slash) {
            size_t len = (size_t)(slash - p);
            bool reg = !strncmp(p, "localhost", len) && len == 9;
            for (size_t i = 0; i < len && !reg; i++)
                if (p[i] == '.' || p[i] == ':')
                    reg = true;
            if (reg) {
                *slash = '\0';
                if (!valid_registry(p))
                    return skiff_error(err, 0, "'%s': bad registry '%s'", s, p);
                COPY(ref->registry, p, "registry");
                p = slash + 1;
            }
        }
        if (!ref->registry[0])
            COPY(ref->registry, default_registry && *default_registry ? default_registry : "registry-1.docker.io",
                 "registry");
    }
    COPY(ref->image, p, "image");

    char *dig = strchr(p, '@');
    if (dig) {
        *dig = '\0';
        if (!skiff_ref_valid_digest(dig + 1))
            return skiff_error(err, 0, "'%s': bad digest '%s' (want sha256: and 64 hex digits)", s, dig + 1);
        COPY(ref->digest, dig + 1, "digest");
    }
    char *colon = strrchr(p, ':');
    if (colon && !strchr(colon, '/')) {
        *colon = '\0';
        if (!valid_tag(colon + 1))
            return skiff_error(err, 0, "'%s': bad tag '%s' (letters, digits, '_', '.', '-'; at most 128)", s,
                               colon + 1);
        COPY(ref->tag, colon + 1, "tag");
    }
    if (!valid_repository(p))
        return skiff_error(err, 0, "'%s': bad image name '%s' (lowercase letters, digits and separators . _ - /)", s,
                           p);
    if (is_docker_hub(ref->registry) && !strchr(p, '/')) {
        if (snprintf(ref->repository, sizeof(ref->repository), "library/%s", p) >= (int)sizeof(ref->repository))
            return skiff_error(err, ENAMETOOLONG, "image name too long");
    } else {
        COPY(ref->repository, p, "image name");
    }
    /* checked after "library/" is added: a repository the registry would
     * refuse must not pass here (and must not fail only when written out) */
    if (strlen(ref->repository) > 255)
        return skiff_error(err, 0, "'%s': repository '%s' is longer than 255 characters", s, ref->repository);
    if (!ref->tag[0] && !ref->digest[0])
        strcpy(ref->tag, "latest");
    return 0;
}

/* Splits PATH[:TAG] for oci: and oci-archive:, where a path may hold ':' only
 * before its last '/'. */
static int parse_path_tag(const char *s, const char *scheme, struct skiff_ref *ref, skiff_err *err)
{
    COPY(ref->path, s, "path");
    char *colon = strrchr(ref->path, ':');
    if (colon && !strchr(colon, '/')) {
        *colon = '\0';
        if (!valid_tag(colon + 1))
            return skiff_error(err, 0, "%s%s: bad tag '%s'", scheme, s, colon + 1);
        COPY(ref->tag, colon + 1, "tag");
    }
    if (!ref->path[0])
        return skiff_error(err, 0, "%s: missing path", scheme);
    return 0;
}

static const struct scheme {
    const char *prefix;
    enum skiff_ref_kind kind;
} schemes[] = {
    {"docker://", SKIFF_REF_DOCKER},
    {"docker-archive:", SKIFF_REF_DOCKER_ARCHIVE},
    {"oci-archive:", SKIFF_REF_OCI_ARCHIVE},
    {"oci:", SKIFF_REF_OCI},
    {"dir:", SKIFF_REF_DIR},
};

int skiff_ref_parse(const char *uri, const char *default_registry, struct skiff_ref *ref, skiff_err *err)
{
    memset(ref, 0, sizeof(*ref));
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t len = strlen(schemes[i].prefix);
        if (strncmp(uri, schemes[i].prefix, len) != 0)
            continue;
        const char *rest = uri + len;
        ref->kind = schemes[i].kind;
        switch (ref->kind) {
        case SKIFF_REF_DOCKER:
            return parse_docker(rest, default_registry, ref, err);
        case SKIFF_REF_OCI:
        case SKIFF_REF_OCI_ARCHIVE:
            return parse_path_tag(rest, schemes[i].prefix, ref, err);
        case SKIFF_REF_DOCKER_ARCHIVE:
        case SKIFF_REF_DIR:
            if (!*rest)
                return skiff_error(err, 0, "%s: missing path", schemes[i].prefix);
            COPY(ref->path, rest, "path");
            return 0;
        }
    }
    if (!strncmp(uri, "docker:", 7))
        return skiff_error(err, 0, "'%s': write docker://IMAGE (two slashes)", uri);
    return skiff_error(err, 0,
                       "'%s': unknown image source (use docker://, docker-archive:, oci:, oci-archive: or dir:)", uri);
}

int skiff_ref_canonical(const struct skiff_ref *ref, char *out, size_t n, skiff_err *err)
{
    int w;
    if (ref->kind == SKIFF_REF_DOCKER) {
        w = snprintf(out, n, "%s/%s%s%s%s%s", ref->registry, ref->repository, ref->tag[0] ? ":" : "", ref->tag,
                     ref->digest[0] ? "@" : "", ref->digest);
    } else {
        const char *scheme = ref->kind == SKIFF_REF_DOCKER_ARCHIVE ? "docker-archive:"
                             : ref->kind == SKIFF_REF_OCI          ? "oci:"
                             : ref->kind == SKIFF_REF_OCI_ARCHIVE  ? "oci-archive:"
                                                                   : "dir:";
        w = snprintf(out, n, "%s%s%s%s", scheme, ref->path, ref->tag[0] ? ":" : "", ref->tag);
    }
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "reference too long");
    return 0;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

enum skiff_ref_class skiff_ref_classify(const char *arg)
{
    if (!arg || !*arg)
        return SKIFF_ARG_INVALID;
    if (arg[0] == '/' || !strncmp(arg, "./", 2) || !strncmp(arg, "../", 3))
        return SKIFF_ARG_PATH;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (!strncmp(arg, schemes[i].prefix, strlen(schemes[i].prefix)))
            return SKIFF_ARG_URI;
    if (has_suffix(arg, ".sqsh") || has_suffix(arg, ".squashfs") || has_suffix(arg, ".sqfs"))
        return SKIFF_ARG_SQSH_NAME;
    struct skiff_ref ref;
    skiff_err err;
    memset(&ref, 0, sizeof(ref));
    if (parse_docker(arg, NULL, &ref, &err) == 0)
        return SKIFF_ARG_BARE;
    return SKIFF_ARG_INVALID;
}
