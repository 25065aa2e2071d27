/* See rdma.h. */

#include "rdma.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hookutil.h"

/* The first line of dirfd/name (a sysfs attribute), without its newline. */
static int read_attr(int dirfd, const char *name, char *out, size_t n)
{
    cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    ssize_t r = read(fd, out, n - 1);
    if (r < 0)
        return -1;
    out[r] = '\0';
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static int cmp_dev(const void *a, const void *b)
{
    return strverscmp(((const struct skiff_rdma_dev *)a)->name, ((const struct skiff_rdma_dev *)b)->name);
}

static struct skiff_rdma_dev *find(struct skiff_rdma_dev *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].name, name))
            return &v[i];
    return NULL;
}

/* Each entry of SYS/class/CLASS whose name starts with one of the prefixes
 * and whose ibdev attribute names a listed device: recorded there. */
static int attach(const char *sys, const char *cls, const char *const *prefixes, struct skiff_rdma_dev *v, size_t n,
                  skiff_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/class/%s", sys, cls);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0 : skiff_error(err, errno, "open %s", path);
    struct dirent *e;
    while ((e = readdir(d))) {
        bool want = false;
        for (size_t i = 0; prefixes[i]; i++)
            want |= !strncmp(e->d_name, prefixes[i], strlen(prefixes[i]));
        if (!want || strlen(e->d_name) >= 32)
            continue;
        cleanup_close int dfd = openat(dirfd(d), e->d_name, O_PATH | O_DIRECTORY | O_CLOEXEC);
        char ibdev[64];
        if (dfd < 0 || read_attr(dfd, "ibdev", ibdev, sizeof(ibdev)) < 0)
            continue;
        struct skiff_rdma_dev *dev = find(v, n, ibdev);
        if (!dev)
            continue;
        if (!strncmp(e->d_name, "uverbs", 6))
            snprintf(dev->uverbs, sizeof(dev->uverbs), "%s", e->d_name);
        else if (dev->nmad < SKIFF_RDMA_NODES)
            snprintf(dev->mad[dev->nmad++], sizeof(dev->mad[0]), "%s", e->d_name);
    }
    closedir(d);
    return 0;
}

int skiff_rdma_list(const char *sys, struct skiff_rdma_dev *v, size_t max, size_t *n, skiff_err *err)
{
    *n = 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/class/infiniband", sys);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0 : skiff_error(err, errno, "open %s", path);
    struct dirent *e;
    int rv = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(v->name))
            continue;
        if (*n >= max) {
            rv = skiff_error(err, 0, "%s: more than %zu RDMA devices", path, max);
            break;
        }
        struct skiff_rdma_dev *dev = &v[(*n)++];
        memset(dev, 0, sizeof(*dev));
        snprintf(dev->name, sizeof(dev->name), "%s", e->d_name);
        char link[4096], drv[256];
        snprintf(link, sizeof(link), "%s/device/driver", e->d_name);
        ssize_t l = readlinkat(dirfd(d), link, drv, sizeof(drv) - 1);
        if (l > 0) {
            drv[l] = '\0';
            const char *base = strrchr(drv, '/');
            snprintf(dev->driver, sizeof(dev->driver), "%.63s", base ? base + 1 : drv);
        }
    }
    closedir(d);
    if (rv < 0)
        return rv;
    qsort(v, *n, sizeof(*v), cmp_dev);
    static const char *const verbs[] = {"uverbs", NULL}, *const mad[] = {"umad", "issm", NULL};
    if (attach(sys, "infiniband_verbs", verbs, v, *n, err) < 0 || attach(sys, "infiniband_mad", mad, v, *n, err) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++) /* a stable order for the mount lines */
        qsort(v[i].mad, v[i].nmad, sizeof(v[i].mad[0]), (int (*)(const void *, const void *))strverscmp);
    return 0;
}

int skiff_rdma_parse(const char *s, struct skiff_rdma_set *set, skiff_err *err)
{
    memset(set, 0, sizeof(*set));
    if (!s || !*s || !strcmp(s, "void") || !strcmp(s, "none")) {
        set->kind = SKIFF_RDMA_VOID;
        return 0;
    }
    if (!strcmp(s, "all")) {
        set->kind = SKIFF_RDMA_ALL;
        return 0;
    }
    set->kind = SKIFF_RDMA_LIST;
    for (const char *p = s;;) {
        char *end;
        if (*p < '0' || *p > '9')
            return skiff_error(err, 0, "RDMA device list '%.60s': expected a device index at '%.20s' (or all, none)", s,
                               p);
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v >= SKIFF_RDMA_MAX)
            return skiff_error(err, 0, "RDMA device list '%.60s': bad device index", s);
        bool dup = false;
        for (size_t k = 0; k < set->n; k++)
            dup |= set->idx[k] == v;
        if (!dup) {
            if (set->n >= SKIFF_RDMA_MAX)
                return skiff_error(err, 0, "RDMA device list '%.60s': too many devices", s);
            set->idx[set->n++] = (unsigned)v;
        }
        if (!*end)
            break;
        if (*end != ',')
            return skiff_error(err, 0, "RDMA device list '%.60s': unexpected '%c'", s, *end);
        p = end + 1;
    }
    return 0;
}

int skiff_rdma_select(const char *(*get)(void *, const char *), void *ctx,
                      const char *(*image_get)(void *, const char *), void *image_ctx, const char *dflt,
                      struct skiff_rdma_set *set, skiff_err *err)
{
    static const char var[] = "MELLANOX_VISIBLE_DEVICES";
    const char *v = get ? get(ctx, var) : NULL, *from = var;
    if (!v && image_get) {
        v = image_get(image_ctx, var);
        from = "the image's MELLANOX_VISIBLE_DEVICES";
    }
    if (!v) {
        v = dflt;
        from = "default";
    }
    if (skiff_rdma_parse(v, set, err) < 0)
        return skiff_err_wrap(err, "%s", from);
    set->from = from;
    return 0;
}

int skiff_rdma_parse_driver_file(const char *text, char *out, size_t n, skiff_err *err)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        const char *s = p + strspn(p, " \t");
        p = nl ? nl + 1 : NULL;
        if (end - s < 8 || strncmp(s, "driver", 6) || (s[6] != ' ' && s[6] != '\t'))
            continue;
        const char *w = s + 6;
        w += strspn(w, " \t");
        size_t wl = strcspn(w, " \t\r\n");
        if (!wl || wl >= n)
            break;
        memcpy(out, w, wl);
        out[wl] = '\0';
        return 0;
    }
    return skiff_error(err, 0, "no 'driver NAME' line");
}

void skiff_rdma_provider(const struct skiff_rdma_dev *d, char *out, size_t n)
{
    static const char *const by_driver[][2] = {
        {"mlx5_core", "mlx5"}, {"mlx4_core", "mlx4"}, {"bnxt_en", "bnxt_re"}, {"efa", "efa"},
        {"irdma", "irdma"},    {"i40e", "irdma"},     {"ice", "irdma"},       {"qede", "qedr"},
    };
    for (size_t i = 0; i < sizeof(by_driver) / sizeof(by_driver[0]); i++)
        if (!strcmp(d->driver, by_driver[i][0])) {
            snprintf(out, n, "%s", by_driver[i][1]);
            return;
        }
    size_t len = strlen(d->name);
    while (len && d->name[len - 1] >= '0' && d->name[len - 1] <= '9')
        len--;
    while (len && d->name[len - 1] == '_')
        len--;
    snprintf(out, n, "%.*s", (int)len, d->name);
}
