/* What the container's environment needs so that habits from pyxis and
 * enroot keep working; see container_int.h (skiff_compat_env).
 *
 *  - apt under remap-root. apt drops to its _apt user to download and
 *    then checks that it did (getresuid); in a namespace of one id that
 *    check fails ("Could not switch group") even though the id filter
 *    (idfilter.h) lets the calls pass. enroot's answer is apt's own
 *    setting APT::Sandbox::User "root". skiff gives it through APT_CONFIG
 *    pointing at a file on the container's private /dev, so nothing is
 *    written into the image, a named container or a saved image.
 *  - the host's locale. Slurm passes the submitting shell's LANG and LC_*
 *    to the tasks; an image without that locale makes perl, Python and the
 *    C library warn ("Setting locale failed") in every task. A variable
 *    whose locale the image lacks gets C.UTF-8 instead (pyxis does the
 *    same). The image is asked directly: its /usr/lib/locale/NAME
 *    directories and the names in its locale-archive. Loading the locale
 *    with newlocale() would use this process's C library and its own
 *    compiled-in data, not the image's; the archive's name table is read
 *    here instead (glibc's locarchive.h layout, every offset checked).
 *  - an environment file (enroot's start --env-file, the plugin's
 *    --container-env-file): NAME=VALUE lines over everything above, read
 *    by the holder as the user before pivot_root, so the path is the
 *    host's (relative: from where the start runs). */
#include "container_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "rootfs.h"

#define APT_CONF_NAME ".skiff-apt.conf"
#define LOCALE_DIR "/usr/lib/locale"
#define LOCALE_FALLBACK "C.UTF-8"

static bool env_has(char *const *env, const char *key, size_t klen)
{
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], key, klen) && env[i][klen] == '=')
            return true;
    return false;
}

static int apt_config(int rootfd, char ***env, skiff_err *err)
{
    cleanup_close int apt = skiff_root_open(rootfd, "/etc/apt", O_PATH | O_DIRECTORY, err);
    if (apt < 0 || env_has(*env, "APT_CONFIG", 10)) {
        skiff_err_clear(err); /* not an apt image, or its own setting */
        return 0;
    }
    bool main_conf = faccessat(apt, "apt.conf", F_OK, 0) == 0;
    cleanup_close int dev = skiff_root_open(rootfd, "/dev", O_PATH | O_DIRECTORY, err);
    if (dev < 0)
        return skiff_err_wrap(err, "apt setting");
    int fd = openat(dev, APT_CONF_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return skiff_error(err, errno, "apt setting: create /dev/" APT_CONF_NAME);
    /* APT_CONFIG replaces /etc/apt/apt.conf: include the image's own */
    int w = dprintf(fd,
                    "// skiff, --remap-root: apt cannot switch to its _apt user in a namespace of one id\n"
                    "APT::Sandbox::User \"root\";\n%s",
                    main_conf ? "#include \"/etc/apt/apt.conf\";\n" : "");
    if (close(fd) < 0 || w < 0)
        return skiff_error(err, errno, "apt setting: write /dev/" APT_CONF_NAME);
    return skiff_env_set(env, "APT_CONFIG=/dev/" APT_CONF_NAME, err);
}

/* glibc's _nl_normalize_codeset: letters lower-cased, digits kept, the
 * rest dropped; all digits get "iso" in front. "UTF-8" -> "utf8". */
static void normalize(const char *name, char *out, size_t n)
{
    const char *dot = strchr(name, '.');
    const char *at = strchr(name, '@');
    if (!dot || (at && at < dot)) {
        snprintf(out, n, "%s", name);
        return;
    }
    size_t o = 0, lead = (size_t)(dot - name) + 1;
    if (lead >= n) {
        out[0] = '\0';
        return;
    }
    memcpy(out, name, lead);
    o = lead;
    const char *cs = dot + 1, *end = at ? at : cs + strlen(cs);
    bool digits_only = true;
    for (const char *c = cs; c < end; c++)
        if (isalpha((unsigned char)*c))
            digits_only = false;
    if (digits_only && o + 3 < n) {
        memcpy(out + o, "iso", 3);
        o += 3;
    }
    for (const char *c = cs; c < end && o + 1 < n; c++)
        if (isalnum((unsigned char)*c))
            out[o++] = (char)tolower((unsigned char)*c);
    out[o] = '\0';
    if (at)
        snprintf(out + o, n - o, "%s", at);
}

struct locarhead {
    uint32_t magic, serial;
    uint32_t namehash_offset, namehash_used, namehash_size;
    uint32_t string_offset, string_used, string_size;
    uint32_t locrectab_offset, locrectab_used, locrectab_size;
    uint32_t sumhash_offset, sumhash_used, sumhash_size;
};
struct namehashent {
    uint32_t hashval, name_offset, locrec_offset;
};
#define AR_MAGIC 0xde020109u
#define AR_NAMES_MAX (1u << 20)

/* Whether the archive open at fd names one of the two spellings. */
static bool archive_has(int fd, const char *a, const char *b)
{
    struct locarhead h;
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < (off_t)sizeof(h) || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != AR_MAGIC ||
        h.namehash_size > AR_NAMES_MAX ||
        (off_t)h.namehash_offset + (off_t)h.namehash_size * (off_t)sizeof(struct namehashent) > size)
        return false;
    size_t bytes = (size_t)h.namehash_size * sizeof(struct namehashent);
    struct namehashent *tab = malloc(bytes ? bytes : 1);
    bool found = false;
    if (!tab || pread(fd, tab, bytes, (off_t)h.namehash_offset) != (ssize_t)bytes)
        goto out;
    for (uint32_t i = 0; i < h.namehash_size && !found; i++) {
        if (tab[i].name_offset == 0 || (off_t)tab[i].name_offset >= size)
            continue;
        char name[256];
        ssize_t got = pread(fd, name, sizeof(name) - 1, (off_t)tab[i].name_offset);
        if (got <= 0)
            continue;
        name[got] = '\0';
        found = !strcmp(name, a) || !strcmp(name, b);
    }
out:
    free(tab);
    return found;
}

