/* Hook "gpu": gives the container the host's NVIDIA driver and the GPUs the
 * step may use, deciding as enroot's 98-nvidia hook (with NVIDIA's
 * container toolkit) does; the differences are deliberate and listed in
 * doc/bundled-hooks.md.
 *
 * Which GPUs: skiff_gpu_select (hookutil.h): the job's
 * NVIDIA_VISIBLE_DEVICES, else the image's (its "all" narrowed to Slurm's
 * allocation when there is one), else SLURM_STEP_GPUS, SLURM_JOB_GPUS,
 * CUDA_VISIBLE_DEVICES; none: nothing at all. Device numbers are minors
 * (/dev/nvidiaN); GPU-... UUIDs are mapped through the driver's
 * /proc/driver/nvidia/gpus/BUS/information; a MIG device (MIG-GPU-U/GI/CI
 * through /proc alone, MIG-UUID through the host's NVML) gives its parent
 * GPU's node and that instance's two nvidia-caps nodes only.
 *
 * What goes in, by NVIDIA_DRIVER_CAPABILITIES (the job's, else the
 * image's, else the knob capabilities = compute,utility):
 *   - always DEV/nvidiactl; nvidia-uvm(-tools), gdrdrv with compute;
 *     nvidia-modeset with graphics or display; the GPUs' nodes; MIG caps as
 *     above (mig config/monitor caps with NVIDIA_MIG_CONFIG_DEVICES /
 *     NVIDIA_MIG_MONITOR_DEVICES=all); IMEX channels
 *     (DEV/nvidia-caps-imex-channels/channelN: NVIDIA_IMEX_CHANNELS, else
 *     every channel the node has);
 *   - the driver's libraries of those capabilities as the driver's
 *     ld.so.cache lists them, at the path the cache names (32-bit ones with
 *     compat32); libcuda.so.1 must be there with compute, and a listed
 *     library whose file is missing is an error that names it;
 *   - its tools (nvidia-smi, ...) at /usr/bin/.
 * NVIDIA_REQUIRE_* (job's, else image's, per name) are checked against the
 * driver (its CUDA version from libcuda's cuDriverGetVersion, its version
 * from /proc, each GPU's arch and brand from NVML) unless
 * NVIDIA_DISABLE_REQUIRE is set: unmet, the start fails saying which.
 * Then the image's own ldconfig lists the libraries (hookld.h), and
 * SKIFF_GPU_MINORS tells each task's CUDA_VISIBLE_DEVICES renumbering
 * (done by the plugin) which host GPUs the container has.
 *
 * Knobs in NAME.conf beside the hook (the runtime passes hooks no
 * environment of the admin's): dev_root (/dev), driver_root (/), ldcache
 * (DRIVER_ROOT/etc/ld.so.cache), driver_proc (/proc/driver/nvidia),
 * update_ldcache (yes), image_env (yes), capabilities (compute,utility),
 * require (yes). No DEV/nvidiactl: no NVIDIA driver here, nothing to do. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_env.h"
#include "hookconf.h"
#include "hookld.h"
#include "hookutil.h"
#include "nvidia.h"

#define WHO "gpu"

static const struct {
    const char *prefix;
    unsigned caps;
} libs[] = {
    {"libnvidia-ml.so", SKIFF_NV_UTILITY},
    {"libnvidia-cfg.so", SKIFF_NV_UTILITY},
    {"libcuda.so", SKIFF_NV_COMPUTE},
    {"libcudadebugger.so", SKIFF_NV_COMPUTE},
    {"libnvidia-opencl.so", SKIFF_NV_COMPUTE},
    {"libnvidia-ptxjitcompiler.so", SKIFF_NV_COMPUTE},
    {"libnvidia-fatbinaryloader.so", SKIFF_NV_COMPUTE},
    {"libnvidia-compiler.so", SKIFF_NV_COMPUTE},
    {"libnvidia-nvvm.so", SKIFF_NV_COMPUTE},
    {"libnvidia-gpucomp.so", SKIFF_NV_COMPUTE | SKIFF_NV_GRAPHICS},
    {"libvdpau_nvidia.so", SKIFF_NV_VIDEO},
    {"libnvidia-encode.so", SKIFF_NV_VIDEO},
    {"libnvidia-opticalflow.so", SKIFF_NV_VIDEO},
    {"libnvcuvid.so", SKIFF_NV_VIDEO},
    {"libnvidia-eglcore.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-glcore.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-tls.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-glsi.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-fbc.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-ifr.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-rtcore.so", SKIFF_NV_GRAPHICS},
    {"libnvoptix.so", SKIFF_NV_GRAPHICS},
    {"libGLX_nvidia.so", SKIFF_NV_GRAPHICS},
    {"libEGL_nvidia.so", SKIFF_NV_GRAPHICS},
    {"libGLESv2_nvidia.so", SKIFF_NV_GRAPHICS},
    {"libGLESv1_CM_nvidia.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-glvkspirv.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-allocator.so", SKIFF_NV_GRAPHICS},
    {"libnvidia-vulkan-producer.so", SKIFF_NV_GRAPHICS},
};
#define NLIBS (sizeof(libs) / sizeof(libs[0]))

static const struct {
    const char *name;
    unsigned caps;
} tools[] = {
    {"nvidia-smi", SKIFF_NV_UTILITY},
    {"nvidia-debugdump", SKIFF_NV_UTILITY},
    {"nvidia-persistenced", SKIFF_NV_UTILITY},
    {"nvidia-cuda-mps-control", SKIFF_NV_COMPUTE},
    {"nvidia-cuda-mps-server", SKIFF_NV_COMPUTE},
};

struct conf {
    char dev_root[PATH_MAX];
    char driver_root[PATH_MAX];
    char ldcache[PATH_MAX];
    char proc[PATH_MAX];
    char caps[128];
    bool update_ldcache, image_env, require;
};

static bool caps_word(const char *w)
{
    unsigned c;
    skiff_err ignore;
    return skiff_nv_caps_parse(w, &c, &ignore) == 0 && c;
}

static int read_conf(const char *self, struct conf *c, skiff_err *err)
{
    *c = (struct conf){.update_ldcache = true, .image_env = true, .require = true};
    snprintf(c->dev_root, sizeof(c->dev_root), "/dev");
    snprintf(c->driver_root, sizeof(c->driver_root), "/");
    snprintf(c->proc, sizeof(c->proc), "/proc/driver/nvidia");
    snprintf(c->caps, sizeof(c->caps), "compute,utility");
    const struct skiff_knob knobs[] = {
        {"dev_root", SKIFF_KNOB_PATH, c->dev_root, sizeof(c->dev_root), NULL, NULL},
        {"driver_root", SKIFF_KNOB_PATH, c->driver_root, sizeof(c->driver_root), NULL, NULL},
        {"ldcache", SKIFF_KNOB_PATH, c->ldcache, sizeof(c->ldcache), NULL, NULL},
        {"driver_proc", SKIFF_KNOB_PATH, c->proc, sizeof(c->proc), NULL, NULL},
        {"update_ldcache", SKIFF_KNOB_BOOL, &c->update_ldcache, 0, NULL, NULL},
        {"image_env", SKIFF_KNOB_BOOL, &c->image_env, 0, NULL, NULL},
        {"require", SKIFF_KNOB_BOOL, &c->require, 0, NULL, NULL},
        {"capabilities", SKIFF_KNOB_WORD, c->caps, sizeof(c->caps), caps_word,
         "a list of compute, compat32, graphics, utility, video, display, or all"},
        {NULL, 0, NULL, 0, NULL, NULL},
    };
    if (skiff_hook_conf_load(self, knobs, err) < 0)
        return -1;
    skiff_hook_driver_root(c->driver_root, c->ldcache, sizeof(c->ldcache));
    return 0;
}

/* ---- what the hook reads: the job's and the image's variables ---- */

