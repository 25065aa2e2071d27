/* The --container-* option table. Registered with spank_option_register()
 * from slurm_spank_init (not a static spank_options[] table, which reaches
 * srun only) so that sbatch and salloc accept the options too. */
#include <stdint.h>
#include <string.h>

#include "plugin.h"

#define CB(id)                                                                                                         \
    static int cb_##id(int val, const char *optarg, int remote)                                                        \
    {                                                                                                                  \
        (void)remote;                                                                                                  \
        skiff_err err;                                                                                                 \
        skiff_err_clear(&err);                                                                                         \
        if (skiff_opts_set(&skiff_g.opts, id, val, optarg, &err) < 0) {                                                \
            skiff_log_error("skiff: %s", err.msg);                                                                     \
            return -1;                                                                                                 \
        }                                                                                                              \
        return 0;                                                                                                      \
    }

CB(SKIFF_OPT_IMAGE)
CB(SKIFF_OPT_MOUNTS)
CB(SKIFF_OPT_WORKDIR)
CB(SKIFF_OPT_NAME)
CB(SKIFF_OPT_SAVE)
CB(SKIFF_OPT_MOUNT_HOME)
CB(SKIFF_OPT_REMAP_ROOT)
CB(SKIFF_OPT_ENTRYPOINT)
CB(SKIFF_OPT_ENTRYPOINT_LOG)
CB(SKIFF_OPT_WRITABLE)
CB(SKIFF_OPT_ENV)
CB(SKIFF_OPT_UNSHARE)

/* name, arginfo, usage, has_arg, val, cb. Slurm's struct takes char * for
 * what are constant strings; it never writes them, so the const is dropped
 * (through uintptr_t, which says so on purpose). */
#define S(x) ((char *)(uintptr_t)(x))
#define OPT(n, a, u, has, v, cb)                                                                                       \
    {                                                                                                                  \
        S(n), S(a), S(u), has, v, cb                                                                                   \
    }
static struct spank_option table[] = {
    OPT("container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
        "[skiff] image for the container: a squashfs file (/path or ./path) or an image URI "
        "(docker://, docker-archive:, oci:, oci-archive:, dir:)",
        1, 0, cb_SKIFF_OPT_IMAGE),
    OPT("container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
        "[skiff] bind mount[s] inside the container; flags separated by '+', e.g. ro+rbind; "
        "tmpfs:DST for a tmpfs",
        1, 0, cb_SKIFF_OPT_MOUNTS),
    OPT("container-workdir", "PATH", "[skiff] working directory inside the container", 1, 0, cb_SKIFF_OPT_WORKDIR),
    OPT("container-name", "NAME[:auto|create|exec|no_exec]",
        "[skiff] keep the container's changes under NAME and reuse them in later steps", 1, 0, cb_SKIFF_OPT_NAME),
    OPT("container-save", "PATH", "[skiff] save the container's filesystem to a squashfs file at step end", 1, 0,
        cb_SKIFF_OPT_SAVE),
    OPT("container-mount-home", NULL, "[skiff] bind mount the user's home directory", 0, 1, cb_SKIFF_OPT_MOUNT_HOME),
    OPT("no-container-mount-home", NULL, "[skiff] do not bind mount the user's home directory", 0, 0,
        cb_SKIFF_OPT_MOUNT_HOME),
    OPT("container-remap-root", NULL, "[skiff] be uid 0 inside the container (grants no privilege on the host)", 0, 1,
        cb_SKIFF_OPT_REMAP_ROOT),
    OPT("no-container-remap-root", NULL, "[skiff] keep your own uid inside the container", 0, 0,
        cb_SKIFF_OPT_REMAP_ROOT),
    OPT("container-entrypoint", NULL, "[skiff] run the image's entrypoint before the command", 0, 1,
        cb_SKIFF_OPT_ENTRYPOINT),
    OPT("no-container-entrypoint", NULL, "[skiff] do not run the image's entrypoint", 0, 0, cb_SKIFF_OPT_ENTRYPOINT),
    OPT("container-entrypoint-log", NULL, "[skiff] show the entrypoint's output", 0, 1, cb_SKIFF_OPT_ENTRYPOINT_LOG),
    OPT("container-writable", NULL, "[skiff] make the container filesystem writable (default)", 0, 1,
        cb_SKIFF_OPT_WRITABLE),
    OPT("container-readonly", NULL, "[skiff] make the container filesystem read-only", 0, 0, cb_SKIFF_OPT_WRITABLE),
    OPT("container-env", "NAME[,NAME...]",
        "[skiff] keep these variables' host values over the image's (NAME=VALUE sets one)", 1, 0, cb_SKIFF_OPT_ENV),
    OPT("container-unshare", "net,ipc,uts", "[skiff] give the container its own network/IPC/hostname namespaces", 1, 0,
        cb_SKIFF_OPT_UNSHARE),
};

int skiff_spank_register_options(spank_t sp)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        spank_err_t rc = spank_option_register(sp, &table[i]);
        if (rc != ESPANK_SUCCESS) {
            skiff_log_error("skiff: cannot register --%s: %s", table[i].name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}
