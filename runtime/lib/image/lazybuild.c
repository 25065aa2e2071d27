/* A lazy image made from an image source (lazy.h): the source is planned
 * as an import plans it (source.c: manifest, config, layers), each layer
 * is indexed in one streaming pass (a registry blob flows from the
 * download straight into the index pass through a pipe: nothing of it is
 * stored), the indexes are merged into the tree and the skeleton is
 * written; the image's directory is published by rename. Indexes are kept
 * by layer digest (cache_path/lazy-index), so a layer shared by images is
 * indexed once. */
#include "import_int.h"
#include "lazy_int.h"
#include "layer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "cache.h"
#include "clock.h"
#include "fdio.h"
#include "fsutil.h"
#include "imgconfig.h"
#include "registry.h"

struct download {
    struct skiff_registry *reg;
    const char *digest;
    int fd;
    int rc;
    skiff_err err;
};

static int to_pipe(void *ctx, const void *buf, size_t n)
{
    const struct download *d = ctx;
    return skiff_write_all(d->fd, buf, n);
}

static void *download_main(void *arg)
{
    struct download *d = arg;
    /* the index pass may stop reading (a layer it cannot index): the
     * write then fails with EPIPE instead of killing the process */
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, NULL);
    skiff_err_clear(&d->err);
    /* the whole blob as a range: retried and resumed where it was cut;
     * the index pass checks its digest */
    d->rc = skiff_registry_blob_range(d->reg, d->digest, 0, 0, to_pipe, d, NULL, &d->err);
    close(d->fd);
    return NULL;
}

/* Indexes layer l into path: from the blob on disk, or streamed from the
 * registry. */
static int index_layer(struct skiff_import_job *j, struct skiff_import_layer *l, const char *path, skiff_err *err)
{
    const unsigned flags = SKIFF_LAYER_WHITEOUTS | SKIFF_LAYER_OWNERS;
    if (!l->remote) {
        int fd = skiff_source_open(j, l->path, err);
        return fd < 0 ? -1 : lz_index_layer(fd, l->digest, flags, path, err);
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "pipe");
    struct download d = {.reg = j->reg, .digest = l->digest, .fd = p[1]};
    pthread_t t;
    int pe = pthread_create(&t, NULL, download_main, &d);
    if (pe != 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, pe, "pthread_create");
    }
    int rv = lz_index_layer(p[0], l->digest, flags, path, err);
    pthread_join(t, NULL);
    /* the download's failure is the cause when both failed (the index pass
     * then saw a short stream), unless the pass refused the layer first */
    if (d.rc < 0 && (rv == 0 || err->code != ENOTSUP)) {
        *err = d.err;
        return skiff_err_wrap(err, "download");
    }
    return rv;
}

static int write_text(const char *dir, const char *name, const char *data, size_t len, skiff_err *err)
{
    char p[SKIFF_PATH_MAX + 32];
    if (skiff_fmt_path(p, sizeof(p), err, "%s/%s", dir, name) < 0)
        return -1;
    return skiff_atomic_write(p, data, len, 0644, SKIFF_ATOMIC_NOSYNC, err);
}

/* The index at from as dir/layer-N.idx: a hard link, or a copy on another
 * filesystem. */
static int place_index(const char *from, const char *dir, size_t i, skiff_err *err)
{
    char to[SKIFF_PATH_MAX + 32];
    if (skiff_fmt_path(to, sizeof(to), err, "%s/layer-%zu.idx", dir, i) < 0)
        return -1;
    if (link(from, to) == 0)
        return 0;
    size_t len;
    cleanup_free char *data = skiff_read_file(from, 0, (size_t)1 << 34, &len, err);
    if (!data)
        return -1;
    return skiff_atomic_write(to, data, len, 0600, SKIFF_ATOMIC_NOSYNC, err);
}