static char *image_text; /* the image's environment file ("" when ignored) */

/* The job's value of name, else the image's. */
static const char *job_or_image(const char *name, const char **from)
{
    const char *v = getenv(name);
    if (v) {
        *from = "job";
        return v;
    }
    *from = "image";
    return skiff_envtext_getter(image_text, name);
}

/* ---- devices ---- */

static int bind_dev(const struct conf *c, const char *name, bool required, skiff_err *err)
{
    return skiff_hook_bind_dev(c->dev_root, name, required, err) < 0 ? -1 : 0;
}

static bool numbered(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    return !strncmp(name, prefix, pl) && name[pl] && strspn(name + pl, "0123456789") == strlen(name + pl) &&
           strlen(name) < 40;
}

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* What the container gets of the GPUs. */
struct gpus {
    size_t n;
    unsigned minor[SKIFF_GPU_MAX]; /* ascending: the order CUDA numbers them */
    size_t ncaps;
    unsigned caps[2 * SKIFF_GPU_MAX]; /* nvidia-caps minors (MIG instances) */
};

static void add_minor(unsigned *v, size_t *n, size_t max, unsigned m)
{
    for (size_t i = 0; i < *n; i++)
        if (v[i] == m)
            return;
    if (*n < max)
        v[(*n)++] = m;
}

