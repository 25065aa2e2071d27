/* A lazy image on disk and on a node (lazy.h, lazy_int.h): the plan in
 * its directory, and the data file and presence map under the lazy path.
 *
 * The map is shared by every process that serves or fills the image on
 * the node (two containers of one image read each other's spans): a
 * 4 KiB header and one bit per span, mmap'ed. A bit is set (atomically)
 * only after its span's bytes are in the data file, so a reader that sees
 * it reads them from the page cache. Nothing is synced: a map written in
 * another boot (its boot id differs) is reset with its data file, since
 * after a crash the bits may have reached the disk and the data not. */
#include "lazy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "fdio.h"
#include "fsutil.h"

#define MAP_MAGIC "SKLZMAP1"
#define MAP_HEADER 4096u

struct lz_map_header {
    char magic[8];
    uint32_t version, nspans;
    char boot_id[40];
    uint64_t data_size;
    uint64_t fetched;  /* bytes fetched from the source, all containers */
    uint32_t present;  /* spans there */
    uint32_t complete; /* every span is there */
};

bool skiff_lazy_is_image(const char *path)
{
    char p[SKIFF_PATH_MAX + 8];
    struct stat st;
    return path && snprintf(p, sizeof(p), "%s/plan", path) < (int)sizeof(p) && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *skiff_lazy_skeleton(const struct lz_image *im, char *buf, size_t n)
{
    snprintf(buf, n, "%s/root.sqsh", im->dir);
    return buf;
}

/* ---- the plan ------------------------------------------------------------ */

static int plan_bad(skiff_err *err, const char *dir, const char *what)
{
    return lz_error(err, EINVAL, "lazy image %s: bad plan (%s); remove it to make it again", dir, what);
}

static bool json_u64(json_t *o, const char *k, uint64_t *v)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return false;
    *v = (uint64_t)json_integer_value(x);
    return true;
}

/* Reads DIR/plan, then each layer's index (spans only; with windows for
 * the fetcher). */
static int load_plan(struct lz_image *im, unsigned loads, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/plan", im->dir);
    size_t len;
    cleanup_free char *text = skiff_read_file(p, 0, 1u << 20, &len, err);
    if (!text)
        return -1;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    int rv = -1;
    if (!json_is_object(root)) {
        plan_bad(err, im->dir, "not JSON");
        goto out;
    }
    json_t *src = json_object_get(root, "source"), *layers = json_object_get(root, "layers");
    uint64_t cfg_len, env_len;
    if (json_integer_value(json_object_get(root, "version")) != 1 || !json_is_string(src) ||
        strlen(json_string_value(src)) >= sizeof(im->source) || !json_is_array(layers) || !json_array_size(layers) ||
        json_array_size(layers) > LZ_MAX_LAYERS || !json_u64(root, "config_len", &cfg_len) ||
        !json_u64(root, "environment_len", &env_len) || cfg_len + env_len > (16u << 20)) {
        plan_bad(err, im->dir, "fields");
        goto out;
    }
    snprintf(im->source, sizeof(im->source), "%s", json_string_value(src));
    json_t *key = json_object_get(root, "key");
    const char *k = json_string_value(key);
    if (!k || strlen(k) != 20 || strspn(k, "0123456789abcdef") != 20) {
        plan_bad(err, im->dir, "key");
        goto out;
    }
    snprintf(im->key, sizeof(im->key), "%s", k);
    im->nlayers = (uint32_t)json_array_size(layers);
    im->layers = calloc(im->nlayers, sizeof(*im->layers));
    im->blob_paths = calloc(im->nlayers, sizeof(*im->blob_paths));
    if (!im->layers || !im->blob_paths) {
        skiff_error(err, ENOMEM, "lazy image");
        goto out;
    }
    for (uint32_t i = 0; i < im->nlayers; i++)
        im->layers[i].ix.fd = -1;
    /* the image's own files first, then each layer's tar, 4 KiB aligned */
    im->extras_len = cfg_len + env_len;
    uint64_t at = (im->extras_len + 4095) & ~4095ull;
    for (uint32_t i = 0; i < im->nlayers; i++) {
        json_t *l = json_array_get(layers, i), *d = json_object_get(l, "digest"), *b = json_object_get(l, "blob");
        struct lz_layer *ly = &im->layers[i];
        char ip[SKIFF_PATH_MAX + 32];
        snprintf(ip, sizeof(ip), "%s/layer-%u.idx", im->dir, i);
        if (!json_is_string(d) || (b && !json_is_string(b))) {
            plan_bad(err, im->dir, "a layer");
            goto out;
        }
        if (lz_index_load(ip, loads, &ly->ix, err) < 0)
            goto out;
        if (strcmp(ly->ix.digest, json_string_value(d)) != 0) {
            plan_bad(err, im->dir, "a layer's index is another layer's");
            goto out;
        }
        if (b && !(im->blob_paths[i] = strdup(json_string_value(b)))) {
            skiff_error(err, ENOMEM, "lazy image");
            goto out;
        }
        ly->base = at;
        ly->span0 = im->nspans;
        if (ly->ix.usize > (1ull << 50) || im->nspans + (uint64_t)ly->ix.nspans > LZ_MAX_SPANS) {
            plan_bad(err, im->dir, "sizes");
            goto out;
        }
        im->nspans += ly->ix.nspans;
        im->compressed += ly->ix.csize;
        at = (at + ly->ix.usize + 4095) & ~4095ull;
    }
    im->data_size = at;
    rv = 0;
out:
    json_decref(root);
    return rv;
}

