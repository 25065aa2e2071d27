/* Hook "rdma": gives the container the node's RDMA fabric, deciding as
 * enroot's 99-mellanox hook does; the differences are deliberate and
 * listed in doc/bundled-hooks.md.
 *
 * Which devices: MELLANOX_VISIBLE_DEVICES, the job's, else the image's,
 * else the knob default_visible (all): all, none or void (no fabric
 * device at all), or indices into the node's RDMA devices (rdma.h: every
 * entry of /sys/class/infiniband, Mellanox/NVIDIA, EFA, iWARP, RoCE, in
 * natural order of their names).
 *
 * What is bound for each visible device, each at /dev/infiniband/NAME with
 * the host's owner and mode (a character device is bound without nodev):
 * its uverbsN (verbs: libibverbs lists only the devices whose uverbs node
 * it can find, so the others stay out of ibv_get_device_list), its umadN
 * and issmN (subnet management datagrams); rdma_cm once. HPE Slingshot's
 * /dev/cxiN (one per /sys/class/cxi entry) unless none/void or cxi = no.
 * NVIDIA's gdrdrv and IMEX channels come with the GPUs (the gpu hook).
 *
 * mount_driver = yes (off by default) also puts the host's RDMA user
 * space in, as enroot does for MOFED: each visible device's libibverbs
 * provider (its .driver file names it; the newest -rdmavN.so of it),
 * libibverbs, librdmacm and the vendor libraries from the driver root's
 * ld.so.cache, all under /usr/local/lib/skiff-rdma, the provider's .driver
 * file rewritten to point there, and the image's ldconfig run so that they
 * win over the image's own copies (hookld.h).
 *
 * It says, on stderr (the runtime shows a hook's warning to the user; the
 * plugin once per step, from the step's first node):
 *   - when a step on more than one node gets no RDMA device although the
 *     node has some (MELLANOX_VISIBLE_DEVICES or the admin's default): NCCL
 *     and MPI then use TCP sockets, and nothing else would tell;
 *   - when the container has RDMA devices but the tasks' RLIMIT_MEMLOCK
 *     (Slurm's propagated SLURM_RLIMIT_MEMLOCK, else this process's, which
 *     is slurmd's) is not unlimited: memory registration fails beyond it.
 *     The hook never changes the limit.
 *
 * Knobs in NAME.conf beside the hook: dev_root (/dev), sys_root (/sys),
 * driver_root (/), config_dir (/etc/libibverbs.d, inside the driver root),
 * provider_dir (/usr/lib/MULTIARCH/libibverbs, inside the driver root),
 * ldcache (DRIVER_ROOT/etc/ld.so.cache), default_visible (all),
 * mount_driver (no), cxi (yes), check_memlock (yes), image_env (yes). */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "ddp_env.h"
#include "hookconf.h"
#include "hookld.h"
#include "hookutil.h"
#include "hostlist.h"
#include "rdma.h"

#define WHO "rdma"
#define LIBDIR "/usr/local/lib/skiff-rdma"

struct conf {
    char dev_root[PATH_MAX];
    char sys_root[PATH_MAX];
    char driver_root[PATH_MAX];
    char config_dir[PATH_MAX];
    char provider_dir[PATH_MAX];
    char ldcache[PATH_MAX];
    char default_visible[256];
    bool mount_driver, cxi, check_memlock, image_env;
};

static bool visible_word(const char *w)
{
    struct skiff_rdma_set s;
    skiff_err ignore;
    return skiff_rdma_parse(w, &s, &ignore) == 0;
}

