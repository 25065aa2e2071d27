#include "squash.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomicfile.h"
#include "lazy.h"
#include "spawn.h"

/* mksquashfs packs a tree that is already on disk (dir: imports, saved
 * containers, and imports with import_mksquashfs or compression lz4, lzo
 * or none) with all cores. Image layers are packed by pack.c instead, straight from
 * their tar streams: it overlaps download, inflate and compression and
 * writes no tree. */

static const char *const mksquashfs_dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"};

static int find_mksquashfs(char *buf, size_t n, skiff_err *err)
{
    for (size_t i = 0; i < sizeof(mksquashfs_dirs) / sizeof(mksquashfs_dirs[0]); i++) {
        snprintf(buf, n, "%s/mksquashfs", mksquashfs_dirs[i]);
        if (access(buf, X_OK) == 0)
            return 0;
    }
    return skiff_error(err, ENOENT, "mksquashfs not found in /usr/bin or /usr/sbin (install squashfs-tools)");
}

/* skiff's default level per compressor when squash_level is 0: zstd's own
 * default (15) is ~10x slower than level 1 for ~10% smaller images, and imports
 * sit on the job's critical path. */
static int default_level(const char *comp)
{
    if (!strcmp(comp, "zstd"))
        return 1;
    return 0;
}

int skiff_squash_level(const struct skiff_config *cfg)
{
    const char *comp = cfg->squash_compression[0] ? cfg->squash_compression : "zstd";
    if (!strcmp(comp, "none") || !strcmp(comp, "lz4"))
        return 0;
    return cfg->squash_level ? cfg->squash_level : default_level(comp);
}

bool skiff_squash_is_image(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* (a FIFO: no wait, no magic) */
    if (fd < 0)
        return false;
    char magic[4];
    ssize_t n = read(fd, magic, sizeof(magic));
    close(fd);
    return n == 4 && memcmp(magic, "hsqs", 4) == 0;
}