static int read_small(const char *path, char *buf, size_t n, skiff_err *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    ssize_t r = read(fd, buf, n - 1);
    if (r < 0)
        return skiff_error(err, errno, "read %s", path);
    buf[r] = '\0';
    return 0;
}

/* GPU-UUID: its minor from PROC/gpus/BUS/information. */
static int uuid_minor(const struct conf *c, const char *uuid, unsigned *minor, skiff_err *err)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/gpus", c->proc);
    DIR *d = opendir(dir);
    if (!d)
        return skiff_error(err, errno, "GPU %s: cannot map a UUID to a device without %s", uuid, dir);
    struct dirent *e;
    int rv = skiff_error(err, 0, "GPU %s: no GPU of this node has that UUID (%s/*/information)", uuid, dir);
    while ((e = readdir(d))) {
        char path[PATH_MAX + 300], text[4096], have[SKIFF_GPU_UUID_MAX];
        unsigned m;
        skiff_err ignore;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/information", dir, e->d_name);
        if (read_small(path, text, sizeof(text), &ignore) < 0 ||
            skiff_nv_parse_information(text, have, sizeof(have), &m, &ignore) < 0 || strcasecmp(have, uuid))
            continue;
        *minor = m;
        skiff_err_clear(err);
        rv = 0;
        break;
    }
    closedir(d);
    return rv;
}

/* The nvidia-caps minor of PROC/capabilities/REL/access. */
static int cap_minor(const struct conf *c, const char *rel, unsigned *minor, skiff_err *err)
{
    char path[PATH_MAX + 200], text[1024];
    snprintf(path, sizeof(path), "%s/capabilities/%s/access", c->proc, rel);
    if (read_small(path, text, sizeof(text), err) < 0 || skiff_nv_parse_access(text, minor, err) < 0)
        return skiff_err_wrap(err, "%s", path);
    return 0;
}

/* ---- NVML and libcuda of the host's driver, loaded only when needed ---- */

struct driver {
    const struct conf *c;
    char libcuda[PATH_MAX]; /* host paths of the driver's libcuda.so.1, libnvidia-ml.so.1 */
    char nvml[PATH_MAX];
    void *nvml_h;
    bool nvml_tried;
    char cuda[32], version[64];
    bool cuda_tried, version_tried;
};

typedef struct nvml_device *nvml_dev;
static int (*nvml_handle_by_uuid)(const char *, nvml_dev *);
static int (*nvml_parent)(nvml_dev, nvml_dev *);
static int (*nvml_minor)(nvml_dev, unsigned *);
static int (*nvml_gi)(nvml_dev, unsigned *);
static int (*nvml_ci)(nvml_dev, unsigned *);
static int (*nvml_count)(unsigned *);
static int (*nvml_by_index)(unsigned, nvml_dev *);
static int (*nvml_brand)(nvml_dev, int *);
static int (*nvml_cc)(nvml_dev, int *, int *);