static int write_plan(struct skiff_import_job *j, const char *dir, const struct lz_index *ix, size_t cfg_len,
                      size_t env_len, const char *extras, size_t extras_len, skiff_err *err)
{
    json_t *root = json_object(), *layers = json_array();
    char src[SKIFF_PATH_MAX];
    /* (freed at out: a cleanup variable would be jumped over by the gotos) */
    char *text = NULL;
    int rv = -1;
    if (!root || !layers)
        goto nomem;
    if (j->ref.kind == SKIFF_REF_DOCKER) {
        /* the fetcher asks the repository for blobs only; the manifest it
         * was made of is pinned all the same */
        const struct skiff_ref *r = &j->ref;
        if (snprintf(src, sizeof(src), "docker://%s%s%s#%s@%s", r->user, r->user[0] ? "@" : "", r->registry,
                     r->repository, j->manifest_digest) >= (int)sizeof(src)) {
            skiff_error(err, ENAMETOOLONG, "lazy plan: the image's name");
            goto out;
        }
    } else {
        snprintf(src, sizeof(src), "local");
    }
    /* the data file's name: what it holds (the layers and the image's
     * own files), so images that serve the same bytes share one */
    struct skiff_sha256 h;
    char key[SKIFF_DIGEST_LEN];
    if (skiff_sha256_init(&h, err) < 0)
        goto out;
    for (size_t i = 0; i < j->nlayers; i++)
        skiff_sha256_update(&h, ix[i].digest, strlen(ix[i].digest));
    skiff_sha256_update(&h, extras, extras_len);
    skiff_sha256_final(&h, key);
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "key", json_stringn(key + 7, 20));
    json_object_set_new(root, "source", json_string(src));
    json_object_set_new(root, "manifest", json_string(j->manifest_digest));
    json_object_set_new(root, "config_len", json_integer((json_int_t)cfg_len));
    json_object_set_new(root, "environment_len", json_integer((json_int_t)env_len));
    for (size_t i = 0; i < j->nlayers; i++) {
        json_t *l = json_object();
        if (!l)
            goto nomem;
        json_object_set_new(l, "digest", json_string(ix[i].digest));
        json_object_set_new(l, "size", json_integer((json_int_t)ix[i].csize));
        if (j->ref.kind != SKIFF_REF_DOCKER) {
            char real[SKIFF_PATH_MAX];
            if (!realpath(j->layers[i].path, real)) {
                json_decref(l);
                skiff_error(err, errno, "%s", j->layers[i].path);
                goto out;
            }
            json_object_set_new(l, "blob", json_string(real));
        }
        json_array_append_new(layers, l);
    }
    json_object_set(root, "layers", layers);
    text = json_dumps(root, JSON_INDENT(1));
    if (!text)
        goto nomem;
    rv = write_text(dir, "plan", text, strlen(text), err);
    goto out;
nomem:
    skiff_error(err, ENOMEM, "lazy plan");
out:
    free(text);
    json_decref(layers);
    json_decref(root);
    return rv;
}

/* The tree, the skeleton, the image's files and the plan, into dir. */
static int assemble(struct skiff_import_job *j, char **idx_paths, const char *dir, skiff_err *err)
{
    struct lz_index *ix = calloc(j->nlayers, sizeof(*ix));
    uint64_t *base = calloc(j->nlayers, sizeof(*base));
    mode_t um = umask(0);
    umask(um);
    struct lz_tree *t = lz_tree_new(geteuid() == 0, um);
    char *config = NULL, *env = NULL;
    size_t cfg_len = 0, env_len = 0;
    int rv = -1;
    if (!ix || !base || !t) {
        skiff_error(err, ENOMEM, "lazy image");
        goto out;
    }
    for (size_t i = 0; i < j->nlayers; i++)
        ix[i].fd = -1;
    for (size_t i = 0; i < j->nlayers; i++) {
        if (lz_index_load(idx_paths[i], LZ_LOAD_ENTRIES, &ix[i], err) < 0)
            goto out;
        if (lz_tree_apply(t, &ix[i], (uint32_t)i, err) < 0) {
            skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, j->layers[i].digest);
            goto out;
        }
        /* the entries are in the tree now */
        free(ix[i].entries);
        free(ix[i].strings);
        ix[i].entries = NULL;
        ix[i].strings = NULL;
    }
    if (skiff_imgconfig_render(j->config, j->o ? j->o->warn : NULL, j->o ? j->o->warn_ctx : NULL, &config, &cfg_len,
                               &env, &env_len, err) < 0 ||
        lz_tree_add_imgconfig(t, 0, cfg_len, env_len, NULL, err) < 0 ||
        write_text(dir, "config.json", config, cfg_len, err) < 0 ||
        write_text(dir, "environment", env, env_len, err) < 0)
        goto out;
    uint64_t at = (cfg_len + env_len + 4095) & ~4095ull;
    for (size_t i = 0; i < j->nlayers; i++) {
        base[i] = at;
        at = (at + ix[i].usize + 4095) & ~4095ull;
    }
    char skel[SKIFF_PATH_MAX + 16];
    if (skiff_fmt_path(skel, sizeof(skel), err, "%s/root.sqsh", dir) < 0 ||
        lz_skel_write(t, base, (uint32_t)j->nlayers, skel, err) < 0)
        goto out;
    for (size_t i = 0; i < j->nlayers; i++)
        if (place_index(idx_paths[i], dir, i, err) < 0)
            goto out;
    char *both = malloc(cfg_len + env_len + 1);
    if (!both) {
        skiff_error(err, ENOMEM, "lazy plan");
        goto out;
    }
    memcpy(both, config, cfg_len);
    memcpy(both + cfg_len, env, env_len);
    rv = write_plan(j, dir, ix, cfg_len, env_len, both, cfg_len + env_len, err);
    free(both);
