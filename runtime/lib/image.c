#include "image.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "digest.h"
#include "fdio.h"
#include "imgconfig.h"
#include "layer.h"
#include "ref.h"
#include "registry.h"
#include "squash.h"

#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define JSON_MAX (16u << 20)

struct layer {
    char digest[SKIFF_DIGEST_LEN]; /* "" when the source names none (docker-archive) */
    char path[SKIFF_PATH_MAX];     /* the blob on disk */
    bool verified;                 /* digest already checked (just downloaded) */
    long long size;
    /* Registry layers not in the cache are downloaded by a thread while the
     * layers before them are applied, and applied while they download. */
    bool remote;                     /* set while planning: downloaded by the fetcher */
    int state;                       /* BLOB_* (guarded by job.mu once it runs) */
    unsigned long long avail;        /* bytes written so far */
    char tmp[SKIFF_PATH_MAX + 16];   /* the file being written */
    char error[SKIFF_ERR_MSG_MAX];   /* why the download failed */
};

enum { BLOB_READY, BLOB_PENDING, BLOB_RUNNING, BLOB_DONE, BLOB_FAILED };

struct job {
    const struct skiff_config *cfg;
    const struct skiff_import_opts *o;
    struct skiff_ref ref;
    char arch[80], variant[32];
    char work[SKIFF_PATH_MAX]; /* scratch dir: rootfs/ and src/ */
    struct skiff_registry *reg;
    char src[SKIFF_PATH_MAX]; /* layout dir for oci:/dir:/archives */
    int srcfd;                /* src when skiff unpacked it (archives), else -1 */
    json_t *config;           /* the image config (whole) */
    struct layer *layers;
    size_t nlayers;
    char manifest_digest[SKIFF_DIGEST_LEN];
    /* Blobs this import put in the cache: removed again if it fails, so a
     * refused image leaves nothing behind. */
    char **fetched;
    size_t nfetched;
    /* the download thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t fetch_tid;
    bool fetching, fetch_abort, fetch_over;
};

/* snprintf that reports truncation as an error (paths must never be cut). */
static int fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "path too long");
    return 0;
}

static void warn(const struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(const struct job *j, const char *fmt, ...)
{
    if (!j->o || !j->o->warn)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j->o->warn(j->o->warn_ctx, msg);
}

static double now_s(void);

/* ---- platform --------------------------------------------------------- */

static void host_arch(char *arch, size_t n)
{
    struct utsname u;
    const char *m = uname(&u) == 0 ? u.machine : "x86_64";
    const char *a = !strcmp(m, "x86_64")                         ? "amd64"
                    : !strcmp(m, "aarch64")                      ? "arm64"
                    : !strncmp(m, "armv7", 5)                    ? "arm"
                    : !strcmp(m, "i686") || !strcmp(m, "i386") ? "386"
                                                                 : m;
    snprintf(arch, n, "%s", a);
}

static void set_arch(struct job *j, const char *want)
{
    if (!want || !*want) {
        host_arch(j->arch, sizeof(j->arch));
        return;
    }
    /* linux/arm64/v8, arm64/v8, x86_64 ... */
    if (!strncmp(want, "linux/", 6))
        want += 6;
    snprintf(j->arch, sizeof(j->arch), "%s", want);
    char *slash = strchr(j->arch, '/');
    if (slash) {
        *slash = '\0';
        snprintf(j->variant, sizeof(j->variant), "%s", slash + 1);
    }
    if (!strcmp(j->arch, "x86_64"))
        strcpy(j->arch, "amd64");
    else if (!strcmp(j->arch, "aarch64"))
        strcpy(j->arch, "arm64");
}

/* From an index's manifests[], the digest for linux/arch[/variant]. */
static int pick_platform(struct job *j, json_t *index, char *digest, skiff_err *err)
{
    json_t *ms = json_object_get(index, "manifests");
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        return skiff_error(err, 0, "image index without manifests");
    char seen[512] = "";
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        json_t *p = json_object_get(m, "platform");
        const char *os = json_string_value(json_object_get(p, "os"));
        const char *arch = json_string_value(json_object_get(p, "architecture"));
        const char *var = json_string_value(json_object_get(p, "variant"));
        const char *d = json_string_value(json_object_get(m, "digest"));
        if (!os || !arch || !d)
            continue;
        size_t sl = strlen(seen);
        snprintf(seen + sl, sizeof(seen) - sl, "%s%s/%s%s%s", sl ? ", " : "", os, arch, var ? "/" : "",
                 var ? var : "");
        if (strcmp(os, "linux") || strcmp(arch, j->arch))
            continue;
        if (j->variant[0] && (!var || strcmp(var, j->variant)))
            continue;
        if (!skiff_ref_valid_digest(d))
            return skiff_error(err, 0, "index entry with bad digest '%s'", d);
        snprintf(digest, SKIFF_DIGEST_LEN, "%s", d);
        return 0;
    }
    return skiff_error(err, 0, "no linux/%s%s%s image in this multi-platform image (it has: %s); pick one with -a ARCH",
                       j->arch, j->variant[0] ? "/" : "", j->variant, seen);
}

static bool is_index(const char *mt, json_t *doc)
{
    if (!strcmp(mt, MT_DOCKER_LIST) || !strcmp(mt, MT_OCI_INDEX))
        return true;
    if (!strcmp(mt, MT_DOCKER_MANIFEST) || !strcmp(mt, MT_OCI_MANIFEST))
        return false;
    const char *inner = json_string_value(json_object_get(doc, "mediaType"));
    if (inner && (!strcmp(inner, MT_DOCKER_LIST) || !strcmp(inner, MT_OCI_INDEX)))
        return true;
    return json_object_get(doc, "manifests") != NULL && json_object_get(doc, "layers") == NULL;
}