/* Whether the image has the locale name. */
static bool locale_available(int rootfd, const char *name)
{
    if (!strcmp(name, "C") || !strcmp(name, "POSIX") || !strcasecmp(name, "C.UTF-8") || !strcasecmp(name, "C.utf8"))
        return true; /* built into the C library (C.UTF-8 since glibc 2.35; a directory before) */
    char norm[256];
    normalize(name, norm, sizeof(norm));
    const char *const names[] = {name, norm};
    skiff_err e;
    for (size_t i = 0; i < 2; i++) {
        char p[300];
        snprintf(p, sizeof(p), LOCALE_DIR "/%s", names[i]);
        int d = skiff_root_open(rootfd, p, O_PATH | O_DIRECTORY, &e);
        if (d >= 0) {
            close(d);
            return true;
        }
    }
    cleanup_close int fd = skiff_root_open(rootfd, LOCALE_DIR "/locale-archive", O_RDONLY, &e);
    return fd >= 0 && archive_has(fd, name, norm);
}

static int locale_fallback(int rootfd, const char *const *host, char ***env, skiff_err *err)
{
    for (size_t i = 0; host && host[i]; i++) {
        const char *eq = strchr(host[i], '=');
        if (!eq || eq == host[i] || env_has(*env, host[i], (size_t)(eq - host[i])))
            continue; /* the image (or a hook) chose this variable's value */
        const char *v = eq + 1;
        /* empty: unset for the C library; a path: not an installed locale */
        if (!*v || strchr(v, '/') || strlen(v) > 200 || locale_available(rootfd, v))
            continue;
        char kv[300];
        snprintf(kv, sizeof(kv), "%.*s=" LOCALE_FALLBACK, (int)(eq - host[i]), host[i]);
        if (skiff_env_set(env, kv, err) < 0)
            return -1;
    }
    return 0;
}

/* NAME=VALUE lines (the value verbatim to the line's end), blank lines and
 * # comments; at most 1 MiB. Anything else names the file and line. */
static int env_file(const char *path, char ***env, skiff_err *err)
{
    size_t len = 0;
    cleanup_free char *text = skiff_read_file(path, 0, 1u << 20, &len, err);
    if (!text)
        return skiff_err_wrap(err, "environment file %s", path);
    if (memchr(text, '\0', len))
        return skiff_error(err, 0, "environment file %s: not a text file", path);
    size_t line = 0;
    for (char *l = text, *next; l; l = next) {
        next = strchr(l, '\n');
        if (next)
            *next++ = '\0';
        line++;
        l[strcspn(l, "\r")] = '\0';
        const char *p = l + strspn(l, " \t");
        if (!*p || *p == '#')
            continue;
        const char *eq = strchr(p, '=');
        if (!eq || !skiff_env_name_valid(p, (size_t)(eq - p)))
            return skiff_error(err, 0, "environment file %s, line %zu: '%.64s' is not NAME=VALUE", path, line, p);
        if (skiff_env_set(env, p, err) < 0)
            return -1;
    }
    return 0;
}

int skiff_compat_env(int rootfd, const struct skiff_start_request *o, char ***env, skiff_err *err)
{
    if (o->remap_root && apt_config(rootfd, env, err) < 0)
        return -1;
    /* pyxis: with --container-remap-root the home directory is root's */
    if (o->remap_root && o->mount_home && skiff_env_set(env, "HOME=/root", err) < 0)
        return -1;
    if (locale_fallback(rootfd, o->locale_env, env, err) < 0)
        return -1;
    return o->env_file ? env_file(o->env_file, env, err) : 0;
}
