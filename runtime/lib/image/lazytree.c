/* The layers of a lazy image merged into one tree in memory (lazy_int.h).
 *
 * Each recorded entry is a plan of layer.c's policy (layer_int.h); here
 * it is carried out on this tree the way layer.c carries it out on a real
 * one, step for step, so that the skeleton holds exactly what a full
 * import would have: parents made on the way (0755 less the umask, as
 * mkdirat makes them), nothing written through a symlink, a name taken
 * by a new entry unless both are directories, whiteouts and opaque
 * directories as they come, hardlinks only to what is already there and
 * not a directory, directories kept u+rwx when the importer is not root,
 * a FIFO's mode less the umask. The messages are layer.c's. The two
 * differ only in what they act on: layer.c's tests and the differential
 * test (tests/integration/runtime-lazy.sh) hold them together. */
#include "lazy_int.h"
#include "layer_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct lz_tree {
    struct lz_node *root;
    bool as_root;
    mode_t umask;
    int64_t now; /* what an import stamps on what it makes itself */
};

#define SLOT_FREE (-1)
#define SLOT_GONE (-2)

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static struct lz_node *node_new(mode_t mode)
{
    struct lz_node *n = calloc(1, sizeof(*n));
    if (n) {
        n->mode = mode;
        n->layer = UINT32_MAX;
    }
    return n;
}

static void node_unref(struct lz_node *n);

static void clear_dir(struct lz_node *d)
{
    for (uint32_t i = 0; i < d->nents; i++) {
        if (!d->ents[i].name)
            continue;
        free(d->ents[i].name);
        node_unref(d->ents[i].node);
    }
    free(d->ents);
    free(d->slots);
    d->ents = NULL;
    d->slots = NULL;
    d->nents = d->cap = d->nslots = d->used = 0;
}

static void node_unref(struct lz_node *n)
{
    if (!n || --n->links > 0)
        return;
    if (S_ISDIR(n->mode))
        clear_dir(n);
    free(n->target);
    free(n);
}

/* The slot of name in d's index: where it is, or where it would go. */
static int32_t *slot_of(struct lz_node *d, const char *name)
{
    uint32_t mask = d->nslots - 1, i = hash_name(name) & mask;
    int32_t *gone = NULL;
    for (;;) {
        int32_t *s = &d->slots[i];
        if (*s == SLOT_FREE)
            return gone ? gone : s;
        if (*s == SLOT_GONE) {
            if (!gone)
                gone = s;
        } else if (!strcmp(d->ents[*s].name, name)) {
            return s;
        }
        i = (i + 1) & mask;
    }
}

static int reindex(struct lz_node *d, uint32_t nslots)
{
    int32_t *slots = malloc(nslots * sizeof(*slots));
    if (!slots)
        return -1;
    for (uint32_t i = 0; i < nslots; i++)
        slots[i] = SLOT_FREE;
    free(d->slots);
    d->slots = slots;
    d->nslots = nslots;
    d->used = 0;
    /* (entries removed leave a hole in ents: compacted here) */
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nents; i++)
        if (d->ents[i].name)
            d->ents[n++] = d->ents[i];
    d->nents = n;
    for (uint32_t i = 0; i < n; i++) {
        *slot_of(d, d->ents[i].name) = (int32_t)i;
        d->used++;
    }
    return 0;
}

static struct lz_dent *dir_find(struct lz_node *d, const char *name)
{
    if (!d->nslots)
        return NULL;
    int32_t s = *slot_of(d, name);
    return s >= 0 ? &d->ents[s] : NULL;
}

/* Adds name -> n to d (which has no such name): n's reference is taken. */
static int dir_add(struct lz_node *d, const char *name, struct lz_node *n)
{
    if (d->nents == d->cap) {
        uint32_t cap = d->cap ? 2 * d->cap : 8;
        struct lz_dent *e = realloc(d->ents, cap * sizeof(*e));
        if (!e)
            return -1;
        d->ents = e;
        d->cap = cap;
    }
    if ((d->used + 1) * 2 > d->nslots && reindex(d, d->nslots ? 2 * d->nslots : 16) < 0)
        return -1;
    char *copy = strdup(name);
    if (!copy)
        return -1;
    int32_t *s = slot_of(d, name);
    if (*s == SLOT_FREE)
        d->used++;
    d->ents[d->nents] = (struct lz_dent){.name = copy, .node = n};
    *s = (int32_t)d->nents++;
    n->links++;
    return 0;
}