static json_t *parse_json(const char *buf, size_t len, const char *what, skiff_err *err)
{
    json_error_t je;
    json_t *doc = json_loadb(buf, len, 0, &je);
    if (!doc || !json_is_object(doc)) {
        json_decref(doc);
        skiff_error(err, 0, "%s: not a JSON object (%s, line %d)", what, je.text, je.line);
        return NULL;
    }
    return doc;
}

/* Opens a source file. Inside an archive skiff unpacked (work/src), paths
 * resolve as if that dir were "/", so a symlink in the archive cannot make
 * skiff read a host file; elsewhere (a layout the user names) plainly. */
static int open_source(const struct job *j, const char *path, skiff_err *err)
{
    size_t n = strlen(j->src);
    if (j->srcfd >= 0 && n && !strncmp(path, j->src, n) && path[n] == '/')
        return skiff_open_in_root(j->srcfd, path + n + 1, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? skiff_error(err, errno, "open %s", path) : fd;
}

/* Reads a whole (small) file, checking its digest when one is given. */
static char *read_small(const struct job *j, const char *path, const char *digest, size_t *len,
                        skiff_err *err)
{
    cleanup_close int fd = open_source(j, path, err);
    if (fd < 0)
        return NULL;
    size_t got;
    char *buf = skiff_read_fd_small(fd, path, JSON_MAX, &got, err);
    if (!buf)
        return NULL;
    if (digest) {
        char d[SKIFF_DIGEST_LEN];
        if (skiff_digest_buf(buf, got, d, err) < 0) {
            free(buf);
            return NULL;
        }
        if (strcmp(d, digest) != 0) {
            free(buf);
            skiff_error(err, 0, "%s: digest mismatch: expected %s, got %s", path, digest, d);
            return NULL;
        }
    }
    *len = got;
    return buf;
}

/* Fills j->layers and j->config from an image manifest; blob_path maps a
 * digest to a file (fetching it when needed). */
typedef int (*blob_fn)(struct job *j, const char *digest, bool layer, struct layer *out, skiff_err *err);

static int use_manifest(struct job *j, json_t *man, blob_fn blob, skiff_err *err)
{
    json_t *sv = json_object_get(man, "schemaVersion");
    if (json_integer_value(sv) == 1)
        return skiff_error(err, 0, "Docker schema 1 manifests are not supported (push the image again with a current client)");
    json_t *cfgd = json_object_get(man, "config");
    const char *cdig = json_string_value(json_object_get(cfgd, "digest"));
    json_t *layers = json_object_get(man, "layers");
    if (!cdig || !json_is_array(layers))
        return skiff_error(err, 0, "manifest without config or layers");
    if (!skiff_ref_valid_digest(cdig))
        return skiff_error(err, 0, "config digest '%s' is not sha256", cdig);
    struct layer cl;
    memset(&cl, 0, sizeof(cl));
    if (blob(j, cdig, false, &cl, err) < 0)
        return skiff_err_wrap(err, "image config %s", cdig);
    size_t len;
    cleanup_free char *cbuf = read_small(j, cl.path, cl.verified ? NULL : cdig, &len, err);
    if (!cbuf) {
        if (j->ref.kind == SKIFF_REF_DOCKER && strstr(err->msg, "digest mismatch"))
            unlink(cl.path); /* a corrupt cached config: fetched again next time */
        return skiff_err_wrap(err, "image config");
    }
    j->config = parse_json(cbuf, len, "image config", err);
    if (!j->config)
        return -1;
    j->nlayers = json_array_size(layers);
    j->layers = calloc(j->nlayers ? j->nlayers : 1, sizeof(*j->layers));
    if (!j->layers)
        return skiff_error(err, ENOMEM, "layers");
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        const char *d = json_string_value(json_object_get(l, "digest"));
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        if (!d || !skiff_ref_valid_digest(d))
            return skiff_error(err, 0, "layer %zu: missing or non-sha256 digest", i + 1);
        if (mt && (strstr(mt, "encrypted") || strstr(mt, "nondistributable") || strstr(mt, "foreign")))
            return skiff_error(err, 0, "layer %s: media type %s is not supported", d, mt);
        j->layers[i].size = json_integer_value(json_object_get(l, "size"));
        if (blob(j, d, true, &j->layers[i], err) < 0)
            return skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, d);
        snprintf(j->layers[i].digest, sizeof(j->layers[i].digest), "%s", d);
    }
    return 0;
}

/* ---- registry source -------------------------------------------------- */

static int registry_blob(struct job *j, const char *digest, bool layer, struct layer *out, skiff_err *err)
{
    if (skiff_cache_blob_path(j->cfg, digest, out->path, sizeof(out->path), err) < 0)
        return -1;
    if (access(out->path, F_OK) == 0)
        return 0; /* cached: checked again while it is read */
    if (layer) {
        out->state = BLOB_PENDING; /* fetched while the layers are applied */
        out->remote = true;
        return 0;
    }
    char tmp[SKIFF_PATH_MAX + 16];
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", out->path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "create %s", tmp);
    double t0 = now_s();
    int rv = skiff_registry_blob(j->reg, digest, fd, err);
    if (rv == 0 && layer && j->o && j->o->progress) {
        struct stat st;
        fstat(fd, &st);
        fprintf(stderr, "skiff: fetched layer %.19s %8.1f MB %5.2f s\n", digest,
                (double)st.st_size / 1e6, now_s() - t0);
    }
    if (rv == 0 && close(fd) < 0)
        rv = skiff_error(err, errno, "write %s", tmp);
    else if (rv < 0)
        close(fd);
    if (rv == 0 && rename(tmp, out->path) < 0)
        rv = skiff_error(err, errno, "publish %s", out->path);
    if (rv < 0) {
        unlink(tmp);
        return -1;
    }
    out->verified = true;
    char **nf = realloc(j->fetched, (j->nfetched + 1) * sizeof(*nf));
    if (nf) {
        j->fetched = nf;
        if ((nf[j->nfetched] = strdup(out->path)))
            j->nfetched++;
    }
    return 0;
}

