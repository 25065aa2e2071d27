/* The holder: the process that builds a container and then holds its
 * namespaces (container_int.h). skiff_holder_setup is the start path in
 * order, one step per file: namespaces (ns.c), root filesystem
 * (assemble.c), image config and warming (image/imgconfig.c, fs/warm.c),
 * system and user mounts (assemble.c; enroot's mounts.d between them,
 * enrootsite.c), hooks (hookrun.c, then enroot's hooks.d), environment
 * (imgcompat.c), the report and state file (runstate.c), pivot_root, the
 * command (command.c). */
#include "container_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "env.h"
#include "fdio.h"
#include "fusemount.h"
#include "imgconfig.h"
#include "lazy.h"
#include "mount.h"
#include "named.h"
#include "ns.h"
#include "rootfs.h"
#include "warm.h"

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
static int workdir_of(const struct skiff_start_request *o, const struct skiff_image_config *ic, char *out, size_t n,
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
static void warm_command(const struct skiff_start_request *o, const struct skiff_image_config *ic, int rootfd)
{
    char **argv = NULL;
    skiff_err e;
    if (o->no_warm || skiff_command_argv(ic->entrypoint, ic->cmd, o->use_entrypoint, o->command, &argv, &e) < 0)
        return; /* nothing to run: the caller says so when it asks */
    const char *path = path_in(o->env, path_in((const char *const *)ic->env, SKIFF_DEFAULT_PATH + 5));
    char wd[SKIFF_PATH_MAX];
    if (workdir_of(o, ic, wd, sizeof(wd), &e) == 0)
        (void)skiff_warm_start(rootfd, argv[0], path, wd);
    skiff_strv_free(argv);
}

int skiff_holder_setup(struct skiff_holder *h, struct skiff_recbuf *out, skiff_err *err)
{
    const struct skiff_start_request *o = h->o;
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
    cleanup_close int rootfd = skiff_assemble_root(h, err);
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
    if (skiff_assemble_system_mounts(rootfd, o->unshare_flags, err) < 0) {
        skiff_err_wrap(err, "system mounts");
        goto out;
    }
    skiff_trace(o->trace, "holder: system mounts");
    if (skiff_enroot_mounts(h, rootfd, err) < 0)
        goto out;
    if (skiff_assemble_user_mounts(rootfd, o->mount_home ? h->home : NULL, o->mount_home && o->remap_root, o->mounts,
                                   err) < 0)
        goto out;
    if (skiff_env_set(&env, SKIFF_DEFAULT_PATH, err) < 0)
        goto out;
    for (size_t i = 0; ic.env && ic.env[i]; i++)
        if (skiff_env_set(&env, ic.env[i], err) < 0) {
            skiff_err_wrap(err, "image Env");
            goto out;
        }
    if (skiff_enroot_environ(h, &env, err) < 0)
        goto out;
    char notice[SKIFF_NOTICE_LEN] = "";
    if (skiff_hooks_container(h, &env, notice, sizeof(notice), err) < 0 ||
        skiff_enroot_hooks(h, rootfd, &env, notice, sizeof(notice), err) < 0) {
        h->failed_in_hooks = true;
        goto out;
    }
    skiff_trace(o->trace, "holder: hooks");
    if (skiff_compat_env(rootfd, o, &env, err) < 0)
        goto out;
    {
        /* the user's entries over the container's own (env.h) */
        char **own = env;
        int rc = skiff_env_compose(NULL, (const char *const *)own, o, &env, err);
        skiff_strv_free(own);
        if (rc < 0)
            goto out;
    }
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
            (notice[0] && skiff_rec_put(out, 'U', notice, err) < 0) ||
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
        char **cenv = NULL;
        if (skiff_env_compose(o->default_env, (const char *const *)env, NULL, &cenv, err) < 0 ||
            skiff_command_argv(ic.entrypoint, ic.cmd, o->use_entrypoint, o->command, &argv, err) < 0) {
            skiff_strv_free(cenv);
            goto out;
        }
        cmd = skiff_command_spawn(h, argv, cenv, wd, err);
        skiff_strv_free(argv);
        skiff_strv_free(cenv);
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

/* Keeps fds 0-2 (stdin and stdout to /dev/null unless keep_stdio), wfd,
 * /dev/fuse and a lazy image's data file and fetcher channel; closes the
 * rest so the holder holds none of the caller's sockets or pipes. */
static void close_stray_fds(const struct skiff_holder *h, int wfd)
{
    if (!h->o->spawn)
        null_stdio(false);
    const int keep[] = {wfd, h->o->fuse_fd, h->o->lazy ? skiff_lazy_data_fd(h->o->lazy) : -1, h->o->lazy_chan};
    skiff_close_fds_except(keep, 4);
}

void skiff_holder_main(struct skiff_holder *h, int wfd)
{
    /* The holder ignores job-control and terminal signals (they are meant for
     * the command); it dies by SIGKILL from stop, or with its parent. */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &h->caller_mask);
    prctl(PR_SET_NAME, "skiff-holder", 0, 0, 0);
    /* the spawned command gets the caller's stdio and signal mask */
    close_stray_fds(h, wfd);
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_recbuf out = {0};
    int rc = skiff_holder_setup(h, &out, &err);
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