/* Removes name from d, if there (a directory with all it holds). */
static void dir_remove(struct lz_node *d, const char *name)
{
    if (!d->nslots)
        return;
    int32_t *s = slot_of(d, name);
    if (*s < 0)
        return;
    struct lz_dent *e = &d->ents[*s];
    free(e->name);
    e->name = NULL;
    node_unref(e->node);
    e->node = NULL;
    *s = SLOT_GONE;
}

struct lz_tree *lz_tree_new(bool as_root, mode_t umask_now)
{
    struct lz_tree *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->as_root = as_root;
    t->umask = umask_now;
    t->now = time(NULL);
    t->root = node_new(S_IFDIR | 0755);
    if (!t->root) {
        free(t);
        return NULL;
    }
    t->root->mtime = t->now;
    t->root->links = 1;
    return t;
}

void lz_tree_free(struct lz_tree *t)
{
    if (!t)
        return;
    node_unref(t->root);
    free(t);
}

struct lz_node *lz_tree_root(struct lz_tree *t)
{
    return t->root;
}

/* layer.c's open_dir_beneath: the directory at path, made on the way when
 * create (0755 less the umask, owned by the importer: root in the image);
 * never through a symlink. */
static struct lz_node *open_dir(struct lz_tree *t, const char *path, bool create, const char *entry, skiff_err *err)
{
    struct lz_node *d = t->root;
    char buf[SKIFF_ENTRY_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        struct lz_dent *e = dir_find(d, c);
        if (!e) {
            if (!create) {
                skiff_layer_err_missing(err, entry, path);
                return NULL;
            }
            struct lz_node *n = node_new(S_IFDIR | (0755 & ~t->umask));
            if (n)
                n->mtime = t->now;
            if (!n || dir_add(d, c, n) < 0) {
                free(n);
                skiff_error(err, ENOMEM, "entry '%s'", entry);
                return NULL;
            }
            d = n;
            continue;
        }
        if (S_ISLNK(e->node->mode)) {
            skiff_layer_err_through_symlink(err, entry, path);
            return NULL;
        }
        if (!S_ISDIR(e->node->mode)) {
            skiff_error(err, ENOTDIR, "entry '%s': open '%s'", entry, path);
            return NULL;
        }
        d = e->node;
    }
    return d;
}

static void split(const char *path, char *parent, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (slash) {
        memcpy(parent, path, (size_t)(slash - path));
        parent[slash - path] = '\0';
        *base = slash + 1;
    } else {
        parent[0] = '\0';
        *base = path;
    }
}