static bool nvml_load(struct driver *d)
{
    if (d->nvml_tried)
        return d->nvml_h != NULL;
    d->nvml_tried = true;
    if (!d->nvml[0])
        return false;
    void *h = dlopen(d->nvml, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "nvmlInit_v2") : NULL;
#define SYM(var, name) *(void **)&var = dlsym(h, name)
    if (!init || init() != 0) {
        if (h)
            dlclose(h);
        return false;
    }
    SYM(nvml_handle_by_uuid, "nvmlDeviceGetHandleByUUID");
    SYM(nvml_parent, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    SYM(nvml_minor, "nvmlDeviceGetMinorNumber");
    SYM(nvml_gi, "nvmlDeviceGetGpuInstanceId");
    SYM(nvml_ci, "nvmlDeviceGetComputeInstanceId");
    SYM(nvml_count, "nvmlDeviceGetCount_v2");
    SYM(nvml_by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(nvml_brand, "nvmlDeviceGetBrand");
    SYM(nvml_cc, "nvmlDeviceGetCudaComputeCapability");
#undef SYM
    d->nvml_h = h;
    return true;
}

/* MIG-UUID: its parent's minor and its instance ids, from NVML. */
static int mig_nvml(struct driver *d, const char *uuid, unsigned *minor, unsigned *gi, unsigned *ci, skiff_err *err)
{
    if (!nvml_load(d))
        return skiff_error(err, 0,
                           "MIG device %s: mapping a MIG UUID needs the driver's NVML (libnvidia-ml.so.1), which "
                           "did not load: name the instance as MIG-GPU-UUID/GI/CI instead",
                           uuid);
    nvml_dev mig, parent;
    if (!nvml_handle_by_uuid || !nvml_parent || !nvml_minor || !nvml_gi || !nvml_ci ||
        nvml_handle_by_uuid(uuid, &mig) != 0)
        return skiff_error(err, 0, "MIG device %s: no MIG device of this node has that UUID (NVML)", uuid);
    if (nvml_parent(mig, &parent) != 0 || nvml_minor(parent, minor) != 0 || nvml_gi(mig, gi) != 0 ||
        nvml_ci(mig, ci) != 0)
        return skiff_error(err, 0, "MIG device %s: NVML gives no parent GPU or instance ids", uuid);
    return 0;
}

/* A MIG device: its parent GPU and the access caps of its GPU instance and
 * compute instance. */
static int add_mig(const struct conf *c, struct driver *d, const char *uuid, struct gpus *g, skiff_err *err)
{
    char parent[SKIFF_GPU_UUID_MAX], rel[128];
    unsigned minor, gi, ci, cap;
    if (skiff_nv_parse_mig_path(uuid, parent, sizeof(parent), &gi, &ci) == 0) {
        if (uuid_minor(c, parent, &minor, err) < 0)
            return skiff_err_wrap(err, "MIG device %s", uuid);
    } else if (mig_nvml(d, uuid, &minor, &gi, &ci, err) < 0)
        return -1;
    add_minor(g->minor, &g->n, SKIFF_GPU_MAX, minor);
    snprintf(rel, sizeof(rel), "gpu%u/mig/gi%u", minor, gi);
    if (cap_minor(c, rel, &cap, err) < 0)
        return skiff_err_wrap(err, "MIG device %s (GPU %u, instance %u)", uuid, minor, gi);
    add_minor(g->caps, &g->ncaps, 2 * SKIFF_GPU_MAX, cap);
    snprintf(rel, sizeof(rel), "gpu%u/mig/gi%u/ci%u", minor, gi, ci);
    if (cap_minor(c, rel, &cap, err) < 0)
        return skiff_err_wrap(err, "MIG device %s (GPU %u, instance %u/%u)", uuid, minor, gi, ci);
    add_minor(g->caps, &g->ncaps, 2 * SKIFF_GPU_MAX, cap);
    return 0;
}

static int resolve_gpus(const struct conf *c, struct driver *d, const struct skiff_gpu_set *set, struct gpus *g,
                        skiff_err *err)
{
    memset(g, 0, sizeof(*g));
    if (set->kind == SKIFF_GPU_ALL) {
        DIR *dir = opendir(c->dev_root);
        if (!dir)
            return skiff_error(err, errno, "open %s", c->dev_root);
        struct dirent *e;
        while ((e = readdir(dir)))
            if (numbered(e->d_name, "nvidia"))
                add_minor(g->minor, &g->n, SKIFF_GPU_MAX, (unsigned)strtoul(e->d_name + 6, NULL, 10));
        closedir(dir);
    } else if (set->kind == SKIFF_GPU_LIST) {
        for (size_t i = 0; i < set->n; i++)
            add_minor(g->minor, &g->n, SKIFF_GPU_MAX, set->idx[i]);
        for (size_t i = 0; i < set->nuuid; i++) {
            const char *u = set->uuid[i];
            unsigned m;
            if (!strncmp(u, "MIG-", 4)) {
                if (add_mig(c, d, u, g, err) < 0)
                    return skiff_err_wrap(err, "%s", set->from);
            } else if (uuid_minor(c, u, &m, err) < 0)
                return skiff_err_wrap(err, "%s", set->from);
            else
                add_minor(g->minor, &g->n, SKIFF_GPU_MAX, m);
        }
    }
    qsort(g->minor, g->n, sizeof(g->minor[0]), cmp_uint);
    return 0;
}

/* "all", "none", or a list of numbers: the numbered nodes DIR/PREFIXn of the
 * value (all: every one the node has). */
static int bind_numbered(const struct conf *c, const char *dir, const char *prefix, const char *value, const char *what,
                         skiff_err *err)
{
    char path[PATH_MAX + 64], name[384];
    snprintf(path, sizeof(path), "%s/%s", c->dev_root, dir);
    if (!value || !strcmp(value, "all")) {
        DIR *d = opendir(path);
        if (!d)
            return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", path);
        struct dirent *e;
        int rv = 0;
        while (rv == 0 && (e = readdir(d)))
            if (numbered(e->d_name, prefix)) {
                snprintf(name, sizeof(name), "%s/%s", dir, e->d_name);
                rv = bind_dev(c, name, true, err);
            }
        closedir(d);
        return rv;
    }
    if (!strcmp(value, "none") || !strcmp(value, "void") || !*value)
        return 0;
    for (const char *p = value; *p;) {
        size_t len = strspn(p, "0123456789");
        if (!len || len > 6 || (p[len] && p[len] != ','))
            return skiff_error(err, 0, "%s '%.60s': expected all, none or channel numbers", what, value);
        snprintf(name, sizeof(name), "%s/%s%.*s", dir, prefix, (int)len, p);
        if (bind_dev(c, name, true, err) < 0)
            return skiff_err_wrap(err, "%s", what);
        p += len + (p[len] == ',');
    }
    return 0;
}

static int bind_devices(const struct conf *c, const struct skiff_gpu_set *set, const struct gpus *g, unsigned caps,
                        skiff_err *err)
{
    const char *from;
    if (bind_dev(c, "nvidiactl", true, err) < 0)
        return -1;
    if (caps & SKIFF_NV_COMPUTE)
        if (bind_dev(c, "nvidia-uvm", false, err) < 0 || bind_dev(c, "nvidia-uvm-tools", false, err) < 0 ||
            bind_dev(c, "gdrdrv", false, err) < 0)
            return -1;
    if ((caps & (SKIFF_NV_GRAPHICS | SKIFF_NV_DISPLAY)) && bind_dev(c, "nvidia-modeset", false, err) < 0)
        return -1;
    for (size_t i = 0; i < g->n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "nvidia%u", g->minor[i]);
        if (bind_dev(c, name, true, err) < 0)
            return skiff_err_wrap(err, "%s lists GPU %u", set->from, g->minor[i]);
    }
    for (size_t i = 0; i < g->ncaps; i++) {
        char name[64];
        snprintf(name, sizeof(name), "nvidia-caps/nvidia-cap%u", g->caps[i]);
        if (bind_dev(c, name, true, err) < 0)
            return skiff_err_wrap(err, "MIG instance of %s", set->from);
    }
    static const char *const mig_caps[][2] = {{"NVIDIA_MIG_CONFIG_DEVICES", "mig/config"},
                                              {"NVIDIA_MIG_MONITOR_DEVICES", "mig/monitor"}};
    for (size_t i = 0; i < 2; i++) {
        const char *v = job_or_image(mig_caps[i][0], &from);
        unsigned m;
        char name[64];
        if (!v || strcmp(v, "all"))
            continue;
        if (cap_minor(c, mig_caps[i][1], &m, err) < 0)
            return skiff_err_wrap(err, "%s=all", mig_caps[i][0]);
        snprintf(name, sizeof(name), "nvidia-caps/nvidia-cap%u", m);
        if (bind_dev(c, name, true, err) < 0)
            return skiff_err_wrap(err, "%s=all", mig_caps[i][0]);
    }
    if (g->n)
        return bind_numbered(c, "nvidia-caps-imex-channels", "channel", job_or_image("NVIDIA_IMEX_CHANNELS", &from),
                             "NVIDIA_IMEX_CHANNELS", err);
    return 0;
}

/* ---- libraries and tools ---- */

#define MAX_LIBS 256
struct lib {
    char name[128];
    char src[PATH_MAX]; /* on the host, symlinks resolved inside the driver root */
    char dst[PATH_MAX]; /* in the container: the path the driver's cache names */
    unsigned caps;
    bool compat32;
};
struct found {
    const struct conf *c;
    struct driver *d;
    struct lib *v;
    size_t n;
    skiff_err *err;
};

static int on_lib(void *ctx, const char *name, const char *path, unsigned flags)
{
    struct found *f = ctx;
    unsigned native = skiff_ldcache_native_abi(), compat = skiff_ldcache_compat32_abi();
    unsigned abi = flags & (SKIFF_LDCACHE_ABI_MASK | 0xffu);
    bool is_compat = compat != UINT32_MAX && abi == compat;
    if (native != UINT32_MAX && abi != native && !is_compat)
        return 0; /* a library for another ABI */
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].dst, path))
            return 0; /* listed again (another hwcap variant of one file) */
    if (f->n >= MAX_LIBS)
        return skiff_error(f->err, 0, "more than %d NVIDIA libraries in %s", MAX_LIBS, f->c->ldcache);
    if (path[0] != '/' || strlen(path) >= PATH_MAX || strlen(name) >= sizeof(f->v->name))
        return skiff_error(f->err, 0, "%s: library %s has a bad path '%s'", f->c->ldcache, name, path);
    struct lib *l = &f->v[f->n];
    if (skiff_hook_resolve_in(f->c->driver_root, path, l->src, sizeof(l->src), f->err) < 0) {
        if (f->err->code == ENOENT)
            return skiff_error(f->err, 0,
                               "driver library %s is listed in %s but %s is missing under driver root %s (a "
                               "partly installed or removed driver: reinstall it, or rerun ldconfig)",
                               name, f->c->ldcache, path, f->c->driver_root);
        return skiff_err_wrap(f->err, "driver library %s", name);
    }
    snprintf(l->dst, sizeof(l->dst), "%s", path);
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->compat32 = is_compat;
    for (size_t i = 0; i < NLIBS; i++)
        if (!strncmp(name, libs[i].prefix, strlen(libs[i].prefix)))
            l->caps = libs[i].caps;
    if (!is_compat && !strcmp(name, "libcuda.so.1"))
        snprintf(f->d->libcuda, sizeof(f->d->libcuda), "%s", l->src);
    if (!is_compat && !strcmp(name, "libnvidia-ml.so.1"))
        snprintf(f->d->nvml, sizeof(f->d->nvml), "%s", l->src);
    f->n++;
    return 0;
}