/* ---- the map and the data file -------------------------------------------- */

static void boot_id(char out[40])
{
    memset(out, 0, 40);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, out, 39);
        (void)n;
        close(fd);
    }
    out[strcspn(out, "\n")] = '\0';
}

static int write_extras(struct lz_image *im, skiff_err *err)
{
    static const char *const names[] = {"config.json", "environment"};
    uint64_t at = 0;
    for (int i = 0; i < 2; i++) {
        char p[SKIFF_PATH_MAX + 32];
        snprintf(p, sizeof(p), "%s/%s", im->dir, names[i]);
        size_t len;
        cleanup_free char *data = skiff_read_file(p, 0, 16u << 20, &len, err);
        if (!data)
            return -1;
        if (len && skiff_write_all_at(im->datafd, data, len, at) < 0)
            return skiff_error(err, errno, "write the lazy data file");
        at += len;
    }
    if (at != im->extras_len)
        return plan_bad(err, im->dir, "the image's files changed");
    return 0;
}

static int open_data(struct lz_image *im, const struct skiff_config *cfg, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX], key[24], node[128] = "node", p[SKIFF_PATH_MAX + 200];
    if (skiff_config_lazy_path(cfg, dir, sizeof(dir)) < 0)
        return skiff_error(err, ENAMETOOLONG, "lazy_path");
    if (skiff_mkdir_p(dir, 0700, err) < 0)
        return skiff_err_wrap(err, "lazy_path");
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return skiff_error(err, 0, "lazy_path %s must be a directory of yours that nobody else can read (chmod 700)",
                           dir);
    snprintf(key, sizeof(key), "%s", im->key);
    gethostname(node, sizeof(node) - 1);
    node[strcspn(node, "./")] = '\0';
    snprintf(p, sizeof(p), "%s/%s.%s.map", dir, key, node);
    im->mapfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (im->mapfd < 0)
        return skiff_error(err, errno, "open %s", p);
    snprintf(p, sizeof(p), "%s/%s.%s.data", dir, key, node);
    im->datafd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (im->datafd < 0)
        return skiff_error(err, errno, "open %s", p);
    while (flock(im->mapfd, LOCK_EX) < 0)
        if (errno != EINTR)
            return skiff_error(err, errno, "lock %s", p);
    im->maplen = MAP_HEADER + ((size_t)(im->nspans + 63) / 64) * 8;
    int rv = -1;
    struct lz_map_header h;
    char boot[40];
    boot_id(boot);
    bool fresh = fstat(im->mapfd, &st) < 0 || (size_t)st.st_size != im->maplen ||
                 skiff_read_all_at(im->mapfd, &h, sizeof(h), 0) < 0 || memcmp(h.magic, MAP_MAGIC, 8) != 0 ||
                 h.version != 1 || h.nspans != im->nspans || h.data_size != im->data_size ||
                 memcmp(h.boot_id, boot, sizeof(boot)) != 0;
    if (fresh) {
        /* a new map, or one that cannot be trusted: nothing is there */
        if (skiff_fd_empty(im->mapfd) < 0 || ftruncate(im->mapfd, (off_t)im->maplen) < 0 ||
            skiff_fd_empty(im->datafd) < 0 || ftruncate(im->datafd, (off_t)im->data_size) < 0) {
            skiff_error(err, errno, "size the lazy data file %s (lazy_path: is the disk full?)", p);
            goto out;
        }
        if (write_extras(im, err) < 0)
            goto out;
        memset(&h, 0, sizeof(h));
        memcpy(h.magic, MAP_MAGIC, 8);
        h.version = 1;
        h.nspans = im->nspans;
        h.data_size = im->data_size;
        memcpy(h.boot_id, boot, sizeof(boot));
        if (skiff_write_all_at(im->mapfd, &h, sizeof(h), 0) < 0) {
            skiff_error(err, errno, "write the lazy map");
            goto out;
        }
    }
    void *m = mmap(NULL, im->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, im->mapfd, 0);
    if (m == MAP_FAILED) {
        skiff_error(err, errno, "map the lazy map");
        goto out;
    }
    im->hdr = m;
    im->bits = (volatile uint64_t *)((char *)m + MAP_HEADER);
    rv = 0;
