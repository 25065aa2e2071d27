/* skiff doctor: checks what unprivileged containers need on this host and
 * prints, for each problem, the command that fixes it. Exit 1 on problems. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "fdio.h"
#include "fsutil.h"
#include "hookrun.h"
#include "strv.h"

static int problems;

static void ok(const char *what)
{
    printf("ok:      %s\n", what);
}

static void bad(const char *what, const char *fix)
{
    printf("problem: %s\n         fix: %s\n", what, fix);
    problems++;
}

static long read_long(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

static int has_fs(const char *name)
{
    FILE *f = fopen("/proc/filesystems", "re");
    if (!f)
        return 0;
    char line[128];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        char *t = strrchr(line, '\t');
        t = t ? t + 1 : line;
        t[strcspn(t, "\n")] = '\0';
        if (!strcmp(t, name))
            found = 1;
    }
    fclose(f);
    return found;
}

static int in_path(const char *prog)
{
    static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"};
    char p[256];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dirs[i], prog);
        if (access(p, X_OK) == 0)
            return 1;
    }
    return 0;
}

/* Really tries: a child creates user + mount namespaces. */
/* The block cache is never an error of a start, so a directory it cannot
 * use would only make starts slower, silently: said here. */
static void block_cache(const struct skiff_config *cfg)
{
    char fix[SKIFF_PATH_MAX + 64], dir[SKIFF_PATH_MAX];
    struct stat st;
    if (cfg->block_cache_mb <= 0 || skiff_config_block_cache(cfg, dir, sizeof(dir)) < 0) {
        printf("note:    block cache off (block_cache_size = 0): every start decompresses what it reads\n");
        return;
    }
    if (lstat(dir, &st) < 0) {
        ok("block cache (created at the first start)");
        return;
    }
    snprintf(fix, sizeof(fix), "chmod 700 %s (or remove it)", dir);
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid())
        bad("block_cache_path exists but is not a directory of yours (starts run without the cache)", fix);
    else if (st.st_mode & 022)
        bad("block_cache_path is writable by others, so it is not used (starts run without the cache)", fix);
    else
        ok("block cache usable");
}

static int try_userns(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : 1);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ---- doctor --fabric: the GPUs and the RDMA fabric, as the hooks see them ---- */

/* A file's lines, each to cb. */
static void each_line(const char *path, void (*cb)(void *ctx, const char *line), void *ctx)
{
    FILE *f = fopen(path, "re");
    char line[8192];
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0])
            cb(ctx, line);
    }
    if (f)
        fclose(f);
}

struct seen {
    char devices[4096], libs[4096], other[2048];
    size_t ndev, nlib;
};

static void add_word(char *buf, size_t n, const char *w)
{
    size_t o = strlen(buf);
    if (o + strlen(w) + 2 < n)
        snprintf(buf + o, n - o, "%s%s", o ? " " : "", w);
}

static void on_mount(void *ctx, const char *line)
{
    struct seen *s = ctx;
    char src[4096], dst[4096];
    if (sscanf(line, "%4095s %4095s", src, dst) != 2)
        return;
    const char *base = strrchr(dst, '/');
    base = base ? base + 1 : dst;
    if (!strncmp(dst, "/dev/", 5) && strncmp(dst, "/dev/shm", 8)) {
        add_word(s->devices, sizeof(s->devices), dst);
        s->ndev++;
    } else if (!strncmp(base, "lib", 3) && strstr(base, ".so")) {
        add_word(s->libs, sizeof(s->libs), base);
        s->nlib++;
    } else
        add_word(s->other, sizeof(s->other), dst);
}

struct kind {
    const char *name;
};

static void on_report(void *ctx, const char *line)
{
    const struct kind *k = ctx;
    size_t kl = strlen(k->name);
    if (!strncmp(line, k->name, kl) && line[kl] == ':')
        printf("%-10s %s\n", k->name, line + kl + 2);
}

/* The lines of KIND of the hooks' report. */
static void print_report(const char *path, const char *kind)
{
    struct kind k = {kind};
    each_line(path, on_report, &k);
}