int lz_tree_put(struct lz_tree *t, const struct lz_entry *e, uint32_t layer, struct lz_node **made, skiff_err *err)
{
    if (made)
        *made = NULL;
    char parent[SKIFF_ENTRY_PATH_MAX];
    const char *base;
    split(e->path, parent, &base);
    struct lz_node *d = open_dir(t, parent, true, e->raw, err);
    if (!d)
        return -1;
    switch (e->kind) {
    case SKIFF_ENTRY_OPAQUE:
        clear_dir(d);
        return 0;
    case SKIFF_ENTRY_WHITEOUT:
        dir_remove(d, base + 4);
        return 0;
    case SKIFF_ENTRY_HARDLINK: {
        char tparent[SKIFF_ENTRY_PATH_MAX];
        const char *tbase;
        split(e->target, tparent, &tbase);
        struct lz_node *td = open_dir(t, tparent, false, e->raw, err);
        if (!td)
            return skiff_err_wrap(err, "hardlink '%s' -> '%s'", e->raw, e->target);
        struct lz_dent *te = dir_find(td, tbase);
        if (!te)
            return skiff_layer_err_link_target(err, ENOENT, e->raw, e->target);
        if (S_ISDIR(te->node->mode))
            return skiff_layer_err_link_dir(err, e->raw, e->target);
        if (!strcmp(e->target, e->path))
            return 0;
        struct lz_node *n = te->node;
        n->links++; /* held across the removal of base, which may be n itself */
        dir_remove(d, base);
        int rv = dir_add(d, base, n);
        node_unref(n);
        return rv < 0 ? skiff_error(err, ENOMEM, "entry '%s'", e->raw) : 0;
    }
    default:
        break;
    }
    struct lz_dent *old = dir_find(d, base);
    if (e->kind == SKIFF_ENTRY_DIR && old && S_ISDIR(old->node->mode)) {
        /* an existing directory stays, with its contents: mode and owner change */
        struct lz_node *n = old->node;
        n->mode = S_IFDIR | (t->as_root ? e->mode : (e->mode | 0700));
        if (t->as_root) {
            n->uid = e->uid;
            n->gid = e->gid;
        }
        return 0;
    }
    if (old)
        dir_remove(d, base);
    mode_t mode;
    switch (e->kind) {
    case SKIFF_ENTRY_DIR:
        mode = S_IFDIR | (t->as_root ? e->mode : (e->mode | 0700));
        break;
    case SKIFF_ENTRY_REG:
        mode = S_IFREG | e->mode;
        break;
    case SKIFF_ENTRY_SYMLINK:
        mode = S_IFLNK | 0777;
        break;
    default: /* FIFO: mknodat's mode, less the umask */
        mode = S_IFIFO | (e->mode & 0777 & ~t->umask);
        break;
    }
    struct lz_node *n = node_new(mode);
    if (!n)
        return skiff_error(err, ENOMEM, "entry '%s'", e->raw);
    if (t->as_root) {
        n->uid = e->uid;
        n->gid = e->gid;
    }
    /* layer.c stamps files and symlinks with the entry's time; a directory
     * or a FIFO keeps the time it was made */
    n->mtime = e->kind == SKIFF_ENTRY_REG || e->kind == SKIFF_ENTRY_SYMLINK ? e->mtime : t->now;
    if (e->kind == SKIFF_ENTRY_REG) {
        n->size = e->size;
        n->off = e->off;
        n->layer = layer;
    }
    if (e->kind == SKIFF_ENTRY_SYMLINK && !(n->target = strdup(e->target))) {
        free(n);
        return skiff_error(err, ENOMEM, "entry '%s'", e->raw);
    }
    if (dir_add(d, base, n) < 0) {
        free(n->target);
        free(n);
        return skiff_error(err, ENOMEM, "entry '%s'", e->raw);
    }
    if (made)
        *made = n;
    return 0;
}

int lz_tree_apply(struct lz_tree *t, const struct lz_index *ix, uint32_t layer, skiff_err *err)
{
    for (uint32_t i = 0; i < ix->nentries; i++)
        if (lz_tree_put(t, &ix->entries[i], layer, NULL, err) < 0)
            return -1;
    return 0;
}

int lz_tree_add_imgconfig(struct lz_tree *t, uint64_t off, uint64_t config_len, uint64_t env_len,
                          struct lz_node *made[2], skiff_err *err)
{
    /* imgconfig.c's skiff_imgconfig_write: whatever was at /.skiff goes,
     * a 0755 directory with two 0644 files comes */
    dir_remove(t->root, ".skiff");
    struct lz_node *d = node_new(S_IFDIR | 0755);
    if (d)
        d->mtime = t->now;
    if (!d || dir_add(t->root, ".skiff", d) < 0) {
        free(d);
        return skiff_error(err, ENOMEM, "/.skiff");
    }
    static const char *const names[] = {"config.json", "environment"};
    uint64_t lens[] = {config_len, env_len}, at = off;
    for (int i = 0; i < 2; i++) {
        struct lz_node *f = node_new(S_IFREG | 0644);
        if (!f || dir_add(d, names[i], f) < 0) {
            free(f);
            return skiff_error(err, ENOMEM, "/.skiff");
        }
        f->size = lens[i];
        f->off = at;
        if (made)
            made[i] = f;
        f->mtime = t->now;
        at += lens[i];
    }
    return 0;
}

/* ---- for the skeleton (lazyskel.c) ---- */

static int cmp_dent(const void *a, const void *b)
{
    return strcmp(((const struct lz_dent *)a)->name, ((const struct lz_dent *)b)->name);
}

/* d's entries sorted by name (squashfs wants them so), compacted. */
int lz_tree_sorted(struct lz_node *d, struct lz_dent **ents, uint32_t *n)
{
    if (d->nslots && reindex(d, d->nslots) < 0)
        return -1;
    if (d->nents > 1) /* (an empty directory has no array: qsort(NULL) is undefined) */
        qsort(d->ents, d->nents, sizeof(*d->ents), cmp_dent);
    if (d->nslots && reindex(d, d->nslots) < 0)
        return -1;
    *ents = d->ents;
    *n = d->nents;
    return 0;
}
