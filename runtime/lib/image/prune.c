/* The image cache's lifecycle (cache.h): listing what it holds and
 * pruning it, never an image in use. A lazy image (doc/lazy.md) is a
 * directory, images/KEY.lazy, held by a shared lock on its plan; its
 * bytes are there, in its data files under lazy_path and in the layer
 * indexes it links (lazy-index/, kept while another image links them). */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"

/* ---- listing --------------------------------------------------------------- */

/* Whether some process holds a lock on path (nothing there: no). */
static bool locked(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return false;
    bool busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}

static int append_str(char **s, const char *sep, const char *add)
{
    size_t a = *s ? strlen(*s) : 0, b = strlen(add), c = strlen(sep);
    char *n = realloc(*s, a + c + b + 1);
    if (!n)
        return -1;
    if (a)
        memcpy(n + a, sep, c), a += c;
    memcpy(n + a, add, b + 1);
    *s = n;
    return 0;
}

static int by_last_used(const void *a, const void *b)
{
    const struct skiff_cache_entry *x = a, *y = b;
    return x->last_used < y->last_used ? 1 : x->last_used > y->last_used ? -1 : strcmp(x->key, y->key);
}

/* Calls fn for each tag record under root (its file name in root/tags and
 * what it says); fn returns false to stop. */
static void each_tag(const char *root,
                     bool (*fn)(void *ctx, int dirfd, const char *name, const struct skiff_cache_tag *t), void *ctx)
{
    char dir[SKIFF_PATH_MAX + 16];
    skiff_err err;
    if (skiff_fmt_path(dir, sizeof(dir), &err, "%s/tags", root) < 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct skiff_cache_tag t;
        if (skiff_cache_valid_key(de->d_name) && skiff_cache_tag_read(root, de->d_name, NULL, &t, &err) == 1 &&
            !fn(ctx, dirfd(d), de->d_name, &t))
            break;
    }
    closedir(d);
}

static bool attach_tag(void *ctx, int dirfd, const char *name, const struct skiff_cache_tag *t)
{
    (void)dirfd;
    (void)name;
    struct skiff_cache_listing *l = ctx;
    for (size_t i = 0; i < l->nimages; i++)
        if (!strcmp(l->images[i].key, t->key) && append_str(&l->images[i].tags, ", ", t->ref) < 0)
            return false;
    return true;
}

/* The tag records under root: for each image key, the references that
 * resolved to it last. */
static void attach_tags(const char *root, struct skiff_cache_listing *l)
{
    each_tag(root, attach_tag, l);
}

static unsigned long long dir_bytes(const char *dir, size_t *count)
{
    unsigned long long sum = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            sum += (unsigned long long)st.st_blocks * 512;
            if (count)
                (*count)++;
        }
    }
    closedir(d);
    return sum;
}

/* ---- lazy images ------------------------------------------------------------ */

/* The "key" of the plan of the lazy image at dir (its data files' names),
 * or "" when the plan does not say. */
static void lazy_data_key(const char *dir, char out[24])
{
    out[0] = '\0';
    char p[SKIFF_PATH_MAX + 128];
    snprintf(p, sizeof(p), "%s/plan", dir);
    json_error_t je;
    json_t *plan = json_load_file(p, 0, &je);
    const char *k = json_string_value(json_object_get(plan, "key"));
    if (k && strlen(k) == 20 && strspn(k, "0123456789abcdef") == 20)
        snprintf(out, 24, "%s", k);
    json_decref(plan);
}

/* Whether name is one of key's data files (KEY.NODE.data, KEY.NODE.map). */
static bool lazy_data_file(const char *name, const char *key)
{
    size_t kl = strlen(key), nl = strlen(name);
    if (!kl || strncmp(name, key, kl) != 0 || name[kl] != '.')
        return false;
    return (nl > kl + 5 && !strcmp(name + nl - 5, ".data")) || (nl > kl + 4 && !strcmp(name + nl - 4, ".map"));
}

/* The bytes of key's data files under lazy_path (every node's); with
 * unlink_them, removed. */