static bool wanted(const struct lib *l, unsigned caps)
{
    return (l->caps & caps) && (!l->compat32 || (caps & SKIFF_NV_COMPAT32));
}

static int bind_tools(const struct conf *c, unsigned caps, skiff_err *err)
{
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
        char in[64], src[PATH_MAX];
        if (!(tools[i].caps & caps))
            continue;
        snprintf(in, sizeof(in), "/usr/bin/%s", tools[i].name);
        if (skiff_hook_resolve_in(c->driver_root, in, src, sizeof(src), err) < 0) {
            if (err->code == ENOENT) {
                skiff_err_clear(err);
                continue;
            }
            return -1;
        }
        if (skiff_hook_mount(src, in, "none", "ro,bind,x-create=file", err) < 0)
            return -1;
    }
    return 0;
}

/* ---- NVIDIA_REQUIRE_* ---- */

struct facts {
    struct driver *d;
    int minor; /* the GPU being checked, -1: none */
};

static const char *fact(void *ctx, const char *name)
{
    struct facts *f = ctx;
    struct driver *d = f->d;
    static char buf[64];
    if (!strcmp(name, "driver")) {
        if (!d->version_tried) {
            char path[PATH_MAX + 16], text[1024];
            skiff_err ignore;
            d->version_tried = true;
            snprintf(path, sizeof(path), "%s/version", d->c->proc);
            if (read_small(path, text, sizeof(text), &ignore) < 0 ||
                skiff_nv_parse_version(text, d->version, sizeof(d->version), &ignore) < 0)
                d->version[0] = '\0';
        }
        return d->version;
    }
    if (!strcmp(name, "cuda")) {
        if (!d->cuda_tried) {
            d->cuda_tried = true;
            void *h = d->libcuda[0] ? dlopen(d->libcuda, RTLD_NOW | RTLD_LOCAL) : NULL;
            int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "cuDriverGetVersion") : NULL;
            int v = 0;
            if (get && get(&v) == 0 && v > 0)
                snprintf(d->cuda, sizeof(d->cuda), "%d.%d", v / 1000, (v % 1000) / 10);
        }
        return d->cuda;
    }
    /* arch, brand: per GPU, through NVML */
    if (f->minor < 0 || !nvml_load(d) || !nvml_count || !nvml_by_index || !nvml_minor)
        return "";
    unsigned count = 0;
    if (nvml_count(&count) != 0)
        return "";
    for (unsigned i = 0; i < count && i < 1024; i++) {
        nvml_dev dev;
        unsigned m;
        if (nvml_by_index(i, &dev) != 0 || nvml_minor(dev, &m) != 0 || m != (unsigned)f->minor)
            continue;
        int a, b;
        if (!strcmp(name, "arch") && nvml_cc && nvml_cc(dev, &a, &b) == 0) {
            snprintf(buf, sizeof(buf), "%d.%d", a, b);
            return buf;
        }
        if (!strcmp(name, "brand") && nvml_brand && nvml_brand(dev, &a) == 0)
            return skiff_nv_brand_name(a);
    }
    return "";
}

