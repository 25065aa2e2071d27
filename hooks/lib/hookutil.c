/* See hookutil.h. */
#include "hookutil.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fsutil.h"

static int append_line(const char *var, const char *line, skiff_err *err)
{
    const char *path = getenv(var);
    if (!path || !*path)
        return skiff_error(err, 0, "%s is not set (run hooks through the skiff runtime)", var);
    cleanup_close int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return skiff_error(err, errno, "open %s=%s", var, path);
    size_t len = strlen(line);
    /* One write per line: O_APPEND keeps lines whole. */
    ssize_t w = write(fd, line, len);
    if (w < 0 || (size_t)w != len)
        return skiff_error(err, w < 0 ? errno : EIO, "write %s", path);
    return 0;
}

int skiff_hook_setenv(const char *name, const char *value, skiff_err *err)
{
    /* what the runtime would not read back as this variable: a '#' line is
     * a comment there */
    if (!*name || name[0] == '#' || strchr(name, '=') || strpbrk(name, "\n\r") || strpbrk(value, "\n\r"))
        return skiff_error(err, 0,
                           "environment variable %.60s: empty name, name starting with '#', or '=' or a "
                           "newline in it",
                           name);
    size_t n = strlen(name) + strlen(value) + 3;
    cleanup_free char *line = malloc(n);
    if (!line)
        return skiff_error(err, ENOMEM, "env line");
    snprintf(line, n, "%s=%s\n", name, value);
    return append_line("SKIFF_ENV_FILE", line, err);
}

int skiff_hook_bind_dev(const char *dev_root, const char *name, bool required, skiff_err *err)
{
    char src[4096 + 64], dst[160];
    if (snprintf(src, sizeof(src), "%s/%s", dev_root, name) >= (int)sizeof(src) ||
        snprintf(dst, sizeof(dst), "/dev/%s", name) >= (int)sizeof(dst))
        return skiff_error(err, ENAMETOOLONG, "device %.100s", name);
    struct stat st;
    if (stat(src, &st) < 0) {
        if (errno == ENOENT && !required)
            return 0;
        return skiff_error(err, errno, "device %s", src);
    }
    if (!S_ISCHR(st.st_mode))
        return skiff_error(err, 0, "%s is not a character device", src);
    return skiff_hook_mount(src, dst, "none", "rw,bind,x-create=file", err) < 0 ? -1 : 1;
}

int skiff_hook_main(int argc, char **argv, const char *name, int (*run)(const char *self, skiff_err *err))
{
    skiff_err err = {0};
    if (argc < 1 || !argv[0] || argv[0][0] != '/') {
        fprintf(stderr, "skiff hook %s: run by the skiff runtime, which gives the hook's absolute path\n", name);
        return 1;
    }
    if (run(argv[0], &err) < 0) {
        fprintf(stderr, "skiff hook %s: %s\n", name, err.msg);
        return 1;
    }
    return 0;
}

bool skiff_hook_reporting(void)
{
    const char *path = getenv("SKIFF_REPORT_FILE");
    return path && *path;
}

void skiff_hook_report(const char *kind, const char *fmt, ...)
{
    const char *path = getenv("SKIFF_REPORT_FILE");
    if (!path || !*path)
        return;
    char line[2048];
    int o = snprintf(line, sizeof(line), "%s: ", kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + o, sizeof(line) - (size_t)o - 1, fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++)
        if (*c == '\n')
            *c = ' ';
    size_t len = strlen(line);
    line[len++] = '\n';
    cleanup_close int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && write(fd, line, len) < 0)
        return;
}

