/* Import sources: what an image is made of (image config, layers in order),
 * read from a registry (registry.h), an OCI layout, skopeo's dir layout, or
 * a docker-save or OCI archive (unpacked with the checks of a layer, so its
 * names cannot escape); see import_int.h. */
#include "import_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "atomicfile.h"
#include "cache.h"
#include "fdio.h"
#include "fsutil.h"
#include "layer.h"
#include "registry.h"
#include "rootfs.h"

/* ---- platform --------------------------------------------------------- */

void skiff_source_host_arch(char *arch, size_t n)
{
    struct utsname u;
    const char *m = uname(&u) == 0 ? u.machine : "x86_64";
    const char *a = !strcmp(m, "x86_64")                       ? "amd64"
                    : !strcmp(m, "aarch64")                    ? "arm64"
                    : !strncmp(m, "armv7", 5)                  ? "arm"
                    : !strcmp(m, "i686") || !strcmp(m, "i386") ? "386"
                                                               : m;
    snprintf(arch, n, "%s", a);
}

void skiff_source_set_arch(struct skiff_import_job *j, const char *want)
{
    if (!want || !*want) {
        skiff_source_host_arch(j->arch, sizeof(j->arch));
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
static int pick_platform(struct skiff_import_job *j, json_t *index, char *digest, skiff_err *err)
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
        snprintf(seen + sl, sizeof(seen) - sl, "%s%s/%s%s%s", sl ? ", " : "", os, arch, var ? "/" : "", var ? var : "");
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
 * resolve as if that dir were "/" (rootfs.h), so a symlink in the archive
 * cannot make skiff read a host file, and only a regular file is read
 * (O_NONBLOCK: a FIFO cannot block the open); elsewhere (a layout the user
 * names) plainly. */
int skiff_source_open(const struct skiff_import_job *j, const char *path, skiff_err *err)
{
    size_t n = strlen(j->src);
    if (j->srcfd >= 0 && n && !strncmp(path, j->src, n) && path[n] == '/') {
        const char *rel = path + n + 1;
        int fd = skiff_root_open(j->srcfd, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, err);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
            close(fd);
            return skiff_error(err, 0, "%s is not a regular file", rel);
        }
        return fd;
    }
    return skiff_open_regular(path, 0, err); /* (a FIFO in a layout: refused, not waited on) */
}

/* Reads a whole (small) file, checking its digest when one is given. */
static char *read_small(const struct skiff_import_job *j, const char *path, const char *digest, size_t *len,
                        skiff_err *err)
{
    cleanup_close int fd = skiff_source_open(j, path, err);
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
typedef int (*blob_fn)(struct skiff_import_job *j, const char *digest, bool layer, struct skiff_import_layer *out,
                       skiff_err *err);

static int use_manifest(struct skiff_import_job *j, json_t *man, blob_fn blob, skiff_err *err)
{
    json_t *sv = json_object_get(man, "schemaVersion");
    if (json_integer_value(sv) == 1)
        return skiff_error(err, 0,
                           "Docker schema 1 manifests are not supported (push the image again with a current client)");
    json_t *cfgd = json_object_get(man, "config");
    const char *cdig = json_string_value(json_object_get(cfgd, "digest"));
    json_t *layers = json_object_get(man, "layers");
    if (!cdig || !json_is_array(layers))
        return skiff_error(err, 0, "manifest without config or layers");
    if (!skiff_ref_valid_digest(cdig))
        return skiff_error(err, 0, "config digest '%s' is not sha256", cdig);
    snprintf(j->config_digest, sizeof(j->config_digest), "%s", cdig);
    struct skiff_import_layer cl;
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

void skiff_source_fetched(struct skiff_import_job *j, const char *path)
{
    char **nf = realloc(j->fetched, (j->nfetched + 1) * sizeof(*nf));
    if (nf) {
        j->fetched = nf;
        if ((nf[j->nfetched] = strdup(path)))
            j->nfetched++;
    }
}

/* ---- registry source -------------------------------------------------- */

static int registry_blob(struct skiff_import_job *j, const char *digest, bool layer, struct skiff_import_layer *out,
                         skiff_err *err)
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
    /* the image config, now (layers were left to the fetcher above); not
     * synced: a cached blob is checked against its digest when read */
    struct skiff_atomic blob;
    if (skiff_atomic_begin(&blob, out->path, NULL, 0600, SKIFF_ATOMIC_NOSYNC, err) < 0)
        return -1;
    if (skiff_registry_blob(j->reg, digest, blob.fd, err) < 0) {
        skiff_atomic_abort(&blob);
        return -1;
    }
    if (skiff_atomic_commit(&blob, err) < 0)
        return -1;
    out->verified = true;
    skiff_source_fetched(j, out->path);
    return 0;
}

/* A manifest by reference. One named by its digest is kept in the blob
 * cache once fetched and read back from there (checked against the
 * digest): a lazy attempt that finds the image too small for lazy_min_size
 * has just fetched the manifest the full import then needs. Its media
 * type is then the document's own (is_index looks there too). Like a
 * layer, it is one of the blobs a failed import removes (a lazy attempt
 * ends as a success here, so the full import after it still finds it). */
static int get_manifest(struct skiff_import_job *j, const char *reference, char **body, size_t *len, char *mt,
                        size_t mtlen, char digest[SKIFF_DIGEST_LEN], skiff_err *err)
{
    char path[SKIFF_PATH_MAX];
    skiff_err e;
    bool pinned =
        skiff_ref_valid_digest(reference) && skiff_cache_blob_path(j->cfg, reference, path, sizeof(path), &e) == 0;
    if (pinned) {
        *body = skiff_read_file(path, 0, 4u << 20, len, &e);
        if (*body && skiff_digest_buf(*body, *len, digest, &e) == 0 && !strcmp(digest, reference)) {
            snprintf(mt, mtlen, "%s", "");
            skiff_source_fetched(j, path); /* an import that fails takes it away with it */
            return 0;
        }
        free(*body);
        *body = NULL;
    }
    if (skiff_registry_manifest(j->reg, reference, body, len, mt, mtlen, digest, err) < 0)
        return -1;
    /* best effort: a failed write only costs the next plan its request */
    if (pinned && !strcmp(digest, reference) &&
        skiff_atomic_write(path, *body, *len, 0600, SKIFF_ATOMIC_NOSYNC, &e) == 0)
        skiff_source_fetched(j, path);
    return 0;
}

static int plan_registry(struct skiff_import_job *j, skiff_err *err)
{
    if (skiff_registry_open(&j->reg, j->cfg, &j->ref, err) < 0)
        return -1;
    if (j->o && j->o->deadline_ms > 0)
        skiff_registry_set_defaults(j->reg, &(struct skiff_fetch_opts){.deadline_ms = j->o->deadline_ms});
    const char *reference = j->ref.digest[0] ? j->ref.digest : j->ref.tag;
    char mt[128], digest[SKIFF_DIGEST_LEN];
    cleanup_free char *body = NULL;
    size_t len;
    if (get_manifest(j, reference, &body, &len, mt, sizeof(mt), digest, err) < 0)
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
        if (get_manifest(j, pick, &body, &len, mt, sizeof(mt), digest, err) < 0)
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

static int layout_blob(struct skiff_import_job *j, const char *digest, bool layer, struct skiff_import_layer *out,
                       skiff_err *err)
{
    (void)layer;
    int w;
    if (j->ref.kind == SKIFF_REF_DIR)
        w = snprintf(out->path, sizeof(out->path), "%s/%s", j->src, digest + 7);
    else
        w = snprintf(out->path, sizeof(out->path), "%s/blobs/sha256/%s", j->src, digest + 7);
    if (w < 0 || (size_t)w >= sizeof(out->path))
        return skiff_error(err, ENAMETOOLONG, "blob path");
    int fd = skiff_source_open(j, out->path, err);
    if (fd < 0)
        return skiff_err_wrap(err, "blob");
    close(fd);
    return 0;
}

static json_t *load_json_file(const struct skiff_import_job *j, const char *path, const char *digest, skiff_err *err)
{
    size_t len;
    cleanup_free char *buf = read_small(j, path, digest, &len, err);
    if (!buf)
        return NULL;
    return parse_json(buf, len, path, err);
}

static int plan_oci(struct skiff_import_job *j, skiff_err *err)
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
        const char *name =
            json_string_value(json_object_get(json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
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
    struct skiff_import_layer b;
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

static int plan_dir(struct skiff_import_job *j, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/manifest.json", j->src);
    if (access(p, F_OK) < 0)
        return skiff_error(
            err, errno, "dir:%s: not a directory (dir: takes a root filesystem tree or skopeo's dir layout)", j->src);
    json_t *doc = load_json_file(j, p, NULL, err);
    if (!doc)
        return -1;
    if (is_index("", doc)) {
        json_decref(doc);
        return skiff_error(err, 0, "dir:%s holds a multi-platform list; copy one platform with skopeo --override-arch",
                           j->src);
    }
    int rv = use_manifest(j, doc, layout_blob, err);
    json_decref(doc);
    return rv;
}

/* docker save: manifest.json = [{"Config": "x.json", "RepoTags": [...], "Layers": ["a/layer.tar"]}] */
static int plan_docker_archive(struct skiff_import_job *j, skiff_err *err)
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
        return skiff_error(err, 0,
                           "docker-archive:%s: manifest.json holds %zu images; skiff imports archives of one image",
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
    /* before the first goto: jumping over a cleanup variable's
     * initialisation freed whatever its stack slot held */
    cleanup_free char *cbuf = NULL;
    if (strstr(config, "..") || config[0] == '/') {
        rv = skiff_error(err, 0, "docker-archive: bad config path '%s'", config);
        goto out;
    }
    snprintf(p, sizeof(p), "%s/%s", j->src, config);
    size_t clen;
    cbuf = read_small(j, p, NULL, &clen, err);
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
        if (skiff_fmt_path(j->layers[i].path, sizeof(j->layers[i].path), err, "%s/%s", j->src, lp) < 0) {
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
static int extract_source(struct skiff_import_job *j, skiff_err *err)
{
    if (skiff_fmt_path(j->src, sizeof(j->src), err, "%s/src", j->work) < 0)
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

/* ---- the source's plan ---- */

int skiff_source_plan(struct skiff_import_job *j, skiff_err *err)
{
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
    return rv;
}
