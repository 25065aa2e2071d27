/* cache: the image cache, per user under cfg->cache_path, and the site's
 * read-only store under cfg->system_cache_path (store.h), both laid out
 * alike:
 *   blobs/sha256/<hex>   compressed layer blobs from registries, by digest
 *   images/<key>.sqsh    an image, published by rename and never changed
 *                        after; in the user's cache its readers hold a
 *                        shared flock(2) on it while they use it, pruning
 *                        takes an exclusive one (never waiting) to remove
 *                        it; in the store nobody locks it (below)
 *   images/<key>.lock    flock serialising imports of one key; while an
 *                        import runs it names the importer (HOST pid PID
 *                        since EPOCH), for those who wait
 *   images/<key>.info    key = value: the reference imported, its digest,
 *                        the layers it was made of; its mtime is when the
 *                        image was last used (what prune goes by)
 *   tags/<refkey>        key = value: a reference's last resolution (its
 *                        manifest digest, the image key, when): tag_ttl and
 *                        the offline fallback read it
 * The user's directories are created 0700 (private); the store's 0755.
 *
 * Locks (doc/SECURITY.md, "Locks"): every lock skiff takes is on a file
 * only its taker's uid can open, or is taken without waiting. The user's
 * cache is private, so its locks are the user's own. The store's images
 * are readable by every user, and flock(2) lets a reader take even an
 * exclusive lock on a read-only fd: so nobody locks them at all. Its
 * readers open them and go (an image is immutable once renamed into
 * place); its owner's prune removes by age and unlinks, which leaves an
 * open image readable by those who have it open. The store's import locks
 * (KEY.lock) are 0600 files of its owner's. */
#ifndef SKIFF_CACHE_H
#define SKIFF_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "config.h"
#include "digest.h"
#include "error.h"

/* mkdir -p of cache_path/sub (0700). */
int skiff_cache_dir(const struct skiff_config *cfg, const char *sub, char *out, size_t n, skiff_err *err);

/* Path of blob digest in the cache (whether it exists or not). */
int skiff_cache_blob_path(const struct skiff_config *cfg, const char *digest, char *out, size_t n, skiff_err *err);

/* Whether k is an image key (64 lower-case hex digits). */
bool skiff_cache_valid_key(const char *k);

/* The files of image key under root (a cache or the store). */
struct skiff_cache_paths {
    char sqsh[SKIFF_PATH_MAX + 96], lock[SKIFF_PATH_MAX + 96], info[SKIFF_PATH_MAX + 96];
};
int skiff_cache_paths(const char *root, const char *key, struct skiff_cache_paths *p, skiff_err *err);

/* How an image is held while it is used. */
enum skiff_hold {
    SKIFF_HOLD_LOCKED, /* the user's own cache: a shared lock, which pruning respects */
    SKIFF_HOLD_OPEN,   /* the site's store: open only, nothing another user can block */
};

/* Opens the image at sqsh for as long as the fd is open, checking that it
 * is still the file at sqsh once held (a prune may have removed it
 * meanwhile): the fd, or -1 with err->code ENOENT when it is not there.
 * SKIFF_HOLD_LOCKED also takes a shared lock on it (pruning leaves it
 * alone), waiting for the user's own prune to let go of it if one is
 * looking at it right then. */
int skiff_cache_hold(const char *sqsh, enum skiff_hold how, skiff_err *err);

/* Holds the image at sqsh (a path skiff_image_resolve gave) while it is
 * in use, as skiff_cache_hold says: an image of the user's cache
 * with a shared lock that the user's pruning honours; one of the site's
 * store open only (its other readers are other users: none may be able to
 * hold this one back), after the store's checks (store.h). The fd, or -1
 * with err->code ENOENT when a prune removed it meanwhile (resolve again). */
int skiff_cache_hold_image(const struct skiff_config *cfg, const char *sqsh, skiff_err *err);

/* Waiting for another process's import of the same image. */
struct skiff_cache_wait {
    double deadline_ms; /* skiff_now_ms() at which it gives up (ETIMEDOUT); 0: none */
    /* told once the lock is found taken: who holds it and since when */
    void (*waiting)(void *ctx, const char *who, double running_s);
    void *ctx;
};

/* Takes the import lock at path (exclusive), waiting as w says while
 * another process holds it, then writes who this process is into it.
 * Returns the fd; skiff_cache_import_unlock gives it back. */
int skiff_cache_import_lock(const char *path, const struct skiff_cache_wait *w, skiff_err *err);
void skiff_cache_import_unlock(int fd);

/* A reference's last resolution (tags/<refkey>). */
struct skiff_cache_tag {
    char ref[2048];                /* canonical reference */
    char digest[SKIFF_DIGEST_LEN]; /* its manifest digest */
    char key[80];                  /* the image's key */
    time_t resolved;               /* when the registry said so */
};