static void on_env(void *ctx, const char *line)
{
    (void)ctx;
    if (strncmp(line, "SLURM_", 6) && line[0] != '#')
        printf("           env %s\n", line);
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* Runs the hooks as a container start would (doc/hooks.md), on an empty
 * root whose image environment is image_env, with this process's Slurm,
 * NVIDIA, CUDA and MELLANOX variables as the plugin passes a job's; prints
 * what the container would get. */
static int fabric_run(const struct skiff_config *cfg, const char *dir, const char *title, const char *image_env,
                      bool show_host)
{
    char root[SKIFF_PATH_MAX + 16], state[SKIFF_PATH_MAX + 16], envf[SKIFF_PATH_MAX + 16], fstab[SKIFF_PATH_MAX + 16],
        report[SKIFF_PATH_MAX + 16], img[SKIFF_PATH_MAX + 32], kv[SKIFF_PATH_MAX + 64];
    snprintf(root, sizeof(root), "%s/root", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(envf, sizeof(envf), "%s/env", dir);
    snprintf(fstab, sizeof(fstab), "%s/fstab", dir);
    snprintf(report, sizeof(report), "%s/report", dir);
    snprintf(img, sizeof(img), "%s/root/.skiff", dir);
    mkdir(root, 0755);
    mkdir(state, 0700);
    mkdir(img, 0755);
    snprintf(img, sizeof(img), "%s/root/.skiff/environment", dir);
    if (write_text(img, image_env) < 0 || write_text(envf, "") < 0 || write_text(fstab, "") < 0 ||
        write_text(report, "") < 0) {
        printf("problem: cannot write the scratch files in %s\n", dir);
        return -1;
    }
    char **env = NULL;
    skiff_err err;
    skiff_err_clear(&err);
    extern char **environ;
    const char *const fixed[][2] = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                                    {"SKIFF_ROOTFS", root},
                                    {"SKIFF_STATE_DIR", state},
                                    {"SKIFF_ENV_FILE", envf},
                                    {"SKIFF_MOUNTS_FILE", fstab},
                                    {"SKIFF_REPORT_FILE", report},
                                    {"SKIFF_IMAGE", ""},
                                    {"SKIFF_CONTAINER_NAME", ""},
                                    {"SKIFF_WRITABLE", "0"},
                                    {"SKIFF_REMAP_ROOT", "0"}};
    int rv = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && rv == 0; i++) {
        snprintf(kv, sizeof(kv), "%s=%s", fixed[i][0], fixed[i][1]);
        rv = skiff_strv_push(&env, kv, &err);
    }
    snprintf(kv, sizeof(kv), "SKIFF_PID=%d", (int)getpid());
    rv = rv < 0 ? rv : skiff_strv_push(&env, kv, &err);
    snprintf(kv, sizeof(kv), "SKIFF_UID=%u", (unsigned)getuid());
    rv = rv < 0 ? rv : skiff_strv_push(&env, kv, &err);
    snprintf(kv, sizeof(kv), "SKIFF_GID=%u", (unsigned)getgid());
    rv = rv < 0 ? rv : skiff_strv_push(&env, kv, &err);
    for (char **e = environ; e && *e && rv == 0; e++)
        if (!strncmp(*e, "SLURM_", 6) || !strncmp(*e, "NVIDIA_", 7) || !strncmp(*e, "MELLANOX_", 9) ||
            !strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21))
            rv = skiff_strv_push(&env, *e, &err);
    const char *extra = getenv("SKIFF_HOOKS_DIR");
    const char *dirs[] = {cfg->hooks_dir, extra && strcmp(extra, cfg->hooks_dir) ? extra : "", NULL};
    char notice[1024] = "";
    if (rv == 0) {
        /* what the hooks say is shown below, once: not on stderr as well */
        int saved = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (saved >= 0 && null >= 0)
            dup2(null, 2);
        rv = skiff_hooks_run(dirs, NULL, (const char *const *)env, 60000, notice, sizeof(notice), &err);
        if (saved >= 0 && null >= 0)
            dup2(saved, 2);
        if (saved >= 0)
            close(saved);
        if (null >= 0)
            close(null);
    }
    skiff_strv_free(env);
    if (show_host) {
        print_report(report, "host");
        printf("\n");
    }
    printf("%s\n", title);
    if (rv < 0) {
        printf("problem: a container would not start: %s\n", err.msg);
        problems++;
        return -1;
    }
    struct seen s = {0};
    each_line(fstab, on_mount, &s);
    printf("           devices (%zu): %s\n", s.ndev, s.ndev ? s.devices : "none");
    printf("           libraries of the host (%zu): %s\n", s.nlib, s.nlib ? s.libs : "none");
    if (s.other[0])
        printf("           also: %s\n", s.other);
    each_line(envf, on_env, NULL);
    print_report(report, "container");
    if (notice[0])
        printf("           the user is told: %s\n", notice);
    return 0;
}

