/* Helpers for skiff's bundled container hooks (ABI: doc/hooks.md; the hooks
 * themselves: doc/bundled-hooks.md). Pure parsing is separate from I/O so
 * the unit tests can check it. */
#ifndef SKIFF_HOOKUTIL_H
#define SKIFF_HOOKUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* Appends "NAME=VALUE\n" to the file named by $SKIFF_ENV_FILE. Values with a
 * newline are refused (one variable per line is the file's format), and so
 * are names starting with '#' (a comment there). */
int skiff_hook_setenv(const char *name, const char *value, skiff_err *err);

/* Appends "SRC DST TYPE OPTS\n" to $SKIFF_MOUNTS_FILE. Fields with blanks
 * are refused (the file is split on blanks), and so is a SRC starting with
 * '#' (a comment there). */
int skiff_hook_mount(const char *src, const char *dst, const char *type, const char *opts, skiff_err *err);

/* Which GPUs a container should see: nothing at all; the driver (control
 * devices, libraries, tools) but no GPU; every GPU; the listed GPUs. */
enum skiff_gpu_vis { SKIFF_GPU_NONE, SKIFF_GPU_DRIVER, SKIFF_GPU_ALL, SKIFF_GPU_LIST };
#define SKIFF_GPU_MAX 64

struct skiff_gpu_set {
    enum skiff_gpu_vis kind;
    size_t n;
    unsigned idx[SKIFF_GPU_MAX]; /* device minor numbers (/dev/nvidiaN) */
    const char *from;            /* the variable it came from, or "default" */
};

/* Parses one visibility list: "0,2", "0-3", "all", "none" (the driver
 * without GPUs, as the NVIDIA container runtime means it), "void", "" or
 * "NoDevFiles" (Slurm's word for no device: nothing). GPU-/MIG- UUIDs
 * cannot be mapped to device files without NVML: they select all devices
 * (the driver still hides the rest through CUDA_VISIBLE_DEVICES). */
int skiff_gpu_parse(const char *s, struct skiff_gpu_set *set, skiff_err *err);

/* Picks the list by precedence: NVIDIA_VISIBLE_DEVICES, SLURM_STEP_GPUS,
 * SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES; none of them set: nothing (a step
 * that asked for no GPU gets none). get as in ddp_env.h. */
int skiff_gpu_select(const char *(*get)(void *, const char *), void *ctx, struct skiff_gpu_set *set, skiff_err *err);

/* Looks libraries up in a glibc ld.so.cache (format "glibc-ld.so.cache1.1").
 * cb is called for every entry whose name starts with one of prefixes
 * (NULL-terminated), with the library name and its path. Reads the whole
 * file (bounded: 64 MiB) and checks every offset before using it. */
int skiff_ldcache_find(const char *path, const char *const *prefixes,
                       int (*cb)(void *ctx, const char *name, const char *path), void *ctx, skiff_err *err);

/* Merges identity lines into a passwd or group file's text: lines of image
 * whose first field equals name or whose third field equals id are dropped,
 * then line (no newline) is appended. Returns a malloc'ed string. */
char *skiff_identity_merge(const char *image, const char *name, unsigned long id, const char *line, skiff_err *err);

/* Opens path inside root without leaving it (openat2 RESOLVE_IN_ROOT):
 * rootfs content is the image's, so /etc/passwd may be a symlink anywhere. */
int skiff_hook_open_in_root(const char *root, const char *path, int flags, skiff_err *err);

#endif
