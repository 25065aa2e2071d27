/* skiff doctor: checks what unprivileged containers need on this host and
 * prints, for each problem, the command that fixes it. Exit 1 on problems. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

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

int cmd_doctor(int argc, char **argv)
{
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