static unsigned long long lazy_data(const char *lazy_path, const char *key, bool unlink_them)
{
    unsigned long long sum = 0;
    DIR *d = lazy_path && key[0] ? opendir(lazy_path) : NULL;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (!lazy_data_file(de->d_name, key) || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        sum += (unsigned long long)st.st_blocks * 512;
        if (unlink_them)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    return sum;
}

int skiff_cache_list(const char *root, const char *lazy_path, bool store, struct skiff_cache_listing *out,
                     skiff_err *err)
{
    memset(out, 0, sizeof(*out));
    char dir[SKIFF_PATH_MAX + 32];
    if (skiff_fmt_path(dir, sizeof(dir), err, "%s/images", root) < 0)
        return -1;
    DIR *d = opendir(dir);
    if (!d && errno != ENOENT)
        return skiff_error(err, errno, "open %s", dir);
    size_t cap = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        bool lazy = nl == 64 + 5 && !strcmp(de->d_name + 64, ".lazy");
        if (nl != 64 + 5 || (strcmp(de->d_name + 64, ".sqsh") != 0 && !lazy))
            continue;
        char key[80];
        snprintf(key, sizeof(key), "%.64s", de->d_name);
        if (!skiff_cache_valid_key(key))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !(lazy ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)))
            continue;
        if (out->nimages == cap) {
            cap = cap ? cap * 2 : 16;
            struct skiff_cache_entry *n = realloc(out->images, cap * sizeof(*n));
            if (!n) {
                closedir(d);
                skiff_cache_listing_free(out);
                return skiff_error(err, ENOMEM, "cache listing");
            }
            out->images = n;
        }
        struct skiff_cache_entry *e = &out->images[out->nimages++];
        memset(e, 0, sizeof(*e));
        snprintf(e->key, sizeof(e->key), "%s", key);
        struct skiff_cache_paths p;
        if (skiff_cache_paths(root, key, &p, err) < 0) {
            closedir(d);
            skiff_cache_listing_free(out);
            return -1;
        }
        snprintf(e->path, sizeof(e->path), "%s", p.sqsh);
        e->size = (unsigned long long)st.st_blocks * 512;
        e->last_used = st.st_mtime;
        struct stat is;
        if (skiff_cache_info_read(p.info, &e->info) == 1 && stat(p.info, &is) == 0)
            e->last_used = is.st_mtime;
        /* (nobody locks the store's images: store.h) */
        e->in_use = (!store && locked(p.sqsh)) || locked(p.lock);
        if (lazy) {
            char plan[SKIFF_PATH_MAX + 128];
            if (snprintf(e->path, sizeof(e->path), "%s/%s", dir, de->d_name) >= (int)sizeof(e->path)) {
                out->nimages--; /* (a cache path within SKIFF_PATH_MAX never gets here) */
                continue;
            }
            snprintf(plan, sizeof(plan), "%s/plan", e->path);
            e->lazy = true;
            lazy_data_key(e->path, e->data_key);
            e->size = dir_bytes(e->path, NULL) + lazy_data(lazy_path, e->data_key, false);
            e->in_use = locked(plan) || locked(p.lock);
        }
        out->images_bytes += e->size;
    }
    if (d)
        closedir(d);
    qsort(out->images, out->nimages, sizeof(*out->images), by_last_used);
    attach_tags(root, out);
    char blobs[SKIFF_PATH_MAX + 32];
    if (skiff_fmt_path(blobs, sizeof(blobs), err, "%s/blobs/sha256", root) == 0)
        out->blobs_bytes = dir_bytes(blobs, &out->nblobs);
    return 0;
}

void skiff_cache_listing_free(struct skiff_cache_listing *l)
{
    for (size_t i = 0; i < l->nimages; i++) {
        skiff_cache_info_free(&l->images[i].info);
        free(l->images[i].tags);
    }
    free(l->images);
    memset(l, 0, sizeof(*l));
}

/* ---- pruning --------------------------------------------------------------- */

struct blob {
    char name[80];
    unsigned long long size;
    time_t mtime;
    bool gone;
};

