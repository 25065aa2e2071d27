/* Hook "gpu": gives the container the host's NVIDIA driver and the GPUs the
 * step may use.
 *
 * Which GPUs: NVIDIA_VISIBLE_DEVICES, else SLURM_STEP_GPUS, else
 * SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES (hookutil.h); none of them set,
 * or "void": nothing at all. "none": the driver without a GPU.
 *
 * What is bound, each at the path programs expect, host permissions kept
 * (the runtime binds a character device without nodev, always nosuid: a
 * node opens inside exactly as it does on the host, for the same user):
 *   - DEV/nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset and the
 *     nodes in DEV/nvidia-caps/, at /dev/...;
 *   - DEV/nvidiaN for each visible GPU (a listed GPU without its node is an
 *     error);
 *   - the driver's libraries as the driver's ld.so.cache lists them
 *     (libcuda.so, libnvidia-ml.so, ...), read-only at the path the cache
 *     names; libcuda.so.1 must be there, and a listed library whose file
 *     is missing (a half-installed driver) is an error that names it;
 *   - the driver's tools (nvidia-smi, ...) at /usr/bin/.
 * Then the image's own ldconfig runs on the image with those libraries in
 * place (in a throwaway mount namespace, chrooted into the root) and the
 * new cache is bound over /etc/ld.so.cache, so `ldconfig -p` and the
 * dynamic linker inside find libcuda.so.1 like any other library.
 *
 * Knobs, in NAME.conf next to the hook (e.g. 40-gpu.conf; the runtime
 * passes hooks no environment of the admin's): dev_root (/dev),
 * driver_root (/), ldcache (DRIVER_ROOT/etc/ld.so.cache), update_ldcache
 * (yes). No DEV/nvidiactl: no NVIDIA driver on this host, nothing to do. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_env.h"
#include "hookutil.h"

static const char *const libs[] = {"libcuda.so",
                                   "libcudadebugger.so",
                                   "libnvidia-ml.so",
                                   "libnvidia-ptxjitcompiler.so",
                                   "libnvidia-nvvm.so",
                                   "libnvidia-gpucomp.so",
                                   "libnvidia-cfg.so",
                                   "libnvidia-opencl.so",
                                   "libnvidia-allocator.so",
                                   NULL};
static const char *const tools[] = {
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", NULL};
static const char *const ctl[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", NULL};

struct conf {
    char dev_root[PATH_MAX];
    char driver_root[PATH_MAX];
    char ldcache[PATH_MAX];
    bool update_ldcache;
};

#define MAX_LIBS 256
struct lib {
    char src[PATH_MAX]; /* on the host, symlinks resolved inside the driver root */
    char dst[PATH_MAX]; /* in the container: the path the driver's cache names */
};
struct found {
    const struct conf *c;
    struct lib *v;
    size_t n;
    bool cuda;
    skiff_err *err;
};

static int set_path(char *out, const char *file, int line, const char *key, const char *v, skiff_err *err)
{
    if (v[0] != '/' || strlen(v) >= PATH_MAX)
        return skiff_error(err, 0, "%s:%d: %s must be an absolute path, got '%s'", file, line, key, v);
    snprintf(out, PATH_MAX, "%s", v);
    return 0;
}