out:
    for (size_t i = 0; ix && i < j->nlayers; i++)
        lz_index_free(&ix[i]);
    free(ix);
    free(base);
    free(config);
    free(env);
    lz_tree_free(t);
    return rv;
}

static int probe_sink(void *ctx, const void *buf, size_t n)
{
    (void)buf;
    *(size_t *)ctx += n;
    return 0;
}

/* A registry that ignores Range (or a proxy in front of it that does)
 * would send a whole layer for every span: found out with one byte. */
static int probe_ranges(struct skiff_import_job *j, skiff_err *err)
{
    struct probe {
        size_t got;
    } pr = {0};
    struct skiff_fetch_opts fo = {.retries = 1, .need_ranges = true, .deadline_ms = skiff_now_ms() + 30000};
    int rc = skiff_registry_blob_range(j->reg, j->layers[0].digest, 1, 1, probe_sink, &pr, &fo, err);
    if (rc < 0 && err->code == ENOTSUP)
        return -1;
    return rc < 0 ? skiff_err_wrap(err, "a Range request") : 0;
}

static int build(struct skiff_import_job *j, const char *out_dir, unsigned long long min_bytes, skiff_err *err)
{
    if (skiff_source_plan(j, err) < 0)
        return -1;
    if (j->nlayers == 0)
        return lz_error(err, ENOTSUP, "the image has no layers");
    unsigned long long total = 0;
    for (size_t i = 0; i < j->nlayers; i++)
        total += j->layers[i].size > 0 ? (unsigned long long)j->layers[i].size : 0;
    if (total < min_bytes)
        return lz_error(err, ENOTSUP, "its layers are %llu MB, less than lazy_min_size=%llu", total >> 20,
                        min_bytes >> 20);
    if (j->ref.kind == SKIFF_REF_DOCKER && probe_ranges(j, err) < 0)
        return -1;
    char idxdir[SKIFF_PATH_MAX];
    if (skiff_cache_dir(j->cfg, "lazy-index", idxdir, sizeof(idxdir), err) < 0)
        return -1;
    char **paths = calloc(j->nlayers, sizeof(*paths));
    char tmp[SKIFF_PATH_MAX + 32] = "";
    int rv = -1;
    if (!paths) {
        skiff_error(err, ENOMEM, "lazy image");
        goto out;
    }
    for (size_t i = 0; i < j->nlayers; i++) {
        struct skiff_import_layer *l = &j->layers[i];
        if (strncmp(l->digest, "sha256:", 7) != 0 || strlen(l->digest) != 71) {
            lz_error(err, ENOTSUP, "layer %zu has no sha256 digest", i + 1);
            goto out;
        }
        paths[i] = malloc(SKIFF_PATH_MAX + 80);
        if (!paths[i]) {
            skiff_error(err, ENOMEM, "lazy image");
            goto out;
        }
        snprintf(paths[i], SKIFF_PATH_MAX + 80, "%s/%s.idx", idxdir, l->digest + 7);
        struct lz_index probe;
        skiff_err ignore;
        if (lz_index_load(paths[i], 0, &probe, &ignore) == 0 && !strcmp(probe.digest, l->digest)) {
            lz_index_free(&probe);
            continue; /* indexed before (another image, another node) */
        }
        lz_index_free(&probe);
        double t0 = skiff_now_s();
        if (index_layer(j, l, paths[i], err) < 0) {
            skiff_err_wrap(err, "layer %zu/%zu %s", i + 1, j->nlayers, l->digest);
            goto out;
        }
        if (j->o && j->o->progress)
            fprintf(stderr, "skiff: indexed layer %zu/%zu %.19s %5.2f s\n", i + 1, j->nlayers, l->digest,
                    skiff_now_s() - t0);
    }
    if (skiff_fmt_path(tmp, sizeof(tmp), err, "%s.tmp.XXXXXX", out_dir) < 0)
        goto out;
    if (!mkdtemp(tmp)) {
        skiff_error(err, errno, "mkdtemp %s", tmp);
        tmp[0] = '\0';
        goto out;
    }
    if (assemble(j, paths, tmp, err) < 0)
        goto out;
    if (chmod(tmp, 0755) < 0 || rename(tmp, out_dir) < 0) {
        skiff_error(err, errno, "publish %s", out_dir);
        goto out;
    }
    tmp[0] = '\0';
    rv = 0;
out:
    if (tmp[0]) {
        skiff_err ignore;
        skiff_remove_tree(tmp, &ignore);
    }
    for (size_t i = 0; paths && i < j->nlayers; i++)
        free(paths[i]);
    free(paths);
    return rv;
}