struct pruner {
    const char *root;
    const struct skiff_prune_opts *o;
    struct skiff_prune_result *res;
    struct skiff_cache_listing l;
    bool *gone; /* per image */
    struct blob *blobs;
    size_t nblobs;
    char blobdir[SKIFF_PATH_MAX + 32];
    unsigned long long total;
};

static void told(struct pruner *p, const char *what, unsigned long long bytes, const char *why)
{
    if (p->o->removed)
        p->o->removed(p->o->ctx, what, bytes, why);
}

/* Whether an image kept (gone false) or removed (gone true) names blob hex. */
static bool blob_named(const struct pruner *p, const char *hex, bool gone)
{
    for (size_t i = 0; i < p->l.nimages; i++) {
        const char *ls = p->l.images[i].info.layers;
        if (p->gone[i] != gone || !ls)
            continue;
        for (const char *s = ls; (s = strstr(s, hex)); s += 64)
            if (s >= ls + 7 && !strncmp(s - 7, "sha256:", 7) && (s[64] == ' ' || !s[64]))
                return true;
    }
    return false;
}

static void remove_blob(struct pruner *p, struct blob *b, const char *why)
{
    char path[SKIFF_PATH_MAX + 128];
    skiff_err err;
    if (b->gone || skiff_fmt_path(path, sizeof(path), &err, "%s/%s", p->blobdir, b->name) < 0)
        return;
    if (!p->o->dry_run && unlink(path) < 0 && errno != ENOENT)
        return;
    b->gone = true;
    p->res->blobs++;
    p->res->freed += b->size;
    p->total -= b->size < p->total ? b->size : p->total;
    told(p, path, b->size, why);
}

static bool remove_tag(void *ctx, int dirfd, const char *name, const struct skiff_cache_tag *t)
{
    if (!strcmp(t->key, ctx))
        unlinkat(dirfd, name, 0);
    return true;
}

/* The tag records naming key go with its image. */
static void remove_tags_of(const char *root, const char *key)
{
    each_tag(root, remove_tag, (void *)(uintptr_t)key);
}

/* Lazy image i's files, its lock held: the directory; its data files
 * unless an image kept serves the same bytes; the layer indexes only it
 * linked. */
static void remove_lazy_files(struct pruner *p, size_t i)
{
    struct skiff_cache_entry *e = &p->l.images[i];
    struct {
        dev_t dev;
        ino_t ino;
    } idx[64];
    size_t nidx = 0;
    DIR *d = opendir(e->path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        struct stat st;
        if (nidx < 64 && !strncmp(de->d_name, "layer-", 6) &&
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 2)
            idx[nidx].dev = st.st_dev, idx[nidx++].ino = st.st_ino;
    }
    if (d)
        closedir(d);
    skiff_err err;
    if (skiff_remove_tree(e->path, &err) < 0)
        return;
    bool shared = false;
    for (size_t k = 0; k < p->l.nimages; k++)
        shared |= k != i && !p->gone[k] && p->l.images[k].lazy && !strcmp(p->l.images[k].data_key, e->data_key);
    if (!shared)
        lazy_data(p->o->lazy_path, e->data_key, true);
    char dir[SKIFF_PATH_MAX + 32];
    if (!nidx || skiff_fmt_path(dir, sizeof(dir), &err, "%s/lazy-index", p->root) < 0 || !(d = opendir(dir)))
        return;
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_nlink != 1)
            continue;
        for (size_t k = 0; k < nidx; k++)
            if (st.st_dev == idx[k].dev && st.st_ino == idx[k].ino)
                unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* Removes image i unless it is in use: under an exclusive lock taken
 * without waiting, which no reader holds then (readers hold shared ones and
 * check, once locked, that the file is still there; a lazy image's readers
 * lock its plan). The store's images are not locked by their readers
 * (store.h): there only an import running keeps one. */