/* NAME.conf beside the hook: "key = value" lines, '#' comments. */
static int read_conf(const char *self, struct conf *c, skiff_err *err)
{
    snprintf(c->dev_root, sizeof(c->dev_root), "/dev");
    snprintf(c->driver_root, sizeof(c->driver_root), "/");
    c->ldcache[0] = '\0';
    c->update_ldcache = true;
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s.conf", self) >= (int)sizeof(path))
        return skiff_error(err, ENAMETOOLONG, "hook path %s", self);
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", path);
    char *line = NULL;
    size_t cap = 0;
    int rv = 0, no = 0;
    while (rv == 0 && getline(&line, &cap, f) > 0) {
        no++;
        char *s = line + strspn(line, " \t");
        s[strcspn(s, "\r\n#")] = '\0';
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rv = skiff_error(err, 0, "%s:%d: expected 'key = value'", path, no);
            break;
        }
        char *k = s, *v = eq + 1, *e = eq;
        while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        *e = '\0';
        v += strspn(v, " \t");
        for (e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t');)
            *--e = '\0';
        if (!strcmp(k, "dev_root"))
            rv = set_path(c->dev_root, path, no, k, v, err);
        else if (!strcmp(k, "driver_root"))
            rv = set_path(c->driver_root, path, no, k, v, err);
        else if (!strcmp(k, "ldcache"))
            rv = set_path(c->ldcache, path, no, k, v, err);
        else if (!strcmp(k, "update_ldcache") && (!strcmp(v, "yes") || !strcmp(v, "no")))
            c->update_ldcache = !strcmp(v, "yes");
        else if (!strcmp(k, "update_ldcache"))
            rv = skiff_error(err, 0, "%s:%d: update_ldcache is yes or no, got '%s'", path, no, v);
        else
            rv = skiff_error(err, 0, "%s:%d: unknown key '%s' (dev_root, driver_root, ldcache, update_ldcache)", path,
                             no, k);
    }
    free(line);
    fclose(f);
    size_t n = strlen(c->driver_root);
    while (n > 1 && c->driver_root[n - 1] == '/')
        c->driver_root[--n] = '\0';
    if (rv == 0 && !c->ldcache[0])
        snprintf(c->ldcache, sizeof(c->ldcache), "%s/etc/ld.so.cache", n > 1 ? c->driver_root : "");
    return rv;
}

/* DEV/name, which must be a character device, at /dev/name. */
static int bind_dev(const struct conf *c, const char *name, bool required, skiff_err *err)
{
    char src[PATH_MAX + 64], dst[128];
    snprintf(src, sizeof(src), "%s/%s", c->dev_root, name);
    snprintf(dst, sizeof(dst), "/dev/%s", name);
    struct stat st;
    if (stat(src, &st) < 0) {
        if (errno == ENOENT && !required)
            return 0;
        return skiff_error(err, errno, "device %s", src);
    }
    if (!S_ISCHR(st.st_mode))
        return skiff_error(err, 0, "%s is not a character device", src);
    return skiff_hook_mount(src, dst, "none", "rw,bind,x-create=file", err);
}

static bool gpu_node(const char *name)
{
    return !strncmp(name, "nvidia", 6) && name[6] && strspn(name + 6, "0123456789") == strlen(name + 6);
}

/* Every entry of DEV/dir that is a character device (nvidia-caps: MIG). */
static int bind_dev_dir(const struct conf *c, const char *dir, skiff_err *err)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", c->dev_root, dir);
    DIR *d = opendir(p);
    if (!d)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", p);
    struct dirent *e;
    int rv = 0;
    while (rv == 0 && (e = readdir(d))) {
        struct stat st;
        char name[300];
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISCHR(st.st_mode))
            continue;
        snprintf(name, sizeof(name), "%s/%.250s", dir, e->d_name);
        rv = bind_dev(c, name, true, err);
    }
    closedir(d);
    return rv;
}

static int bind_devices(const struct conf *c, const struct skiff_gpu_set *set, skiff_err *err)
{
    for (size_t i = 0; ctl[i]; i++)
        if (bind_dev(c, ctl[i], false, err) < 0)
            return -1;
    if (bind_dev_dir(c, "nvidia-caps", err) < 0)
        return -1;
    if (set->kind == SKIFF_GPU_LIST) {
        for (size_t i = 0; i < set->n; i++) {
            char name[32];
            snprintf(name, sizeof(name), "nvidia%u", set->idx[i]);
            if (bind_dev(c, name, true, err) < 0)
                return skiff_err_wrap(err, "%s lists GPU %u", set->from, set->idx[i]);
        }
    } else if (set->kind == SKIFF_GPU_ALL) {
        DIR *d = opendir(c->dev_root);
        if (!d)
            return skiff_error(err, errno, "open %s", c->dev_root);
        struct dirent *e;
        int rv = 0;
        while (rv == 0 && (e = readdir(d)))
            if (gpu_node(e->d_name) && strlen(e->d_name) < 32)
                rv = bind_dev(c, e->d_name, true, err);
        closedir(d);
        return rv;
    }
    return 0;
}