struct reqs {
    size_t n;
    char name[32][64];
    char *value[32];
    bool image[32]; /* the image's (else the job's) */
    bool adding_image;
};

static int add_req(void *ctx, const char *name, const char *value)
{
    struct reqs *r = ctx;
    r->image[r->n] = r->adding_image;
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], name))
            return 0; /* the job's wins */
    if (r->n >= 32 || strlen(name) >= sizeof(r->name[0]))
        return 0;
    snprintf(r->name[r->n], sizeof(r->name[0]), "%s", name);
    r->value[r->n] = strdup(value);
    if (!r->value[r->n])
        return -1;
    r->n++;
    return 0;
}

static int check_requirements(struct driver *d, const struct gpus *g, skiff_err *err)
{
    const char *from;
    const char *off = job_or_image("NVIDIA_DISABLE_REQUIRE", &from);
    if (off && *off)
        return 0;
    extern char **environ;
    struct reqs r = {0};
    int rv = 0;
    for (char **e = environ; e && *e && rv == 0; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || strncmp(*e, "NVIDIA_REQUIRE_", 15) || eq - *e >= 64)
            continue;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
        rv = add_req(&r, name, eq + 1);
    }
    r.adding_image = true;
    if (rv == 0 && skiff_envtext_each(image_text, "NVIDIA_REQUIRE_", add_req, &r) < 0)
        rv = skiff_error(err, ENOMEM, "NVIDIA_REQUIRE_*");
    for (size_t i = 0; i < r.n && rv == 0; i++) {
        size_t k = 0;
        do {
            struct facts f = {.d = d, .minor = g->n ? (int)g->minor[k] : -1};
            char why[512];
            int ok = skiff_nv_require_eval(r.value[i], fact, &f, why, sizeof(why), err);
            if (ok < 0)
                rv = skiff_err_wrap(err, "%s", r.name[i]);
            else if (!ok) {
                char gpu[32] = "";
                if (g->n)
                    snprintf(gpu, sizeof(gpu), " on GPU %u", g->minor[k]);
                rv = skiff_error(err, 0,
                                 "%s %s='%.300s' is not met%s: %s; a newer driver, or an image built for this "
                                 "node, satisfies it (NVIDIA_DISABLE_REQUIRE=1 starts it anyway)",
                                 r.image[i] ? "the image's" : "the job's", r.name[i], r.value[i], gpu, why);
            }
        } while (rv == 0 && ++k < g->n);
    }
    for (size_t i = 0; i < r.n; i++)
        free(r.value[i]);
    return rv;
}