static int plan_registry(struct job *j, skiff_err *err)
{
    if (skiff_registry_open(&j->reg, j->cfg, &j->ref, err) < 0)
        return -1;
    const char *reference = j->ref.digest[0] ? j->ref.digest : j->ref.tag;
    char mt[128], digest[SKIFF_DIGEST_LEN];
    cleanup_free char *body = NULL;
    size_t len;
    if (skiff_registry_manifest(j->reg, reference, &body, &len, mt, sizeof(mt), digest, err) < 0)
        return -1;
    snprintf(j->manifest_digest, sizeof(j->manifest_digest), "%s", digest);
    json_t *doc = parse_json(body, len, "manifest", err);
    if (!doc)
        return -1;
    if (is_index(mt, doc)) {
        char pick[SKIFF_DIGEST_LEN];
        int rv = pick_platform(j, doc, pick, err);
        json_decref(doc);
        if (rv < 0)
            return -1;
        free(body);
        body = NULL;
        if (skiff_registry_manifest(j->reg, pick, &body, &len, mt, sizeof(mt), digest, err) < 0)
            return -1;
        doc = parse_json(body, len, "manifest", err);
        if (!doc)
            return -1;
        if (is_index(mt, doc)) {
            json_decref(doc);
            return skiff_error(err, 0, "nested image index at %s is not supported", pick);
        }
    }
    int rv = use_manifest(j, doc, registry_blob, err);
    json_decref(doc);
    return rv;
}

/* ---- OCI layout and skopeo dir: sources -------------------------------- */

static int layout_blob(struct job *j, const char *digest, bool layer, struct layer *out, skiff_err *err)
{
    (void)layer;
    int w;
    if (j->ref.kind == SKIFF_REF_DIR)
        w = snprintf(out->path, sizeof(out->path), "%s/%s", j->src, digest + 7);
    else
        w = snprintf(out->path, sizeof(out->path), "%s/blobs/sha256/%s", j->src, digest + 7);
    if (w < 0 || (size_t)w >= sizeof(out->path))
        return skiff_error(err, ENAMETOOLONG, "blob path");
    int fd = open_source(j, out->path, err);
    if (fd < 0)
        return skiff_err_wrap(err, "blob");
    close(fd);
    return 0;
}

static json_t *load_json_file(const struct job *j, const char *path, const char *digest, skiff_err *err)
{
    size_t len;
    cleanup_free char *buf = read_small(j, path, digest, &len, err);
    if (!buf)
        return NULL;
    return parse_json(buf, len, path, err);
}

static int plan_oci(struct job *j, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/index.json", j->src);
    json_t *index = load_json_file(j, p, NULL, err);
    if (!index)
        return skiff_err_wrap(err, "OCI layout %s (want index.json and blobs/)", j->src);
    json_t *ms = json_object_get(index, "manifests");
    json_t *chosen = NULL;
    char tags[512] = "";
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        const char *name = json_string_value(
            json_object_get(json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
        if (name) {
            size_t tl = strlen(tags);
            snprintf(tags + tl, sizeof(tags) - tl, "%s%s", tl ? ", " : "", name);
        }
        if (j->ref.tag[0] ? (name && !strcmp(name, j->ref.tag)) : json_array_size(ms) == 1)
            chosen = m;
    }
    if (!chosen) {
        int rv;
        if (j->ref.tag[0])
            rv = skiff_error(err, 0, "no image tagged '%s' in %s (tags: %s)", j->ref.tag, j->src,
                             tags[0] ? tags : "none");
        else
            rv = skiff_error(err, 0, "%s holds %zu images: name one with oci:%s:TAG (tags: %s)", j->src,
                             json_array_size(ms), j->src, tags[0] ? tags : "none");
        json_decref(index);
        return rv;
    }
    char digest[SKIFF_DIGEST_LEN];
    const char *d = json_string_value(json_object_get(chosen, "digest"));
    const char *mt = json_string_value(json_object_get(chosen, "mediaType"));
    if (!d || !skiff_ref_valid_digest(d)) {
        json_decref(index);
        return skiff_error(err, 0, "%s: index entry without a sha256 digest", p);
    }
    snprintf(digest, sizeof(digest), "%s", d);
    bool nested = mt && (!strcmp(mt, MT_OCI_INDEX) || !strcmp(mt, MT_DOCKER_LIST));
    char mtbuf[128];
    snprintf(mtbuf, sizeof(mtbuf), "%s", mt ? mt : ""); /* mt lives in index */
    json_decref(index);
    struct layer b;
    if (layout_blob(j, digest, false, &b, err) < 0)
        return -1;
    json_t *doc = load_json_file(j, b.path, digest, err);
    if (!doc)
        return -1;
    if (nested || is_index(mtbuf, doc)) {
        int rv = pick_platform(j, doc, digest, err);
        json_decref(doc);
        if (rv < 0 || layout_blob(j, digest, false, &b, err) < 0)
            return -1;
        doc = load_json_file(j, b.path, digest, err);
        if (!doc)
            return -1;
    }
    snprintf(j->manifest_digest, sizeof(j->manifest_digest), "%s", digest);
    int rv = use_manifest(j, doc, layout_blob, err);
    json_decref(doc);
    return rv;
}

static int plan_dir(struct job *j, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/manifest.json", j->src);
    if (access(p, F_OK) < 0)
        return skiff_error(err, errno, "dir:%s: not a directory (dir: takes a root filesystem tree or skopeo's dir layout)",
                           j->src);
    json_t *doc = load_json_file(j, p, NULL, err);
    if (!doc)
        return -1;
    if (is_index("", doc)) {
        json_decref(doc);
        return skiff_error(err, 0, "dir:%s holds a multi-platform list; copy one platform with skopeo --override-arch", j->src);
    }
    int rv = use_manifest(j, doc, layout_blob, err);
    json_decref(doc);
    return rv;
}

/* docker save: manifest.json = [{"Config": "x.json", "RepoTags": [...], "Layers": ["a/layer.tar"]}] */
static int plan_docker_archive(struct job *j, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/manifest.json", j->src);
    size_t len;
    cleanup_free char *buf = read_small(j, p, NULL, &len, err);
    if (!buf)
        return skiff_err_wrap(err, "docker-archive:%s (not a 'docker save' archive?)", j->ref.path);
    json_error_t je;
    json_t *arr = json_loadb(buf, len, 0, &je);
    json_t *m = json_array_get(arr, 0);
    if (!m || json_array_size(arr) != 1) {
        size_t n = json_array_size(arr);
        json_decref(arr);
        return skiff_error(err, 0, "docker-archive:%s: manifest.json holds %zu images; skiff imports archives of one image",
                           j->ref.path, n);
    }
    const char *config = json_string_value(json_object_get(m, "Config"));
    json_t *layers = json_object_get(m, "Layers");
    if (!config || !json_is_array(layers)) {
        json_decref(arr);
        return skiff_error(err, 0, "docker-archive:%s: manifest.json without Config or Layers", j->ref.path);
    }
    /* Names in manifest.json are paths inside the extracted archive; they
     * pass the same checks as layer entries. */
    int rv = 0;
    if (strstr(config, "..") || config[0] == '/') {
        rv = skiff_error(err, 0, "docker-archive: bad config path '%s'", config);
        goto out;
    }
    snprintf(p, sizeof(p), "%s/%s", j->src, config);
    size_t clen;
    cleanup_free char *cbuf = read_small(j, p, NULL, &clen, err);
    if (!cbuf) {
        rv = -1;
        goto out;
    }
    j->config = parse_json(cbuf, clen, "image config", err);
    if (!j->config) {
        rv = -1;
        goto out;
    }
    j->nlayers = json_array_size(layers);
    j->layers = calloc(j->nlayers ? j->nlayers : 1, sizeof(*j->layers));
    if (!j->layers) {
        rv = skiff_error(err, ENOMEM, "layers");
        goto out;
    }
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        const char *lp = json_string_value(l);
        if (!lp || strstr(lp, "..") || lp[0] == '/') {
            rv = skiff_error(err, 0, "docker-archive: bad layer path '%s'", lp ? lp : "(null)");
            goto out;
        }
        if (fmt_path(j->layers[i].path, sizeof(j->layers[i].path), err, "%s/%s", j->src, lp) < 0) {
            rv = -1;
            goto out;
        }
        /* Newer docker save names layers blobs/sha256/<hex>: check those. */
        if (!strncmp(lp, "blobs/sha256/", 13) && strlen(lp) == 13 + 64)
            snprintf(j->layers[i].digest, sizeof(j->layers[i].digest), "sha256:%s", lp + 13);
    }
out:
    json_decref(arr);
    return rv;
}