/* The host path of PATH inside ROOT (symlinks may not leave ROOT), which
 * must be a regular file. */
static int resolve_in(const char *root, const char *path, char *out, size_t n, skiff_err *err)
{
    int fd = skiff_hook_open_in_root(root, path, O_PATH, err);
    if (fd < 0)
        return -1;
    struct stat st;
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t len = fstat(fd, &st) < 0 ? -1 : readlink(link, out, n - 1);
    int e = errno;
    close(fd);
    if (len < 0)
        return skiff_error(err, e, "resolve %s in %s", path, root);
    out[len] = '\0';
    if (!S_ISREG(st.st_mode))
        return skiff_error(err, 0, "%s in %s is not a regular file", path, root);
    return 0;
}

static int on_lib(void *ctx, const char *name, const char *path)
{
    struct found *f = ctx;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].dst, path))
            return 0; /* listed again (another hwcap variant of one file) */
    if (f->n >= MAX_LIBS)
        return skiff_error(f->err, 0, "more than %d NVIDIA libraries in %s", MAX_LIBS, f->c->ldcache);
    if (path[0] != '/' || strlen(path) >= PATH_MAX)
        return skiff_error(f->err, 0, "%s: library %s has a bad path '%s'", f->c->ldcache, name, path);
    struct lib *l = &f->v[f->n];
    if (resolve_in(f->c->driver_root, path, l->src, sizeof(l->src), f->err) < 0) {
        if (f->err->code == ENOENT)
            return skiff_error(f->err, 0,
                               "driver library %s is listed in %s but %s is missing under driver root %s (a "
                               "partly installed or removed driver: reinstall it, or rerun ldconfig)",
                               name, f->c->ldcache, path, f->c->driver_root);
        return skiff_err_wrap(f->err, "driver library %s", name);
    }
    snprintf(l->dst, sizeof(l->dst), "%s", path);
    f->cuda |= !strcmp(name, "libcuda.so.1");
    f->n++;
    return 0;
}

static int bind_tools(const struct conf *c, skiff_err *err)
{
    for (size_t i = 0; tools[i]; i++) {
        char in[64], src[PATH_MAX];
        snprintf(in, sizeof(in), "/usr/bin/%s", tools[i]);
        if (resolve_in(c->driver_root, in, src, sizeof(src), err) < 0) {
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

/* Creates PATH (and its parents) inside ROOT as an empty file to mount on;
 * returns an O_PATH fd of it. Every step is resolved inside ROOT. */
static int mount_point_in(const char *root, const char *path, skiff_err *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        int fd = skiff_hook_open_in_root(root, p, O_PATH | O_DIRECTORY, err);
        if (fd < 0 && err->code == ENOENT) {
            char *slash = strrchr(p, '/');
            *slash = '\0';
            int parent = skiff_hook_open_in_root(root, p[0] ? p : "/", O_PATH | O_DIRECTORY, err);
            *slash = '/';
            if (parent < 0)
                return -1;
            int r = mkdirat(parent, slash + 1, 0755);
            close(parent);
            if (r < 0 && errno != EEXIST)
                return skiff_error(err, errno, "create %s in the image", p);
            fd = skiff_hook_open_in_root(root, p, O_PATH | O_DIRECTORY, err);
        }
        if (fd < 0)
            return -1;
        close(fd);
        *s = '/';
    }
    int fd = skiff_hook_open_in_root(root, p, O_PATH, err);
    if (fd >= 0 || err->code != ENOENT)
        return fd; /* the image has one (a CUDA compat library): it gets covered */
    fd = skiff_hook_open_in_root(root, p, O_WRONLY | O_CREAT | O_EXCL, err);
    if (fd < 0)
        return -1;
    close(fd);
    return skiff_hook_open_in_root(root, p, O_PATH, err);
}

static int mount_on(const char *src, int target)
{
    char t[64];
    snprintf(t, sizeof(t), "/proc/self/fd/%d", target);
    return mount(src, t, NULL, MS_BIND, NULL);
}

/* The child: a private copy of the container's mount namespace with the
 * libraries bound where they will be, and the state directory on the
 * root's /tmp; chrooted into the root, the image's ldconfig writes
 * /tmp/ld.so.cache (= OUTDIR/ld.so.cache) with the libraries' directories
 * added to those of the image's ld.so.conf (-X: no link in the image is
 * touched). */
static int write_id_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, text, strlen(text));
    close(fd);
    return w == (ssize_t)strlen(text) ? 0 : -1;
}

