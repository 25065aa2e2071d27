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

/* DEV_ROOT/name, which must be a character device, bound at /dev/name with
 * the host's owner and mode (doc/bundled-hooks.md). Returns 1 when bound, 0
 * when it is missing and not required, -1 + err otherwise. */
int skiff_hook_bind_dev(const char *dev_root, const char *name, bool required, skiff_err *err);

/* The main() of a bundled hook: argv[0] must be the hook's absolute path
 * (the runtime gives it; NAME.conf is found beside it); run's failure is
 * printed as "skiff hook NAME: MESSAGE" and exits 1. */
int skiff_hook_main(int argc, char **argv, const char *name, int (*run)(const char *self, skiff_err *err));

/* `skiff doctor --fabric` runs the hooks with SKIFF_REPORT_FILE set: a
 * bundled hook then also says what it found on the host and why it decided
 * what it did, one line each, "KIND: TEXT" (KIND host, container or hint),
 * appended to that file. Without it this does nothing. */
void skiff_hook_report(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool skiff_hook_reporting(void);

/* Which GPUs a container should see: nothing at all; the driver (control
 * devices, libraries, tools) but no GPU; every GPU; the listed GPUs. */
enum skiff_gpu_vis { SKIFF_GPU_NONE, SKIFF_GPU_DRIVER, SKIFF_GPU_ALL, SKIFF_GPU_LIST };
#define SKIFF_GPU_MAX 64
#define SKIFF_GPU_UUID_MAX 96

struct skiff_gpu_set {
    enum skiff_gpu_vis kind;
    size_t n;
    unsigned idx[SKIFF_GPU_MAX]; /* device minor numbers (/dev/nvidiaN) */
    size_t nuuid;
    char uuid[SKIFF_GPU_MAX][SKIFF_GPU_UUID_MAX]; /* GPU-... and MIG-... entries, as given */
    const char *from;                             /* the variable it came from, or "default" */
    /* CUDA_VISIBLE_DEVICES holds host device numbers (Slurm without
     * ConstrainDevices, or a user's own list): each task's value is to be
     * renumbered to index the container's GPUs (skiff_gpu_renumber) */
    bool renumber;
};

/* Parses one visibility list: "0,2", "0-3", "all", "none" (the driver
 * without GPUs, as the NVIDIA container runtime means it), "void", "" or
 * "NoDevFiles" (Slurm's word for no device: nothing), and GPU UUIDs
 * ("GPU-...") and MIG device UUIDs ("MIG-...", "MIG-GPU-.../GI/CI"), which
 * the gpu hook maps to device files with the driver's help. */
int skiff_gpu_parse(const char *s, struct skiff_gpu_set *set, skiff_err *err);

/* Picks the list by precedence, as enroot's 98-nvidia hook does, then as
 * Slurm allocates:
 *   1. the job's NVIDIA_VISIBLE_DEVICES (get);
 *   2. the image's NVIDIA_VISIBLE_DEVICES (image_get; NULL: none), where
 *      "all" means Slurm's allocation when the step has one
 *      (SLURM_STEP_GPUS, else SLURM_JOB_GPUS): the GPUs a device cgroup
 *      would leave an enroot container;
 *   3. SLURM_STEP_GPUS, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES;
 *   none of them set: nothing (a step that asked for no GPU gets none).
 * Sets set->renumber (see above). get as in ddp_env.h; a value need only
 * live until the next call. */
int skiff_gpu_select(const char *(*get)(void *, const char *), void *ctx,
                     const char *(*image_get)(void *, const char *), void *image_ctx, struct skiff_gpu_set *set,
                     skiff_err *err);

/* CUDA_VISIBLE_DEVICES for a task whose value (cvd) names host device
 * numbers, in a container whose GPUs are minors ("1,3": the host numbers in
 * the order CUDA numbers them inside): each number is replaced by its
 * position in minors; UUIDs and numbers the container does not have are
 * kept as they are. Writes the result into out; returns 1 when it differs
 * from cvd, 0 when not, -1 + err on a malformed minors list or no room. */
int skiff_gpu_renumber(const char *cvd, const char *minors, char *out, size_t n, skiff_err *err);

/* What the SPANK plugin calls in each task: CUDA_VISIBLE_DEVICES renumbered
 * with SKIFF_GPU_MINORS (which the gpu hook writes into the container's
 * environment when set->renumber) into out; returns 1 when the task's
 * value must change, 0 when not (either unset, nothing to renumber), -1 +
 * err when the variables are malformed. */
int skiff_gpu_task_cvd(const char *(*get)(void *, const char *), void *ctx, char *out, size_t n, skiff_err *err);

/* Looks libraries up in a glibc ld.so.cache (format "glibc-ld.so.cache1.1").
 * cb is called for every entry whose name starts with one of prefixes
 * (NULL-terminated), with the library name, its path and the entry's flags
 * (SKIFF_LDCACHE_*: which ABI the library is for). Reads the whole file
 * (bounded: 64 MiB) and checks every offset before using it. */
#define SKIFF_LDCACHE_ELF_LIBC6 0x0003u
#define SKIFF_LDCACHE_ABI_MASK 0xff00u
#define SKIFF_LDCACHE_X8664 0x0300u /* x86-64; 0x0000 with LIBC6: i386 */
#define SKIFF_LDCACHE_AARCH64 0x0a00u
/* The flags of this program's own ABI, and of the 32-bit one beside it
 * (x86-64: i386; none elsewhere: UINT32_MAX). */
unsigned skiff_ldcache_native_abi(void);
unsigned skiff_ldcache_compat32_abi(void);
int skiff_ldcache_find(const char *path, const char *const *prefixes,
                       int (*cb)(void *ctx, const char *name, const char *path, unsigned flags), void *ctx,
                       skiff_err *err);

/* Merges identity lines into a passwd or group file's text: lines of image
 * whose first field equals name or whose third field equals id are dropped,
 * then line (no newline) is appended. Returns a malloc'ed string. */
char *skiff_identity_merge(const char *image, const char *name, unsigned long id, const char *line, skiff_err *err);

/* Opens path inside root without leaving it (openat2 RESOLVE_IN_ROOT):
 * rootfs content is the image's, so /etc/passwd may be a symlink anywhere. */
int skiff_hook_open_in_root(const char *root, const char *path, int flags, skiff_err *err);

#endif