static int read_conf(const char *self, struct conf *c, skiff_err *err)
{
    *c = (struct conf){.cxi = true, .check_memlock = true, .image_env = true};
    snprintf(c->dev_root, sizeof(c->dev_root), "/dev");
    snprintf(c->sys_root, sizeof(c->sys_root), "/sys");
    snprintf(c->driver_root, sizeof(c->driver_root), "/");
    snprintf(c->config_dir, sizeof(c->config_dir), "/etc/libibverbs.d");
    snprintf(c->default_visible, sizeof(c->default_visible), "all");
    const struct skiff_knob knobs[] = {
        {"dev_root", SKIFF_KNOB_PATH, c->dev_root, sizeof(c->dev_root), NULL, NULL},
        {"sys_root", SKIFF_KNOB_PATH, c->sys_root, sizeof(c->sys_root), NULL, NULL},
        {"driver_root", SKIFF_KNOB_PATH, c->driver_root, sizeof(c->driver_root), NULL, NULL},
        {"config_dir", SKIFF_KNOB_PATH, c->config_dir, sizeof(c->config_dir), NULL, NULL},
        {"provider_dir", SKIFF_KNOB_PATH, c->provider_dir, sizeof(c->provider_dir), NULL, NULL},
        {"ldcache", SKIFF_KNOB_PATH, c->ldcache, sizeof(c->ldcache), NULL, NULL},
        {"default_visible", SKIFF_KNOB_WORD, c->default_visible, sizeof(c->default_visible), visible_word,
         "all, none, void or device indices (0,1)"},
        {"mount_driver", SKIFF_KNOB_BOOL, &c->mount_driver, 0, NULL, NULL},
        {"cxi", SKIFF_KNOB_BOOL, &c->cxi, 0, NULL, NULL},
        {"check_memlock", SKIFF_KNOB_BOOL, &c->check_memlock, 0, NULL, NULL},
        {"image_env", SKIFF_KNOB_BOOL, &c->image_env, 0, NULL, NULL},
        {NULL, 0, NULL, 0, NULL, NULL},
    };
    if (skiff_hook_conf_load(self, knobs, err) < 0)
        return -1;
    skiff_hook_driver_root(c->driver_root, c->ldcache, sizeof(c->ldcache));
    if (!c->provider_dir[0]) {
        struct utsname u;
        uname(&u);
        snprintf(c->provider_dir, sizeof(c->provider_dir), "/usr/lib/%s-linux-gnu/libibverbs", u.machine);
    }
    return 0;
}

/* DEV/name at /dev/name (skiff_hook_bind_dev): 1 bound, 0 missing. */
static int bind_dev(const struct conf *c, const char *name, bool required, skiff_err *err)
{
    return skiff_hook_bind_dev(c->dev_root, name, required, err);
}

/* Slingshot: the entries of SYS/class/cxi (cxi0, ...). */
static size_t cxi_list(const struct conf *c, char names[][32], size_t max)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/class/cxi", c->sys_root);
    DIR *d = opendir(path);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "cxi", 3) && strlen(e->d_name) < 32 && n < max)
            snprintf(names[n++], 32, "%s", e->d_name);
    if (d)
        closedir(d);
    qsort(names, n, 32, (int (*)(const void *, const void *))strverscmp);
    return n;
}

/* ---- the host's RDMA user space (mount_driver) ---- */

static int on_dep(void *ctx, const char *name, const char *path, unsigned flags)
{
    const struct conf *c = ctx;
    unsigned native = skiff_ldcache_native_abi();
    if (native != UINT32_MAX && (flags & (SKIFF_LDCACHE_ABI_MASK | 0xffu)) != native)
        return 0;
    char src[PATH_MAX], dst[PATH_MAX + 64];
    skiff_err err;
    skiff_err_clear(&err);
    if (strchr(name, '/') || skiff_hook_resolve_in(c->driver_root, path, src, sizeof(src), &err) < 0)
        return 0; /* listed but gone: the image's own copy serves */
    snprintf(dst, sizeof(dst), "%s/%s", LIBDIR, name);
    return skiff_hook_mount(src, dst, "none", "ro,bind,x-create=file", &err) < 0 ? -1 : 0;
}

/* Provider P: the newest PROVIDER-rdmavN.so of its .driver file's name,
 * bound in LIBDIR, and a .driver file that names it there. */