int skiff_hook_mount(const char *src, const char *dst, const char *type, const char *opts, skiff_err *err)
{
    const char *f[] = {src, dst, type, opts};
    for (size_t i = 0; i < 4; i++)
        if (!*f[i] || strpbrk(f[i], " \t\n\r"))
            return skiff_error(err, 0, "mount %.100s on %.100s: empty field or blank in a field", src, dst);
    if (src[0] == '#') /* the runtime would skip the line as a comment */
        return skiff_error(err, 0, "mount %.100s on %.100s: a source starting with '#'", src, dst);
    size_t n = strlen(src) + strlen(dst) + strlen(type) + strlen(opts) + 8;
    cleanup_free char *line = malloc(n);
    if (!line)
        return skiff_error(err, ENOMEM, "mount line");
    snprintf(line, n, "%s %s %s %s\n", src, dst, type, opts);
    return append_line("SKIFF_MOUNTS_FILE", line, err);
}

/* Hex digits and dashes, at least one. */
static size_t hexdash(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && (isxdigit((unsigned char)p[i]) || p[i] == '-'))
        i++;
    return i;
}

/* A GPU or MIG UUID as NVIDIA spells them: GPU-<hex and dashes>,
 * MIG-<hex and dashes>, or the older MIG-GPU-<hex and dashes>/GI/CI. */
static bool uuid_token(const char *p, size_t len)
{
    if (len >= SKIFF_GPU_UUID_MAX || len < 5)
        return false;
    if (!strncmp(p, "GPU-", 4))
        return hexdash(p + 4, len - 4) == len - 4;
    if (strncmp(p, "MIG-", 4))
        return false;
    if (len > 8 && !strncmp(p + 4, "GPU-", 4)) {
        size_t h = hexdash(p + 8, len - 8), i = 8 + h, slashes = 0;
        if (!h)
            return false;
        while (i < len && p[i] == '/' && slashes < 2) {
            size_t d = ++i;
            while (i < len && isdigit((unsigned char)p[i]))
                i++;
            if (i == d)
                return false;
            slashes++;
        }
        return i == len && slashes == 2;
    }
    return hexdash(p + 4, len - 4) == len - 4;
}

int skiff_gpu_parse(const char *s, struct skiff_gpu_set *set, skiff_err *err)
{
    memset(set, 0, sizeof(*set));
    if (!s || !*s || !strcmp(s, "void") || !strcmp(s, "NoDevFiles")) {
        set->kind = SKIFF_GPU_NONE;
        return 0;
    }
    if (!strcmp(s, "none")) {
        set->kind = SKIFF_GPU_DRIVER;
        return 0;
    }
    if (!strcmp(s, "all")) {
        set->kind = SKIFF_GPU_ALL;
        return 0;
    }
    set->kind = SKIFF_GPU_LIST;
    const char *p = s;
    for (;;) {
        size_t tok = strcspn(p, ",");
        const char *next;
        if (!strncmp(p, "GPU-", 4) || !strncmp(p, "MIG-", 4)) {
            if (!uuid_token(p, tok))
                return skiff_error(err, 0, "GPU list '%.60s': bad GPU or MIG UUID at '%.40s'", s, p);
            if (set->nuuid >= SKIFF_GPU_MAX)
                return skiff_error(err, 0, "GPU list '%.60s': more than %d UUIDs", s, SKIFF_GPU_MAX);
            memcpy(set->uuid[set->nuuid], p, tok);
            set->uuid[set->nuuid++][tok] = '\0';
            next = p + tok;
        } else {
            char *end;
            if (*p < '0' || *p > '9')
                return skiff_error(err, 0, "GPU list '%.60s': expected a device number or a GPU-/MIG- UUID at '%.20s'",
                                   s, p);
            errno = 0;
            unsigned long lo = strtoul(p, &end, 10), hi = lo;
            if (*end == '-') {
                p = end + 1;
                if (*p < '0' || *p > '9')
                    return skiff_error(err, 0, "GPU list '%.60s': bad range", s);
                hi = strtoul(p, &end, 10);
            }
            if (errno || hi < lo || hi >= 4096)
                return skiff_error(err, 0, "GPU list '%.60s': bad device number or range", s);
            for (unsigned long v = lo; v <= hi; v++) {
                if (set->n >= SKIFF_GPU_MAX)
                    return skiff_error(err, 0, "GPU list '%.60s': more than %d devices", s, SKIFF_GPU_MAX);
                int dup = 0;
                for (size_t k = 0; k < set->n; k++)
                    dup |= set->idx[k] == v;
                if (!dup)
                    set->idx[set->n++] = (unsigned)v;
            }
            next = end;
        }
        if (*next == '\0')
            break;
        if (*next != ',')
            return skiff_error(err, 0, "GPU list '%.60s': unexpected '%c'", s, *next);
        p = next + 1;
    }
    return 0;
}