out:
    flock(im->mapfd, LOCK_UN);
    return rv;
}

static struct lz_image *image_open(const struct skiff_config *cfg, const char *dir, unsigned loads, skiff_err *err)
{
    struct lz_image *im = calloc(1, sizeof(*im));
    if (!im) {
        skiff_error(err, ENOMEM, "lazy image");
        return NULL;
    }
    im->datafd = im->mapfd = im->holdfd = -1;
    char plan[SKIFF_PATH_MAX + 8];
    if (snprintf(im->dir, sizeof(im->dir), "%s", dir) >= (int)sizeof(im->dir) ||
        snprintf(plan, sizeof(plan), "%s/plan", dir) >= (int)sizeof(plan)) {
        skiff_error(err, ENAMETOOLONG, "%s", dir);
        skiff_lazy_close(im);
        return NULL;
    }
    /* held as an imported image is (cache.h): a prune leaves it alone */
    im->holdfd = skiff_cache_hold(plan, SKIFF_HOLD_LOCKED, err);
    if (im->holdfd < 0) {
        if (err->code == ENOENT)
            skiff_error(err, ENOENT, "lazy image %s was removed (skiff cache prune?): resolve the image again", dir);
        skiff_lazy_close(im);
        return NULL;
    }
    if (load_plan(im, loads, err) < 0 || open_data(im, cfg, err) < 0) {
        skiff_err_wrap(err, "lazy image %s", dir);
        skiff_lazy_close(im);
        return NULL;
    }
    return im;
}

struct lz_image *skiff_lazy_open(const struct skiff_config *cfg, const char *dir, skiff_err *err)
{
    return image_open(cfg, dir, 0, err);
}

struct lz_image *lz_image_open_fetch(const struct skiff_config *cfg, const char *dir, skiff_err *err)
{
    return image_open(cfg, dir, LZ_LOAD_WINDOWS, err);
}

void skiff_lazy_close(struct lz_image *im)
{
    if (!im)
        return;
    for (uint32_t i = 0; im->layers && i < im->nlayers; i++)
        lz_index_free(&im->layers[i].ix);
    for (uint32_t i = 0; im->blob_paths && i < im->nlayers; i++)
        free(im->blob_paths[i]);
    free(im->layers);
    free(im->blob_paths);
    if (im->hdr)
        munmap(im->hdr, im->maplen);
    if (im->datafd >= 0)
        close(im->datafd);
    if (im->mapfd >= 0)
        close(im->mapfd);
    if (im->holdfd >= 0)
        close(im->holdfd);
    free(im);
}

/* ---- spans --------------------------------------------------------------- */

int skiff_lazy_data_fd(const struct lz_image *im)
{
    return im->datafd;
}

uint32_t skiff_lazy_nspans(const struct lz_image *im)
{
    return im->nspans;
}

/* The last layer whose first span (by_span) or first data file byte is at
 * or before v: the layers are in order of both. */
