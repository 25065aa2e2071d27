/* skiff configuration: /etc/skiff/skiff.conf (key = value, '#' comments) with
 * SKIFF_<KEY> environment overrides. Every key has a default, so no file is
 * needed. Keys are documented in doc/admin-guide.md. */
#ifndef SKIFF_CONFIG_H
#define SKIFF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SKIFF_CONFIG_DEFAULT_PATH "/etc/skiff/skiff.conf"
#define SKIFF_PATH_MAX 4096
/* The enroot release whose command line, configuration and hook contract
 * skiff follows (skiff-enroot, enroot_compat): its ENROOT_VERSION. */
#define SKIFF_ENROOT_COMPAT_VERSION "3.5.0"

struct skiff_config {
    char data_path[SKIFF_PATH_MAX];        /* named containers, per user */
    char cache_path[SKIFF_PATH_MAX];       /* layer + image cache, per user */
    char runtime_path[SKIFF_PATH_MAX];     /* state of running containers */
    char temp_path[SKIFF_PATH_MAX];        /* scratch for imports */
    char block_cache_path[SKIFF_PATH_MAX]; /* decompressed squashfs blocks; "" = runtime_path/blocks */
    int block_cache_mb;                    /* per image; 0 = no block cache */
    char hooks_dir[SKIFF_PATH_MAX];        /* executables run at container start */
    char credentials_file[SKIFF_PATH_MAX]; /* netrc-style registry credentials */
    char default_registry[256];            /* used when a docker:// ref names none */
    char registry_mirror[256];             /* tried first for every registry, if set */
    char squash_compression[16];           /* zstd (default), gzip, lz4, xz, lzo, none */
    int squash_level;                      /* 0 = skiff's default: zstd level 1 (fast), others their own */
    bool allow_http;                       /* plain http for non-loopback registries */
    int connect_timeout_s;
    int transfer_timeout_s; /* per registry request; 0 = none */
    int max_processors;     /* compression threads (mksquashfs -processors); 0 = every CPU */
    bool import_mksquashfs; /* imports unpack a tree and run mksquashfs (pack.h: the default does not) */
    char plugin_runtime_path[SKIFF_PATH_MAX]; /* the plugin's runtime base (plugstack's runtime_path) */
    bool enroot_compat;                       /* apply enroot's site configuration (container/enrootsite.c) */
    char enroot_sysconf_path[SKIFF_PATH_MAX]; /* enroot's system configuration (/etc/enroot) */
    char enroot_config_path[SKIFF_PATH_MAX];  /* enroot's per-user configuration (its .credentials) */
    /* images at cluster scale (doc/admin-guide.md, "Images on a large cluster") */
    int tag_ttl_s;                          /* a tag resolved this recently is not asked again; 0 = always ask */
    int max_connections;                    /* blobs downloaded at once per import */
    int transfer_retries;                   /* tries after the first on a transient failure (ENROOT_TRANSFER_RETRIES) */
    int stall_timeout_s;                    /* no byte for this long: the connection counts as dropped */
    unsigned long long cache_max_size;      /* bytes the image cache may hold (LRU after an import); 0 = no limit */
    char system_cache_path[SKIFF_PATH_MAX]; /* the site's read-only image store, asked first; "" = none */
    /* lazy images (runtime/lib/image/lazy.h) */
    char image_mode[8];                   /* auto (default), lazy, full */
    int lazy_min_mb;                      /* auto: lazy only for images of at least this many MB compressed */
    char lazy_path[SKIFF_PATH_MAX];       /* the data files; "" = cache_path/lazy-data */
    int lazy_timeout_s;                   /* a read waits at most this long for its data, then EIO */
    int lazy_parallel;                    /* Range requests in flight per fetcher */
    bool lazy_complete;                   /* fetch the rest in the background */
    int lazy_complete_mbps;               /* ... at most this fast (MB/s; 0 = no limit) */
    char lazy_span_store[SKIFF_PATH_MAX]; /* a shared span store (digest-named), or "" */
};

/* Fills cfg with defaults, then (when use_env is true) the ENROOT_*
 * variables that have a skiff meaning (skiff_config_enroot_var), then the
 * file at path (NULL: $SKIFF_CONFIG or the default path; a missing default
 * file is not an error, a missing explicit one is), then SKIFF_* environment
 * overrides when use_env is true: skiff's own settings win. Paths may use
 * ${HOME}, ${UID}, ${USER} and ${XDG_RUNTIME_DIR}; they are expanded for the
 * calling process's user (or the user named with skiff_config_for_user). */
int skiff_config_load(struct skiff_config *cfg, const char *path, bool use_env, skiff_err *err);

/* Sets one key (as in the file) to a value, expanding variables. Unknown keys
 * and bad values are errors naming the key and what is accepted. */
int skiff_config_set(struct skiff_config *cfg, const char *key, const char *value, skiff_err *err);

/* skiff_config_set without ${...} expansion: for values that were expanded
 * already (the plugin hands its loaded config to its user-side helper). */
int skiff_config_set_raw(struct skiff_config *cfg, const char *key, const char *value, skiff_err *err);

/* "key=value" of the i-th key into out: 1, 0 past the last key, -1 when it
 * does not fit. Values are as loaded (expanded); booleans yes/no. */
int skiff_config_entry(const struct skiff_config *cfg, size_t i, char *out, size_t n);

/* Where the plugin keeps uid's running containers: plugin_runtime_path/UID.
 * -1 when it does not fit in n (or is not set). */
int skiff_config_plugin_runtime(const struct skiff_config *cfg, unsigned uid, char *out, size_t n);

/* The block cache directory: block_cache_path, or runtime_path/blocks when
 * it is empty (the default). -1 when it does not fit in n. */
int skiff_config_block_cache(const struct skiff_config *cfg, char *out, size_t n);

/* The skiff.conf key that the enroot variable name (ENROOT_DATA_PATH, ...)
 * sets, or NULL when it has none (doc/user-guide.md lists every ENROOT_*
 * variable and what skiff does with it). ENROOT_SQUASH_OPTIONS is read
 * apart: its -comp and -Xcompression-level set squash_compression and
 * squash_level. */
const char *skiff_config_enroot_var(const char *name);
/* A size such as 500M, 20G or 1.5T (K, M, G, T: powers of 1024; an optional
 * trailing B or iB; a bare number is bytes) into *out. */
int skiff_config_parse_size(const char *s, unsigned long long *out);
/* The directory of the lazy images' data files: lazy_path, or
 * cache_path/lazy-data when it is empty. -1 when it does not fit. */
int skiff_config_lazy_path(const struct skiff_config *cfg, char *out, size_t n);

/* Sets the user whose ${HOME}/${UID}/${USER} expand in later load/set calls
 * (the plugin runs as root for a job user). uid (unsigned)-1 = calling user. */
void skiff_config_for_user(unsigned uid, const char *user, const char *home);

#endif
