/* Container start / join / env / export; see container.h. The holder's
 * side is holder.c (the start path in order), its command command.c, the
 * state, stop and load runstate.c (container_int.h).
 *
 * Parse -> plan -> execute: the parent only forks; everything that touches
 * the image runs in the holder, as the user, inside its own namespaces. The
 * holder reports back over a pipe: either a skiff_err (the real reason) or
 * the container's workdir, env, entrypoint and cmd. */
#include "container.h"
#include "container_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomicfile.h"
#include "caps.h"
#include "clock.h"
#include "lazy.h"
#include "fdio.h"
#include "fsutil.h"
#include "fusemount.h"
#include "idfilter.h"
#include "mountspec.h"
#include "named.h"
#include "ns.h"
#include "squash.h"

static int resolve_image(const struct skiff_config *cfg, const struct skiff_start_request *o, struct skiff_holder *h,
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
    if (skiff_lazy_is_image(h->image)) {
        /* served from its skeleton, with its fetcher (skiff_lazy_run_begin) */
        if (!o->lazy)
            return skiff_error(err, 0, "%s is a lazy image: it starts only with its span fetcher (skiff start, srun)",
                               h->image);
        char skel[SKIFF_PATH_MAX];
        skiff_lazy_skeleton(o->lazy, skel, sizeof(skel));
        snprintf(h->image, sizeof(h->image), "%s", skel);
    }
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

int skiff_container_start(const struct skiff_config *cfg, const struct skiff_start_request *req,
                          struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    struct skiff_holder h = {.cfg = cfg, .o = req, .named = {.users = -1, .lock = -1}};
    if (resolve_image(cfg, req, &h, err) < 0)
        return skiff_err_wrap(err, "start");
    /* validate mount specs before forking: a typo gets its message at once */
    for (size_t i = 0; req->mounts && req->mounts[i]; i++) {
        struct skiff_mount m;
        if (skiff_mountspec_parse(req->mounts[i], &m, err) < 0)
            return skiff_err_wrap(err, "start");
        skiff_mount_free(&m);
    }
    /* NAME=VALUE, or a bare NAME: the caller's value (env.h) */
    for (size_t i = 0; req->env && req->env[i]; i++)
        if (req->env[i][0] == '=' || !req->env[i][0])
            return skiff_error(err, 0, "start: environment entry '%s' is not KEY=VALUE or NAME", req->env[i]);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "start: pipe");
    if (req->state_key && req->state_key[0] && skiff_state_dir_for(cfg, req->state_key, 0, c->state_dir, err) < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_err_wrap(err, "start");
    }
    pid_t parent = getpid();
    h.caller = parent;
    skiff_trace(req->trace, "start: fork holder");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, errno, "start: fork");
    }
    if (pid == 0) {
        close(p[0]);
        if (req->die_with_parent) {
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (getppid() != parent)
                _exit(1);
        }
        if (!c->state_dir[0]) {
            skiff_err e2;
            skiff_state_dir_for(cfg, NULL, getpid(), c->state_dir, &e2);
        }
        h.state_dir = c->state_dir;
        skiff_holder_main(&h, p[1]);
        _exit(1);
    }
    close(p[1]);
    if (!c->state_dir[0])
        skiff_state_dir_for(cfg, NULL, pid, c->state_dir, err);
    c->owns_state = true;
    c->trace = req->trace;
    int rc = read_reply(p[0], pid, c, err);
    close(p[0]);
    skiff_trace(req->trace, "start: holder ready");
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
    c->subreaper = req->subreaper;
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

/* ---- rootfs-only assembly for export ---- */

int skiff_container_export(const struct skiff_config *cfg, const char *name, const char *out_path, skiff_err *err)
{
    struct skiff_start_request o;
    skiff_start_request_init(&o);
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
            rc = skiff_holder_setup(&h, NULL, &e);
        char root[SKIFF_PATH_MAX + 8], tmp[SKIFF_PATH_MAX + 64], mark[SKIFF_PATH_MAX + 32];
        snprintf(root, sizeof(root), "%s/root", h.stage);
        /* The temporary image's name goes into the state directory first: if
         * this export is killed (a cancelled step), whoever prunes the state
         * of dead containers removes it too (runstate.c). */
        const char *slash = strrchr(abs_out, '/');
        if (rc == 0 && (skiff_fmt_path(tmp, sizeof(tmp), &e, "%.*s/.%s" SKIFF_EXPORT_TMP "%d", (int)(slash - abs_out),
                                       abs_out, slash + 1, (int)getpid()) < 0 ||
                        skiff_fmt_path(mark, sizeof(mark), &e, "%s/" SKIFF_EXPORT_MARK, state_dir) < 0 ||
                        skiff_atomic_write(mark, tmp, strlen(tmp), 0600, SKIFF_ATOMIC_NOSYNC, &e) < 0))
            rc = -1;
        if (rc == 0)
            rc = skiff_squash_from_dir(cfg, root, abs_out, tmp, &e);
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