int skiff_lazy_build(const struct skiff_config *cfg, const char *uri, const char *out_dir,
                     const struct skiff_lazy_build_opts *o, skiff_err *err)
{
    struct skiff_ref ref;
    if (skiff_ref_parse(uri, cfg->default_registry, &ref, err) < 0)
        return -1;
    if (ref.kind != SKIFF_REF_DOCKER && ref.kind != SKIFF_REF_OCI && ref.kind != SKIFF_REF_DIR)
        return lz_error(err, ENOTSUP, "%s: a lazy image needs a registry, an OCI layout or a skopeo dir", uri);
    struct skiff_import_opts io = {.progress = o && o->progress, .deadline_ms = o ? o->deadline_ms : 0};
    struct skiff_import_job j;
    memset(&j, 0, sizeof(j));
    j.cfg = cfg;
    j.o = &io;
    j.ref = ref;
    j.srcfd = -1;
    skiff_source_set_arch(&j, NULL);
    int rv = build(&j, out_dir, o ? o->min_bytes : 0, err);
    skiff_import_job_free(&j, false);
    return rv < 0 ? skiff_err_wrap(err, "%s", uri) : 0;
}

/* What a lazy image's directory holds, in bytes. */
static unsigned long long dir_bytes(const char *dir)
{
    unsigned long long sum = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            sum += (unsigned long long)st.st_size;
    }
    if (d)
        closedir(d);
    return sum;
}

/* A lazy image made by an older skiff: an index of an older format (the
 * loader refuses it). */
static bool older_format(const char *dir)
{
    for (unsigned i = 0;; i++) {
        char p[SKIFF_PATH_MAX + 128];
        unsigned char h[12];
        snprintf(p, sizeof(p), "%s/layer-%u.idx", dir, i);
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            return false;
        bool old =
            skiff_read_all_at(fd, h, sizeof(h), 0) == 0 && !memcmp(h, IDX_MAGIC, 8) && lz_get32(h + 8) < IDX_VERSION;
        close(fd);
        if (old)
            return true;
    }
}

/* Moves dir away (a process serving it keeps what it has open) and
 * removes it. */
static int remove_image_dir(const char *dir, skiff_err *err)
{
    char away[SKIFF_PATH_MAX + 128];
    if (skiff_fmt_path(away, sizeof(away), err, "%s.old.XXXXXX", dir) < 0)
        return -1;
    if (!mkdtemp(away))
        return skiff_error(err, errno, "mkdtemp %s", away);
    if (rename(dir, away) < 0) {
        int e = errno;
        rmdir(away);
        return skiff_error(err, e, "move %s away", dir);
    }
    return skiff_remove_tree(away, err);
}

int skiff_lazy_resolve(const struct skiff_config *cfg, const char *uri, const char *fetch, const char *images,
                       const char *key, char *out, size_t n, const struct skiff_resolve_opts *progress, bool *announced,
                       skiff_err *err)
{
    if (!strcmp(cfg->image_mode, "full") || strncmp(uri, "docker://", 9) != 0)
        return 0;
    char dir[SKIFF_PATH_MAX + 80];
    if (skiff_fmt_path(dir, sizeof(dir), err, "%s/%s.lazy", images, key) < 0)
        return -1;
    /* (under the image's import lock: nobody is making it meanwhile) */
    if (skiff_lazy_is_image(dir) && older_format(dir)) {
        /* made again: the same spans (the data files under lazy_path,
         * named by what they hold, stay good), checked the new way */
        if (remove_image_dir(dir, err) < 0)
            return skiff_err_wrap(err, "a lazy image of an older format");
    }
    if (!skiff_lazy_is_image(dir)) {
        struct skiff_lazy_build_opts o = {0};
        if (!strcmp(cfg->image_mode, "auto"))
            o.min_bytes = (unsigned long long)cfg->lazy_min_mb << 20;
        o.deadline_ms = progress ? progress->deadline_ms : 0;
        double t0 = skiff_now_ms();
        if (progress && progress->importing) {
            progress->importing(progress->ctx, uri);
            *announced = true;
        }
        if (skiff_lazy_build(cfg, fetch ? fetch : uri, dir, &o, err) < 0)
            return err->code == ENOTSUP ? 0 : -1; /* (ENOTSUP: imported in full instead) */
        if (progress && progress->imported)
            progress->imported(progress->ctx, uri, dir_bytes(dir), skiff_now_ms() - t0);
    }
    if (snprintf(out, n, "%s", dir) >= (int)n)
        return skiff_error(err, ENAMETOOLONG, "%s", dir);
    return 1;
}