static int inject_provider(const struct conf *c, const char *p, skiff_err *err)
{
    char rel[PATH_MAX + 64], host[PATH_MAX], text[512], name[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s/%s.driver", c->config_dir, p);
    if (skiff_hook_resolve_in(c->driver_root, rel, host, sizeof(host), err) < 0)
        return skiff_err_wrap(err, "libibverbs provider %s (mount_driver = yes)", p);
    {
        cleanup_close int fd = open(host, O_RDONLY | O_CLOEXEC);
        ssize_t r = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
        if (r < 0)
            return skiff_error(err, errno, "read %s", host);
        text[r] = '\0';
    }
    if (skiff_rdma_parse_driver_file(text, name, sizeof(name), err) < 0)
        return skiff_err_wrap(err, "%s", host);
    /* "driver mlx5" means PROVIDER_DIR/libmlx5; "driver /x/libmlx5" is a path */
    char base[2 * PATH_MAX + 16], dir[2 * PATH_MAX + 16];
    if (name[0] == '/')
        snprintf(base, sizeof(base), "%s", name);
    else
        snprintf(base, sizeof(base), "%s/lib%s", c->provider_dir, name);
    snprintf(dir, sizeof(dir), "%s", base);
    char *slash = strrchr(dir, '/');
    *slash = '\0';
    const char *stem = strrchr(base, '/') + 1;
    char hostdir[3 * PATH_MAX + 32];
    snprintf(hostdir, sizeof(hostdir), "%s%s", strcmp(c->driver_root, "/") ? c->driver_root : "", dir[0] ? dir : "/");
    DIR *d = opendir(hostdir);
    if (!d)
        return skiff_error(err, errno, "libibverbs provider %s: open %s", p, hostdir);
    char best[256] = "";
    struct dirent *e;
    size_t sl = strlen(stem);
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, stem, sl) && !strncmp(e->d_name + sl, "-rdmav", 6) && strlen(e->d_name) > 3 &&
            !strcmp(e->d_name + strlen(e->d_name) - 3, ".so") && strlen(e->d_name) < 256 &&
            (!best[0] || strverscmp(e->d_name, best) > 0))
            snprintf(best, sizeof(best), "%s", e->d_name);
    closedir(d);
    if (!best[0])
        return skiff_error(err, 0, "libibverbs provider %s: no %s-rdmav*.so in %s", p, stem, hostdir);
    char in[2 * PATH_MAX + 300], src[PATH_MAX], dst[PATH_MAX];
    snprintf(in, sizeof(in), "%s/%s", dir, best);
    if (skiff_hook_resolve_in(c->driver_root, in, src, sizeof(src), err) < 0)
        return skiff_err_wrap(err, "libibverbs provider %s", p);
    snprintf(dst, sizeof(dst), "%s/%s", LIBDIR, best);
    if (skiff_hook_mount(src, dst, "none", "ro,bind,x-create=file", err) < 0)
        return -1;
    /* the container's .driver file: the same provider, at LIBDIR */
    const char *state = getenv("SKIFF_STATE_DIR");
    if (!state || !*state)
        return skiff_error(err, 0, "SKIFF_STATE_DIR is not set (run hooks through the skiff runtime)");
    char sdir[PATH_MAX], file[PATH_MAX + 64], line[PATH_MAX + 64], target[PATH_MAX + 64];
    snprintf(sdir, sizeof(sdir), "%s/%s", state, WHO);
    if (mkdir(sdir, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", sdir);
    snprintf(file, sizeof(file), "%s/%s.driver", sdir, p);
    int len = snprintf(line, sizeof(line), "driver %s/%s\n", LIBDIR, stem);
    cleanup_close int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || write(fd, line, (size_t)len) != len)
        return skiff_error(err, errno, "write %s", file);
    snprintf(target, sizeof(target), "/etc/libibverbs.d/%s.driver", p);
    return skiff_hook_mount(file, target, "none", "ro,bind,x-create=file", err);
}