static void ldconfig_child(const char *root, const char *outdir, const char *ldconfig, const struct found *f)
{
    /* A hook holds no capability unless the user is root inside: a user
     * namespace of its own (the same uid and gid) gives the mount namespace
     * and chroot, within the container's. */
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        perror("skiff hook gpu: namespaces for ldconfig");
        _exit(2);
    }
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    int ok = write_id_file("/proc/self/uid_map", map) == 0 && write_id_file("/proc/self/setgroups", "deny") == 0;
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (!ok || write_id_file("/proc/self/gid_map", map) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        perror("skiff hook gpu: private mount namespace for ldconfig");
        _exit(2);
    }
    skiff_err err = {0};
    const char *argv[MAX_LIBS + 8];
    size_t a = 0;
    argv[a++] = "ldconfig";
    argv[a++] = "-X";
    argv[a++] = "-C";
    argv[a++] = "/tmp/ld.so.cache";
    static char dirs[MAX_LIBS][PATH_MAX];
    for (size_t i = 0; i < f->n; i++) {
        int t = mount_point_in(root, f->v[i].dst, &err);
        if (t < 0 || mount_on(f->v[i].src, t) < 0) {
            fprintf(stderr, "skiff hook gpu: ldconfig: place %s: %s\n", f->v[i].dst, t < 0 ? err.msg : strerror(errno));
            _exit(2);
        }
        close(t);
        snprintf(dirs[i], sizeof(dirs[i]), "%s", f->v[i].dst);
        *strrchr(dirs[i], '/') = '\0';
        bool seen = false;
        for (size_t k = 4; k < a; k++)
            seen |= !strcmp(argv[k], dirs[i]);
        if (!seen && dirs[i][0])
            argv[a++] = dirs[i];
    }
    argv[a] = NULL;
    int tmp = skiff_hook_open_in_root(root, "/tmp", O_PATH | O_DIRECTORY, &err);
    if (tmp < 0 || mount_on(outdir, tmp) < 0) {
        fprintf(stderr, "skiff hook gpu: ldconfig: /tmp of the image: %s\n", tmp < 0 ? err.msg : strerror(errno));
        _exit(2);
    }
    if (chroot(root) < 0 || chdir("/") < 0) {
        perror("skiff hook gpu: ldconfig: chroot");
        _exit(2);
    }
    const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    execve(ldconfig, (char *const *)(void *)argv, (char *const *)(void *)envp);
    fprintf(stderr, "skiff hook gpu: exec %s in the image: %s\n", ldconfig, strerror(errno));
    _exit(127);
}

/* Runs the image's ldconfig as above and binds the result over the image's
 * /etc/ld.so.cache. An image without ld.so.cache or ldconfig (musl,
 * busybox) has no use for one: nothing is done. A failure is a warning:
 * the dynamic linker still finds libcuda.so.1 in the default directories. */