/* Extracts an archive (docker-archive, oci-archive) into work/src with the
 * same checks as a layer, so names in it cannot escape either. */
static int extract_source(struct job *j, skiff_err *err)
{
    if (fmt_path(j->src, sizeof(j->src), err, "%s/src", j->work) < 0)
        return -1;
    if (mkdir(j->src, 0700) < 0)
        return skiff_error(err, errno, "mkdir %s", j->src);
    cleanup_close int fd = open(j->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", j->src);
    struct skiff_layer_stats st;
    if (skiff_layer_apply(fd, j->ref.path, NULL, 0, &st, err) < 0)
        return skiff_err_wrap(err, "extract %s", j->ref.path);
    j->srcfd = fd;
    fd = -1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct fetch_progress {
    struct job *j;
    struct layer *l;
};

static int fetch_progress_cb(void *ctx, unsigned long long bytes)
{
    struct fetch_progress *fp = ctx;
    pthread_mutex_lock(&fp->j->mu);
    fp->l->avail = bytes;
    bool abort = fp->j->fetch_abort;
    pthread_cond_broadcast(&fp->j->cv);
    pthread_mutex_unlock(&fp->j->mu);
    return abort ? -1 : 0;
}

/* Downloads the pending layers in order into the cache (temp name, digest
 * checked, rename), publishing progress for the applier. */
static void *fetch_main(void *arg)
{
    struct job *j = arg;
    for (size_t i = 0; i < j->nlayers; i++) {
        struct layer *l = &j->layers[i];
        if (l->state != BLOB_PENDING)
            continue;
        skiff_err e;
        skiff_err_clear(&e);
        snprintf(l->tmp, sizeof(l->tmp), "%s.tmp.XXXXXX", l->path);
        int fd = mkostemp(l->tmp, O_CLOEXEC);
        pthread_mutex_lock(&j->mu);
        if (fd < 0) {
            skiff_error(&e, errno, "create %s", l->tmp);
            snprintf(l->error, sizeof(l->error), "%s", e.msg);
            l->state = BLOB_FAILED;
        } else {
            l->state = BLOB_RUNNING;
        }
        bool stop = fd < 0 || j->fetch_abort;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        if (stop) {
            if (fd >= 0) {
                close(fd);
                unlink(l->tmp);
            }
            break;
        }
        double t0 = now_s();
        struct fetch_progress fp = {j, l};
        int rv = skiff_registry_blob_progress(j->reg, l->digest, fd, fetch_progress_cb, &fp, &e);
        if (rv == 0 && close(fd) < 0)
            rv = skiff_error(&e, errno, "write %s", l->tmp);
        else if (rv < 0)
            close(fd);
        if (rv == 0 && j->o && j->o->progress)
            fprintf(stderr, "skiff: fetched layer %.19s %8.1f MB %5.2f s\n", l->digest, (double)l->avail / 1e6,
                    now_s() - t0);
        pthread_mutex_lock(&j->mu);
        if (rv == 0 && rename(l->tmp, l->path) < 0)
            rv = skiff_error(&e, errno, "publish %s", l->path);
        if (rv < 0) {
            unlink(l->tmp);
            snprintf(l->error, sizeof(l->error), "%s", e.msg);
            l->state = BLOB_FAILED;
        } else {
            l->state = BLOB_DONE;
            char **nf = realloc(j->fetched, (j->nfetched + 1) * sizeof(*nf));
            if (nf) {
                j->fetched = nf;
                if ((nf[j->nfetched] = strdup(l->path)))
                    j->nfetched++;
            }
        }
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        if (rv < 0)
            break;
    }
    pthread_mutex_lock(&j->mu);
    j->fetch_over = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void fetch_stop(struct job *j)
{
    if (!j->fetching)
        return;
    pthread_mutex_lock(&j->mu);
    j->fetch_abort = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->fetch_tid, NULL);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    j->fetching = false;
}

/* wait_more for skiff_layer_apply_stream: blocks until the layer file grows
 * past have, or its download ends. */
static int fetch_wait(void *ctx, unsigned long long have)
{
    struct fetch_progress *fp = ctx;
    struct job *j = fp->j;
    struct layer *l = fp->l;
    pthread_mutex_lock(&j->mu);
    while (l->avail <= have && l->state == BLOB_RUNNING && !j->fetch_abort)
        pthread_cond_wait(&j->cv, &j->mu);
    int rv = l->avail > have ? 1 : l->state == BLOB_DONE ? 0 : -1;
    pthread_mutex_unlock(&j->mu);
    return rv;
}

/* Opens a layer the fetcher is downloading (or has): waits until it started. */
static int open_fetched(struct job *j, struct layer *l, skiff_err *err)
{
    pthread_mutex_lock(&j->mu);
    while (l->state == BLOB_PENDING && !j->fetch_over)
        pthread_cond_wait(&j->cv, &j->mu);
    int fd = -1;
    if (l->state == BLOB_RUNNING || l->state == BLOB_DONE) {
        const char *p = l->state == BLOB_DONE ? l->path : l->tmp;
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            skiff_error(err, errno, "open %s", p);
    } else {
        skiff_error(err, 0, "download: %s", l->state == BLOB_FAILED ? l->error : "not started");
    }
    pthread_mutex_unlock(&j->mu);
    return fd;
}

/* After a streamed layer was applied: its download must also have ended well
 * (the tar may end before the blob does; the digest covers all of it). */
static int fetched_ok(struct job *j, struct layer *l, skiff_err *err)
{
    pthread_mutex_lock(&j->mu);
    while (l->state == BLOB_RUNNING && !j->fetch_abort)
        pthread_cond_wait(&j->cv, &j->mu);
    int rv = l->state == BLOB_DONE ? 0 : skiff_error(err, 0, "download: %s", l->state == BLOB_FAILED ? l->error : "stopped");
    pthread_mutex_unlock(&j->mu);
    return rv;
}

static int apply_layers(struct job *j, int rootfd, skiff_err *err)
{
    unsigned long devices = 0, setid = 0, xattrs = 0;
    bool pending = false;
    for (size_t i = 0; i < j->nlayers; i++)
        pending |= j->layers[i].remote;
    if (pending) {
        pthread_mutex_init(&j->mu, NULL);
        pthread_cond_init(&j->cv, NULL);
        int pe = pthread_create(&j->fetch_tid, NULL, fetch_main, j);
        if (pe != 0) {
            pthread_mutex_destroy(&j->mu);
            pthread_cond_destroy(&j->cv);
            return skiff_error(err, pe, "pthread_create");
        }
        j->fetching = true;
    }
    for (size_t i = 0; i < j->nlayers; i++) {
        struct layer *l = &j->layers[i];
        double t0 = now_s();
        struct skiff_layer_stats st;
        int rv;
        if (l->remote) {
            /* Streamed while it downloads; the fetcher checks the digest. */
            struct fetch_progress fp = {j, l};
            int bfd = open_fetched(j, l, err);
            rv = bfd < 0 ? -1
                         : skiff_layer_apply_stream(rootfd, bfd, l->path, NULL,
                                                    SKIFF_LAYER_WHITEOUTS | SKIFF_LAYER_OWNERS, fetch_wait, &fp,
                                                    &st, err);
            if (rv == 0)
                rv = fetched_ok(j, l, err);
            if (rv < 0) {
                fetch_stop(j); /* joined: l->state is ours to read now */
                if (l->state == BLOB_FAILED) /* the download's error is the cause */
                    skiff_error(err, 0, "download: %s", l->error);
                return skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, l->digest);
            }
        } else {
        const char *check = l->digest[0] && !l->verified ? l->digest : NULL;
        int bfd = open_source(j, l->path, err);
        rv = bfd < 0 ? -1
                         : skiff_layer_apply_fd(rootfd, bfd, l->path, check,
                                                SKIFF_LAYER_WHITEOUTS | SKIFF_LAYER_OWNERS, &st, err);
        if (rv < 0 && err->code == EBADMSG && j->ref.kind == SKIFF_REF_DOCKER && unlink(l->path) == 0) {
            size_t ml = strlen(err->msg);
            snprintf(err->msg + ml, sizeof(err->msg) - ml, "; removed the bad blob from the cache: run again to download it");
        }
        if (rv < 0) {
            fetch_stop(j);
            return skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, l->digest[0] ? l->digest : l->path);
        }
        }
        devices += st.devices_skipped;
        setid += st.setid_stripped;
        xattrs += st.xattrs_dropped;
        if (j->o && j->o->progress)
            fprintf(stderr, "skiff: layer %zu/%zu %.19s %8.1f MB %6lu entries %5.2f s\n", i + 1, j->nlayers,
                    l->digest[0] ? l->digest : "(no digest)", (double)st.bytes_in / 1e6, st.entries,
                    now_s() - t0);
    }
    fetch_stop(j);
    if (devices)
        warn(j, "skipped %lu device node(s) or socket(s): containers get their /dev from the runtime", devices);
    if (setid)
        warn(j, "stripped setuid/setgid bits from %lu file(s)", setid);
    if (xattrs)
        warn(j, "dropped %lu extended attribute(s) (file capabilities included)", xattrs);
    return 0;
}