static int inject_driver(struct conf *c, const struct skiff_rdma_dev *dev, const bool *vis, size_t n, skiff_err *err)
{
    char done[SKIFF_RDMA_MAX][32];
    size_t nd = 0;
    for (size_t i = 0; i < n; i++) {
        char p[32];
        bool seen = false;
        if (!vis[i])
            continue;
        skiff_rdma_provider(&dev[i], p, sizeof(p));
        for (size_t k = 0; k < nd; k++)
            seen |= !strcmp(done[k], p);
        if (seen || !p[0])
            continue;
        snprintf(done[nd++], sizeof(done[0]), "%s", p);
        if (inject_provider(c, p, err) < 0)
            return -1;
    }
    static const char *const deps[] = {"libibverbs.so", "librdmacm.so", "libibumad.so",     "libmlx5.so", "libmlx4.so",
                                       "libefa.so",     "libnl-3.so",   "libnl-route-3.so", NULL};
    if (skiff_ldcache_find(c->ldcache, deps, on_dep, c, err) < 0)
        return skiff_err_wrap(err, "RDMA libraries of the host (mount_driver = yes)");
    return skiff_hook_update_ldcache(WHO, err);
}

/* ---- what the user is told ---- */

static unsigned long env_num(const char *name, unsigned long dflt)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return dflt;
    unsigned long n = strtoul(v, &end, 10);
    return *end ? dflt : n;
}

/* The memlock limit the step's tasks get: what srun propagates, else what
 * slurmd (and so this hook) has. */
static void memlock(char *out, size_t n, bool *limited)
{
    const char *v = getenv("SLURM_RLIMIT_MEMLOCK");
    unsigned long long lim;
    struct rlimit rl;
    if (v && *v) {
        char *end;
        lim = strtoull(v, &end, 10);
        if (*end || !strcmp(v, "18446744073709551615"))
            lim = RLIM_INFINITY;
    } else if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
        lim = rl.rlim_cur;
    else
        lim = RLIM_INFINITY;
    *limited = lim != RLIM_INFINITY;
    if (!*limited)
        snprintf(out, n, "unlimited");
    else if (lim >= (1ull << 20))
        snprintf(out, n, "%llu MiB", lim >> 20);
    else
        snprintf(out, n, "%llu KiB", lim >> 10);
}

/* Whether this is the step's first node, which says things once per step
 * (the hook sees the step's SLURM_STEP_NODELIST, not SLURM_NODEID, which
 * Slurm sets per task later); a node that cannot tell says them too. */
static bool first_node(char *node, size_t n)
{
    if (gethostname(node, n) < 0)
        snprintf(node, n, "this node");
    node[n - 1] = '\0';
    node[strcspn(node, ".")] = '\0';
    const char *list = getenv("SLURM_STEP_NODELIST");
    if (!list)
        list = getenv("SLURM_JOB_NODELIST");
    char head[SKIFF_HOSTLIST_MAX_NAME + 1];
    skiff_err ignore;
    if (!list || skiff_hostlist_nth(list, 0, head, sizeof(head), &ignore) < 0)
        return true;
    if (!strcmp(head, node))
        return true;
    size_t count;
    struct skiff_hostlist hl;
    if (skiff_hostlist_count(list, &count, &ignore) < 0 || count > 4096 ||
        skiff_hostlist_expand(list, count, &hl, &ignore) < 0)
        return true;
    bool listed = false;
    for (size_t i = 0; i < hl.n && !listed; i++)
        listed = !strcmp(hl.hosts[i], node);
    skiff_hostlist_free(&hl);
    return !listed; /* a node name other than the host name: cannot tell */
}