/* ---- the doctor's report ---- */

static void report_host(const struct conf *c, struct driver *d)
{
    struct facts f = {.d = d, .minor = -1};
    const char *ver = fact(&f, "driver"), *cuda = fact(&f, "cuda");
    char list[2048] = "", dir[PATH_MAX + 8];
    size_t o = 0, n = 0;
    struct gpu_seen {
        unsigned minor;
        char uuid[SKIFF_GPU_UUID_MAX], bus[64];
    } seen[SKIFF_GPU_MAX];
    snprintf(dir, sizeof(dir), "%s/gpus", c->proc);
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd)) && n < SKIFF_GPU_MAX) {
        char path[PATH_MAX + 300], text[4096];
        skiff_err ignore;
        snprintf(path, sizeof(path), "%s/%s/information", dir, e->d_name);
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(seen[n].bus) ||
            read_small(path, text, sizeof(text), &ignore) < 0 ||
            skiff_nv_parse_information(text, seen[n].uuid, sizeof(seen[n].uuid), &seen[n].minor, &ignore) < 0)
            continue;
        snprintf(seen[n].bus, sizeof(seen[n].bus), "%s", e->d_name);
        n++;
    }
    if (dd)
        closedir(dd);
    for (size_t i = 1; i < n; i++) /* by minor: the order CUDA numbers them */
        for (size_t k = i; k > 0 && seen[k - 1].minor > seen[k].minor; k--) {
            struct gpu_seen t = seen[k];
            seen[k] = seen[k - 1];
            seen[k - 1] = t;
        }
    for (size_t i = 0; i < n && o < sizeof(list); i++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%s/dev/nvidia%u %s (%s)", o ? ", " : "", seen[i].minor,
                              seen[i].uuid, seen[i].bus);
    skiff_hook_report("host", "NVIDIA driver %s (CUDA %s), %zu GPU%s%s%s", *ver ? ver : "of unknown version",
                      *cuda ? cuda : "unknown", n, n == 1 ? "" : "s", n ? ": " : "", list);
    char gdr[PATH_MAX + 64];
    snprintf(gdr, sizeof(gdr), "%s/gdrdrv", c->dev_root);
    if (access(gdr, F_OK) == 0)
        skiff_hook_report("host", "gdrcopy: %s", gdr);
    snprintf(gdr, sizeof(gdr), "%s/nvidia-caps-imex-channels", c->dev_root);
    if (access(gdr, F_OK) == 0)
        skiff_hook_report("host", "IMEX channels: %s (NVIDIA_IMEX_CHANNELS chooses; default: every one)", gdr);
}