static void remove_image(struct pruner *p, size_t i, const char *why)
{
    struct skiff_cache_entry *e = &p->l.images[i];
    if (p->gone[i])
        return;
    if (p->o->keep && p->o->keep(p->o->keep_ctx, e->path)) {
        e->in_use = true;
        p->res->in_use++;
        return;
    }
    struct skiff_cache_paths ps;
    skiff_err err;
    if (skiff_cache_paths(p->root, e->key, &ps, &err) < 0)
        return;
    char held[SKIFF_PATH_MAX + 128];
    snprintf(held, sizeof(held), e->lazy ? "%s/plan" : "%s", e->lazy ? e->path : ps.sqsh);
    int fd = open(held, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    int lk = open(ps.lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    bool busy = (!p->o->store && flock(fd, LOCK_EX | LOCK_NB) < 0) || (lk >= 0 && flock(lk, LOCK_EX | LOCK_NB) < 0);
    if (busy) {
        e->in_use = true;
        p->res->in_use++;
    } else {
        if (!p->o->dry_run) {
            if (e->lazy)
                remove_lazy_files(p, i);
            else
                unlink(ps.sqsh);
            unlink(ps.info);
            remove_tags_of(p->root, e->key);
            if (lk >= 0)
                unlink(ps.lock);
        }
        p->gone[i] = true;
        p->res->images++;
        p->res->freed += e->size;
        p->total -= e->size < p->total ? e->size : p->total;
        char what[SKIFF_PATH_MAX + 2300];
        snprintf(what, sizeof(what), "%s (%s)", e->path, e->info.ref[0] ? e->info.ref : "no record of its source");
        told(p, what, e->size, why);
    }
    if (lk >= 0)
        close(lk);
    close(fd);
}

/* The blobs no image kept names: those of images removed now, and of the
 * others all, or those not touched for older_than_s (< 0: all), or none
 * (only_removed). */
static void drop_unnamed_blobs(struct pruner *p, double older_than_s, bool only_removed)
{
    time_t now = time(NULL);
    for (size_t b = 0; b < p->nblobs; b++) {
        if (p->blobs[b].gone || blob_named(p, p->blobs[b].name, false))
            continue;
        if (blob_named(p, p->blobs[b].name, true)) {
            remove_blob(p, &p->blobs[b], "a layer of an image removed");
            continue;
        }
        if (only_removed || (older_than_s >= 0 && difftime(now, p->blobs[b].mtime) < older_than_s))
            continue;
        remove_blob(p, &p->blobs[b], "no image in the cache names it");
    }
}

static int by_mtime(const void *a, const void *b)
{
    const struct blob *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

static int scan_blobs(struct pruner *p, skiff_err *err)
{
    if (skiff_fmt_path(p->blobdir, sizeof(p->blobdir), err, "%s/blobs/sha256", p->root) < 0)
        return -1;
    DIR *d = opendir(p->blobdir);
    if (!d)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", p->blobdir);
    size_t cap = 0;
    struct dirent *de;
    time_t now = time(NULL);
    while ((de = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (de->d_name[0] == '.') {
            /* a download's temporary file: written to all the time while it
             * runs, so one untouched for an hour is what a crash left */
            if (difftime(now, st.st_mtime) > 3600) {
                if (!p->o->dry_run)
                    unlinkat(dirfd(d), de->d_name, 0);
                told(p, de->d_name, (unsigned long long)st.st_blocks * 512, "a download's leftover");
            }
            continue;
        }
        if (!skiff_cache_valid_key(de->d_name))
            continue;
        if (p->nblobs == cap) {
            cap = cap ? cap * 2 : 64;
            struct blob *n = realloc(p->blobs, cap * sizeof(*n));
            if (!n) {
                closedir(d);
                return skiff_error(err, ENOMEM, "blobs");
            }
            p->blobs = n;
        }
        struct blob *b = &p->blobs[p->nblobs++];
        snprintf(b->name, sizeof(b->name), "%.79s", de->d_name);
        b->size = (unsigned long long)st.st_blocks * 512;
        b->mtime = st.st_mtime;
        b->gone = false;
        p->total += b->size;
    }
    closedir(d);
    qsort(p->blobs, p->nblobs, sizeof(*p->blobs), by_mtime);
    return 0;
}

/* images/: leftovers of imports that died (temporary files whose import
 * lock nobody holds) and the hard links older versions kept for the
 * offline fallback (ref-*.sqsh: tags/ does that now). */
static void drop_leftovers(struct pruner *p)
{
    char dir[SKIFF_PATH_MAX + 32];
    skiff_err err;
    if (skiff_fmt_path(dir, sizeof(dir), &err, "%s/images", p->root) < 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    time_t now = time(NULL);
    while ((de = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        const char *why = NULL;
        if (!strncmp(de->d_name, "ref-", 4))
            why = "an older version's offline link";
        else if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp.") && difftime(now, st.st_mtime) > 3600) {
            char key[80], lock[SKIFF_PATH_MAX + 128];
            snprintf(key, sizeof(key), "%.64s", de->d_name + 1);
            if (!skiff_cache_valid_key(key) || skiff_fmt_path(lock, sizeof(lock), &err, "%s/%s.lock", dir, key) < 0 ||
                !locked(lock))
                why = "an import's leftover";
        }
        if (!why)
            continue;
        /* a link's bytes are freed only with the image's last name */
        unsigned long long bytes = st.st_nlink > 1 ? 0 : (unsigned long long)st.st_blocks * 512;
        if (!p->o->dry_run)
            unlinkat(dirfd(d), de->d_name, 0);
        p->res->freed += bytes;
        char what[SKIFF_PATH_MAX + 300];
        snprintf(what, sizeof(what), "%s/%s", dir, de->d_name);
        told(p, what, bytes, why);
    }
    closedir(d);
}

static void fmt_age(double s, char *out, size_t n)
{
    if (s >= 2 * 86400)
        snprintf(out, n, "%.0f d", s / 86400);
    else if (s >= 2 * 3600)
        snprintf(out, n, "%.0f h", s / 3600);
    else
        snprintf(out, n, "%.0f min", s / 60);
}

int skiff_cache_prune(const char *root, const struct skiff_prune_opts *o, struct skiff_prune_result *res,
                      skiff_err *err)
{
    memset(res, 0, sizeof(*res));
    struct pruner p = {.root = root, .o = o, .res = res};
    if (skiff_cache_list(root, o->lazy_path, o->store, &p.l, err) < 0)
        return -1;
    int rv = -1;
    p.gone = calloc(p.l.nimages + 1, sizeof(*p.gone));
    if (!p.gone) {
        skiff_error(err, ENOMEM, "prune");
        goto out;
    }
    p.total = p.l.images_bytes;
    if (scan_blobs(&p, err) < 0)
        goto out;
    drop_leftovers(&p);
    bool asked = o->all || o->older_than_s >= 0 || o->max_size_set;
    time_t now = time(NULL);
    /* images, by what was asked */
    for (size_t i = 0; i < p.l.nimages; i++) {
        double idle = difftime(now, p.l.images[i].last_used);
        char why[64];
        if (o->all) {
            remove_image(&p, i, "--all");
        } else if (o->older_than_s >= 0 && idle >= o->older_than_s) {
            char age[32];
            fmt_age(idle, age, sizeof(age));
            snprintf(why, sizeof(why), "unused for %s", age);
            remove_image(&p, i, why);
        }
    }
    /* blobs no image kept names (with --older-than: only old ones, unless
     * their image just went) */
    drop_unnamed_blobs(&p, asked && !o->all && !o->max_size_set ? o->older_than_s : -1, false);
    if (o->max_size_set && p.total > o->max_size) {
        /* then the blobs of the least recently used images, then those
         * images (the listing is most recently used first) */
        for (size_t i = p.l.nimages; i-- > 0 && p.total > o->max_size;) {
            const char *ls = p.l.images[i].info.layers;
            for (size_t b = 0; ls && b < p.nblobs && p.total > o->max_size; b++)
                if (!p.blobs[b].gone && strstr(ls, p.blobs[b].name))
                    remove_blob(&p, &p.blobs[b], "over the cache's size (a download cache: the image stays)");
        }
        for (size_t i = p.l.nimages; i-- > 0 && p.total > o->max_size;)
            remove_image(&p, i, "over the cache's size, least recently used");
        /* the layers of the images that went */
        drop_unnamed_blobs(&p, -1, true);
    }
    res->left = p.total;
    rv = 0;
out:
    free(p.gone);
    free(p.blobs);
    skiff_cache_listing_free(&p.l);
    return rv;
}