/* ---- import ----------------------------------------------------------- */

static void job_free(struct job *j, bool failed)
{
    fetch_stop(j);
    if (j->srcfd >= 0)
        close(j->srcfd);
    for (size_t i = 0; i < j->nfetched; i++) {
        if (failed)
            unlink(j->fetched[i]);
        free(j->fetched[i]);
    }
    free(j->fetched);
    skiff_registry_close(j->reg);
    json_decref(j->config);
    free(j->layers);
    if (j->work[0]) {
        skiff_err e;
        skiff_remove_tree(j->work, &e);
    }
}

static int base_name_no_ext(const char *path, char *out, size_t n)
{
    char copy[SKIFF_PATH_MAX];
    snprintf(copy, sizeof(copy), "%s", path);
    size_t l = strlen(copy);
    while (l > 1 && copy[l - 1] == '/')
        copy[--l] = '\0';
    const char *b = basename(copy);
    size_t bl = strlen(b);
    if (bl > 4 && !strcmp(b + bl - 4, ".tar"))
        bl -= 4;
    return snprintf(out, n, "%.*s", (int)bl, b);
}

int skiff_image_default_name(const char *uri, char *out, size_t n, skiff_err *err)
{
    struct skiff_ref ref;
    if (skiff_ref_parse(uri, NULL, &ref, err) < 0)
        return -1;
    char name[1024];
    if (ref.kind == SKIFF_REF_DOCKER) {
        snprintf(name, sizeof(name), "%s", ref.image);
    } else {
        base_name_no_ext(ref.path, name, sizeof(name));
        if (ref.tag[0]) {
            size_t l = strlen(name);
            snprintf(name + l, sizeof(name) - l, "+%s", ref.tag);
        }
    }
    for (char *p = name; *p; p++)
        if (*p == ':' || *p == '/' || *p == '@')
            *p = '+';
    if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
        return skiff_error(err, 0, "%s: cannot derive an output name; give one with -o", uri);
    int w = snprintf(out, n, "%s.sqsh", name);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "output name");
    return 0;
}

