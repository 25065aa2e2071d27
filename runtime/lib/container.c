/* Container start / join / env / export; see container.h. The state, stop
 * and load are in ctstate.c, the root filesystem in assemble.c, the hooks
 * in hookrun.c (container_int.h).
 *
 * Parse -> plan -> execute: the parent only forks; everything that touches
 * the image runs in the holder, as the user, inside its own namespaces. The
 * holder reports back over a pipe: either a skiff_err (the real reason) or
 * the container's workdir, env, entrypoint and cmd. */
#include "container.h"
#include "container_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "caps.h"
#include "clock.h"
#include "fdio.h"
#include "fusemount.h"
#include "imgconfig.h"
#include "mountspec.h"
#include "named.h"
#include "ns.h"
#include "rootfs.h"
#include "idfilter.h"
#include "squash.h"
#include "warm.h"

void skiff_trace(bool on, const char *what)
{
    if (on)
        fprintf(stderr, "skiff-trace: %.3f %d %s\n", skiff_now_ms(), (int)getpid(), what);
}

void skiff_start_opts_init(struct skiff_start_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->fuse_fd = -1;
    opts->use_entrypoint = true;
}

/* Sets K=V in an env list: replaces an existing K, else appends. */
int skiff_env_set(char ***v, const char *kv, skiff_err *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return skiff_error(err, 0, "environment entry '%s' is not KEY=VALUE", kv);
    size_t klen = (size_t)(eq - kv) + 1;
    for (char **p = *v; p && *p; p++)
        if (!strncmp(*p, kv, klen)) {
            char *d = strdup(kv);
            if (!d)
                return skiff_error(err, ENOMEM, "env");
            free(*p);
            *p = d;
            return 0;
        }
    return skiff_strv_push(v, kv, err);
}

/* ---- holder ---- */

int skiff_stage_path(const struct skiff_holder *h, const char *sub, char *out, size_t n, skiff_err *err)
{
    if ((size_t)snprintf(out, n, "%s/%s", h->stage, sub) >= n)
        return skiff_error(err, ENAMETOOLONG, "staging path");
    return 0;
}

/* skiff_container_argv's choice, from the image's Entrypoint and Cmd. */
static int build_argv(char *const *entrypoint, char *const *cmd, bool use_entrypoint, char *const *user_argv,
                      char ***argvp, skiff_err *err)
{
    char **v = calloc(1, sizeof(char *));
    if (!v)
        return skiff_error(err, ENOMEM, "argv");
    bool have_user = user_argv && user_argv[0];
    if (use_entrypoint)
        for (size_t i = 0; entrypoint && entrypoint[i]; i++)
            if (skiff_strv_push(&v, entrypoint[i], err) < 0)
                goto fail;
    char *const *rest = have_user ? user_argv : cmd;
    for (size_t i = 0; rest && rest[i]; i++)
        if (skiff_strv_push(&v, rest[i], err) < 0)
            goto fail;
    if (!v[0]) {
        skiff_error(err, 0, "no command given and the image defines no Entrypoint or Cmd");
        goto fail;
    }
    *argvp = v;
    return 0;
fail:
    skiff_strv_free(v);
    return -1;
}

/* The value of the last PATH= in env, or NULL. */
static const char *path_in(const char *const *env, const char *found)
{
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], "PATH=", 5))
            found = env[i] + 5;
    return found;
}

/* The working directory: --workdir (a relative one from where the
 * container starts, pyxis's rule; ".." never leaves the root), else the
 * image's WorkingDir, else /. */
static int workdir_of(const struct skiff_start_opts *o, const struct skiff_image_config *ic, char *out, size_t n,
                      skiff_err *err)
{
    const char *base = ic->workdir[0] == '/' ? ic->workdir : "/";
    if (o->workdir && *o->workdir)
        return skiff_root_path(base, o->workdir, true, out, n, err);
    if (ic->workdir[0] && ic->workdir[0] != '/')
        return skiff_error(err, EINVAL, "the image's working directory '%s' is not absolute", ic->workdir);
    snprintf(out, n, "%s", base);
    return 0;
}

/* Starts warming the executable the caller will run (see warm.h): the same
 * choice of argv[0] as skiff_container_argv, the PATH the command will get
 * (hooks aside), the working directory it will start in. */