static uint32_t layer_of(const struct lz_image *im, uint64_t v, bool by_span)
{
    uint32_t lo = 0, hi = im->nlayers;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if ((by_span ? im->layers[mid].span0 : im->layers[mid].base) <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

const struct lz_span *lz_image_span(const struct lz_image *im, uint32_t g, uint32_t *layer)
{
    uint32_t lo = layer_of(im, g, true);
    if (layer)
        *layer = lo;
    return &im->layers[lo].ix.spans[g - im->layers[lo].span0];
}

int64_t skiff_lazy_span_at(const struct lz_image *im, uint64_t off)
{
    if (im->nlayers == 0 || off < im->layers[0].base)
        return -1;
    const struct lz_layer *l = &im->layers[layer_of(im, off, false)];
    uint64_t u = off - l->base;
    if (u >= l->ix.usize)
        return -1; /* alignment padding: nothing reads it */
    uint32_t a = 0, b = l->ix.nspans;
    while (b - a > 1) {
        uint32_t mid = (a + b) / 2;
        if (l->ix.spans[mid].ustart <= u)
            a = mid;
        else
            b = mid;
    }
    return (int64_t)l->span0 + a;
}

uint64_t skiff_lazy_span_end(const struct lz_image *im, uint32_t g)
{
    uint32_t layer;
    const struct lz_span *s = lz_image_span(im, g, &layer);
    return im->layers[layer].base + s->uend;
}

bool skiff_lazy_present(const struct lz_image *im, uint32_t g)
{
    return (__atomic_load_n(&im->bits[g / 64], __ATOMIC_ACQUIRE) >> (g % 64)) & 1;
}

void lz_image_set_present(struct lz_image *im, uint32_t g, uint64_t fetched)
{
    uint64_t bit = 1ull << (g % 64);
    uint64_t old = __atomic_fetch_or(&im->bits[g / 64], bit, __ATOMIC_RELEASE);
    __atomic_fetch_add(&im->hdr->fetched, fetched, __ATOMIC_RELAXED);
    if (!(old & bit) && __atomic_add_fetch(&im->hdr->present, 1, __ATOMIC_RELAXED) == im->nspans)
        __atomic_store_n(&im->hdr->complete, 1, __ATOMIC_RELAXED);
}

void skiff_lazy_counters(const struct lz_image *im, uint64_t *fetched, uint64_t *compressed, uint32_t *present)
{
    *fetched = __atomic_load_n(&im->hdr->fetched, __ATOMIC_RELAXED);
    *compressed = im->compressed;
    *present = __atomic_load_n(&im->hdr->present, __ATOMIC_RELAXED);
}

/* ---- the prefetch list ------------------------------------------------- */

/* The image's prefetch list (*n spans), or NULL when it has none. */
uint32_t *lz_prefetch_read(const struct lz_image *im, size_t *n)
{
    *n = 0;
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/prefetch", im->dir);
    size_t len;
    skiff_err ignore;
    cleanup_free char *text = skiff_read_file(p, 0, 16u << 20, &len, &ignore);
    if (!text)
        return NULL;
    uint32_t *pre = calloc(im->nspans, sizeof(*pre));
    for (char *c = text, *end; pre && *c && *n < im->nspans; c = end) {
        unsigned long g = strtoul(c, &end, 10);
        if (end == c)
            break;
        if (g < im->nspans)
            pre[(*n)++] = (uint32_t)g;
        while (*end == '\n' || *end == ' ')
            end++;
    }
    return pre;
}

bool skiff_lazy_fetcher_idle(const struct skiff_config *cfg, const struct lz_image *im)
{
    uint32_t present;
    uint64_t fetched, compressed;
    skiff_lazy_counters(im, &fetched, &compressed, &present);
    if (present == im->nspans)
        return true;
    /* a cold node: its first read misses for sure, and the fetcher had
     * better be up by then (made beside the container's start) */
    if (present == 0 || cfg->lazy_complete)
        return false;
    size_t n;
    cleanup_free uint32_t *pre = lz_prefetch_read(im, &n);
    for (size_t i = 0; i < n; i++)
        if (!skiff_lazy_present(im, pre[i]))
            return false;
    return true;
}
