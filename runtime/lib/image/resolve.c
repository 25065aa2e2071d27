/* --container-image through the caches (image.h: skiff_image_resolve) and
 * filling the site's store (skiff_image_import_system).
 *
 * A registry image is keyed by its manifest digest. A tag costs one HEAD
 * (Docker-Content-Digest; a GET where a registry does not send it), or no
 * request at all within tag_ttl of the last resolution; when the registry
 * cannot be reached the tag's last resolution is used. The image is then
 * looked for in the site's store (store.h), then in the user's cache, and
 * imported into the latter when neither has it: one importer per image
 * (the import lock), the others wait and say for whom. Whoever uses the
 * image holds a shared lock on it, which pruning respects. With image_mode
 * lazy or auto, an image that is in neither is made a lazy image instead
 * (lazy.h), under the same import lock, when it can be one. */
#include "image.h"
#include "import_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "fsutil.h"
#include "lazy.h"
#include "registry.h"
#include "squash.h"
#include "store.h"

static int key_hex(const char *text, char out[80], skiff_err *err)
{
    char d[SKIFF_DIGEST_LEN];
    if (skiff_digest_buf(text, strlen(text), d, err) < 0)
        return -1;
    snprintf(out, 80, "%s", d + 7);
    return 0;
}

/* One resolution. */
struct resolver {
    const struct skiff_config *cfg;
    const struct skiff_resolve_opts *o;
    const char *uri;
    struct skiff_ref ref;
    char canon[2048], arch[80];
    char refkey[80], key[80];
    char digest[SKIFF_DIGEST_LEN]; /* registry images: the manifest's */
    const char *store;             /* system_cache_path, or NULL */
    uid_t store_owner;
    bool to_store;  /* skiff import --system: the store is where it goes */
    bool new_tag;   /* the registry resolved the tag: noted once the image is there */
    bool announced; /* o->importing was called (by a lazy attempt) */
};

/* Where an image of key is, if anywhere: 2 in the store, 1 in the user's
 * cache (paths in *p), 0 nowhere. An image in the store that fails its
 * checks is an error. */
static int find_image(struct resolver *r, const char *key, struct skiff_cache_paths *p, skiff_err *err)
{
    if (r->store && !r->to_store) {
        if (skiff_cache_paths(r->store, key, p, err) < 0)
            return -1;
        struct stat st;
        if (lstat(p->sqsh, &st) == 0)
            return 2;
        if (errno != ENOENT)
            return skiff_error(err, errno, "system store: %s", p->sqsh);
    }
    const char *root = r->to_store ? r->store : r->cfg->cache_path;
    if (skiff_cache_paths(root, key, p, err) < 0)
        return -1;
    return skiff_squash_is_image(p->sqsh) ? 1 : 0;
}

/* ---- tags ----------------------------------------------------------------- */

/* The freshest last resolution of the reference, from the user's cache or
 * the store, whose image is still there: 1, or 0 when none is; -1 when
 * the store's record fails the store's checks. */
static int last_resolution(struct resolver *r, struct skiff_cache_tag *t, skiff_err *err)
{
    struct skiff_cache_tag c[2];
    int n = 0, got;
    if (!r->to_store && skiff_cache_tag_read(r->cfg->cache_path, r->refkey, NULL, &c[n], err) == 1)
        n++;
    if (r->store && (got = skiff_cache_tag_read(r->store, r->refkey, &r->store_owner, &c[n], err)) != 0) {
        if (got < 0)
            return -1;
        n++;
    }
    int best = -1;
    for (int i = 0; i < n; i++) {
        struct skiff_cache_paths p;
        skiff_err e;
        if (strcmp(c[i].ref, r->canon) != 0 || find_image(r, c[i].key, &p, &e) <= 0)
            continue;
        if (best < 0 || c[i].resolved > c[best].resolved)
            best = i;
    }
    if (best < 0)
        return 0;
    *t = c[best];
    return 1;
}

/* The digest of r's tag: from its last resolution within tag_ttl, else
 * from the registry (HEAD, or GET when the HEAD names none), else (no
 * registry) from the last resolution whatever its age. 1 when the image
 * key is known already (a last resolution was used: r->key set), 0 when
 * r->digest is set, -1 on error. */