static void warm_command(const struct skiff_start_opts *o, const struct skiff_image_config *ic, int rootfd)
{
    char **argv = NULL;
    skiff_err e;
    if (o->no_warm || build_argv(ic->entrypoint, ic->cmd, o->use_entrypoint, o->command, &argv, &e) < 0)
        return; /* nothing to run: the caller says so when it asks */
    const char *path = path_in(o->env, path_in((const char *const *)ic->env, SKIFF_DEFAULT_PATH + 5));
    char wd[SKIFF_PATH_MAX];
    if (workdir_of(o, ic, wd, sizeof(wd), &e) == 0)
        (void)skiff_warm_start(rootfd, argv[0], path, wd);
    skiff_strv_free(argv);
}

/* Writes "skiff: start: WHAT: strerror(e)" to stderr with write(2) alone. */
static void child_fail(const char *what, const char *arg, int e)
{
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "skiff: start: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(e));
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

struct spawn_args {
    const struct skiff_holder *h;
    char **argv, **envp;
    const char *wd;
    const struct skiff_idfilter_prog *filter; /* compiled before the clone */
};

/* The spawned command's side, until exec. It shares the holder's memory
 * (CLONE_VM, the holder waits: CLONE_VFORK) and the holder has another
 * thread (the warm): system calls only, on its own stack, everything it
 * needs prepared before. */
static int spawned(void *arg)
{
    const struct spawn_args *a = arg;
    /* dies with the caller, as a joined child would */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != a->h->caller)
        _exit(125);
    skiff_err e;
    if (chdir(a->wd) < 0) {
        child_fail("working directory", a->wd, errno);
        _exit(125);
    }
    if (skiff_caps_drop_all(&e) < 0) {
        child_fail(e.msg, NULL, e.code);
        _exit(125);
    }
    int sr = skiff_idfilter_load(a->filter);
    if (sr < 0) {
        child_fail("install the seccomp filter", NULL, -sr);
        _exit(125);
    }
    close_range(3, ~0U, 0); /* no holder fd into the command */
    sigprocmask(SIG_SETMASK, &a->h->caller_mask, NULL);
    extern char **environ;
    environ = a->envp; /* execvp searches the container's PATH */
    execvp(a->argv[0], a->argv);
    int en = errno;
    child_fail("exec", a->argv[0], en);
    _exit(en == ENOENT ? 127 : 126);
}

/* opts->spawn: the command, cloned from the holder (inside the namespaces,
 * after pivot_root) as a child of the caller (CLONE_PARENT), so that the
 * caller waits for it and its signals reach it as with a join, without the
 * join; like vfork, nothing of the holder is copied for an exec. */
static pid_t spawn_command(const struct skiff_holder *h, char **argv, char **envp, const char *wd, skiff_err *err)
{
    const size_t stack_size = 64 << 10;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return skiff_error(err, errno, "start the command: stack");
    /* compiled here: the child shares our memory and may not allocate */
    struct skiff_idfilter_prog filter;
    if (skiff_idfilter_build(getuid(), getgid(), &filter, err) < 0) {
        munmap(stack, stack_size);
        return skiff_err_wrap(err, "start the command");
    }
    struct spawn_args a = {.h = h, .argv = argv, .envp = envp, .wd = wd, .filter = &filter};
    pid_t pid = clone(spawned, stack + stack_size, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, &a);
    int e = errno;
    munmap(stack, stack_size); /* the child has exec'ed or exited */
    skiff_idfilter_free(&filter);
    if (pid < 0)
        return skiff_error(err, e, "start the command");
    return pid;
}

int skiff_env_add_defaults(char ***env, const char *const *defaults, skiff_err *err)
{
    for (size_t i = 0; defaults && defaults[i]; i++) {
        const char *eq = strchr(defaults[i], '=');
        if (!eq)
            continue;
        bool have = false;
        for (size_t j = 0; *env && (*env)[j] && !have; j++)
            have = !strncmp((*env)[j], defaults[i], (size_t)(eq - defaults[i]) + 1);
        if (!have && skiff_strv_push(env, defaults[i], err) < 0)
            return -1;
    }
    return 0;
}

