/* Private to image import (image.c, source.c, fetch.c, resolve.c), whose
 * API is image.h: the state of one import, shared by its steps. image.c
 * runs an import (scratch tree, squashfs, publishing); resolve.c finds or
 * imports plugin images through the caches;
 * source.c plans the layers and the image config from the source (registry,
 * OCI layout, skopeo dir, docker and OCI archives); fetch.c downloads
 * registry layers, several at once, while it applies them in order. */
#ifndef SKIFF_IMPORT_INT_H
#define SKIFF_IMPORT_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "atomicfile.h"
#include "clock.h" /* skiff_now_s for progress lines */
#include "config.h"
#include "digest.h"
#include "error.h"
#include "image.h"
#include "ref.h"

#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define JSON_MAX (16u << 20)

struct skiff_import_layer {
    char digest[SKIFF_DIGEST_LEN]; /* "" when the source names none (docker-archive) */
    char path[SKIFF_PATH_MAX];     /* the blob on disk */
    bool verified;                 /* digest already checked (just downloaded) */
    long long size;
    /* Registry layers not in the cache are downloaded by a thread while the
     * layers before them are applied, and applied while they download. */
    bool remote;                   /* set while planning: downloaded by the fetcher */
    int state;                     /* BLOB_* (guarded by job.mu once it runs) */
    unsigned long long avail;      /* bytes written so far */
    unsigned long long counted;    /* of them, counted in the job's progress */
    struct skiff_atomic dl;        /* the download, under its temporary name */
    char error[SKIFF_ERR_MSG_MAX]; /* why the download failed */
};

enum { BLOB_READY, BLOB_PENDING, BLOB_RUNNING, BLOB_DONE, BLOB_FAILED };

struct skiff_import_job {
    const struct skiff_config *cfg;
    const struct skiff_import_opts *o;
    struct skiff_ref ref;
    char arch[80], variant[32];
    char work[SKIFF_PATH_MAX]; /* scratch dir: rootfs/ and src/ */
    struct skiff_registry *reg;
    char src[SKIFF_PATH_MAX]; /* layout dir for oci:/dir:/archives */
    int srcfd;                /* src when skiff unpacked it (archives), else -1 */
    json_t *config;           /* the image config (whole) */
    struct skiff_import_layer *layers;
    size_t nlayers;
    char manifest_digest[SKIFF_DIGEST_LEN];
    char config_digest[SKIFF_DIGEST_LEN]; /* the image config's blob */
    /* Blobs this import put in the cache: removed again if it fails, so a
     * refused image leaves nothing behind. */
    char **fetched;
    size_t nfetched;
    /* the download threads (at most cfg->max_connections), each with a
     * registry handle of its own, taking pending layers in order */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *fetch_tids;
    unsigned nfetchers, fetchers_left;
    size_t fetch_next; /* the next layer a thread may take */
    bool fetching, fetch_abort, fetch_over;
    /* progress of the downloads (under mu) */
    unsigned long long dl_total, dl_base; /* bytes to download; of them done in finished layers */
    unsigned dl_layers, dl_layers_done;
    double dl_t0, dl_last_report;
};

/* ---- image.c ---- */

/* Frees what j holds: the download thread stopped, the registry closed,
 * the scratch dir removed; when failed, the blobs it put in the cache too. */
void skiff_import_job_free(struct skiff_import_job *j, bool failed);

/* What an import was made of, for the cache's records. */
struct skiff_import_result {
    char manifest_digest[SKIFF_DIGEST_LEN];
    char *layers; /* the registry blobs it used, space-separated (malloc'd), or NULL */
};

/* Imports ref into out_path (temp + rename; force: replace it). */
int skiff_import_ref(const struct skiff_config *cfg, const struct skiff_ref *ref, const char *out_path,
                     const struct skiff_import_opts *o, bool force, struct skiff_import_result *res, skiff_err *err);

/* ---- source.c ---- */

/* The host's architecture as images name it (amd64, arm64, ...). */
void skiff_source_host_arch(char *arch, size_t n);

/* j->arch and j->variant from -a ARCH[/VARIANT] (NULL or "": the host's). */
void skiff_source_set_arch(struct skiff_import_job *j, const char *want);

/* Opens a file of the source; inside an archive skiff unpacked, confined to it. */
int skiff_source_open(const struct skiff_import_job *j, const char *path, skiff_err *err);

/* Notes a blob this import put in the cache (removed again if the import
 * fails; a note that cannot be made only leaves the blob cached). */
void skiff_source_fetched(struct skiff_import_job *j, const char *path);

/* Reads the source's manifest (unpacking an archive into j->work first):
 * fills j->config and j->layers, downloading the config (registry). */
int skiff_source_plan(struct skiff_import_job *j, skiff_err *err);

/* ---- fetch.c ---- */

/* Applies j's layers in order onto rootfd, or hands them to sink when it is
 * not NULL (pack.h); registry layers not in the cache are downloaded
 * meanwhile (up to cfg->max_connections at once, retried and resumed:
 * registry.h) and applied as they arrive. */
struct skiff_layer_sink;
int skiff_fetch_apply_layers(struct skiff_import_job *j, int rootfd, const struct skiff_layer_sink *sink,
                             skiff_err *err);

/* Stops and joins the download threads, if they run. */
void skiff_fetch_stop(struct skiff_import_job *j);

#endif