static int doctor_fabric(void)
{
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    char dir[] = "/tmp/skiff-doctor.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "skiff: doctor: scratch directory in /tmp: %s\n", strerror(errno));
        return 1;
    }
    problems = 0;
    const char *extra = getenv("SKIFF_HOOKS_DIR");
    printf("skiff %s doctor --fabric (uid %u): the hooks of %s%s%s, as a container start runs them\n\n", SKIFF_VERSION,
           (unsigned)getuid(), cfg.hooks_dir[0] ? cfg.hooks_dir : "(no hooks_dir)", extra && *extra ? " and " : "",
           extra && *extra ? extra : "");
    char sub[sizeof(dir) + 16];
    snprintf(sub, sizeof(sub), "%s/a", dir);
    mkdir(sub, 0700);
    fabric_run(&cfg, sub, "a container of an image without NVIDIA_* or MELLANOX_* variables gets:", "", true);
    printf("\n");
    snprintf(sub, sizeof(sub), "%s/b", dir);
    mkdir(sub, 0700);
    /* what NGC's images (nvcr.io/nvidia/pytorch, ...) set */
    fabric_run(&cfg, sub,
               "a container of an NGC-style image (NVIDIA_VISIBLE_DEVICES=all, "
               "NVIDIA_DRIVER_CAPABILITIES=compute,utility) gets:",
               "NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\n", false);
    snprintf(sub, sizeof(sub), "%s/a/report", dir);
    printf("\n");
    print_report(sub, "hint");
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_remove_tree(dir, &err) < 0)
        fprintf(stderr, "skiff: doctor: %s\n", err.msg);
    printf("%d problem%s\n", problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}

int cmd_doctor(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--fabric"))
        return doctor_fabric();
    if (argc > 1)
        return cli_usage_error("doctor", "unexpected argument '%s'", argv[1]);
    problems = 0;
    printf("skiff %s doctor (uid %u)\n", SKIFF_VERSION, (unsigned)getuid());

    long max = read_long("/proc/sys/user/max_user_namespaces");
    long clone = read_long("/proc/sys/kernel/unprivileged_userns_clone");
    long aa = read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    if (max == 0)
        bad("user namespaces are disabled (user.max_user_namespaces = 0)", "sysctl -w user.max_user_namespaces=15000");
    else if (clone == 0)
        bad("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)",
            "sysctl -w kernel.unprivileged_userns_clone=1");
    else if (aa == 1)
        bad("AppArmor restricts unprivileged user namespaces",
            "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0");
    else if (try_userns() < 0)
        bad("creating user + mount namespaces failed", "check seccomp/LSM policy; sysctl user.max_user_namespaces");
    else
        ok("user + mount namespaces can be created");

    struct stat st;
    if (stat("/dev/fuse", &st) < 0)
        bad("/dev/fuse is missing (squashfs images are then extracted: slower)", "modprobe fuse");
    else if ((st.st_mode & 0006) != 0006) {
        char what[160];
        snprintf(what, sizeof(what), "/dev/fuse is mode %04o: users cannot open it (images are then extracted)",
                 st.st_mode & 07777);
        bad(what, "chmod 0666 /dev/fuse  (as root; keep it with a udev rule: KERNEL==\"fuse\", MODE=\"0666\")");
    } else {
        int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
        if (fd < 0)
            bad("/dev/fuse cannot be opened", "chmod 0666 /dev/fuse (as root)");
        else {
            close(fd);
            ok("/dev/fuse is usable");
        }
    }
    if (has_fs("fuse"))
        ok("FUSE filesystem support (squashfs served in-process with libsquashfuse_ll)");
    else
        bad("no FUSE support in the kernel", "modprobe fuse");
    if (has_fs("overlay"))
        ok("overlayfs support (--rw, named containers)");
    else
        bad("no overlayfs in the kernel (--rw and named containers fail)", "modprobe overlay");
    struct utsname u;
    int maj = 0, min = 0;
    if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &maj, &min) == 2 && (maj < 5 || (maj == 5 && min < 11)))
        bad("Linux < 5.11: overlayfs is refused in user namespaces", "use a newer kernel (or only read-only images)");
    if (has_fs("squashfs"))
        ok("kernel squashfs (only used by privileged modes)");
    else
        printf("note:    kernel squashfs not loaded (not needed: images are served with FUSE)\n");
    if (in_path("unsquashfs"))
        ok("unsquashfs present (fallback when FUSE is unavailable)");
    else
        bad("unsquashfs missing (no fallback without FUSE)", "apt-get install squashfs-tools");
    if (in_path("mksquashfs"))
        ok("mksquashfs present (import, export)");
    else
        bad("mksquashfs missing (skiff import and export need it)", "apt-get install squashfs-tools");
    if (in_path("squashfuse_ll") || in_path("squashfuse"))
        ok("squashfuse present (not required: skiff serves squashfs in-process)");
    else
        printf("note:    squashfuse not installed (not required: skiff serves squashfs in-process)\n");

    struct skiff_config cfg;
    if (cli_load_config(&cfg) == 0) {
        if (lstat(cfg.runtime_path, &st) == 0 && (st.st_uid != getuid() || !S_ISDIR(st.st_mode)))
            bad("runtime_path exists but is not a directory of yours",
                "rm -rf the path, or set runtime_path in skiff.conf");
        else
            ok("runtime_path usable");
        block_cache(&cfg);
    }
    if (getuid() == 0)
        printf("note:    run 'skiff doctor' as a normal user too: containers run unprivileged\n");
    printf("%d problem%s\n", problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}