/* A copy of get(name) into buf, or NULL when unset. */
static const char *get_copy(const char *(*get)(void *, const char *), void *ctx, const char *name, char *buf, size_t n)
{
    const char *v = get ? get(ctx, name) : NULL;
    if (!v)
        return NULL;
    snprintf(buf, n, "%s", v);
    return buf;
}

static int take(const char *v, const char *from, struct skiff_gpu_set *set, skiff_err *err)
{
    if (skiff_gpu_parse(v, set, err) < 0)
        return skiff_err_wrap(err, "%s", from);
    set->from = from;
    return 0;
}

/* Whether CUDA_VISIBLE_DEVICES lists the same host devices as set, in
 * order: Slurm then gives host numbers (it gives 0.. when it constrains
 * devices with cgroups, and those need no renumbering). */
static bool same_devices(const char *cvd, const struct skiff_gpu_set *set)
{
    static struct skiff_gpu_set c;
    skiff_err ignore;
    if (skiff_gpu_parse(cvd, &c, &ignore) < 0 || c.kind != SKIFF_GPU_LIST || c.nuuid || c.n != set->n)
        return false;
    return !memcmp(c.idx, set->idx, set->n * sizeof(set->idx[0]));
}

int skiff_gpu_select(const char *(*get)(void *, const char *), void *ctx,
                     const char *(*image_get)(void *, const char *), void *image_ctx, struct skiff_gpu_set *set,
                     skiff_err *err)
{
    static char v[8192], alloc[8192], cvd[8192];
    const char *alloc_from = "SLURM_STEP_GPUS";
    bool have_alloc = get_copy(get, ctx, alloc_from, alloc, sizeof(alloc));
    if (!have_alloc) {
        alloc_from = "SLURM_JOB_GPUS";
        have_alloc = get_copy(get, ctx, alloc_from, alloc, sizeof(alloc));
    }
    bool have_cvd = get_copy(get, ctx, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd));
    if (get_copy(get, ctx, "NVIDIA_VISIBLE_DEVICES", v, sizeof(v)))
        return take(v, "NVIDIA_VISIBLE_DEVICES", set, err);
    if (get_copy(image_get, image_ctx, "NVIDIA_VISIBLE_DEVICES", v, sizeof(v))) {
        if (take(v, "the image's NVIDIA_VISIBLE_DEVICES", set, err) < 0)
            return -1;
        if (set->kind != SKIFF_GPU_ALL || !have_alloc)
            return 0;
        /* "all" within Slurm's allocation */
    }
    if (have_alloc) {
        if (take(alloc, alloc_from, set, err) < 0)
            return -1;
        set->renumber = set->kind == SKIFF_GPU_LIST && !set->nuuid && (!have_cvd || same_devices(cvd, set));
        return 0;
    }
    if (have_cvd) {
        if (take(cvd, "CUDA_VISIBLE_DEVICES", set, err) < 0)
            return -1;
        set->renumber = set->kind == SKIFF_GPU_LIST && !set->nuuid;
        return 0;
    }
    memset(set, 0, sizeof(*set));
    set->kind = SKIFF_GPU_NONE;
    set->from = "default";
    return 0;
}