static int update_ldcache(const struct found *f, skiff_err *err)
{
    const char *root = getenv("SKIFF_ROOTFS"), *state = getenv("SKIFF_STATE_DIR");
    if (!root || !*root || !state || !*state)
        return skiff_error(err, 0,
                           "SKIFF_ROOTFS and SKIFF_STATE_DIR must be set (run hooks through the skiff runtime)");
    int fd = skiff_hook_open_in_root(root, "/etc/ld.so.cache", O_PATH, err);
    if (fd < 0) {
        skiff_err_clear(err);
        return 0;
    }
    close(fd);
    const char *ldconfig = NULL;
    static const char *const cand[] = {"/sbin/ldconfig", "/usr/sbin/ldconfig", NULL};
    for (size_t i = 0; cand[i] && !ldconfig; i++) {
        fd = skiff_hook_open_in_root(root, cand[i], O_PATH, err);
        if (fd >= 0) {
            ldconfig = cand[i];
            close(fd);
        }
    }
    skiff_err_clear(err);
    if (!ldconfig)
        return 0;
    char outdir[PATH_MAX], out[PATH_MAX + 16];
    snprintf(outdir, sizeof(outdir), "%s/gpu", state);
    snprintf(out, sizeof(out), "%s/ld.so.cache", outdir);
    if (mkdir(outdir, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", outdir);
    unlink(out);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return skiff_error(err, errno, "fork");
    if (pid == 0)
        ldconfig_child(root, outdir, ldconfig, f);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return skiff_error(err, errno, "wait for ldconfig");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || access(out, R_OK) < 0) {
        fprintf(stderr,
                "skiff hook gpu: warning: the image's ldconfig failed (status %d): /etc/ld.so.cache "
                "does not list the driver's libraries\n",
                st);
        return 0;
    }
    return skiff_hook_mount(out, "/etc/ld.so.cache", "none", "ro,bind,x-create=file", err);
}

static int run(const char *self, skiff_err *err)
{
    struct conf c;
    if (read_conf(self, &c, err) < 0)
        return -1;
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/nvidiactl", c.dev_root);
    if (access(p, F_OK) < 0)
        return 0; /* no NVIDIA driver on this host */
    struct skiff_gpu_set set;
    if (skiff_gpu_select(skiff_ddp_getenv_process, NULL, &set, err) < 0)
        return -1;
    if (set.kind == SKIFF_GPU_NONE)
        return 0;
    if (bind_devices(&c, &set, err) < 0)
        return -1;
    static struct lib found_libs[MAX_LIBS];
    struct found f = {.c = &c, .v = found_libs, .err = err};
    if (skiff_ldcache_find(c.ldcache, libs, on_lib, &f, err) < 0)
        return skiff_err_wrap(err, "driver libraries");
    if (!f.cuda)
        return skiff_error(err, 0,
                           "libcuda.so.1 is not in %s: the NVIDIA driver's libraries are not installed under "
                           "driver root %s (or its ld.so.cache is out of date: run ldconfig)",
                           c.ldcache, c.driver_root);
    for (size_t i = 0; i < f.n; i++)
        if (skiff_hook_mount(found_libs[i].src, found_libs[i].dst, "none", "ro,bind,x-create=file", err) < 0)
            return -1;
    if (bind_tools(&c, err) < 0)
        return -1;
    return c.update_ldcache ? update_ldcache(&f, err) : 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    skiff_err err = {0};
    if (!argv[0] || argv[0][0] != '/') {
        fprintf(stderr, "skiff hook gpu: run by the skiff runtime, which gives the hook's absolute path\n");
        return 1;
    }
    if (run(argv[0], &err) < 0) {
        fprintf(stderr, "skiff hook gpu: %s\n", err.msg);
        return 1;
    }
    return 0;
}
