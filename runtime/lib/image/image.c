/* Image import and resolve; see image.h. The sources are read in source.c,
 * the layers downloaded and applied in fetch.c (import_int.h). */
#include "image.h"
#include "import_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "atomicfile.h"
#include "cache.h"
#include "clock.h"
#include "fdio.h"
#include "fsutil.h"
#include "imgconfig.h"
#include "lazy.h"
#include "registry.h"
#include "squash.h"

/* ---- import ----------------------------------------------------------- */

void skiff_import_job_free(struct skiff_import_job *j, bool failed)
{
    skiff_fetch_stop(j);
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

static int make_work(struct skiff_import_job *j, unsigned long long need, skiff_err *err)
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
static unsigned long long unpacked_estimate(const struct skiff_import_job *j)
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

static int import_to(struct skiff_import_job *j, const char *tmp_out, skiff_err *err)
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
        double t0 = skiff_now_s();
        if (skiff_squash_build(j->cfg, j->ref.path, tmp_out, err) < 0)
            return skiff_err_wrap(err, "dir:%s", j->ref.path);
        if (j->o && j->o->progress)
            fprintf(stderr, "skiff: squashfs (%s) %5.2f s\n", j->cfg->squash_compression, skiff_now_s() - t0);
        return 0;
    }
    if (skiff_source_plan(j, err) < 0)
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
    if (skiff_fetch_apply_layers(j, rootfd, err) < 0)
        return -1;
    if (skiff_imgconfig_write(rootfd, j->config, j->o ? j->o->warn : NULL, j->o ? j->o->warn_ctx : NULL, err) < 0)
        return skiff_err_wrap(err, "image metadata");
    /* The compressed sources are not needed any more: free the scratch space
     * before mksquashfs needs memory (temp_path may be a tmpfs). */
    if (j->src[0] && !strncmp(j->src, j->work, strlen(j->work))) {
        skiff_err e;
        skiff_remove_tree(j->src, &e);
    }
    double t0 = skiff_now_s();
    if (skiff_squash_build(j->cfg, root, tmp_out, err) < 0)
        return -1;
    if (j->o && j->o->progress)
        fprintf(stderr, "skiff: squashfs (%s) %5.2f s\n", j->cfg->squash_compression, skiff_now_s() - t0);
    return 0;
}

static int import_ref(const struct skiff_config *cfg, const struct skiff_ref *ref, const char *out_path,
                      const struct skiff_import_opts *o, bool force, char *manifest_digest, skiff_err *err)
{
    struct skiff_import_job j;
    memset(&j, 0, sizeof(j));
    j.cfg = cfg;
    j.o = o;
    j.ref = *ref;
    j.srcfd = -1;
    skiff_source_set_arch(&j, o ? o->arch : NULL);
    /* mksquashfs writes the temporary file by its name; not synced (as
     * mksquashfs's own output never was) */
    struct skiff_atomic out;
    if (skiff_atomic_begin(&out, out_path, NULL, 0600, SKIFF_ATOMIC_NOSYNC | (force ? 0 : SKIFF_ATOMIC_NOREPLACE),
                           err) < 0)
        return -1;
    close(out.fd);
    out.fd = -1;
    int rv = import_to(&j, out.tmp, err);
    if (rv == 0 && chmod(out.tmp, 0644) < 0)
        rv = skiff_error(err, errno, "chmod %s", out.tmp);
    if (rv == 0 && skiff_atomic_commit(&out, err) < 0)
        rv = err->code == EEXIST ? skiff_error(err, 0, "%s exists (use -f to replace it)", out_path) : -1;
    if (rv < 0)
        skiff_atomic_abort(&out);
    if (rv == 0 && manifest_digest)
        snprintf(manifest_digest, SKIFF_DIGEST_LEN, "%s", j.manifest_digest);
    skiff_import_job_free(&j, rv < 0);
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

int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path, size_t n,
                        const struct skiff_resolve_progress *progress, skiff_err *err)
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
    struct skiff_ref ref;
    if (skiff_ref_parse(uri, cfg->default_registry, &ref, err) < 0)
        return -1;
    char canon[2048], arch[80];
    if (skiff_ref_canonical(&ref, canon, sizeof(canon), err) < 0)
        return -1;
    skiff_source_host_arch(arch, sizeof(arch));
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
        bool archive = ref.kind == SKIFF_REF_DOCKER_ARCHIVE || ref.kind == SKIFF_REF_OCI_ARCHIVE;
        /* a FIFO would hold the import (and the step) until its deadline */
        if (archive ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))
            return skiff_error(err, 0, "%s: %s is not a %s", uri, real, archive ? "regular file" : "directory");
        if (S_ISDIR(st.st_mode)) {
            char idx[PATH_MAX + 16];
            snprintf(idx, sizeof(idx), "%s/%s", real, ref.kind == SKIFF_REF_OCI ? "index.json" : "manifest.json");
            if (stat(idx, &st) < 0)
                return skiff_error(err, errno, "%s: %s", uri, idx);
        }
        skiff_fmt_path(keytext, sizeof(keytext), err, "local|%d|%s|%s|%lu|%lu|%lld|%lld.%09ld|%s", (int)ref.kind, real,
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
        /* image_mode: a lazy image when it can be one (lazy.h) */
        int lazy = skiff_lazy_resolve(cfg, uri, images, key, sqsh_path, n, progress, err);
        if (lazy != 0)
            return lazy < 0 ? -1 : 0;
        struct skiff_import_opts o = {.force = true};
        double t0 = skiff_now_ms();
        if (progress && progress->importing)
            progress->importing(progress->ctx, uri);
        if (import_ref(cfg, &ref, path, &o, true, NULL, err) < 0) {
            /* Waiters holding this inode's lock still serialise correctly: they
             * re-check for the image and publish by rename. */
            unlink(lockp);
            return skiff_err_wrap(err, "import %s", uri);
        }
        struct stat ist;
        if (progress && progress->imported)
            progress->imported(progress->ctx, uri, stat(path, &ist) == 0 ? (unsigned long long)ist.st_size : 0,
                               skiff_now_ms() - t0);
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