static bool is_tmpfs(const char *path, unsigned long long *avail)
{
    struct statfs sf;
    if (statfs(path, &sf) < 0)
        return false;
    *avail = (unsigned long long)sf.f_bavail * (unsigned long long)sf.f_bsize;
    return sf.f_type == TMPFS_MAGIC;
}

/* Where the scratch tree goes. Unpacking ~7k files onto a disk filesystem
 * costs seconds (~2 s for a 200 MB tree here, under load) against ~0.4 s on
 * tmpfs, and the tree lives only until mksquashfs has read it. So with the
 * default temp_path (/tmp), a tmpfs is preferred: /tmp itself if it is one,
 * else /dev/shm when it has room for need bytes plus 1 GiB to spare (a tmpfs
 * is memory). Any other temp_path is used as set. */
static const char *scratch_dir(const struct skiff_config *cfg, unsigned long long need)
{
    const char *t = cfg->temp_path[0] ? cfg->temp_path : "/tmp";
    unsigned long long avail = 0;
    if (strcmp(t, "/tmp") != 0 || is_tmpfs(t, &avail))
        return t;
    if (is_tmpfs("/dev/shm", &avail) && avail >= need + (1ull << 30) && access("/dev/shm", W_OK) == 0)
        return "/dev/shm";
    return t;
}

static int make_work(struct job *j, unsigned long long need, skiff_err *err)
{
    char tmpl[SKIFF_PATH_MAX];
    if (snprintf(tmpl, sizeof(tmpl), "%s/skiff-import-XXXXXX", scratch_dir(j->cfg, need)) >= (int)sizeof(tmpl))
        return skiff_error(err, ENAMETOOLONG, "temp_path");
    if (!mkdtemp(tmpl))
        return skiff_error(err, errno, "mkdtemp %s (check temp_path)", tmpl);
    snprintf(j->work, sizeof(j->work), "%s", tmpl);
    return 0;
}

/* Room the unpacked layers may take: compressed layers grow ~3x. */
static unsigned long long unpacked_estimate(const struct job *j)
{
    unsigned long long sum = 0;
    for (size_t i = 0; i < j->nlayers; i++) {
        struct stat st;
        if (stat(j->layers[i].path, &st) == 0)
            sum += (unsigned long long)st.st_size;
    }
    return 3 * sum;
}

/* The import proper: plan, apply, squash into tmp_out (not renamed). */
/* dir:PATH is either skopeo's dir layout (manifest.json + blobs) or a plain
 * root filesystem tree (what `debootstrap` or a build script leaves). */
