/* Image import; see image.h. The sources are read in source.c, the
 * layers downloaded and applied in fetch.c (import_int.h); resolving
 * --container-image through the caches is resolve.c's. */
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
#include "pack.h"
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

/* The layers streamed into the squashfs (pack.h): no scratch tree. */
static int pack_to(struct skiff_import_job *j, const char *tmp_out, skiff_err *err)
{
    struct skiff_pack *k;
    if (skiff_pack_open(j->cfg, tmp_out, &k, err) < 0)
        return -1;
    int rv = skiff_fetch_apply_layers(j, -1, skiff_pack_sink(k), err);
    double t0 = skiff_now_s();
    if (rv == 0 && skiff_pack_finish(k, j->config, j->o ? j->o->warn : NULL, j->o ? j->o->warn_ctx : NULL, err) < 0)
        rv = skiff_err_wrap(err, "squashfs");
    skiff_pack_free(k);
    if (rv == 0 && j->o && j->o->progress)
        fprintf(stderr, "skiff: squashfs (%s) last blocks and metadata %5.2f s\n", j->cfg->squash_compression,
                skiff_now_s() - t0);
    return rv;
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
    if (skiff_pack_usable(j->cfg))
        return pack_to(j, tmp_out, err);
    if (!j->work[0] && make_work(j, unpacked_estimate(j), err) < 0)
        return -1;

    char root[SKIFF_PATH_MAX + 16];
    snprintf(root, sizeof(root), "%s/rootfs", j->work);
    if (mkdir(root, 0755) < 0 || chmod(root, 0755) < 0)
        return skiff_error(err, errno, "mkdir %s", root);
    cleanup_close int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return skiff_error(err, errno, "open %s", root);
    if (skiff_fetch_apply_layers(j, rootfd, NULL, err) < 0)
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

int skiff_import_ref(const struct skiff_config *cfg, const struct skiff_ref *ref, const char *out_path,
                     const struct skiff_import_opts *o, bool force, struct skiff_import_result *res, skiff_err *err)
{
    struct skiff_import_job j;
    memset(&j, 0, sizeof(j));
    j.cfg = cfg;
    j.o = o;
    j.ref = *ref;
    j.srcfd = -1;
    skiff_source_set_arch(&j, o ? o->arch : NULL);
    /* mksquashfs and libsquashfs write the temporary file by its name; not
     * synced (as mksquashfs's own output never was) */
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
    if (rv == 0 && res) {
        memset(res, 0, sizeof(*res));
        snprintf(res->manifest_digest, sizeof(res->manifest_digest), "%s", j.manifest_digest);
        for (size_t i = 0; i <= j.nlayers; i++) {
            const char *d = i < j.nlayers ? j.layers[i].digest : j.config_digest;
            if (j.ref.kind != SKIFF_REF_DOCKER || !d[0])
                continue;
            size_t have = res->layers ? strlen(res->layers) : 0;
            char *nl = realloc(res->layers, have + strlen(d) + 2);
            if (!nl)
                break; /* a shorter list only lets prune take more blobs */
            snprintf(nl + have, strlen(d) + 2, "%s%s", have ? " " : "", d);
            res->layers = nl;
        }
    }
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
    if (skiff_import_ref(cfg, &ref, out_path, o, force, NULL, err) < 0)
        return skiff_err_wrap(err, "%s", uri);
    if (out && snprintf(out, outsz, "%s", out_path) >= (int)outsz)
        return skiff_error(err, ENAMETOOLONG, "output path");
    return 0;
}