static int run(const char *self, skiff_err *err)
{
    struct conf c;
    if (read_conf(self, &c, err) < 0)
        return -1;
    static struct skiff_rdma_dev dev[SKIFF_RDMA_MAX];
    size_t n = 0;
    if (skiff_rdma_list(c.sys_root, dev, SKIFF_RDMA_MAX, &n, err) < 0)
        return -1;
    char cxi[SKIFF_RDMA_MAX][32];
    size_t ncxi = c.cxi ? cxi_list(&c, cxi, SKIFF_RDMA_MAX) : 0;
    bool report = skiff_hook_reporting();
    if (!n && !ncxi) {
        skiff_hook_report("host", "no RDMA device (%s/class/infiniband%s)", c.sys_root, c.cxi ? ", class/cxi" : "");
        skiff_hook_report("hint", "no RDMA fabric here: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME picks the "
                                  "interface), MPI its TCP transport");
        return 0;
    }
    cleanup_free char *text = c.image_env ? skiff_image_env_read(err) : NULL;
    if (c.image_env && !text)
        return -1;
    struct skiff_rdma_set set;
    if (skiff_rdma_select(skiff_ddp_getenv_process, NULL, skiff_envtext_getter, text, c.default_visible, &set, err) < 0)
        return -1;
    bool vis[SKIFF_RDMA_MAX] = {0};
    if (set.kind == SKIFF_RDMA_ALL)
        for (size_t i = 0; i < n; i++)
            vis[i] = true;
    for (size_t i = 0; set.kind == SKIFF_RDMA_LIST && i < set.n; i++) {
        if (set.idx[i] >= n) {
            char names[1024] = "";
            size_t o = 0;
            for (size_t k = 0; k < n && o < sizeof(names); k++)
                o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%zu %s", k ? ", " : "", k, dev[k].name);
            return skiff_error(err, 0, "%s lists RDMA device %u, but this node has %zu%s%s", set.from, set.idx[i], n,
                               n ? ": " : "", names);
        }
        vis[set.idx[i]] = true;
    }
    size_t nvis = 0;
    char shown[1024] = "";
    size_t so = 0;
    for (size_t i = 0; i < n; i++) {
        if (!vis[i])
            continue;
        if (dev[i].uverbs[0]) {
            char name[64];
            snprintf(name, sizeof(name), "infiniband/%s", dev[i].uverbs);
            int r = bind_dev(&c, name, set.kind == SKIFF_RDMA_LIST, err);
            if (r < 0)
                return skiff_err_wrap(err, "RDMA device %s", dev[i].name);
            nvis += r;
        }
        for (size_t k = 0; k < dev[i].nmad; k++) {
            char name[64];
            snprintf(name, sizeof(name), "infiniband/%s", dev[i].mad[k]);
            if (bind_dev(&c, name, false, err) < 0)
                return skiff_err_wrap(err, "RDMA device %s", dev[i].name);
        }
        if (so < sizeof(shown))
            so += (size_t)snprintf(shown + so, sizeof(shown) - so, "%s%s", so ? "," : "", dev[i].name);
    }
    if (nvis && bind_dev(&c, "infiniband/rdma_cm", false, err) < 0)
        return -1;
    size_t ncxi_vis = 0;
    for (size_t i = 0; set.kind != SKIFF_RDMA_VOID && i < ncxi; i++) {
        int r = bind_dev(&c, cxi[i], false, err);
        if (r < 0)
            return -1;
        ncxi_vis += r;
    }
    if (c.mount_driver && nvis && inject_driver(&c, dev, vis, n, err) < 0)
        return -1;

    unsigned long nodes = env_num("SLURM_STEP_NUM_NODES", env_num("SLURM_NNODES", 1));
    char node[256];
    bool first = first_node(node, sizeof(node));
    char hostlist[512] = "";
    size_t ho = 0;
    for (size_t i = 0; i < n && ho < sizeof(hostlist); i++)
        ho += (size_t)snprintf(hostlist + ho, sizeof(hostlist) - ho, "%s%s", i ? ", " : "", dev[i].name);
    for (size_t i = 0; i < ncxi && ho < sizeof(hostlist); i++)
        ho += (size_t)snprintf(hostlist + ho, sizeof(hostlist) - ho, "%s%s", ho ? ", " : "", cxi[i]);
    if (!nvis && !ncxi_vis && nodes > 1 && first) {
        char why[128];
        if (!strcmp(set.from, "default"))
            snprintf(why, sizeof(why), "the admin's default_visible = %.40s", c.default_visible);
        else
            snprintf(why, sizeof(why), "%s=%.40s", set.from, set.kind == SKIFF_RDMA_VOID ? "none" : "a list");
        fprintf(stderr,
                "this %lu-node step's container has no RDMA device although %s has %zu (%.200s): %s; NCCL and MPI "
                "will use TCP sockets\n",
                nodes, node, n + ncxi, hostlist, why);
    }
    char ml[64];
    bool limited;
    memlock(ml, sizeof(ml), &limited);
    if ((nvis || ncxi_vis) && c.check_memlock && limited && first)
        fprintf(stderr,
                "RLIMIT_MEMLOCK is %s for this step's tasks: RDMA memory registration fails beyond it (unlimited "
                "is needed: slurmd's LimitMEMLOCK=infinity with PropagateResourceLimitsExcept=MEMLOCK, or ulimit -l "
                "unlimited before srun)\n",
                ml);
    if (report) {
        for (size_t i = 0; i < n; i++) {
            char mad[256] = "";
            size_t o = 0;
            for (size_t k = 0; k < dev[i].nmad && o < sizeof(mad); k++)
                o += (size_t)snprintf(mad + o, sizeof(mad) - o, ", %s", dev[i].mad[k]);
            skiff_hook_report("host", "RDMA device %zu: %s (driver %s, %s%s)", i, dev[i].name,
                              dev[i].driver[0] ? dev[i].driver : "unknown",
                              dev[i].uverbs[0] ? dev[i].uverbs : "no uverbs node", mad);
        }
        for (size_t i = 0; i < ncxi; i++)
            skiff_hook_report("host", "Slingshot device %s", cxi[i]);
        char mver[128], vpath[PATH_MAX + 64];
        snprintf(vpath, sizeof(vpath), "%s/module/mlx5_core/version", c.sys_root);
        cleanup_close int vfd = open(vpath, O_RDONLY | O_CLOEXEC);
        ssize_t r = vfd < 0 ? -1 : read(vfd, mver, sizeof(mver) - 1);
        if (r > 0) {
            mver[r] = '\0';
            mver[strcspn(mver, "\n")] = '\0';
            skiff_hook_report("host", "MOFED (mlx5_core %s, out-of-tree: %s)", mver, vpath);
        } else
            skiff_hook_report("host", "no MOFED kernel modules (in-box RDMA drivers: %s absent)", vpath);
        skiff_hook_report("host", "RLIMIT_MEMLOCK for tasks: %s", ml);
        skiff_hook_report("container", "RDMA devices %s (from %s: %s)%s%s", nvis ? shown : "none", set.from,
                          set.kind == SKIFF_RDMA_ALL    ? "all"
                          : set.kind == SKIFF_RDMA_VOID ? "none"
                                                        : "a list",
                          ncxi_vis ? ", Slingshot " : "", ncxi_vis ? "all cxi devices" : "");
        bool efa = false, ib = false;
        for (size_t i = 0; i < n; i++)
            if (vis[i]) {
                char p[32];
                skiff_rdma_provider(&dev[i], p, sizeof(p));
                efa |= !strcmp(p, "efa");
                ib |= strcmp(p, "efa") != 0;
            }
        if (ib)
            skiff_hook_report("hint",
                              "NCCL finds the HCAs itself; NCCL_IB_HCA=%s restricts it to these, "
                              "UCX_NET_DEVICES=<hca>:1 picks UCX's (Open MPI, UCC)",
                              shown);
        if (efa)
            skiff_hook_report("hint", "EFA: FI_PROVIDER=efa for libfabric; NCCL needs the aws-ofi-nccl plugin in "
                                      "the image (NCCL_NET_PLUGIN), FI_EFA_USE_DEVICE_RDMA=1 on p4d/p5");
        if (ncxi_vis)
            skiff_hook_report("hint", "Slingshot: FI_PROVIDER=cxi; NCCL needs the aws-ofi-nccl plugin built for "
                                      "CXI in the image");
        if (!nvis && !ncxi_vis)
            skiff_hook_report("hint", "the container gets no fabric device: NCCL and MPI use TCP sockets "
                                      "(MELLANOX_VISIBLE_DEVICES=all gives them the fabric)");
        if (limited && (nvis || ncxi_vis))
            skiff_hook_report("hint", "RLIMIT_MEMLOCK should be unlimited for RDMA (slurmd: LimitMEMLOCK=infinity, "
                                      "PropagateResourceLimitsExcept=MEMLOCK)");
    }
    return 0;
}

int main(int argc, char **argv)
{
    return skiff_hook_main(argc, argv, WHO, run);
}