static int resolve_tag(struct resolver *r, skiff_err *err)
{
    struct skiff_cache_tag last;
    int had = last_resolution(r, &last, err);
    if (had < 0)
        return -1;
    bool have_last = had == 1;
    time_t now = time(NULL);
    if (have_last && !r->to_store && r->cfg->tag_ttl_s > 0 && now >= last.resolved &&
        now - last.resolved < r->cfg->tag_ttl_s) {
        snprintf(r->digest, sizeof(r->digest), "%s", last.digest);
        snprintf(r->key, sizeof(r->key), "%s", last.key);
        return 1;
    }
    struct skiff_registry *reg = NULL;
    /* with an image to fall back on, an unreachable registry is not waited
     * for: the step starts from what it had */
    struct skiff_fetch_opts fo = {.retries = have_last ? -1 : 0, .deadline_ms = r->o ? r->o->deadline_ms : 0};
    int rv = skiff_registry_open(&reg, r->cfg, &r->ref, err);
    if (rv == 0)
        rv = skiff_registry_manifest_digest(reg, r->ref.tag, r->digest, &fo, err);
    if (rv == 0) { /* no Docker-Content-Digest: the manifest itself */
        cleanup_free char *body = NULL;
        size_t len;
        char mt[128];
        rv = skiff_registry_manifest(reg, r->ref.tag, &body, &len, mt, sizeof(mt), r->digest, err);
    } else if (rv == 1) {
        rv = 0;
    }
    skiff_registry_close(reg);
    if (rv < 0) {
        if (!have_last)
            return -1;
        /* offline: the image this tag had last */
        snprintf(r->digest, sizeof(r->digest), "%s", last.digest);
        snprintf(r->key, sizeof(r->key), "%s", last.key);
        return 1;
    }
    return 0;
}

/* Notes the tag's resolution (where it changed, or tag_ttl needs the
 * time): in the store for an import into it, else in the user's cache. */
static void note_tag(struct resolver *r)
{
    struct skiff_cache_tag t, old;
    memset(&t, 0, sizeof(t));
    snprintf(t.ref, sizeof(t.ref), "%s", r->canon);
    snprintf(t.digest, sizeof(t.digest), "%s", r->digest);
    snprintf(t.key, sizeof(t.key), "%s", r->key);
    t.resolved = time(NULL);
    const char *root = r->to_store ? r->store : r->cfg->cache_path;
    skiff_err e;
    if (!r->to_store && r->cfg->tag_ttl_s == 0 && skiff_cache_tag_read(root, r->refkey, NULL, &old, &e) == 1 &&
        !strcmp(old.digest, t.digest) && !strcmp(old.key, t.key))
        return; /* nothing new: no write on the shared filesystem at every step */
    if (skiff_cache_tag_write(root, r->refkey, &t, r->to_store ? 0644 : 0600, &e) < 0) {
        /* best effort: only tag_ttl and the offline fallback lose it */
    }
}

/* ---- keys ----------------------------------------------------------------- */

/* r->key (and for a registry tag, r->digest) for the reference. */
static int image_key(struct resolver *r, skiff_err *err)
{
    char keytext[4096];
    if (r->ref.kind == SKIFF_REF_DOCKER) {
        bool known = false;
        if (r->ref.digest[0]) {
            snprintf(r->digest, sizeof(r->digest), "%.71s", r->ref.digest);
        } else {
            int rv = resolve_tag(r, err);
            if (rv < 0)
                return skiff_err_wrap(err, "%s", r->uri);
            known = rv == 1;
        }
        if (!known) {
            snprintf(keytext, sizeof(keytext), "digest|%s|%s|%s", r->ref.registry, r->digest, r->arch);
            if (key_hex(keytext, r->key, err) < 0)
                return -1;
            r->new_tag = !r->ref.digest[0];
        }
        /* pin what was resolved: the import fetches this manifest, not
         * whatever the tag names by then */
        snprintf(r->ref.digest, sizeof(r->ref.digest), "%s", r->digest);
        return 0;
    }
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(r->ref.path, real) || stat(real, &st) < 0)
        return skiff_error(err, errno, "%s", r->uri);
    bool archive = r->ref.kind == SKIFF_REF_DOCKER_ARCHIVE || r->ref.kind == SKIFF_REF_OCI_ARCHIVE;
    /* a FIFO would hold the import (and the step) until its deadline */
    if (archive ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))
        return skiff_error(err, 0, "%s: %s is not a %s", r->uri, real, archive ? "regular file" : "directory");
    if (S_ISDIR(st.st_mode)) {
        char idx[PATH_MAX + 16];
        snprintf(idx, sizeof(idx), "%s/%s", real, r->ref.kind == SKIFF_REF_OCI ? "index.json" : "manifest.json");
        if (stat(idx, &st) < 0)
            return skiff_error(err, errno, "%s: %s", r->uri, idx);
    }
    if (skiff_fmt_path(keytext, sizeof(keytext), err, "local|%d|%s|%s|%lu|%lu|%lld|%lld.%09ld|%s", (int)r->ref.kind,
                       real, r->ref.tag, (unsigned long)st.st_dev, (unsigned long)st.st_ino, (long long)st.st_size,
                       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, r->arch) < 0)
        return -1;
    return key_hex(keytext, r->key, err);
}