/* ---- the hook ---- */

static int run(const char *self, skiff_err *err)
{
    struct conf c;
    if (read_conf(self, &c, err) < 0)
        return -1;
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/nvidiactl", c.dev_root);
    if (access(p, F_OK) < 0) {
        skiff_hook_report("host", "no NVIDIA driver (no %s)", p);
        return 0; /* no NVIDIA driver on this host */
    }
    cleanup_free char *text = c.image_env ? skiff_image_env_read(err) : strdup("");
    if (!text)
        return c.image_env ? -1 : skiff_error(err, ENOMEM, "image environment");
    image_text = text;
    struct skiff_gpu_set set;
    if (skiff_gpu_select(skiff_ddp_getenv_process, NULL, skiff_envtext_getter, image_text, &set, err) < 0)
        return -1;
    if (set.kind == SKIFF_GPU_NONE && !skiff_hook_reporting())
        return 0;
    struct driver d = {.c = &c};
    static struct lib found_libs[MAX_LIBS];
    struct found f = {.c = &c, .d = &d, .v = found_libs, .err = err};
    static const char *prefixes[NLIBS + 1];
    for (size_t i = 0; i < NLIBS; i++)
        prefixes[i] = libs[i].prefix;
    if (skiff_ldcache_find(c.ldcache, prefixes, on_lib, &f, err) < 0)
        return skiff_err_wrap(err, "driver libraries");
    if (skiff_hook_reporting())
        report_host(&c, &d);
    if (set.kind == SKIFF_GPU_NONE) {
        skiff_hook_report("container", "no GPU and no driver (from %s)", set.from);
        return 0;
    }
    const char *from;
    const char *cv = job_or_image("NVIDIA_DRIVER_CAPABILITIES", &from);
    unsigned caps = 0;
    if (cv && skiff_nv_caps_parse(cv, &caps, err) < 0)
        return skiff_err_wrap(err, "NVIDIA_DRIVER_CAPABILITIES (%s)", from);
    if (!caps && skiff_nv_caps_parse(c.caps, &caps, err) < 0)
        return -1;
    struct gpus g;
    if (resolve_gpus(&c, &d, &set, &g, err) < 0)
        return -1;
    if (c.require && check_requirements(&d, &g, err) < 0)
        return -1;
    if ((caps & SKIFF_NV_COMPUTE) && !d.libcuda[0])
        return skiff_error(err, 0,
                           "libcuda.so.1 is not in %s: the NVIDIA driver's libraries are not installed under "
                           "driver root %s (or its ld.so.cache is out of date: run ldconfig)",
                           c.ldcache, c.driver_root);
    if (bind_devices(&c, &set, &g, caps, err) < 0)
        return -1;
    size_t nbound = 0;
    for (size_t i = 0; i < f.n; i++)
        if (wanted(&found_libs[i], caps)) {
            if (skiff_hook_mount(found_libs[i].src, found_libs[i].dst, "none", "ro,bind,x-create=file", err) < 0)
                return -1;
            nbound++;
        }
    if (bind_tools(&c, caps, err) < 0)
        return -1;
    if (set.renumber && g.n) {
        char minors[SKIFF_GPU_MAX * 6] = "";
        size_t o = 0;
        for (size_t i = 0; i < g.n; i++)
            o += (size_t)snprintf(minors + o, sizeof(minors) - o, "%s%u", i ? "," : "", g.minor[i]);
        if (skiff_hook_setenv("SKIFF_GPU_MINORS", minors, err) < 0)
            return -1;
    }
    if (skiff_hook_reporting()) {
        char cs[128], gl[SKIFF_GPU_MAX * 6] = "";
        size_t o = 0;
        skiff_nv_caps_format(caps, cs, sizeof(cs));
        for (size_t i = 0; i < g.n; i++)
            o += (size_t)snprintf(gl + o, sizeof(gl) - o, "%s%u", i ? "," : "", g.minor[i]);
        skiff_hook_report("container", "GPUs %s (from %s), capabilities %s (%s), %zu driver librar%s",
                          g.n ? gl : "none, the driver only", set.from, cs, cv ? from : "default", nbound,
                          nbound == 1 ? "y" : "ies");
    }
    return c.update_ldcache ? skiff_hook_update_ldcache(WHO, err) : 0;
}

int main(int argc, char **argv)
{
    return skiff_hook_main(argc, argv, WHO, run);
}
