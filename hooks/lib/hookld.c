/* See hookld.h. */
#include "hookld.h"

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

#include "fsutil.h"
#include "hookutil.h"

int skiff_hook_resolve_in(const char *root, const char *path, char *out, size_t n, skiff_err *err)
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

#define MAX_LIBS 512
struct lib {
    char src[PATH_MAX];
    char dst[PATH_MAX];
};

static bool is_library(const char *dst)
{
    const char *base = strrchr(dst, '/');
    base = base ? base + 1 : dst;
    return !strncmp(base, "lib", 3) && strstr(base, ".so");
}

/* The library binds of the mounts file so far. */
static int read_libs(struct lib *v, size_t *n, skiff_err *err)
{
    const char *path = getenv("SKIFF_MOUNTS_FILE");
    if (!path || !*path)
        return skiff_error(err, 0, "SKIFF_MOUNTS_FILE is not set (run hooks through the skiff runtime)");
    cleanup_free char *text = skiff_read_file(path, 0, 16u << 20, NULL, err);
    if (!text)
        return -1;
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char src[PATH_MAX], dst[PATH_MAX], type[16], opts[256];
        if (line[0] == '#' || sscanf(line, "%4095s %4095s %15s %255s", src, dst, type, opts) != 4)
            continue;
        if ((strcmp(type, "none") && strcmp(type, "bind")) || !strstr(opts, "bind") || !is_library(dst) ||
            dst[0] != '/')
            continue;
        bool seen = false;
        for (size_t i = 0; i < *n && !seen; i++)
            seen = !strcmp(v[i].dst, dst);
        if (seen)
            continue;
        if (*n >= MAX_LIBS)
            return skiff_error(err, 0, "more than %d libraries to list in the container's ld.so.cache", MAX_LIBS);
        snprintf(v[*n].src, sizeof(v[*n].src), "%s", src);
        snprintf(v[*n].dst, sizeof(v[*n].dst), "%s", dst);
        (*n)++;
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

static int write_id_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, text, strlen(text));
    close(fd);
    return w == (ssize_t)strlen(text) ? 0 : -1;
}

/* The child: a private copy of the container's mount namespace with the
 * libraries bound where they will be, and the state directory on the
 * root's /tmp; chrooted into the root, the image's ldconfig writes
 * /tmp/ld.so.cache (= OUTDIR/ld.so.cache). */
static void ldconfig_child(const char *who, const char *root, const char *outdir, const char *ldconfig,
                           const struct lib *v, size_t n)
{
    /* A hook holds no capability unless the user is root inside: a user
     * namespace of its own (the same uid and gid) gives the mount namespace
     * and chroot, within the container's. */
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        fprintf(stderr, "skiff hook %s: namespaces for ldconfig: %s\n", who, strerror(errno));
        _exit(2);
    }
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    int ok = write_id_file("/proc/self/uid_map", map) == 0 && write_id_file("/proc/self/setgroups", "deny") == 0;
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (!ok || write_id_file("/proc/self/gid_map", map) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        fprintf(stderr, "skiff hook %s: private mount namespace for ldconfig: %s\n", who, strerror(errno));
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
    /* the directories of later hooks' libraries first: ldconfig lists the
     * directories it is given first, in their order, before the image's
     * own, and the dynamic linker takes the first entry of a name */
    for (size_t j = n; j-- > 0;) {
        size_t i = j;
        int t = mount_point_in(root, v[i].dst, &err);
        if (t < 0 || mount_on(v[i].src, t) < 0) {
            fprintf(stderr, "skiff hook %s: ldconfig: place %s: %s\n", who, v[i].dst,
                    t < 0 ? err.msg : strerror(errno));
            _exit(2);
        }
        close(t);
        snprintf(dirs[i], sizeof(dirs[i]), "%s", v[i].dst);
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
        fprintf(stderr, "skiff hook %s: ldconfig: /tmp of the image: %s\n", who, tmp < 0 ? err.msg : strerror(errno));
        _exit(2);
    }
    if (chroot(root) < 0 || chdir("/") < 0) {
        fprintf(stderr, "skiff hook %s: ldconfig: chroot: %s\n", who, strerror(errno));
        _exit(2);
    }
    const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    execve(ldconfig, (char *const *)(void *)argv, (char *const *)(void *)envp);
    fprintf(stderr, "skiff hook %s: exec %s in the image: %s\n", who, ldconfig, strerror(errno));
    _exit(127);
}

int skiff_hook_update_ldcache(const char *who, skiff_err *err)
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
    static struct lib libs[MAX_LIBS];
    size_t n = 0;
    if (read_libs(libs, &n, err) < 0)
        return -1;
    char outdir[PATH_MAX], out[PATH_MAX + 16];
    snprintf(outdir, sizeof(outdir), "%s/%s", state, who);
    snprintf(out, sizeof(out), "%s/ld.so.cache", outdir);
    if (mkdir(outdir, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", outdir);
    unlink(out);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return skiff_error(err, errno, "fork");
    if (pid == 0)
        ldconfig_child(who, root, outdir, ldconfig, libs, n);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return skiff_error(err, errno, "wait for ldconfig");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || access(out, R_OK) < 0) {
        fprintf(stderr,
                "skiff hook %s: warning: the image's ldconfig failed (status %d): /etc/ld.so.cache "
                "does not list the libraries of the host\n",
                who, st);
        return 0;
    }
    return skiff_hook_mount(out, "/etc/ld.so.cache", "none", "ro,bind,x-create=file", err);
}