/* ---- finding, holding, importing ------------------------------------------------ */

static void on_waiting(void *ctx, const char *who, double running_s)
{
    struct resolver *r = ctx;
    if (r->o && r->o->waiting)
        r->o->waiting(r->o->ctx, r->uri, who, running_s);
}

/* Imports r's image into p (the import lock held), with its info record. */
static int import_into(struct resolver *r, const struct skiff_cache_paths *p, skiff_err *err)
{
    const struct skiff_resolve_opts *o = r->o;
    struct skiff_import_opts io = {.force = true};
    if (o) {
        io.on_progress = o->on_progress;
        io.progress_ctx = o->ctx;
        io.progress_every_s = o->progress_every_s;
        io.warn = o->warn;
        io.warn_ctx = o->ctx;
        io.deadline_ms = o->deadline_ms;
    }
    double t0 = skiff_now_ms();
    if (o && o->importing && !r->announced)
        o->importing(o->ctx, r->uri);
    struct skiff_import_result res = {0};
    if (skiff_import_ref(r->cfg, &r->ref, p->sqsh, &io, true, &res, err) < 0)
        return skiff_err_wrap(err, "import %s", r->uri);
    struct skiff_cache_info in = {.imported = time(NULL), .layers = res.layers};
    snprintf(in.ref, sizeof(in.ref), "%s", r->canon);
    snprintf(in.digest, sizeof(in.digest), "%s", r->digest);
    skiff_err e;
    if (skiff_cache_info_write(p->info, &in, r->to_store ? 0644 : 0600, &e) < 0) {
        /* best effort: listing shows less, prune keeps fewer blobs */
    }
    free(res.layers);
    struct stat st;
    if (o && o->imported)
        o->imported(o->ctx, r->uri, stat(p->sqsh, &st) == 0 ? (unsigned long long)st.st_size : 0, skiff_now_ms() - t0);
    return 0;
}

/* The user's cache over cache_max_size after an import: the least
 * recently used images not in use go (the one just imported is held). */
static void apply_max_size(const struct skiff_config *cfg, const struct skiff_resolve_opts *o)
{
    if (!cfg->cache_max_size)
        return;
    char lazy[SKIFF_PATH_MAX];
    struct skiff_prune_opts po = {.older_than_s = -1,
                                  .max_size_set = true,
                                  .max_size = cfg->cache_max_size,
                                  .keep = o ? o->keep : NULL,
                                  .keep_ctx = o ? o->keep_ctx : NULL,
                                  .lazy_path = skiff_config_lazy_path(cfg, lazy, sizeof(lazy)) < 0 ? NULL : lazy};
    struct skiff_prune_result pr;
    skiff_err e;
    if (skiff_cache_prune(cfg->cache_path, &po, &pr, &e) < 0) {
        /* the import stands; the next one tries again */
    }
}

