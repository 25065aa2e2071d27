/* Hook "gpu": gives the container the host's NVIDIA GPUs: the device nodes
 * of the visible GPUs (NVIDIA_VISIBLE_DEVICES, else SLURM_STEP_GPUS, else
 * SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES, else all), the control devices,
 * the driver's user-space libraries found in the host's /etc/ld.so.cache and
 * its tools (nvidia-smi, ...), each bound at the same path. On a host
 * without /dev/nvidiactl it does nothing. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_env.h"
#include "hookutil.h"

static const char *const libs[] = {"libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
                                   "libnvidia-nvvm.so", "libnvidia-gpucomp.so", "libnvidia-cfg.so",
                                   "libnvidia-opencl.so", "libnvidia-allocator.so", NULL};
static const char *const tools[] = {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump", "/usr/bin/nvidia-persistenced",
                                    "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server", NULL};
static const char *const ctl[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                                  NULL};

static int bind_file(const char *p, skiff_err *err)
{
    if (access(p, F_OK) < 0)
        return 0;
    return skiff_hook_mount(p, p, "none", "ro,bind,x-create=file", err);
}

static int bind_dev(const char *p, skiff_err *err)
{
    if (access(p, F_OK) < 0)
        return 0;
    return skiff_hook_mount(p, p, "none", "rw,bind,x-create=file", err);
}

static int on_lib(void *ctx, const char *name, const char *path)
{
    (void)name;
    skiff_err *err = ctx;
    return bind_file(path, err);
}

static int run(skiff_err *err)
{
    if (access("/dev/nvidiactl", F_OK) < 0)
        return 0; /* no NVIDIA driver on this host */
    struct skiff_gpu_set set;
    if (skiff_gpu_select(skiff_ddp_getenv_process, NULL, &set, err) < 0)
        return -1;
    if (set.kind == SKIFF_GPU_NONE)
        return 0;
    for (size_t i = 0; ctl[i]; i++)
        if (bind_dev(ctl[i], err) < 0)
            return -1;
    char p[64];
    if (set.kind == SKIFF_GPU_ALL) {
        DIR *d = opendir("/dev");
        if (!d)
            return skiff_error(err, errno, "open /dev");
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, "nvidia", 6) || !e->d_name[6] || strspn(e->d_name + 6, "0123456789") != strlen(e->d_name + 6))
                continue;
            snprintf(p, sizeof(p), "/dev/%.40s", e->d_name);
            if (bind_dev(p, err) < 0) {
                closedir(d);
                return -1;
            }
        }
        closedir(d);
    } else {
        for (size_t i = 0; i < set.n; i++) {
            snprintf(p, sizeof(p), "/dev/nvidia%u", set.idx[i]);
            if (access(p, F_OK) < 0)
                return skiff_error(err, ENOENT, "%s lists GPU %u but %s does not exist", set.from, set.idx[i], p);
            if (bind_dev(p, err) < 0)
                return -1;
        }
    }
    if (access("/dev/nvidia-caps", F_OK) == 0 &&
        skiff_hook_mount("/dev/nvidia-caps", "/dev/nvidia-caps", "none", "rw,bind,x-create=dir", err) < 0)
        return -1;
    const char *cache = getenv("SKIFF_LDCACHE");
    if (skiff_ldcache_find(cache && *cache ? cache : "/etc/ld.so.cache", libs, on_lib, err, err) < 0)
        return skiff_err_wrap(err, "driver libraries");
    for (size_t i = 0; tools[i]; i++)
        if (bind_file(tools[i], err) < 0)
            return -1;
    return 0;
}

int main(void)
{
    skiff_err err = {0};
    if (run(&err) < 0) {
        fprintf(stderr, "skiff hook gpu: %s\n", err.msg);
        return 1;
    }
    return 0;
}