int skiff_squash_build(const struct skiff_config *cfg, const char *dir, const char *tmp_path, skiff_err *err)
{
    char exe[64];
    if (find_mksquashfs(exe, sizeof(exe), err) < 0)
        return -1;
    struct stat st;
    if (stat(dir, &st) < 0)
        return skiff_error(err, errno, "squash %s", dir);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, ENOTDIR, "squash %s", dir);

    const char *comp = cfg->squash_compression[0] ? cfg->squash_compression : "zstd";
    char level[16] = "";
    int lvl = skiff_squash_level(cfg);
    if (lvl)
        snprintf(level, sizeof(level), "%d", lvl);

    /* execve wants char *const[]; the strings are never written. */
    const char *argv[24];
    int a = 0;
    argv[a++] = exe;
    argv[a++] = dir;
    argv[a++] = tmp_path;
    argv[a++] = "-noappend";
    argv[a++] = "-no-progress";
    argv[a++] = "-quiet";
    argv[a++] = "-exit-on-error";
    if (!strcmp(comp, "none")) {
        argv[a++] = "-noI";
        argv[a++] = "-noD";
        argv[a++] = "-noF";
        argv[a++] = "-noX";
    } else {
        argv[a++] = "-comp";
        argv[a++] = comp;
        if (level[0]) {
            argv[a++] = "-Xcompression-level";
            argv[a++] = level;
        }
    }
    if (geteuid() != 0)
        argv[a++] = "-all-root";
    char procs[16];
    if (cfg->max_processors > 0) {
        snprintf(procs, sizeof(procs), "%d", cfg->max_processors);
        argv[a++] = "-processors";
        argv[a++] = procs;
    }
    argv[a] = NULL;

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        return skiff_error(err, e, "fork");
    }
    if (pid == 0) {
        /* mksquashfs installs handlers for these and exits 1 on them, even
         * when they were ignored: the plugin's helper ignores Slurm's step
         * signals (a job that ends while --container-save squashes), so
         * what the caller ignores is blocked across the exec instead */
        static const int quiet[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
        sigset_t block;
        sigemptyset(&block);
        for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
            struct sigaction sa;
            if (sigaction(quiet[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
                sigaddset(&block, quiet[i]);
        }
        sigprocmask(SIG_BLOCK, &block, NULL);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        static char env_path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin", env_lc[] = "LC_ALL=C";
        char *const envp[] = {env_path, env_lc, NULL};
        char *args[24];
        memcpy(args, argv, sizeof(args));
        execve(exe, args, envp);
        _exit(127);
    }
    close(pfd[1]);
    /* Keep the tail of mksquashfs's output for the error message. */
    char out[2048];
    size_t len = 0;
    for (;;) {
        char buf[1024];
        ssize_t n = read(pfd[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (len == sizeof(out) - 1) {
                memmove(out, out + sizeof(out) / 2, len - sizeof(out) / 2);
                len -= sizeof(out) / 2;
            }
            out[len++] = buf[i];
        }
    }
    out[len] = '\0';
    close(pfd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            unlink(tmp_path);
            return skiff_error(err, errno, "waitpid mksquashfs");
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(tmp_path);
        while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
            out[--len] = '\0';
        const char *last = strrchr(out, '\n');
        last = last ? last + 1 : out;
        if (WIFEXITED(status))
            return skiff_error(err, 0, "mksquashfs %s exited %d%s%s", dir, WEXITSTATUS(status), *last ? ": " : "",
                               last);
        return skiff_error(err, 0, "mksquashfs %s killed by signal %d", dir, WTERMSIG(status));
    }
    return 0;
}

int skiff_squash_from_dir(const struct skiff_config *cfg, const char *dir, const char *out_path, const char *tmp,
                          skiff_err *err)
{
    /* mksquashfs writes the temporary file by its name */
    struct skiff_atomic out;
    if (skiff_atomic_begin(&out, out_path, tmp, 0600, SKIFF_ATOMIC_NOSYNC, err) < 0)
        return skiff_err_wrap(err, "squash %s", out_path);
    close(out.fd);
    out.fd = -1;
    if (skiff_squash_build(cfg, dir, out.tmp, err) < 0) {
        skiff_atomic_abort(&out);
        return -1;
    }
    if (chmod(out.tmp, 0644) < 0) {
        int e = errno;
        skiff_atomic_abort(&out);
        return skiff_error(err, e, "publish %s", out_path);
    }
    return skiff_atomic_commit(&out, err);
}

int skiff_squash_resolve_path(const char *arg, char *sqsh_path, size_t n, skiff_err *err)
{
    char real[PATH_MAX];
    if (!realpath(arg, real))
        return skiff_error(err, errno, "container image %s", arg);
    struct stat st;
    if (stat(real, &st) < 0)
        return skiff_error(err, errno, "container image %s", arg);
    if (S_ISDIR(st.st_mode) && skiff_lazy_is_image(real)) {
        /* a lazy image (lazy.h): its directory */
        if (snprintf(sqsh_path, n, "%s", real) >= (int)n)
            return skiff_error(err, ENAMETOOLONG, "%s", real);
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return skiff_error(err, 0, "container image %s is not a regular file (want a squashfs image)", arg);
    if (!skiff_squash_is_image(real))
        return skiff_error(err, 0, "container image %s is not a squashfs image (import one with skiff import)", arg);
    if (snprintf(sqsh_path, n, "%s", real) >= (int)n)
        return skiff_error(err, ENAMETOOLONG, "%s", real);
    return 0;
}

int skiff_squash_check(const char *image, skiff_err *err)
{
    char magic[4];
    cleanup_close int fd = open(image, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open image %s", image);
    if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "hsqs", 4) != 0)
        return skiff_error(err, 0, "%s is not a squashfs image (import it first: skiff import)", image);
    return 0;
}

int skiff_squash_check_fd(int fd, const char *name, skiff_err *err)
{
    unsigned char sb[96];
    struct stat st;
    if (fstat(fd, &st) < 0)
        return skiff_error(err, errno, "%s", name);
    if (pread(fd, sb, sizeof(sb), 0) != (ssize_t)sizeof(sb) || memcmp(sb, "hsqs", 4) != 0)
        return skiff_error(err, 0, "%s is not a squashfs image", name);
    /* little-endian fields of the superblock (squashfs 4.0) */
    unsigned block_size = (unsigned)sb[12] | (unsigned)sb[13] << 8 | (unsigned)sb[14] << 16 | (unsigned)sb[15] << 24;
    unsigned major = (unsigned)sb[28] | (unsigned)sb[29] << 8;
    unsigned long long used = 0;
    for (int i = 7; i >= 0; i--)
        used = used << 8 | sb[40 + i];
    if (major != 4 || block_size < 4096 || block_size > (1u << 20) || (block_size & (block_size - 1)))
        return skiff_error(err, 0, "%s: not a squashfs 4.0 superblock (version %u, block size %u)", name, major,
                           block_size);
    if (used > (unsigned long long)st.st_size)
        return skiff_error(err, 0, "%s is cut short: %llu bytes of the %llu its superblock says it uses", name,
                           (unsigned long long)st.st_size, used);
    return 0;
}

/* The fallback when FUSE is unusable: unsquashfs from squashfs-tools, as
 * mksquashfs builds the image (see above). */
int skiff_squash_extract(const char *image, const char *dir, skiff_err *err)
{
    if (skiff_squash_check(image, err) < 0)
        return -1;
    const char *argv[] = {"unsquashfs", "-quiet", "-no-progress", "-no-xattrs", "-force", "-d", dir, image, NULL};
    const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct skiff_spawn_result r;
    if (skiff_spawn(argv, envp, -1, 0, 0, &r, err) < 0)
        return skiff_err_wrap(err, "extract %s", image);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 127)
            return skiff_error(err, ENOENT, "extract %s: unsquashfs not found (install squashfs-tools)", image);
        char how[64];
        skiff_spawn_describe(&r, 0, how, sizeof(how));
        return skiff_error(err, 0, "extract %s: unsquashfs failed (%s): %s", image, how, r.err_tail);
    }
    return 0;
}