/* The image, held (a shared lock): its fd, path in p->sqsh. */
static int find_or_import(struct resolver *r, struct skiff_cache_paths *p, skiff_err *err)
{
    /* a prune may remove the image between finding and holding it: look
     * again (it is then imported) */
    for (int tries = 0; tries < 3; tries++) {
        int where = find_image(r, r->key, p, err);
        if (where < 0)
            return -1;
        if (where > 0) {
            /* the store's images are other users' too: never locked */
            int fd = skiff_cache_hold(p->sqsh, where == 2 || r->to_store ? SKIFF_HOLD_OPEN : SKIFF_HOLD_LOCKED, err);
            if (fd < 0 && err->code == ENOENT)
                continue;
            if (fd < 0)
                return -1;
            if (where == 2 && skiff_store_check_image(fd, p->sqsh, r->store_owner, err) < 0) {
                close(fd);
                return -1;
            }
            if (where == 1)
                skiff_cache_touch(r->to_store ? r->store : r->cfg->cache_path, r->key);
            return fd;
        }
        struct skiff_cache_wait w = {.deadline_ms = r->o ? r->o->deadline_ms : 0, .waiting = on_waiting, .ctx = r};
        int lock = skiff_cache_import_lock(p->lock, &w, err);
        if (lock < 0)
            return skiff_err_wrap(err, "%s", r->uri);
        int rv = 0;
        /* another process may have imported it while this one waited */
        if (!skiff_squash_is_image(p->sqsh))
            rv = import_into(r, p, err);
        int fd = rv < 0 ? -1 : skiff_cache_hold(p->sqsh, r->to_store ? SKIFF_HOLD_OPEN : SKIFF_HOLD_LOCKED, err);
        if (rv < 0)
            unlink(p->lock); /* nothing left behind (one waiting on it imports anew) */
        skiff_cache_import_unlock(lock);
        if (fd >= 0 && rv == 0 && !r->to_store)
            apply_max_size(r->cfg, r->o);
        if (fd >= 0 || rv < 0 || err->code != ENOENT)
            return fd;
    }
    return skiff_error(err, 0, "%s: the image was removed from the cache again and again while it was looked up",
                       r->uri);
}

/* A lazy image's record (the info file a full import writes: what skiff
 * cache list shows) written when it is new, touched when it is used
 * (pruning's "last used"). */
static void note_lazy_use(struct resolver *r, const struct skiff_cache_paths *p)
{
    struct skiff_cache_info in;
    if (skiff_cache_info_read(p->info, &in) == 1) {
        skiff_cache_info_free(&in);
        skiff_cache_touch(r->cfg->cache_path, r->key);
        return;
    }
    memset(&in, 0, sizeof(in));
    in.imported = time(NULL);
    snprintf(in.ref, sizeof(in.ref), "%s", r->canon);
    snprintf(in.digest, sizeof(in.digest), "%s", r->digest);
    skiff_err e;
    if (skiff_cache_info_write(p->info, &in, 0600, &e) < 0) {
        /* best effort: listing shows less */
    }
}

/* image_mode: r's image as a lazy image (IMAGES/KEY.lazy, made if missing)
 * when no squashfs of it is in the store or the cache: 1 with its
 * directory in out, 0 when it is to be imported in full, -1 on an error. */
static int lazy_or_full(struct resolver *r, char *out, size_t n, skiff_err *err)
{
    if (r->to_store || !strcmp(r->cfg->image_mode, "full") || r->ref.kind != SKIFF_REF_DOCKER)
        return 0;
    struct skiff_cache_paths p;
    int where = find_image(r, r->key, &p, err);
    if (where != 0)
        return where < 0 ? -1 : 0;
    char images[SKIFF_PATH_MAX];
    if (skiff_cache_dir(r->cfg, "images", images, sizeof(images), err) < 0)
        return -1;
    struct skiff_cache_wait w = {.deadline_ms = r->o ? r->o->deadline_ms : 0, .waiting = on_waiting, .ctx = r};
    int lock = skiff_cache_import_lock(p.lock, &w, err);
    if (lock < 0)
        return skiff_err_wrap(err, "%s", r->uri);
    /* the manifest image_key resolved, not the tag again (one request
     * less, and the same image as the key) */
    char pinned[sizeof(r->ref.user) + sizeof(r->ref.registry) + sizeof(r->ref.repository) + sizeof(r->ref.digest) + 16];
    snprintf(pinned, sizeof(pinned), "docker://%s%s%s#%s@%s", r->ref.user, r->ref.user[0] ? "@" : "", r->ref.registry,
             r->ref.repository, r->ref.digest);
    /* another process may have imported it in full meanwhile */
    int rv = skiff_squash_is_image(p.sqsh) ? 0
                                           : skiff_lazy_resolve(r->cfg, r->uri, r->ref.digest[0] ? pinned : NULL,
                                                                images, r->key, out, n, r->o, &r->announced, err);
    if (rv < 0)
        unlink(p.lock);
    if (rv > 0)
        note_lazy_use(r, &p);
    skiff_cache_import_unlock(lock);
    return rv;
}