int skiff_gpu_renumber(const char *cvd, const char *minors, char *out, size_t n, skiff_err *err)
{
    unsigned m[SKIFF_GPU_MAX];
    size_t nm = 0;
    for (const char *p = minors;;) {
        char *end;
        if (*p < '0' || *p > '9' || nm >= SKIFF_GPU_MAX)
            return skiff_error(err, 0, "SKIFF_GPU_MINORS '%.60s': expected up to %d device numbers", minors,
                               SKIFF_GPU_MAX);
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v >= 4096 || (*end && *end != ','))
            return skiff_error(err, 0, "SKIFF_GPU_MINORS '%.60s': bad device number", minors);
        m[nm++] = (unsigned)v;
        if (!*end)
            break;
        p = end + 1;
    }
    size_t o = 0;
    int changed = 0;
    for (const char *p = cvd;;) {
        size_t tok = strcspn(p, ",");
        char num[16];
        const char *w = p;
        size_t wl = tok;
        if (tok && tok < 5 && strspn(p, "0123456789") == tok) {
            unsigned long v = strtoul(p, NULL, 10);
            for (size_t i = 0; i < nm; i++)
                if (m[i] == v) {
                    wl = (size_t)snprintf(num, sizeof(num), "%zu", i);
                    w = num;
                    changed |= wl != tok || memcmp(num, p, tok);
                    break;
                }
        }
        if (o + wl + 2 > n)
            return skiff_error(err, 0, "CUDA_VISIBLE_DEVICES '%.60s': too long", cvd);
        memcpy(out + o, w, wl);
        o += wl;
        if (!p[tok])
            break;
        out[o++] = ',';
        p += tok + 1;
    }
    out[o] = '\0';
    return changed;
}

int skiff_gpu_task_cvd(const char *(*get)(void *, const char *), void *ctx, char *out, size_t n, skiff_err *err)
{
    char minors[1024], cvd[4096];
    if (!get_copy(get, ctx, "SKIFF_GPU_MINORS", minors, sizeof(minors)) ||
        !get_copy(get, ctx, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd)) || !*minors || !*cvd)
        return 0;
    int r = skiff_gpu_renumber(cvd, minors, out, n, err);
    return r < 0 ? skiff_err_wrap(err, "renumbering CUDA_VISIBLE_DEVICES for the container") : r;
}

/* glibc's cache format (elf/cache.c, "new" format): a header, nlibs
 * entries of 24 bytes, then strings; key/value are offsets from the start
 * of the file. Parsed by hand: glibc has no API for it, and `ldconfig -p`
 * output is meant for people. */
#define LDC_MAGIC "glibc-ld.so.cache"
#define LDC_VERSION "1.1"
#define LDC_HDR 48
#define LDC_ENTRY 24

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

unsigned skiff_ldcache_native_abi(void)
{
#if defined(__x86_64__)
    return SKIFF_LDCACHE_X8664 | SKIFF_LDCACHE_ELF_LIBC6;
#elif defined(__aarch64__)
    return SKIFF_LDCACHE_AARCH64 | SKIFF_LDCACHE_ELF_LIBC6;
#else
    return UINT32_MAX;
#endif
}

unsigned skiff_ldcache_compat32_abi(void)
{
#if defined(__x86_64__)
    return SKIFF_LDCACHE_ELF_LIBC6;
#else
    return UINT32_MAX;
#endif
}