/* 1 with *t filled, 0 when there is none (or it does not parse). With
 * owner (the site's store: its readers are other users), tags/ and the
 * record must belong to *owner and be writable by nobody else, as the
 * store's images (store.h): -1 with err naming the file otherwise. */
int skiff_cache_tag_read(const char *root, const char *refkey, const uid_t *owner, struct skiff_cache_tag *t,
                         skiff_err *err);
int skiff_cache_tag_write(const char *root, const char *refkey, const struct skiff_cache_tag *t, mode_t mode,
                          skiff_err *err);

/* What an image was made from (images/<key>.info). */
struct skiff_cache_info {
    char ref[2048];                /* the reference imported */
    char digest[SKIFF_DIGEST_LEN]; /* its manifest digest, "" for local sources */
    time_t imported;
    char *layers; /* blob digests, space-separated (malloc'd), or NULL */
};

int skiff_cache_info_write(const char *path, const struct skiff_cache_info *in, mode_t mode, skiff_err *err);
int skiff_cache_info_read(const char *path, struct skiff_cache_info *in); /* 1, or 0 when there is none */
void skiff_cache_info_free(struct skiff_cache_info *in);

/* Marks image key used now (its info file's mtime; nothing when the
 * cache is not writable, as the store is to its users). */
void skiff_cache_touch(const char *root, const char *key);

/* ---- listing and pruning ------------------------------------------------ */

struct skiff_cache_entry {
    char key[80];
    char path[SKIFF_PATH_MAX + 96];
    unsigned long long size; /* the image */
    time_t last_used;        /* the info file's mtime, else the image's */
    struct skiff_cache_info info;
    char *tags;        /* references whose last resolution is this image, ", "-separated (malloc'd) */
    bool in_use;       /* a process holds it (shared lock) or imports it */
    bool lazy;         /* a lazy image (doc/lazy.md): path is its directory */
    char data_key[24]; /* lazy: names its data files under lazy_path (its plan's "key") */
};

struct skiff_cache_listing {
    struct skiff_cache_entry *images;
    size_t nimages;
    unsigned long long images_bytes;
    unsigned long long blobs_bytes; /* all of blobs/ */
    size_t nblobs;
};

/* The images under root, most recently used first: squashfs images and
 * lazy images (images/KEY.lazy), whose size counts their data files under
 * lazy_path (NULL: none) on every node. store: root is the site's store,
 * whose images only an import running marks in use (nobody locks them). */
int skiff_cache_list(const char *root, const char *lazy_path, bool store, struct skiff_cache_listing *out,
                     skiff_err *err);
void skiff_cache_listing_free(struct skiff_cache_listing *l);

struct skiff_prune_opts {
    bool all;            /* every image not in use */
    double older_than_s; /* images (and unreferenced blobs) unused this long; < 0: not asked */
    bool max_size_set;   /* shrink the cache (images + blobs) to max_size bytes, least recently used first */
    unsigned long long max_size;
    bool dry_run; /* say, do not remove */
    /* images to leave although nobody holds them now (a named container's
     * image: the CLI and the plugin's helper know them); NULL: none */
    bool (*keep)(void *ctx, const char *sqsh_path);
    void *keep_ctx;
    /* told for each image or blob removed (or that would be, dry_run):
     * what (a path), its size, why ("unused for 3 d", "over the size", ...) */
    void (*removed)(void *ctx, const char *what, unsigned long long bytes, const char *why);
    void *ctx;
    const char *lazy_path; /* where lazy images' data files are (NULL: none) */
    /* root is the site's store: its readers hold no lock (store.h), so an
     * image there is in use only while an import of it runs; one a job
     * has open stays readable to it after the unlink (not on NFS: prune
     * the store by age, doc/admin-guide.md) */
    bool store;
};

struct skiff_prune_result {
    unsigned images, blobs, in_use; /* removed, and images kept because they are in use */
    unsigned long long freed, left; /* bytes freed; bytes the cache holds after */
};

/* Removes from the cache at root what o asks, never an image in use (a
 * shared lock held by a running container, or an import running; in the
 * store, o->store, an import running only). It never waits for a lock. Blobs
 * are only a download cache (a container needs its image, not them): the
 * blobs no image names go first, then, when the size is still over, those
 * of the least recently used images, before any image. With no option,
 * only what nothing uses goes: blobs no image names, leftover temporary
 * files, records pointing nowhere. */
int skiff_cache_prune(const char *root, const struct skiff_prune_opts *o, struct skiff_prune_result *res,
                      skiff_err *err);

#endif
