/* Image manifests, indexes and configs as an import reads them
 * (runtime/lib/image/source.c): an OCI layout (index.json, nested indexes,
 * platforms, manifests, configs), skopeo's dir layout, and docker-save and
 * OCI archives (tar, unpacked with a layer's checks, runtime/lib/image/layer.c).
 * Registry manifests go through the same code after the download.
 *
 * Input: byte 0 picks the source (bits 0-1: oci, dir, docker-archive,
 * oci-archive), a tag (bit 2) and the platform asked for (bits 3-4); the
 * rest is up to 9 sections split at "\n--\n": section 0 is index.json
 * (oci) or manifest.json (the others), sections 1-8 are blobs, stored
 * under their sha256. In any section "@N" (N > its own number) becomes the
 * 64 hex digits of section N, so documents can name each other by digest.
 *
 * Properties: a failure says why; a plan has a JSON object as its config,
 * layers with sha256 digests (docker-archive: none or sha256) and paths
 * inside the source, and for oci a manifest digest. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "fuzzlib.h"
#include "import_int.h"
#include "ref.h"

#define NSEC 9

struct section {
    char *data;
    size_t len;
    char hex[65];
};

/* Replaces "@N" (N > self) by section N's hex digest. */
static void substitute(struct section *sec, size_t n, size_t self)
{
    struct section *s = &sec[self];
    size_t cap = s->len * 32 + 1, o = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (size_t i = 0; i < s->len; i++) {
        size_t k = i + 1 < s->len ? (size_t)(s->data[i + 1] - '0') : 0;
        if (s->data[i] == '@' && i + 1 < s->len && k > self && k < n) {
            memcpy(out + o, sec[k].hex, 64);
            o += 64;
            i++;
        } else {
            out[o++] = s->data[i];
        }
    }
    free(s->data);
    s->data = out;
    s->len = o;
    char d[SKIFF_DIGEST_LEN];
    skiff_err err;
    if (skiff_digest_buf(out, o, d, &err) < 0)
        abort();
    memcpy(s->hex, d + 7, 65);
}

static void put(int fd, const void *p, size_t n)
{
    if (n && write(fd, p, n) != (ssize_t)n)
        abort();
}

/* One ustar member (hand-written: the format is 512-byte blocks, and the
 * harness must not depend on the library it tests). */
static void tar_member(int fd, const char *name, char type, const char *data, size_t len)
{
    unsigned char h[512];
    memset(h, 0, sizeof(h));
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, type == '5' ? "0000755" : "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)len);
    memcpy(h + 136, "00000000000", 12);
    memset(h + 148, ' ', 8);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    put(fd, h, 512);
    put(fd, data, len);
    static const char zero[512];
    put(fd, zero, (512 - len % 512) % 512);
}

static void check_plan(const struct skiff_import_job *j, int kind)
{
    FUZZ_CHECK(json_is_object(j->config), "a plan without a config object");
    FUZZ_CHECK(j->nlayers == 0 || j->layers, "layers missing");
    if (kind == 0 || kind == 3)
        FUZZ_CHECK(skiff_ref_valid_digest(j->manifest_digest), "manifest digest '%s'", j->manifest_digest);
    size_t sl = strlen(j->src);
    for (size_t i = 0; i < j->nlayers; i++) {
        const struct skiff_import_layer *l = &j->layers[i];
        if (kind == 2)
            FUZZ_CHECK(!l->digest[0] || skiff_ref_valid_digest(l->digest), "layer %zu digest '%s'", i, l->digest);
        else
            FUZZ_CHECK(skiff_ref_valid_digest(l->digest), "layer %zu digest '%s'", i, l->digest);
        FUZZ_CHECK(!strncmp(l->path, j->src, sl) && l->path[sl] == '/', "layer %zu at '%s', outside %s", i, l->path,
                   j->src);
        FUZZ_CHECK(!strstr(l->path + sl, "/../"), "layer %zu at '%s'", i, l->path);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    int kind = data[0] & 3;
    static const char *const arches[] = {NULL, "arm64", "arm/v7", "linux/386"};
    struct fuzz_part parts[NSEC];
    size_t n = fuzz_split(data + 1, size - 1, "\n--\n", parts, NSEC);
    struct section sec[NSEC];
    for (size_t i = 0; i < n; i++) {
        sec[i].data = malloc(parts[i].len + 1);
        if (!sec[i].data)
            abort();
        memcpy(sec[i].data, parts[i].p, parts[i].len);
        sec[i].len = parts[i].len;
    }
    for (size_t i = n; i-- > 0;)
        substitute(sec, n, i);

    char dir[4096], src[4096 + 64], name[256];
    snprintf(dir, sizeof(dir), "%s/m", fuzz_dir());
    mkdir(dir, 0700);
    fuzz_empty_dir(dir);
    snprintf(src, sizeof(src), "%s/layout", dir);
    mkdir(src, 0700);
    struct skiff_import_job j;
    memset(&j, 0, sizeof(j));
    j.srcfd = -1;
    skiff_source_set_arch(&j, arches[(data[0] >> 3) & 3]);
    if (data[0] & 4)
        snprintf(j.ref.tag, sizeof(j.ref.tag), "latest");
    if (kind == 0 || kind == 1) { /* a directory */
        j.ref.kind = kind == 0 ? SKIFF_REF_OCI : SKIFF_REF_DIR;
        snprintf(j.ref.path, sizeof(j.ref.path), "%s", src);
        snprintf(name, sizeof(name), "%s/blobs", src);
        mkdir(name, 0700);
        snprintf(name, sizeof(name), "%s/blobs/sha256", src);
        mkdir(name, 0700);
        for (size_t i = 0; i < n; i++) {
            char p[8192];
            if (i == 0)
                snprintf(p, sizeof(p), "%s/%s", src, kind == 0 ? "index.json" : "manifest.json");
            else
                snprintf(p, sizeof(p), "%s/%s%s", src, kind == 0 ? "blobs/sha256/" : "", sec[i].hex);
            int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0)
                abort();
            put(fd, sec[i].data, sec[i].len);
            close(fd);
        }
    } else { /* an archive */
        j.ref.kind = kind == 2 ? SKIFF_REF_DOCKER_ARCHIVE : SKIFF_REF_OCI_ARCHIVE;
        snprintf(j.ref.path, sizeof(j.ref.path), "%s/image.tar", dir);
        snprintf(j.work, sizeof(j.work), "%s/work", dir);
        mkdir(j.work, 0700);
        int fd = open(j.ref.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            abort();
        tar_member(fd, "blobs/", '5', "", 0);
        tar_member(fd, "blobs/sha256/", '5', "", 0);
        for (size_t i = 0; i < n; i++) {
            if (i == 0)
                snprintf(name, sizeof(name), "%s", kind == 2 ? "manifest.json" : "index.json");
            else
                snprintf(name, sizeof(name), "blobs/sha256/%s", sec[i].hex);
            tar_member(fd, name, '0', sec[i].data, sec[i].len);
        }
        static const char zero[1024];
        put(fd, zero, sizeof(zero));
        close(fd);
    }

    skiff_err err = {0};
    int rc = skiff_source_plan(&j, &err);
    fuzz_check_failure(rc, &err, "skiff_source_plan");
    if (rc == 0)
        check_plan(&j, kind);
    json_decref(j.config);
    free(j.layers);
    if (j.srcfd >= 0)
        close(j.srcfd);
    for (size_t i = 0; i < n; i++)
        free(sec[i].data);
    return 0;
}