static bool is_plain_rootfs(const char *path)
{
    char p[SKIFF_PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof(p), "%s/manifest.json", path);
    if (lstat(p, &st) == 0)
        return false;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int import_to(struct job *j, const char *tmp_out, skiff_err *err)
{
    /* Archives are unpacked into the scratch dir first; the other sources are
     * planned first, so the scratch dir can be chosen knowing the layer sizes. */
    if (j->ref.kind == SKIFF_REF_OCI_ARCHIVE || j->ref.kind == SKIFF_REF_DOCKER_ARCHIVE) {
        struct stat st;
        if (stat(j->ref.path, &st) < 0)
            return skiff_error(err, errno, "%s", j->ref.path);
        if (make_work(j, 4ull * (unsigned long long)st.st_size, err) < 0)
            return -1;
    }
    if (j->ref.kind == SKIFF_REF_DIR && is_plain_rootfs(j->ref.path)) {
        /* A plain directory is already the root filesystem: squash it as it
         * is. Its files are the user's own, so there is nothing to neutralise
         * that the container's nosuid,nodev mounts do not already. */
        double t0 = now_s();
        if (skiff_squash_build(j->cfg, j->ref.path, tmp_out, err) < 0)
            return skiff_err_wrap(err, "dir:%s", j->ref.path);
        if (j->o && j->o->progress)
            fprintf(stderr, "skiff: squashfs (%s) %5.2f s\n", j->cfg->squash_compression, now_s() - t0);
        return 0;
    }
    int rv;
    switch (j->ref.kind) {
    case SKIFF_REF_DOCKER:
        rv = plan_registry(j, err);
        break;
    case SKIFF_REF_OCI:
        snprintf(j->src, sizeof(j->src), "%s", j->ref.path);
        rv = plan_oci(j, err);
        break;
    case SKIFF_REF_DIR:
        snprintf(j->src, sizeof(j->src), "%s", j->ref.path);
        rv = plan_dir(j, err);
        break;
    case SKIFF_REF_OCI_ARCHIVE:
        rv = extract_source(j, err);
        if (rv == 0)
            rv = plan_oci(j, err);
        break;
    case SKIFF_REF_DOCKER_ARCHIVE:
        rv = extract_source(j, err);
        if (rv == 0)
            rv = plan_docker_archive(j, err);
        break;
    default:
        rv = skiff_error(err, 0, "unknown source");
    }
    if (rv < 0)
        return -1;
    if (!j->work[0] && make_work(j, unpacked_estimate(j), err) < 0)
        return -1;

    char root[SKIFF_PATH_MAX + 16];
    snprintf(root, sizeof(root), "%s/rootfs", j->work);
    if (mkdir(root, 0755) < 0 || chmod(root, 0755) < 0)
        return skiff_error(err, errno, "mkdir %s", root);
    cleanup_close int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return skiff_error(err, errno, "open %s", root);
    if (apply_layers(j, rootfd, err) < 0)
        return -1;
    if (skiff_imgconfig_write(rootfd, j->config, j->o ? j->o->warn : NULL, j->o ? j->o->warn_ctx : NULL, err) < 0)
        return skiff_err_wrap(err, "image metadata");
    /* The compressed sources are not needed any more: free the scratch space
     * before mksquashfs needs memory (temp_path may be a tmpfs). */
    if (j->src[0] && !strncmp(j->src, j->work, strlen(j->work))) {
        skiff_err e;
        skiff_remove_tree(j->src, &e);
    }
    double t0 = now_s();
    if (skiff_squash_build(j->cfg, root, tmp_out, err) < 0)
        return -1;
    if (j->o && j->o->progress)
        fprintf(stderr, "skiff: squashfs (%s) %5.2f s\n", j->cfg->squash_compression, now_s() - t0);
    return 0;
}

/* Makes a temp file beside out_path. */
static int temp_beside(const char *out_path, char *tmp, size_t n, skiff_err *err)
{
    const char *slash = strrchr(out_path, '/');
    int w;
    if (slash)
        w = snprintf(tmp, n, "%.*s/.%s.tmp.XXXXXX", (int)(slash - out_path), out_path, slash + 1);
    else
        w = snprintf(tmp, n, ".%s.tmp.XXXXXX", out_path);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "%s", out_path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "create %s", tmp);
    close(fd);
    return 0;
}

static int import_ref(const struct skiff_config *cfg, const struct skiff_ref *ref, const char *out_path,
                      const struct skiff_import_opts *o, bool force, char *manifest_digest, skiff_err *err)
{
    struct job j;
    memset(&j, 0, sizeof(j));
    j.cfg = cfg;
    j.o = o;
    j.ref = *ref;
    j.srcfd = -1;
    set_arch(&j, o ? o->arch : NULL);
    char tmp[SKIFF_PATH_MAX];
    if (temp_beside(out_path, tmp, sizeof(tmp), err) < 0)
        return -1;
    int rv = import_to(&j, tmp, err);
    if (rv == 0 && chmod(tmp, 0644) < 0)
        rv = skiff_error(err, errno, "chmod %s", tmp);
    if (rv == 0) {
        if (force)
            rv = rename(tmp, out_path);
        else
            rv = renameat2(AT_FDCWD, tmp, AT_FDCWD, out_path, RENAME_NOREPLACE);
        if (rv < 0)
            rv = errno == EEXIST ? skiff_error(err, 0, "%s exists (use -f to replace it)", out_path)
                                 : skiff_error(err, errno, "publish %s", out_path);
    }
    if (rv < 0)
        unlink(tmp);
    if (rv == 0 && manifest_digest)
        snprintf(manifest_digest, SKIFF_DIGEST_LEN, "%s", j.manifest_digest);
    job_free(&j, rv < 0);
    return rv;
}

int skiff_image_import(const struct skiff_config *cfg, const char *uri, const char *out_path,
                       const struct skiff_import_opts *o, char *out, size_t outsz, skiff_err *err)
{
    struct skiff_ref ref;
    if (skiff_ref_parse(uri, cfg->default_registry, &ref, err) < 0)
        return -1;
    char name[SKIFF_PATH_MAX];
    if (!out_path) {
        if (skiff_image_default_name(uri, name, sizeof(name), err) < 0)
            return -1;
        out_path = name;
    }
    bool force = o && o->force;
    if (!force && access(out_path, F_OK) == 0)
        return skiff_error(err, 0, "%s exists (use -f to replace it)", out_path);
    if (import_ref(cfg, &ref, out_path, o, force, NULL, err) < 0)
        return skiff_err_wrap(err, "%s", uri);
    if (out && snprintf(out, outsz, "%s", out_path) >= (int)outsz)
        return skiff_error(err, ENAMETOOLONG, "output path");
    return 0;
}

/* ---- resolve (SPANK plugin) ------------------------------------------- */

static int key_hex(const char *text, char *out, skiff_err *err)
{
    char d[SKIFF_DIGEST_LEN];
    if (skiff_digest_buf(text, strlen(text), d, err) < 0)
        return -1;
    snprintf(out, 65, "%s", d + 7);
    return 0;
}