static int holder_setup(struct skiff_holder *h, struct skiff_recbuf *out, skiff_err *err)
{
    const struct skiff_start_opts *o = h->o;
    char mnt[SKIFF_PATH_MAX + 8];
    if (skiff_state_private_dir(h->cfg->runtime_path, err) < 0 || skiff_state_private_dir(h->state_dir, err) < 0)
        return -1;
    if (o->name) {
        /* held (the fds stay open) until the holder exits: the first
         * instance writes the persistent upper, later ones read it */
        if (skiff_named_acquire(h->cfg, o->name, !h->rootfs_only, &h->named, err) < 0)
            return -1;
    }
    snprintf(mnt, sizeof(mnt), "%s/mnt", h->state_dir);
    if (mkdir(mnt, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", mnt);
    if (o->mount_home) {
        /* before the namespace: inside it, getuid() may be 0 (remap-root) */
        struct passwd *pw = getpwuid(getuid());
        if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
            return skiff_error(err, ENOENT, "--mount-home: no home directory for uid %u", (unsigned)getuid());
        if ((size_t)snprintf(h->home, sizeof(h->home), "%s", pw->pw_dir) >= sizeof(h->home))
            return skiff_error(err, ENAMETOOLONG, "home directory");
    }
    if (skiff_ns_create(o->unshare_flags, o->remap_root || h->rootfs_only, err) < 0)
        return -1;
    skiff_trace(o->trace, "holder: namespaces");
    if (o->die_with_parent)
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* everything below lives on this tmpfs, visible only in our namespace */
    if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
        return skiff_error(err, errno, "mount staging tmpfs on %s", mnt);
    if ((size_t)snprintf(h->stage, sizeof(h->stage), "%s", mnt) >= sizeof(h->stage))
        return skiff_error(err, ENAMETOOLONG, "staging path");
    cleanup_close int rootfd = skiff_rootfs_assemble(h, err);
    if (rootfd < 0)
        return -1;
    skiff_trace(o->trace, "holder: rootfs (lower + overlay)");
    if (h->rootfs_only)
        return 0;
    /* the image config first (it is the image's own file, under no mount):
     * it names the command to warm while the rest is set up */
    struct skiff_image_config ic = {0};
    char **env = NULL;
    int rv = -1;
    if (skiff_imgconfig_read(rootfd, &ic, err) < 0)
        goto out;
    warm_command(o, &ic, rootfd);
    skiff_trace(o->trace, "holder: image config, warm");
    if (skiff_rootfs_system_mounts(rootfd, err) < 0) {
        skiff_err_wrap(err, "system mounts");
        goto out;
    }
    skiff_trace(o->trace, "holder: system mounts");
    /* pyxis: with remap-root the home directory is root's, /root */
    if (skiff_rootfs_user_mounts(rootfd, o->mount_home ? h->home : NULL, o->remap_root ? "/root" : h->home, o->mounts,
                                 err) < 0)
        goto out;
    if (skiff_env_set(&env, SKIFF_DEFAULT_PATH, err) < 0)
        goto out;
    for (size_t i = 0; ic.env && ic.env[i]; i++)
        if (skiff_env_set(&env, ic.env[i], err) < 0) {
            skiff_err_wrap(err, "image Env");
            goto out;
        }
    if (skiff_hooks_container(h, &env, err) < 0) {
        h->failed_in_hooks = true;
        goto out;
    }
    skiff_trace(o->trace, "holder: hooks");
    if (skiff_compat_env(rootfd, o, &env, err) < 0)
        goto out;
    for (size_t i = 0; o->env && o->env[i]; i++)
        if (skiff_env_set(&env, o->env[i], err) < 0)
            goto out;
    char wd[SKIFF_PATH_MAX];
    if (workdir_of(o, &ic, wd, sizeof(wd), err) < 0) {
        skiff_err_wrap(err, "working directory");
        goto out;
    }
    {
        cleanup_close int wfd = skiff_root_open(rootfd, wd, O_PATH | O_DIRECTORY, err);
        if (wfd < 0) {
            skiff_err_wrap(err, "working directory");
            goto out;
        }
    }
    if (!h->writable && skiff_mount_setattr(rootfd, SKIFF_BIND_RO, err) < 0) {
        skiff_err_wrap(err, "make the root read-only");
        goto out;
    }
    {
        /* the report (and state file): the container as the library
         * encodes it everywhere, borrowing env and the image config's lists;
         * then N, R and M, what skiff_container_find needs to attach to it */
        struct skiff_container view = {
            .holder = getpid(), .server_pidfd = -1, .env = env, .entrypoint = ic.entrypoint, .cmd = ic.cmd};
        snprintf(view.workdir, sizeof(view.workdir), "%s", wd);
        struct stat mns;
        if (skiff_container_encode(&view, out, err) < 0 ||
            (h->fuse && skiff_rec_putf(out, 'F', err, "%d", (int)skiff_fuse_server_pid(h->fuse)) < 0) ||
            (o->name && skiff_rec_put(out, 'N', o->name, err) < 0) ||
            (o->name && !h->named.writer && skiff_rec_put(out, 'R', "1", err) < 0) ||
            (stat("/proc/self/ns/mnt", &mns) == 0 &&
             skiff_rec_putf(out, 'M', err, "%llu:%llu", (unsigned long long)mns.st_dev,
                            (unsigned long long)mns.st_ino) < 0))
            goto out;
    }
    skiff_trace(o->trace, "holder: env, workdir, read-only");
    /* state for `skiff exec` */
    if (skiff_state_write(h->state_dir, out, err) < 0)
        goto out;
    skiff_trace(o->trace, "holder: state written");
    /* enter the root: pivot_root(".", ".") stacks the old root on the new
     * one; detaching it leaves only the container's tree in this namespace */
    if (fchdir(rootfd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) {
        skiff_error(err, errno, "pivot_root into the container");
        goto out;
    }
    skiff_trace(o->trace, "holder: pivot_root, ready");
    if (o->spawn) {
        char **argv = NULL;
        char num[16];
        pid_t cmd;
        if (skiff_env_add_defaults(&env, o->default_env, err) < 0 ||
            build_argv(ic.entrypoint, ic.cmd, o->use_entrypoint, o->command, &argv, err) < 0)
            goto out;
        cmd = spawn_command(h, argv, env, wd, err);
        skiff_strv_free(argv);
        if (cmd < 0)
            goto out;
        snprintf(num, sizeof(num), "%d", (int)cmd);
        if (skiff_rec_put(out, 'X', num, err) < 0) {
            kill(cmd, SIGKILL); /* the caller will not know of it */
            goto out;
        }
        skiff_trace(o->trace, "holder: command started");
    }
    rv = 0;
out:
    skiff_strv_free(env);
    skiff_imgconfig_free(&ic);
    return rv;
}

/* Points stdin and stdout (and stderr when all) at /dev/null. */
static void null_stdio(bool all)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        return;
    dup2(null, 0);
    dup2(null, 1);
    if (all)
        dup2(null, 2);
    close(null);
}

/* Keeps fds 0-2 (stdin and stdout to /dev/null unless keep_stdio), keep1
 * and keep2; closes the rest so the holder holds none of the caller's
 * sockets or pipes. */
static void close_stray_fds(int keep1, int keep2, bool keep_stdio)
{
    if (!keep_stdio)
        null_stdio(false);
    const int keep[] = {keep1, keep2};
    skiff_close_fds_except(keep, 2);
}

static void holder_main(struct skiff_holder *h, int wfd)
{
    /* The holder ignores job-control and terminal signals (they are meant for
     * the command); it dies by SIGKILL from stop, or with its parent. */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &h->caller_mask);
    prctl(PR_SET_NAME, "skiff-holder", 0, 0, 0);
    /* the spawned command gets the caller's stdio and signal mask */
    close_stray_fds(wfd, h->o->fuse_fd, h->o->spawn);
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_recbuf out = {0};
    int rc = holder_setup(h, &out, &err);
    int32_t status = rc < 0 && h->failed_in_hooks ? -2 : rc;
    if (skiff_write_all(wfd, &status, sizeof(status)) < 0)
        _exit(1);
    if (rc < 0) {
        skiff_fuse_stop(h->fuse); /* gone before our parent reaps us */
        (void)skiff_write_all(wfd, &err, sizeof(err));
        _exit(1);
    }
    (void)skiff_write_all(wfd, out.p, out.len);
    close(wfd);
    free(out.p);
    null_stdio(!h->o->trace);
    for (;;)
        pause(); /* all signals blocked: only SIGKILL ends us */
}

static int resolve_image(const struct skiff_config *cfg, const struct skiff_start_opts *o, struct skiff_holder *h,
                         skiff_err *err)
{
    h->writable = o->writable;
    if (o->name) {
        char dir[SKIFF_PATH_MAX];
        if (skiff_named_dir(cfg, o->name, dir, sizeof(dir), err) < 0)
            return -1;
        if (!o->image && skiff_named_image(cfg, o->name, h->image, sizeof(h->image), err) < 0)
            return -1;
        snprintf(h->upper, sizeof(h->upper), "%s", dir);
        h->writable = true;
    }
    if (o->image) {
        if (!o->image[0])
            return skiff_error(err, 0, "empty image path");
        if (o->image[0] == '/')
            snprintf(h->image, sizeof(h->image), "%s", o->image);
        else if (!realpath(o->image, h->image))
            return skiff_error(err, errno, "image %s", o->image);
    }
    if (!h->image[0])
        return skiff_error(err, 0, "no image given");
    /* a FIFO (or a device) as the image would hold the start until its
     * deadline: refused now, with its name */
    int fd = skiff_open_regular(h->image, 0, err);
    if (fd < 0)
        return skiff_err_wrap(err, "container image");
    close(fd);
    return 0;
}

/* The holder's report is bounded: its env and argv, a few KiB normally. */
#define REPLY_MAX (16u << 20)

static int read_reply(int rfd, pid_t pid, struct skiff_container *c, skiff_err *err)
{
    int32_t status;
    char *data = NULL;
    size_t len = 0;
    if (skiff_rec_read_fd(rfd, REPLY_MAX, 0, 0, &data, &len, NULL, err) < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        c->holder = 0;
        return skiff_err_wrap(err, "container setup process");
    }
    int rv = -1;
    if (len < sizeof(status)) {
        int st = 0;
        waitpid(pid, &st, 0);
        c->holder = 0;
        if (WIFSIGNALED(st))
            skiff_error(err, 0, "container setup process was killed by signal %d", WTERMSIG(st));
        else
            skiff_error(err, 0, "container setup process exited (status %d) without a report",
                        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        goto out;
    }
    memcpy(&status, data, sizeof(status));
    if (status < 0) {
        c->failed_phase = status == -2 ? SKIFF_START_FAILED_HOOKS : SKIFF_START_FAILED_SETUP;
        if (len >= sizeof(status) + sizeof(*err))
            memcpy(err, data + sizeof(status), sizeof(*err));
        else
            skiff_error(err, 0, "container setup failed");
        err->msg[sizeof(err->msg) - 1] = '\0';
        waitpid(pid, NULL, 0);
        c->holder = 0;
        goto out;
    }
    rv = skiff_state_parse(data + sizeof(status), len - sizeof(status), c, err);
    c->holder = pid; /* the pid as we see it */
out:
    free(data);
    return rv;
}

int skiff_container_start(const struct skiff_config *cfg, const struct skiff_start_opts *opts,
                          struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    struct skiff_holder h = {.cfg = cfg, .o = opts, .named = {.users = -1, .lock = -1}};
    if (resolve_image(cfg, opts, &h, err) < 0)
        return skiff_err_wrap(err, "start");
    /* validate mount specs before forking: a typo gets its message at once */
    for (size_t i = 0; opts->mounts && opts->mounts[i]; i++) {
        struct skiff_mount m;
        if (skiff_mountspec_parse(opts->mounts[i], &m, err) < 0)
            return skiff_err_wrap(err, "start");
        skiff_mount_free(&m);
    }
    for (size_t i = 0; opts->env && opts->env[i]; i++)
        if (!strchr(opts->env[i], '=') || opts->env[i][0] == '=')
            return skiff_error(err, 0, "start: environment entry '%s' is not KEY=VALUE", opts->env[i]);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "start: pipe");
    if (opts->state_key && opts->state_key[0] && skiff_state_dir_for(cfg, opts->state_key, 0, c->state_dir, err) < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_err_wrap(err, "start");
    }
    pid_t parent = getpid();
    h.caller = parent;
    skiff_trace(opts->trace, "start: fork holder");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, errno, "start: fork");
    }
    if (pid == 0) {
        close(p[0]);
        if (opts->die_with_parent) {
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (getppid() != parent)
                _exit(1);
        }
        if (!c->state_dir[0]) {
            skiff_err e2;
            skiff_state_dir_for(cfg, NULL, getpid(), c->state_dir, &e2);
        }
        h.state_dir = c->state_dir;
        holder_main(&h, p[1]);
        _exit(1);
    }
    close(p[1]);
    if (!c->state_dir[0])
        skiff_state_dir_for(cfg, NULL, pid, c->state_dir, err);
    c->owns_state = true;
    c->trace = opts->trace;
    int rc = read_reply(p[0], pid, c, err);
    close(p[0]);
    skiff_trace(opts->trace, "start: holder ready");
    if (rc < 0) {
        skiff_state_remove(c->state_dir);
        skiff_strv_free(c->env);
        skiff_strv_free(c->entrypoint);
        skiff_strv_free(c->cmd);
        c->env = c->entrypoint = c->cmd = NULL;
        if (c->holder > 0) {
            kill(c->holder, SIGKILL);
            waitpid(c->holder, NULL, 0);
            c->holder = 0;
        }
        return skiff_err_wrap(err, "start");
    }
    c->holder = pid;
    /* while the holder lives, so does its server (PR_SET_PDEATHSIG): this
     * pidfd is the server's, and stop can kill both at once */
    if (c->server > 0 && (c->server_pidfd = pidfd_open(c->server, 0)) >= 0 && !skiff_is_child_of(c->server, pid)) {
        close(c->server_pidfd); /* (not the server: it has died, its pid is reused) */
        c->server_pidfd = -1;
    }
    c->subreaper = opts->subreaper;
    if (c->subreaper) {
        char nsp[64];
        struct stat ns;
        snprintf(nsp, sizeof(nsp), "/proc/%d/ns/mnt", (int)pid);
        if (stat(nsp, &ns) == 0) {
            c->mntns_dev = ns.st_dev;
            c->mntns_ino = ns.st_ino;
        }
    }
    return 0;
}