static int resolver_init(struct resolver *r, const struct skiff_config *cfg, const char *uri,
                         const struct skiff_resolve_opts *o, bool to_store, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    r->cfg = cfg;
    r->o = o;
    r->uri = uri;
    r->to_store = to_store;
    if (skiff_ref_parse(uri, cfg->default_registry, &r->ref, err) < 0)
        return -1;
    if (skiff_ref_canonical(&r->ref, r->canon, sizeof(r->canon), err) < 0)
        return -1;
    skiff_source_host_arch(r->arch, sizeof(r->arch));
    char keytext[4096];
    snprintf(keytext, sizeof(keytext), "ref|%s|%s", r->canon, r->arch);
    if (key_hex(keytext, r->refkey, err) < 0)
        return -1;
    if (cfg->system_cache_path[0]) {
        r->store = cfg->system_cache_path;
        if (to_store) {
            if (skiff_store_prepare(r->store, err) < 0)
                return -1;
            r->store_owner = geteuid();
        } else if (skiff_store_check_root(r->store, &r->store_owner, err) < 0) {
            if (err->code != ENOENT)
                return -1;
            r->store = NULL; /* no store (yet): the user's cache alone */
        }
    }
    if (!to_store) {
        char images[SKIFF_PATH_MAX];
        if (skiff_cache_dir(cfg, "images", images, sizeof(images), err) < 0)
            return -1;
    }
    return 0;
}

int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path, size_t n,
                        const struct skiff_resolve_opts *o, skiff_err *err)
{
    char uri[2048];
    switch (skiff_ref_classify(image_arg)) {
    case SKIFF_ARG_PATH:
        return skiff_squash_resolve_path(image_arg, sqsh_path, n, err);
    case SKIFF_ARG_SQSH_NAME:
        if (access(image_arg, F_OK) == 0)
            return skiff_error(err, 0, "'%s' looks like a file name: a local file needs a path with '/' (write ./%s)",
                               image_arg, image_arg);
        return skiff_error(err, 0,
                           "no such file ./%s; a local file needs a path with '/' (./%s or an absolute path), an image "
                           "needs docker://IMAGE[:TAG]",
                           image_arg, image_arg);
    case SKIFF_ARG_INVALID:
        return skiff_error(err, 0,
                           "'%s' is neither a file path (start it with / or ./) nor an image reference "
                           "(docker://[REGISTRY#]IMAGE[:TAG], oci:DIR, docker-archive:FILE, ...)",
                           image_arg ? image_arg : "");
    case SKIFF_ARG_BARE:
        snprintf(uri, sizeof(uri), "docker://%s", image_arg);
        break;
    case SKIFF_ARG_URI:
        snprintf(uri, sizeof(uri), "%s", image_arg);
        break;
    }
    struct resolver r;
    if (resolver_init(&r, cfg, uri, o, false, err) < 0 || image_key(&r, err) < 0)
        return -1;
    int lazy = lazy_or_full(&r, sqsh_path, n, err);
    if (lazy != 0) {
        if (lazy > 0 && r.new_tag)
            note_tag(&r);
        return lazy < 0 ? -1 : 0;
    }
    struct skiff_cache_paths p;
    int fd = find_or_import(&r, &p, err);
    if (fd < 0)
        return -1;
    if (r.new_tag)
        note_tag(&r);
    if (o && o->hold_fd)
        *o->hold_fd = fd;
    else
        close(fd);
    if (snprintf(sqsh_path, n, "%s", p.sqsh) >= (int)n)
        return skiff_error(err, ENAMETOOLONG, "%s", p.sqsh);
    return 0;
}

int skiff_image_import_system(const struct skiff_config *cfg, const char *uri, const struct skiff_resolve_opts *o,
                              char *sqsh_path, size_t n, skiff_err *err)
{
    struct resolver r;
    if (skiff_ref_classify(uri) != SKIFF_ARG_URI && skiff_ref_classify(uri) != SKIFF_ARG_BARE)
        return skiff_error(err, 0, "%s: the site's store takes image references (docker://...), not files", uri);
    char full[2048];
    snprintf(full, sizeof(full), "%s%s", skiff_ref_classify(uri) == SKIFF_ARG_BARE ? "docker://" : "", uri);
    if (resolver_init(&r, cfg, full, o, true, err) < 0)
        return -1;
    /* files of the store are for every user to read */
    mode_t old = umask(022);
    int fd = image_key(&r, err);
    struct skiff_cache_paths p;
    if (fd == 0)
        fd = find_or_import(&r, &p, err);
    if (fd >= 0 && r.new_tag)
        note_tag(&r);
    umask(old);
    if (fd < 0)
        return -1;
    close(fd);
    if (snprintf(sqsh_path, n, "%s", p.sqsh) >= (int)n)
        return skiff_error(err, ENAMETOOLONG, "%s", p.sqsh);
    return 0;
}