int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path,
                        size_t n, skiff_err *err)
{
    char uri[2048];
    switch (skiff_ref_classify(image_arg)) {
    case SKIFF_ARG_PATH:
        return skiff_squash_resolve_path(image_arg, sqsh_path, n, err);
    case SKIFF_ARG_SQSH_NAME:
        if (access(image_arg, F_OK) == 0)
            return skiff_error(err, 0, "'%s' looks like a file name: a local file needs a path with '/' (write ./%s)",
                               image_arg, image_arg);
        return skiff_error(err, 0, "no such file ./%s; a local file needs a path with '/' (./%s or an absolute path), an image needs docker://IMAGE[:TAG]",
                           image_arg, image_arg);
    case SKIFF_ARG_INVALID:
        return skiff_error(err, 0, "'%s' is neither a file path (start it with / or ./) nor an image reference (docker://[REGISTRY#]IMAGE[:TAG], oci:DIR, docker-archive:FILE, ...)",
                           image_arg ? image_arg : "");
    case SKIFF_ARG_BARE:
        snprintf(uri, sizeof(uri), "docker://%s", image_arg);
        break;
    case SKIFF_ARG_URI:
        snprintf(uri, sizeof(uri), "%s", image_arg);
        break;
    }
    struct skiff_ref ref;
    if (skiff_ref_parse(uri, cfg->default_registry, &ref, err) < 0)
        return -1;
    char canon[2048], arch[80];
    if (skiff_ref_canonical(&ref, canon, sizeof(canon), err) < 0)
        return -1;
    host_arch(arch, sizeof(arch));
    char images[SKIFF_PATH_MAX];
    if (skiff_cache_dir(cfg, "images", images, sizeof(images), err) < 0)
        return -1;

    /* Cache key. Registry: the manifest digest. For a tag that costs one
     * manifest GET (cheap next to an import), so a moved tag is noticed; when
     * the registry cannot be reached, the last image imported for the same
     * reference is used. Local sources: path + inode + mtime + size. */
    char keytext[4096], key[65], refkey[65];
    snprintf(keytext, sizeof(keytext), "ref|%s|%s", canon, arch);
    if (key_hex(keytext, refkey, err) < 0)
        return -1;
    char refpath[SKIFF_PATH_MAX + 80];
    snprintf(refpath, sizeof(refpath), "%s/ref-%s.sqsh", images, refkey);
    if (ref.kind == SKIFF_REF_DOCKER) {
        if (!ref.digest[0]) {
            struct skiff_registry *reg = NULL;
            cleanup_free char *body = NULL;
            size_t len;
            char mt[128], d[SKIFF_DIGEST_LEN];
            int rv = skiff_registry_open(&reg, cfg, &ref, err);
            if (rv == 0)
                rv = skiff_registry_manifest(reg, ref.tag, &body, &len, mt, sizeof(mt), d, err);
            skiff_registry_close(reg);
            if (rv < 0) {
                if (skiff_squash_is_image(refpath)) {
                    snprintf(sqsh_path, n, "%s", refpath);
                    return 0;
                }
                return skiff_err_wrap(err, "%s", uri);
            }
            snprintf(ref.digest, sizeof(ref.digest), "%s", d); /* pin what we saw */
        }
        snprintf(keytext, sizeof(keytext), "digest|%s|%s|%s", ref.registry, ref.digest, arch);
    } else {
        char real[PATH_MAX];
        struct stat st;
        if (!realpath(ref.path, real) || stat(real, &st) < 0)
            return skiff_error(err, errno, "%s", uri);
        if (S_ISDIR(st.st_mode)) {
            char idx[PATH_MAX + 16];
            snprintf(idx, sizeof(idx), "%s/%s", real, ref.kind == SKIFF_REF_OCI ? "index.json" : "manifest.json");
            if (stat(idx, &st) < 0)
                return skiff_error(err, errno, "%s: %s", uri, idx);
        }
        fmt_path(keytext, sizeof(keytext), err, "local|%d|%s|%s|%lu|%lu|%lld|%lld.%09ld|%s", (int)ref.kind, real,
                 ref.tag, (unsigned long)st.st_dev, (unsigned long)st.st_ino, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, arch);
    }
    if (key_hex(keytext, key, err) < 0)
        return -1;
    char path[SKIFF_PATH_MAX + 80], lockp[SKIFF_PATH_MAX + 80];
    snprintf(path, sizeof(path), "%s/%s.sqsh", images, key);
    snprintf(lockp, sizeof(lockp), "%s/%s.lock", images, key);
    cleanup_close int lock = skiff_cache_lock(lockp, err);
    if (lock < 0)
        return -1;
    if (!skiff_squash_is_image(path)) {
        struct skiff_import_opts o = {.force = true};
        if (import_ref(cfg, &ref, path, &o, true, NULL, err) < 0) {
            /* Waiters holding this inode's lock still serialise correctly: they
             * re-check for the image and publish by rename. */
            unlink(lockp);
            return skiff_err_wrap(err, "import %s", uri);
        }
    }
    if (ref.kind == SKIFF_REF_DOCKER) {
        /* ref-<key>.sqsh: a hard link to the last image of this reference, for
         * when the registry is unreachable later. */
        char tmp[SKIFF_PATH_MAX + 100];
        snprintf(tmp, sizeof(tmp), "%s.tmp.%d", refpath, (int)getpid());
        unlink(tmp);
        /* rename() of two links to one inode does nothing: unlink tmp after. */
        if (link(path, tmp) == 0) {
            if (rename(tmp, refpath) < 0) {
                /* best effort: only the offline fallback is lost */
            }
            unlink(tmp);
        }
    }
    if (snprintf(sqsh_path, n, "%s", path) >= (int)n)
        return skiff_error(err, ENAMETOOLONG, "%s", path);
    return 0;
}