int skiff_ldcache_find(const char *path, const char *const *prefixes,
                       int (*cb)(void *ctx, const char *name, const char *path, unsigned flags), void *ctx,
                       skiff_err *err)
{
    size_t len;
    cleanup_free char *data = skiff_read_file(path, 0, 64u << 20, &len, err);
    if (!data)
        return -1;
    const unsigned char *u = (const unsigned char *)data;
    /* The old format ("ld.so-1.7.0") may precede the new one; skip it. */
    size_t base = 0;
    if (len >= 16 && !memcmp(data, "ld.so-1.7.0", 11)) {
        uint32_t nold = rd32(u + 12);
        size_t skip = 16 + (size_t)nold * 12;
        skip = (skip + 7) & ~(size_t)7;
        if (skip > len)
            return skiff_error(err, 0, "%s: truncated old-format header", path);
        base = skip;
    }
    if (len - base < LDC_HDR || memcmp(data + base, LDC_MAGIC LDC_VERSION, sizeof(LDC_MAGIC LDC_VERSION) - 1))
        return skiff_error(err, 0, "%s: not a glibc ld.so.cache (version 1.1)", path);
    uint32_t nlibs = rd32(u + base + 20);
    if ((uint64_t)nlibs * LDC_ENTRY > len - base - LDC_HDR)
        return skiff_error(err, 0, "%s: entry table beyond the end of the file", path);
    for (uint32_t i = 0; i < nlibs; i++) {
        const unsigned char *e = u + base + LDC_HDR + (size_t)i * LDC_ENTRY;
        uint32_t flags = rd32(e), key = rd32(e + 4), value = rd32(e + 8);
        /* string offsets count from the new-format header */
        if ((uint64_t)key + base >= len || (uint64_t)value + base >= len)
            return skiff_error(err, 0, "%s: entry %u points beyond the file", path, i);
        const char *name = data + base + key, *lib = data + base + value;
        if (!memchr(name, '\0', len - (size_t)(name - data)) || !memchr(lib, '\0', len - (size_t)(lib - data)))
            return skiff_error(err, 0, "%s: unterminated string in entry %u", path, i);
        for (size_t k = 0; prefixes[k]; k++)
            if (!strncmp(name, prefixes[k], strlen(prefixes[k]))) {
                if (cb(ctx, name, lib, flags) < 0)
                    return -1;
                break;
            }
    }
    return 0;
}

static int line_matches(const char *l, size_t n, const char *name, unsigned long id)
{
    const char *c1 = memchr(l, ':', n);
    if (!c1)
        return 0;
    if ((size_t)(c1 - l) == strlen(name) && !strncmp(l, name, (size_t)(c1 - l)))
        return 1;
    const char *c2 = memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - l));
    if (!c2)
        return 0;
    /* the id field, up to the ':' that ends it within this line: strtoul
     * on the line itself skipped blanks and newlines, so an empty field
     * read the next line's number ("a:b:" then "1000:..." matched 1000) */
    const char *idp = c2 + 1, *c3 = memchr(idp, ':', n - (size_t)(idp - l));
    if (!c3)
        return 0;
    cleanup_free char *num = strndup(idp, (size_t)(c3 - idp));
    if (!num)
        return 0;
    char *end;
    unsigned long v = strtoul(num, &end, 10);
    return end != num && *end == '\0' && v == id;
}

char *skiff_identity_merge(const char *image, const char *name, unsigned long id, const char *line, skiff_err *err)
{
    size_t il = image ? strlen(image) : 0, ll = strlen(line);
    char *out = malloc(il + ll + 3);
    if (!out) {
        skiff_error(err, ENOMEM, "identity");
        return NULL;
    }
    size_t o = 0;
    for (const char *p = image; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (!line_matches(p, n, name, id)) {
            memcpy(out + o, p, n);
            o += n;
            out[o++] = '\n';
        }
        p += n + (nl ? 1 : 0);
    }
    memcpy(out + o, line, ll);
    o += ll;
    out[o++] = '\n';
    out[o] = '\0';
    return out;
}

int skiff_hook_open_in_root(const char *root, const char *path, int flags, skiff_err *err)
{
    cleanup_close int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return skiff_error(err, errno, "open root %s", root);
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    while (*path == '/')
        path++;
    int fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof(how));
    if (fd < 0)
        return skiff_error(err, errno, "open %s in %s", path, root);
    return fd;
}