int skiff_container_join(pid_t holder, const char *workdir, unsigned flags, skiff_err *err)
{
    if (skiff_ns_join(holder, err) < 0)
        return skiff_err_wrap(err, "join container");
    if (workdir && *workdir && chdir(workdir) < 0)
        return skiff_error(err, errno, "join container: working directory %s", workdir);
    if ((flags & SKIFF_JOIN_KEEP_CAPS ? skiff_caps_keep_userns(err) : skiff_caps_drop_all(err)) < 0 ||
        skiff_idfilter_install(err) < 0)
        return skiff_err_wrap(err, "join container");
    return 0;
}

int skiff_container_env(const struct skiff_container *c, char ***envp, skiff_err *err)
{
    *envp = skiff_strv_dup(c->env, err);
    return *envp ? 0 : -1;
}

int skiff_container_argv(const struct skiff_container *c, bool use_entrypoint, char *const *user_argv, char ***argvp,
                         skiff_err *err)
{
    return build_argv(c->entrypoint, c->cmd, use_entrypoint, user_argv, argvp, err);
}

/* ---- rootfs-only assembly for export ---- */

int skiff_container_export(const struct skiff_config *cfg, const char *name, const char *out_path, skiff_err *err)
{
    struct skiff_start_opts o;
    skiff_start_opts_init(&o);
    o.name = name;
    struct skiff_holder h = {.cfg = cfg, .o = &o, .rootfs_only = true, .named = {.users = -1, .lock = -1}};
    if (resolve_image(cfg, &o, &h, err) < 0)
        return skiff_err_wrap(err, "export %s", name);
    char abs_out[SKIFF_PATH_MAX];
    if (out_path[0] == '/')
        snprintf(abs_out, sizeof(abs_out), "%s", out_path);
    else {
        char cwd[SKIFF_PATH_MAX - 256];
        if (!getcwd(cwd, sizeof(cwd)))
            return skiff_error(err, errno, "export: current directory");
        snprintf(abs_out, sizeof(abs_out), "%s/%s", cwd, out_path);
    }
    char state_dir[SKIFF_PATH_MAX];
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "export: pipe");
    pid_t pid = fork();
    if (pid < 0)
        return skiff_error(err, errno, "export: fork");
    if (pid == 0) {
        close(p[0]);
        skiff_err e;
        skiff_err_clear(&e);
        int rc = skiff_state_dir_for(cfg, NULL, getpid(), state_dir, &e);
        h.state_dir = state_dir;
        if (rc == 0)
            rc = holder_setup(&h, NULL, &e);
        char root[SKIFF_PATH_MAX + 8];
        snprintf(root, sizeof(root), "%s/root", h.stage);
        if (rc == 0)
            rc = skiff_squash_from_dir(cfg, root, abs_out, &e);
        skiff_fuse_stop(h.fuse);
        if (rc < 0)
            (void)skiff_write_all(p[1], &e, sizeof(e));
        _exit(rc < 0 ? 1 : 0);
    }
    close(p[1]);
    skiff_err child;
    ssize_t n;
    while ((n = read(p[0], &child, sizeof(child))) < 0 && errno == EINTR)
        ;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    skiff_state_dir_for(cfg, NULL, pid, state_dir, err);
    skiff_state_remove(state_dir);
    if (n == (ssize_t)sizeof(child)) {
        *err = child;
        err->msg[sizeof(err->msg) - 1] = '\0';
        return skiff_err_wrap(err, "export %s", name);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return skiff_error(err, 0, "export %s: the export process failed", name);
    return 0;
}
