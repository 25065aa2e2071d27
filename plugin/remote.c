/* slurmstepd side of spank_skiff.so: one container per step and node.
 *
 *   init_post_opt (root)   environment fallbacks, the user's skiff.conf
 *   user_init (euid=user)  prepare as the user in a child process (resolve
 *                          the image: cache, lock, atomic publish; named
 *                          containers), then start the holder through
 *                          libskiff: it drops to the user itself
 *   task_init (the task, as the user, once per task)
 *                          join the holder's namespaces, apply the image
 *                          env, --container-env, then the per-task training
 *                          env (ddp_env); report any earlier error here,
 *                          because user_init's failures never reach srun
 *   exit (root)            stop and reap the holder (nothing stays mounted),
 *                          --container-save, job-scoped cleanup
 *
 * Errors are "skiff: PHASE: CAUSE" with PHASE one of config, import, mount,
 * hook, join, env, save. No exit() here: this is slurmstepd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "fdio.h"
#include "ddp_env.h"
#include "image.h"
#include "named.h"
#include "plugin.h"
#include "spawn.h"
#include "ref.h"

double skiff_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Stores the first error for task_init and logs it for the admin. */
static int fail(const char *phase, const skiff_err *err)
{
    if (!skiff_g.failed) {
        skiff_g.failed = true;
        snprintf(skiff_g.phase, sizeof(skiff_g.phase), "%s", phase);
        skiff_g.err = *err;
    }
    /* task_init prints it as an error, once per task; here only for the log */
    slurm_verbose("skiff: %s: %s", phase, err->msg);
    return 0; /* fail in task_init, where srun sees it */
}


struct as_user_reply {
    int32_t rc;
    skiff_err err;
    char out[SKIFF_PATH_MAX];
};

struct as_user_call {
    int (*fn)(void *arg, skiff_err *err);
    void *arg;
};

/* Output of the function run as the user (a path, a flag): written by the
 * child into this buffer and carried back over the pipe. */
static char as_user_out[SKIFF_PATH_MAX];

int skiff_as_user(uid_t uid, gid_t gid, const gid_t *groups, int ngroups, const char *cwd,
                  int (*fn)(void *arg, skiff_err *err), void *arg, skiff_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, errno, "fork");
    }
    if (pid == 0) {
        close(p[0]);
        struct as_user_reply *r = calloc(1, sizeof(*r));
        if (!r)
            _exit(1);
        as_user_out[0] = '\0';
        /* user_init runs with euid = user but saved uid 0: get root back
         * for setgroups, then drop everything for good. */
        if (geteuid() != 0 && seteuid(0) < 0)
            r->rc = skiff_error(&r->err, errno, "regain root to drop to uid %u", (unsigned)uid);
        else if (setgroups((size_t)ngroups, groups) < 0 || setresgid(gid, gid, gid) < 0 ||
                 setresuid(uid, uid, uid) < 0)
            r->rc = skiff_error(&r->err, errno, "drop to uid %u gid %u", (unsigned)uid, (unsigned)gid);
        /* a credential change clears dumpable; libskiff writes the new user
         * namespace's /proc/self/{setgroups,uid_map}, which needs it */
        else if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
            r->rc = skiff_error(&r->err, errno, "set dumpable");
        else if (cwd && *cwd && chdir(cwd) < 0)
            r->rc = skiff_error(&r->err, errno, "working directory %s", cwd);
        else
            r->rc = fn(arg, &r->err);
        snprintf(r->out, sizeof(r->out), "%s", as_user_out);
        _exit(skiff_write_all(p[1], r, sizeof(*r)) < 0 ? 1 : 0);
    }
    close(p[1]);
    struct as_user_reply *r = calloc(1, sizeof(*r));
    size_t got = 0;
    while (r && got < sizeof(*r)) {
        ssize_t n = read(p[0], (char *)r + got, sizeof(*r) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    int rv;
    if (!r) {
        rv = skiff_error(err, ENOMEM, "out of memory");
    } else if (got != sizeof(*r)) {
        if (WIFSIGNALED(st))
            rv = skiff_error(err, 0, "helper process killed by signal %d", WTERMSIG(st));
        else
            rv = skiff_error(err, 0, "helper process exited (status %d) without a report",
                             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    } else if (r->rc < 0) {
        *err = r->err;
        err->msg[sizeof(err->msg) - 1] = '\0';
        rv = -1;
    } else {
        snprintf(as_user_out, sizeof(as_user_out), "%s", r->out);
        rv = 0;
    }
    free(r);
    return rv;
}

int skiff_load_user_config(const struct skiff_plugin_args *a, uid_t uid, const char *user, const char *home,
                           struct skiff_config *cfg, skiff_err *err)
{
    skiff_config_for_user(uid, user, home);
    /* slurmstepd's environment is slurmd's, not the user's: no SKIFF_* overrides */
    if (skiff_config_load(cfg, a->config[0] ? a->config : NULL, false, err) < 0)
        return -1;
    if (a->default_registry[0] && skiff_config_set(cfg, "default_registry", a->default_registry, err) < 0)
        return -1;
    if (a->runtime_path[0]) {
        /* an admin's shared directory: one private subdirectory per user */
        char p[SKIFF_PATH_MAX + 32];
        snprintf(p, sizeof(p), "%s/%u", a->runtime_path, (unsigned)uid);
        if (strlen(p) >= sizeof(cfg->runtime_path))
            return skiff_error(err, ENAMETOOLONG, "runtime_path too long");
        snprintf(cfg->runtime_path, sizeof(cfg->runtime_path), "%s", p);
    }
    return 0;
}

/* A getter over the job's environment. Every value it returns stays valid
 * until envget_free: callers (ddp_env) may hold several at once. */
#define ENVGET_MAX 128
struct envget {
    spank_t sp;
    char buf[8192];
    char *kept[ENVGET_MAX];
    size_t n;
};

static const char *spank_get(void *ctx, const char *name)
{
    struct envget *e = ctx;
    if (spank_getenv(e->sp, name, e->buf, sizeof(e->buf)) != ESPANK_SUCCESS)
        return NULL;
    if (e->n >= ENVGET_MAX)
        return NULL;
    char *v = strdup(e->buf);
    if (!v)
        return NULL;
    e->kept[e->n++] = v;
    return v;
}

static void envget_free(struct envget *e)
{
    for (size_t i = 0; e && i < e->n; i++)
        free(e->kept[i]);
    free(e);
}

/* Makes a relative path absolute against the step's working directory. */
static int absolute(const char *path, char *out, size_t n, skiff_err *err)
{
    int w;
    if (path[0] == '/')
        w = snprintf(out, n, "%s", path);
    else
        w = snprintf(out, n, "%s/%s", skiff_g.cwd, path);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "path %s", path);
    return 0;
}

/* The batch step's script lives in slurmd's spool directory, outside the
 * image: it is bind-mounted read-only at the same path. */
static char *batch_script_mount;

static int make_runtime_dir(skiff_err *err)
{
    if (!skiff_g.args.runtime_path[0])
        return 0;
    if (mkdir(skiff_g.args.runtime_path, 0755) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create runtime_path %s", skiff_g.args.runtime_path);
    if (mkdir(skiff_g.cfg.runtime_path, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", skiff_g.cfg.runtime_path);
    struct stat st;
    if (lstat(skiff_g.cfg.runtime_path, &st) < 0)
        return skiff_error(err, errno, "stat %s", skiff_g.cfg.runtime_path);
    if (st.st_uid != skiff_g.uid && lchown(skiff_g.cfg.runtime_path, skiff_g.uid, skiff_g.gid) < 0)
        return skiff_error(err, errno, "chown %s", skiff_g.cfg.runtime_path);
    return 0;
}

static char **build_hook_env(spank_t sp);
static void spawn_starter(void);

/* Who and where: the job's user, groups, id and this node's name. */
static int load_identity(spank_t sp, skiff_err *err)
{
    if (spank_get_item(sp, S_JOB_UID, &skiff_g.uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &skiff_g.gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &skiff_g.jobid) != ESPANK_SUCCESS) {
        return skiff_error(err, 0, "cannot read the job's uid, gid or id from Slurm");
    }
    gid_t *groups = NULL;
    int ngroups = 0;
    if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups) == ESPANK_SUCCESS && ngroups > 0) {
        skiff_g.groups = calloc((size_t)ngroups, sizeof(gid_t));
        if (skiff_g.groups) {
            memcpy(skiff_g.groups, groups, (size_t)ngroups * sizeof(gid_t));
            skiff_g.ngroups = ngroups;
        }
    }
    if (!skiff_g.groups) {
        skiff_g.groups = calloc(1, sizeof(gid_t));
        if (skiff_g.groups) {
            skiff_g.groups[0] = skiff_g.gid;
            skiff_g.ngroups = 1;
        }
    }
    struct passwd pw, *pwp = NULL;
    char pwbuf[4096];
    if (getpwuid_r(skiff_g.uid, &pw, pwbuf, sizeof(pwbuf), &pwp) != 0 || !pwp) {
        return skiff_error(err, 0, "uid %u has no passwd entry on this node", (unsigned)skiff_g.uid);
    }
    snprintf(skiff_g.user, sizeof(skiff_g.user), "%s", pw.pw_name);
    snprintf(skiff_g.home, sizeof(skiff_g.home), "%s", pw.pw_dir);
    if (gethostname(skiff_g.node, sizeof(skiff_g.node)) < 0)
        snprintf(skiff_g.node, sizeof(skiff_g.node), "node");
    char *dot = strchr(skiff_g.node, '.');
    if (dot)
        *dot = '\0';

    return 0;
}

int skiff_remote_post_opt(spank_t sp)
{
    double t0 = skiff_now_ms();
    skiff_err err;
    skiff_err_clear(&err);
    uint32_t stepid = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
        return 0;
    skiff_g.stepid = stepid;
    if (stepid == SLURM_EXTERN_CONT)
        return 0; /* the extern step holds no user task */
    skiff_g.is_batch = stepid == SLURM_BATCH_SCRIPT;
    struct envget *eg = calloc(1, sizeof(*eg));
    if (!eg)
        return 0;
    eg->sp = sp;
    int rc = skiff_opts_from_env(&skiff_g.opts, spank_get, eg, &err);
    envget_free(eg);
    if (rc < 0)
        return fail("config", &err);
    /* the batch step of a job-scoped job removes its named containers at
     * exit even when the batch script itself runs outside a container */
    bool sweep = skiff_g.is_batch && skiff_g.args.scope == SKIFF_SCOPE_JOB;
    bool want = skiff_opts_active(&skiff_g.opts) && !(skiff_g.is_batch && !skiff_g.args.sbatch_support);
    if (!want && !sweep)
        return 0;
    if (load_identity(sp, &err) < 0)
        return fail("config", &err);
    if (!want) {
        skiff_g.sweep_only = true;
        if (skiff_load_user_config(&skiff_g.args, skiff_g.uid, skiff_g.user, skiff_g.home, &skiff_g.cfg, &err) < 0)
            slurm_error("skiff: config: %s", err.msg);
        return 0;
    }
    skiff_g.active = true;
    skiff_g.mntns_fd = -1;
    if (skiff_opts_check(&skiff_g.opts, &err) < 0)
        return fail("config", &err);
    char buf[SKIFF_PATH_MAX];
    if ((spank_getenv(sp, "PWD", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/') ||
        (spank_getenv(sp, "SLURM_SUBMIT_DIR", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/'))
        snprintf(skiff_g.cwd, sizeof(skiff_g.cwd), "%s", buf);
    else
        snprintf(skiff_g.cwd, sizeof(skiff_g.cwd), "%s", skiff_g.home);

    if (skiff_load_user_config(&skiff_g.args, skiff_g.uid, skiff_g.user, skiff_g.home, &skiff_g.cfg, &err) < 0 ||
        make_runtime_dir(&err) < 0)
        return fail("config", &err);

    if (skiff_g.opts.save && absolute(skiff_g.opts.save, skiff_g.save_path, sizeof(skiff_g.save_path), &err) < 0)
        return fail("config", &err);
    if (skiff_g.opts.name) {
        /* Nodes may share the user's data_path (home on NFS): a name is
         * stored per node, and per job when container_scope=job. */
        int w = skiff_g.args.scope == SKIFF_SCOPE_JOB
                    ? snprintf(skiff_g.named, sizeof(skiff_g.named), "%s.%s.job%u", skiff_g.opts.name,
                               skiff_g.node, (unsigned)skiff_g.jobid)
                    : snprintf(skiff_g.named, sizeof(skiff_g.named), "%s.%s", skiff_g.opts.name, skiff_g.node);
        if (w < 0 || (size_t)w >= sizeof(skiff_g.named) || !skiff_name_valid(skiff_g.named)) {
            skiff_error(&err, 0, "container name '%s' is too long for node %s", skiff_g.opts.name, skiff_g.node);
            return fail("config", &err);
        }
    } else if (skiff_g.opts.save) {
        /* --container-save of an unnamed container: keep its changes on
         * disk under a private name for the step, export, then remove it */
        snprintf(skiff_g.named, sizeof(skiff_g.named), "save.%s.%u.%u", skiff_g.node, (unsigned)skiff_g.jobid,
                 (unsigned)skiff_g.stepid);
        skiff_g.temp_named = true;
    }
    skiff_g.hook_env = build_hook_env(sp);
    {
        int argc = 0;
        char **argv = NULL;
        bool have = spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 && argv[0];
        if (have && skiff_g.is_batch && argv[0][0] == '/' &&
            asprintf(&batch_script_mount, "%s:%s:ro+x-create=file", argv[0], argv[0]) < 0)
            batch_script_mount = NULL;
        if (have && !skiff_g.is_batch)
            skiff_g.command0 = strdup(argv[0]); /* NULL (no warming) is fine */
    }
    skiff_g.t_config_ms = skiff_now_ms() - t0;
    skiff_g.t_post_opt_end = skiff_now_ms();
    spawn_starter();
    return 0;
}

/* ---- prepare, as the user --------------------------------------------------- */

static int run_importer(const char *image, char *out, size_t n, skiff_err *err)
{
    /* its stdout into a memory file: skiff_spawn waits for the program, and
     * a pipe nobody reads could fill */
    cleanup_close int mfd = memfd_create("skiff-importer", MFD_CLOEXEC);
    if (mfd < 0)
        return skiff_error(err, errno, "importer: memfd");
    const char *argv[] = {skiff_g.args.importer, "get", image, NULL};
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    struct skiff_spawn_result r;
    if (skiff_spawn(argv, envp, mfd, 0, 0, &r, err) < 0)
        return skiff_err_wrap(err, "importer %s", skiff_g.args.importer);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        char how[64];
        skiff_spawn_describe(&r, 0, how, sizeof(how));
        return skiff_error(err, 0, "importer %s get %s failed (%s): %s", skiff_g.args.importer, image, how,
                           r.err_tail);
    }
    ssize_t got = pread(mfd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] != '/')
        return skiff_error(err, 0, "importer %s printed '%s', not the absolute path of a squashfs file",
                           skiff_g.args.importer, out);
    return 0;
}

/* In the child, as the user, cwd = the step's working directory. Writes
 * "E<path>" (named container exists: start from it) or "I<path>" (image). */
static int prepare(void *arg, skiff_err *err)
{
    (void)arg;
    const struct skiff_config *cfg = &skiff_g.cfg;
    const struct skiff_opts *o = &skiff_g.opts;
    bool exists = false;
    if (skiff_g.named[0]) {
        exists = skiff_named_exists(cfg, skiff_g.named);
        if (exists && (skiff_g.temp_named || o->name_mode == SKIFF_NAME_CREATE)) {
            if (skiff_named_remove(cfg, skiff_g.named, err) < 0)
                return -1;
            exists = false;
        }
        if (!exists && o->name_mode == SKIFF_NAME_EXEC && !skiff_g.temp_named)
            return skiff_error(err, 0,
                               "no container named '%s' on %s (create it first: --container-name=%s with "
                               "--container-image)",
                               o->name, skiff_g.node, o->name);
        if (!exists && !o->image)
            return skiff_error(err, 0, "no container named '%s' on %s yet: give --container-image to create it",
                               o->name, skiff_g.node);
    }
    if (exists) {
        snprintf(as_user_out, sizeof(as_user_out), "E");
        return 0;
    }
    char path[SKIFF_PATH_MAX - 16];
    int rc = skiff_g.args.importer[0] ? run_importer(o->image, path, sizeof(path), err)
                                      : skiff_image_resolve(cfg, o->image, path, sizeof(path), err);
    if (rc < 0)
        return -1;
    if (skiff_g.named[0] && skiff_named_create(cfg, skiff_g.named, path, err) < 0)
        return skiff_err_wrap(err, "container %s", skiff_g.named);
    snprintf(as_user_out, sizeof(as_user_out), "I%s", path);
    return 0;
}

/* Which phase a start error belongs to, from libskiff's message. */
static const char *start_phase(const char *msg)
{
    if (strstr(msg, "hook"))
        return "hook";
    return "mount";
}

static char **build_hook_env(spank_t sp)
{
    char **env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; env[i]; i++)
        if (!strncmp(env[i], "SLURM_", 6) || !strncmp(env[i], "CUDA_VISIBLE_DEVICES=", 21) ||
            !strncmp(env[i], "NVIDIA_", 7) || !strncmp(env[i], "PMIX_", 5))
            n++;
    char **out = calloc(n + 1, sizeof(char *));
    if (!out)
        return NULL;
    n = 0;
    for (size_t i = 0; env[i]; i++)
        if (!strncmp(env[i], "SLURM_", 6) || !strncmp(env[i], "CUDA_VISIBLE_DEVICES=", 21) ||
            !strncmp(env[i], "NVIDIA_", 7) || !strncmp(env[i], "PMIX_", 5))
            out[n++] = env[i]; /* borrowed from Slurm for the duration of start */
    return out;
}

/* Resolve the image and start the holder. Called either in user_init
 * (euid = user: root is taken back for the fork only) or in the starter
 * process (root). On failure *phase names the step that failed. */
static int start_container(const char **phase, skiff_err *err)
{
    const struct skiff_opts *o = &skiff_g.opts;
    bool root = geteuid() == 0;
    double t0 = skiff_now_ms();
    *phase = "import";
    if (!root && !skiff_g.named[0] && !skiff_g.args.importer[0] && skiff_ref_classify(o->image) == SKIFF_ARG_PATH) {
        /* A squashfs path needs no import: check it here, with the user's
         * euid (user_init's), and save the fork of a helper (~1-3 ms). */
        char abs[SKIFF_PATH_MAX];
        if (absolute(o->image, abs, sizeof(abs) - 16, err) < 0 ||
            skiff_image_resolve(&skiff_g.cfg, abs, as_user_out + 1, sizeof(as_user_out) - 1, err) < 0)
            return -1;
        as_user_out[0] = 'I';
    } else if (skiff_as_user(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, skiff_g.cwd, prepare, NULL,
                             err) < 0)
        return -1;
    skiff_g.named_exists = as_user_out[0] == 'E';
    if (as_user_out[0] == 'I')
        snprintf(skiff_g.image_path, sizeof(skiff_g.image_path), "%s", as_user_out + 1);
    double t1 = skiff_now_ms();
    skiff_g.t_resolve_ms = t1 - t0;

    /* mounts: relative sources against the step's working directory */
    *phase = "mount";
    char **mounts = calloc(o->nmounts + 2, sizeof(char *));
    if (!mounts)
        return skiff_error(err, ENOMEM, "out of memory");
    size_t k = 0;
    int rc = -1;
    for (size_t i = 0; i < o->nmounts; i++) {
        const char *m = o->mounts[i];
        if (m[0] == '.') {
            if (asprintf(&mounts[k], "%s/%s", skiff_g.cwd, m) < 0)
                mounts[k] = NULL;
        } else
            mounts[k] = strdup(m);
        if (!mounts[k]) {
            skiff_error(err, ENOMEM, "out of memory");
            goto out;
        }
        k++;
    }
    if (batch_script_mount && !(mounts[k++] = strdup(batch_script_mount))) {
        skiff_error(err, ENOMEM, "out of memory");
        goto out;
    }

    struct skiff_start_opts so;
    skiff_start_opts_init(&so);
    so.image = skiff_g.named_exists ? NULL : skiff_g.image_path;
    so.name = skiff_g.named[0] ? skiff_g.named : NULL;
    so.mounts = (const char *const *)mounts;
    so.workdir = o->workdir;
    so.writable = o->writable != 0 || skiff_g.named[0];
    so.remap_root = o->remap_root == 1;
    so.mount_home = o->mount_home == 1;
    so.use_entrypoint = o->entrypoint == 1 || (o->entrypoint < 0 && skiff_g.args.execute_entrypoint);
    so.unshare_flags = o->unshare_flags;
    char *command[2] = {skiff_g.command0, NULL};
    so.command = skiff_g.command0 ? command : NULL;
    so.hook_env = (const char *const *)skiff_g.hook_env;
    so.set_creds = true;
    so.uid = skiff_g.uid;
    so.gid = skiff_g.gid;
    so.groups = skiff_g.groups;
    so.ngroups = (size_t)skiff_g.ngroups;
    char key[512];
    if (skiff_g.is_batch)
        snprintf(key, sizeof(key), "%s.%u.batch", skiff_g.node, (unsigned)skiff_g.jobid);
    else
        snprintf(key, sizeof(key), "%s.%u.%u", skiff_g.node, (unsigned)skiff_g.jobid, (unsigned)skiff_g.stepid);
    so.state_key = key;
    so.fuse_fd = -1;
    /* The forking thread is slurmstepd's main thread (user_init) or the
     * starter: when it dies, even by SIGKILL, the holder and every mount go. */
    so.die_with_parent = true;

    /* The holder sets the user's groups and ids itself (it needs root for
     * setgroups); in user_init the euid is the user's, so root is taken
     * back for the fork and given up right after. */
    uid_t euid = geteuid();
    if (euid != 0 && seteuid(0) < 0) {
        rc = skiff_error(err, errno, "regain root to start the container");
    } else {
        rc = skiff_container_start(&skiff_g.cfg, &so, &skiff_g.c, err);
        if (euid != 0 && seteuid(euid) < 0) {
            /* never go on as root in user_init */
            int e = errno;
            if (rc == 0)
                skiff_container_stop(&skiff_g.c, err);
            rc = skiff_error(err, e, "return to uid %u", (unsigned)euid);
        }
    }
    if (rc < 0)
        *phase = start_phase(err->msg);
    skiff_g.t_start_ms = skiff_now_ms() - t1;
out:
    for (size_t i = 0; i < k; i++)
        free(mounts[i]);
    free(mounts);
    return rc;
}

/* ---- the starter: the container is started while Slurm sets the step up ----
 *
 * Between init_post_opt and user_init slurmstepd spends 5-15 ms on its own
 * setup. A child forked at the end of init_post_opt (root, so no credential
 * juggling) resolves the image and starts the holder meanwhile; user_init
 * only collects the result. The starter stays the holder's parent until
 * exit, then stops it. It dies with slurmstepd (PDEATHSIG), and the holder
 * with it. Reply: int32 status, then on failure a phase and a skiff_err, on
 * success tagged records (tag, u32 length, bytes), ended by 'Z'. */
static pid_t starter_pid = -1;
static int starter_rep = -1, starter_ctl = -1;


static int put_rec(int fd, char tag, const char *s)
{
    uint32_t len = (uint32_t)strlen(s);
    return skiff_write_all(fd, &tag, 1) < 0 || skiff_write_all(fd, &len, sizeof(len)) < 0 || skiff_write_all(fd, s, len) < 0 ? -1 : 0;
}

static void starter_main(pid_t stepd, int rep, int ctl)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != stepd)
        _exit(1);
    /* keep nothing of slurmstepd's: its sockets must close when it does */
    if (dup2(rep, 3) < 0 || dup2(ctl, 4) < 0)
        _exit(1);
    rep = 3;
    ctl = 4;
    close_range(5, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    skiff_err err;
    skiff_err_clear(&err);
    const char *phase = "mount";
    int32_t status = start_container(&phase, &err) < 0 ? -1 : 0;
    if (skiff_write_all(rep, &status, sizeof(status)) < 0)
        _exit(1);
    if (status < 0) {
        char ph[SKIFF_PHASE_MAX] = {0};
        snprintf(ph, sizeof(ph), "%s", phase);
        (void)!skiff_write_all(rep, ph, sizeof(ph));
        (void)!skiff_write_all(rep, &err, sizeof(err));
        _exit(0);
    }
    char num[64];
    int bad = 0;
    snprintf(num, sizeof(num), "%d", (int)skiff_g.c.holder);
    bad |= put_rec(rep, 'H', num);
    snprintf(num, sizeof(num), "%.3f %.3f", skiff_g.t_resolve_ms, skiff_g.t_start_ms);
    bad |= put_rec(rep, 'T', num);
    bad |= put_rec(rep, 'W', skiff_g.c.workdir);
    for (size_t i = 0; skiff_g.c.env && skiff_g.c.env[i]; i++)
        bad |= put_rec(rep, 'E', skiff_g.c.env[i]);
    for (size_t i = 0; skiff_g.c.entrypoint && skiff_g.c.entrypoint[i]; i++)
        bad |= put_rec(rep, 'P', skiff_g.c.entrypoint[i]);
    for (size_t i = 0; skiff_g.c.cmd && skiff_g.c.cmd[i]; i++)
        bad |= put_rec(rep, 'C', skiff_g.c.cmd[i]);
    bad |= put_rec(rep, 'Z', "");
    close(rep);
    if (!bad) {
        char b;
        while (read(ctl, &b, 1) < 0 && errno == EINTR)
            ; /* EOF: slurmstepd's exit, or slurmstepd is gone */
    }
    skiff_container_stop(&skiff_g.c, &err);
    _exit(0);
}

/* Forks the starter; on failure the container is started in user_init. */
static void spawn_starter(void)
{
    int rp[2], cp[2];
    if (pipe2(rp, O_CLOEXEC) < 0)
        return;
    if (pipe2(cp, O_CLOEXEC) < 0) {
        close(rp[0]);
        close(rp[1]);
        return;
    }
    pid_t stepd = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(rp[0]);
        close(cp[1]);
        starter_main(stepd, rp[1], cp[0]);
        _exit(1);
    }
    close(rp[1]);
    close(cp[0]);
    if (pid < 0) {
        close(rp[0]);
        close(cp[1]);
        return;
    }
    starter_pid = pid;
    starter_rep = rp[0];
    starter_ctl = cp[1];
}

static int strv_add(char ***v, size_t *n, char *s)
{
    char **nv = realloc(*v, (*n + 2) * sizeof(char *));
    if (!nv)
        return -1;
    *v = nv;
    nv[(*n)++] = s;
    nv[*n] = NULL;
    return 0;
}

/* Reads the starter's reply into skiff_g.c; returns 0, or -1 with phase and err. */
static int collect_starter(const char **phase, skiff_err *err)
{
    static char ph[SKIFF_PHASE_MAX];
    int32_t status;
    *phase = "mount";
    if (skiff_read_all(starter_rep, &status, sizeof(status)) < 0)
        return skiff_error(err, 0, "the container starter exited without a report");
    if (status < 0) {
        if (skiff_read_all(starter_rep, ph, sizeof(ph)) < 0 || skiff_read_all(starter_rep, err, sizeof(*err)) < 0)
            return skiff_error(err, 0, "the container starter failed without a report");
        ph[sizeof(ph) - 1] = '\0';
        err->msg[sizeof(err->msg) - 1] = '\0';
        *phase = ph;
        return -1;
    }
    size_t ne = 0, np = 0, nc = 0;
    for (;;) {
        char tag;
        uint32_t len;
        if (skiff_read_all(starter_rep, &tag, 1) < 0 || skiff_read_all(starter_rep, &len, sizeof(len)) < 0 || len > (1u << 24))
            return skiff_error(err, 0, "short reply from the container starter");
        char *s = malloc((size_t)len + 1);
        if (!s)
            return skiff_error(err, ENOMEM, "out of memory");
        if (skiff_read_all(starter_rep, s, len) < 0) {
            free(s);
            return skiff_error(err, 0, "short reply from the container starter");
        }
        s[len] = '\0';
        int bad = 0;
        switch (tag) {
        case 'H':
            skiff_g.c.holder = (pid_t)atoi(s);
            free(s);
            break;
        case 'T':
            if (sscanf(s, "%lf %lf", &skiff_g.t_resolve_ms, &skiff_g.t_start_ms) != 2)
                skiff_g.t_resolve_ms = skiff_g.t_start_ms = 0;
            free(s);
            break;
        case 'W':
            snprintf(skiff_g.c.workdir, sizeof(skiff_g.c.workdir), "%s", s);
            free(s);
            break;
        case 'E':
            bad = strv_add(&skiff_g.c.env, &ne, s);
            break;
        case 'P':
            bad = strv_add(&skiff_g.c.entrypoint, &np, s);
            break;
        case 'C':
            bad = strv_add(&skiff_g.c.cmd, &nc, s);
            break;
        default:
            free(s);
            if (tag == 'Z')
                return skiff_g.c.holder > 0 ? 0 : skiff_error(err, 0, "the container starter sent no holder");
            return skiff_error(err, 0, "bad reply from the container starter");
        }
        if (bad) {
            free(s);
            return skiff_error(err, ENOMEM, "out of memory");
        }
    }
}

int skiff_remote_user_init(spank_t sp)
{
    if (!skiff_g.active || skiff_g.failed)
        return 0;
    skiff_err err;
    skiff_err_clear(&err);
    char dbg[16];
    skiff_g.debug = spank_getenv(sp, "SKIFF_DEBUG", dbg, sizeof(dbg)) == ESPANK_SUCCESS && dbg[0] && strcmp(dbg, "0");
    double t0 = skiff_now_ms();
    skiff_g.t_gap_ms = t0 - skiff_g.t_post_opt_end;
    const char *phase = "mount";
    int rc;
    if (starter_pid > 0) {
        rc = collect_starter(&phase, &err);
        close(starter_rep);
        starter_rep = -1;
        skiff_g.t_wait_ms = skiff_now_ms() - t0;
    } else {
        rc = start_container(&phase, &err);
    }
    if (rc < 0)
        return fail(phase, &err);
    skiff_g.started = true;
    /* Remembered so exit can find processes left in the container after
     * task_exit has already killed the holder. The fd keeps the namespace
     * alive: otherwise its inode number could be reused by another step's
     * container and exit would kill that step's tasks. */
    char nsp[64];
    struct stat nst;
    snprintf(nsp, sizeof(nsp), "/proc/%d/ns/mnt", (int)skiff_g.c.holder);
    skiff_g.mntns_fd = open(nsp, O_RDONLY | O_CLOEXEC);
    if (skiff_g.mntns_fd >= 0 && fstat(skiff_g.mntns_fd, &nst) == 0) {
        skiff_g.mntns_dev = nst.st_dev;
        skiff_g.mntns_ino = nst.st_ino;
    }
    return 0;
}

/* ---- task_init: in the task, as the user ------------------------------------ */

static bool env_listed(const char *kv, size_t namelen)
{
    const struct skiff_opts *o = &skiff_g.opts;
    for (size_t i = 0; i < o->nenv; i++)
        if (!strchr(o->env[i], '=') && strlen(o->env[i]) == namelen && !strncmp(o->env[i], kv, namelen))
            return true;
    return false;
}

static int apply_env(spank_t sp, skiff_err *err)
{
    char name[256], buf[16];
    /* 1. the image's environment (and what hooks added) over the host's,
     *    except names the user listed in --container-env (pyxis) */
    for (size_t i = 0; skiff_g.c.env && skiff_g.c.env[i]; i++) {
        const char *kv = skiff_g.c.env[i];
        const char *eq = strchr(kv, '=');
        if (!eq || (size_t)(eq - kv) >= sizeof(name))
            continue;
        size_t nl = (size_t)(eq - kv);
        memcpy(name, kv, nl);
        name[nl] = '\0';
        if (env_listed(kv, nl)) {
            spank_err_t e = spank_getenv(sp, name, buf, sizeof(buf));
            if (e == ESPANK_SUCCESS || e == ESPANK_NOSPACE)
                continue; /* the host has it: host wins */
        }
        if (spank_setenv(sp, name, eq + 1, 1) != ESPANK_SUCCESS)
            return skiff_error(err, 0, "cannot set %s", name);
    }
    /* 2. --container-env NAME=VALUE */
    for (size_t i = 0; i < skiff_g.opts.nenv; i++) {
        const char *eq = strchr(skiff_g.opts.env[i], '=');
        if (!eq)
            continue;
        size_t nl = (size_t)(eq - skiff_g.opts.env[i]);
        if (nl >= sizeof(name))
            continue;
        memcpy(name, skiff_g.opts.env[i], nl);
        name[nl] = '\0';
        if (spank_setenv(sp, name, eq + 1, 1) != ESPANK_SUCCESS)
            return skiff_error(err, 0, "cannot set %s", name);
    }
    if (skiff_g.c.workdir[0])
        spank_setenv(sp, "PWD", skiff_g.c.workdir, 1);
    return 0;
}

static int apply_ddp_env(spank_t sp, skiff_err *err)
{
    if (!skiff_g.args.ddp_env)
        return 0;
    struct envget *eg = calloc(1, sizeof(*eg));
    struct skiff_ddp_env *d = calloc(1, sizeof(*d));
    int rv = -1;
    if (!eg || !d) {
        skiff_error(err, ENOMEM, "out of memory");
        goto out;
    }
    eg->sp = sp;
    if (skiff_ddp_env_compute(spank_get, eg, NULL, d, err) < 0)
        goto out;
    for (size_t i = 0; i < d->n; i++)
        /* overwrite: the list already leaves out what the user set, and what it
         * holds beyond that (values inherited from another task) must change */
        spank_setenv(sp, d->vars[i].name, d->vars[i].value, 1);
    rv = 0;
out:
    envget_free(eg);
    free(d);
    return rv;
}

/* --container-entrypoint: Slurm cannot be told to run another argv, so the
 * task execs Entrypoint + the step's command itself, with the job's env. */
static int exec_entrypoint(spank_t sp, skiff_err *err)
{
    if (!skiff_g.c.entrypoint || !skiff_g.c.entrypoint[0])
        return 0;
    int argc = 0;
    char **argv = NULL, **env = NULL;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS)
        return skiff_error(err, 0, "cannot read the step's command from Slurm");
    char **full = NULL;
    if (skiff_container_argv(&skiff_g.c, true, argv, &full, err) < 0)
        return -1;
    const char *path = NULL;
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], "PATH=", 5))
            path = env[i] + 5;
    if (path)
        setenv("PATH", path, 1); /* execvpe searches the caller's PATH */
    execvpe(full[0], full, env);
    int e = errno;
    skiff_error(err, e, "exec entrypoint %s", full[0]);
    skiff_strv_free(full);
    return -1;
}

int skiff_remote_task_init(spank_t sp)
{
    if (skiff_g.failed) {
        slurm_error("skiff: %s: %s", skiff_g.phase, skiff_g.err.msg);
        return -1;
    }
    if (!skiff_g.active || !skiff_g.started)
        return 0;
    skiff_err err;
    skiff_err_clear(&err);
    double t0 = skiff_now_ms();
    if (skiff_container_join(skiff_g.c.holder, skiff_g.c.workdir[0] ? skiff_g.c.workdir : "/", &err) < 0) {
        slurm_error("skiff: join: %s", err.msg);
        return -1;
    }
    if (apply_env(sp, &err) < 0) {
        slurm_error("skiff: env: %s", err.msg);
        return -1;
    }
    if (apply_ddp_env(sp, &err) < 0) {
        slurm_error("skiff: env: training environment: %s", err.msg);
        return -1;
    }
    double t1 = skiff_now_ms();
    int local = -1;
    spank_get_item(sp, S_TASK_ID, &local);
    if (local == 0) {
        char dbg[16];
        if (spank_getenv(sp, "SKIFF_DEBUG", dbg, sizeof(dbg)) == ESPANK_SUCCESS && dbg[0] && strcmp(dbg, "0")) {
            dprintf(2,
                    "skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms (during Slurm's own "
                    "%.1f ms of step setup; user_init waited %.1f ms), join+env %.1f ms\n",
                    skiff_g.node, skiff_g.t_config_ms, skiff_g.t_resolve_ms, skiff_g.t_start_ms, skiff_g.t_gap_ms,
                    skiff_g.t_wait_ms, t1 - t0);
        }
        slurm_verbose("skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms, join+env %.1f ms",
                      skiff_g.node, skiff_g.t_config_ms, skiff_g.t_resolve_ms, skiff_g.t_start_ms, t1 - t0);
    }
    bool ep = skiff_g.opts.entrypoint == 1 || (skiff_g.opts.entrypoint < 0 && skiff_g.args.execute_entrypoint);
    if (ep && exec_entrypoint(sp, &err) < 0) {
        slurm_error("skiff: entrypoint: %s", err.msg);
        return -1;
    }
    return 0;
}

/* task_exit (slurmstepd, root, once per task): when the node's last task
 * is gone the holder gets SIGKILL at once, so that the kernel tears the
 * namespace and the FUSE mount down while Slurm finishes the step;
 * exit() reaps it. */
int skiff_remote_task_exit(spank_t sp)
{
    /* Only when the starter is the holder's parent: it reaps the holder at
     * exit, so until then the pid cannot be reused. A holder that is
     * slurmstepd's own child could be reaped by slurmstepd's wait for any
     * child, and a later kill would hit whatever process got its pid. */
    if (!skiff_g.active || !skiff_g.started || skiff_g.c.holder <= 0 || starter_pid <= 0)
        return 0;
    uint32_t ntasks = 0;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS)
        return 0;
    if (++skiff_g.tasks_exited >= ntasks)
        kill(skiff_g.c.holder, SIGKILL);
    return 0;
}

/* ---- exit: slurmstepd, root ----------------------------------------------------- */

static int do_save(void *arg, skiff_err *err)
{
    (void)arg;
    return skiff_container_export(&skiff_g.cfg, skiff_g.named, skiff_g.save_path, err);
}

static int do_remove_named(void *arg, skiff_err *err)
{
    (void)arg;
    if (!skiff_named_exists(&skiff_g.cfg, skiff_g.named))
        return 0;
    return skiff_named_remove(&skiff_g.cfg, skiff_g.named, err);
}

static int do_release(void *arg, skiff_err *err)
{
    (void)arg;
    pid_t pid = fork();
    if (pid < 0)
        return skiff_error(err, errno, "fork");
    if (pid == 0) {
        char release[] = "release";
        char *const argv[] = {skiff_g.args.importer, release, NULL};
        char path[] = "PATH=/usr/local/bin:/usr/bin:/bin";
        char *const envp[] = {path, NULL};
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

/* SIGKILLs every process still in the container's mount namespace (a
 * task's daemon that left the step's process tree). */
static void kill_ns_members(void)
{
    if (skiff_g.mntns_fd < 0)
        return;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    char p[300];
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        struct stat st;
        snprintf(p, sizeof(p), "/proc/%s/ns/mnt", e->d_name);
        if (stat(p, &st) == 0 && st.st_ino == skiff_g.mntns_ino && st.st_dev == skiff_g.mntns_dev)
            kill((pid_t)atoi(e->d_name), SIGKILL);
    }
    closedir(d);
    close(skiff_g.mntns_fd);
    skiff_g.mntns_fd = -1;
}

int skiff_remote_exit(spank_t sp)
{
    (void)sp;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_g.sweep_only) {
        if (skiff_remove_job_containers(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, skiff_g.node,
                                        skiff_g.jobid, &skiff_g.cfg, &err) < 0)
            slurm_error("skiff: cleanup: %s", err.msg);
        free(skiff_g.groups);
        skiff_g.groups = NULL;
        return 0;
    }
    if (!skiff_g.active)
        return 0;
    if (starter_pid > 0) {
        /* EOF on its control pipe: the starter stops the holder, removes
         * the state and exits; wait for it (save needs the upper free) */
        if (skiff_g.started && skiff_g.c.holder > 0)
            kill(skiff_g.c.holder, SIGKILL);
        if (starter_ctl >= 0)
            close(starter_ctl);
        starter_ctl = -1;
        if (starter_rep >= 0)
            close(starter_rep);
        starter_rep = -1;
        while (waitpid(starter_pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (skiff_g.started) {
        double t0 = skiff_now_ms();
        if (starter_pid > 0) {
            skiff_container_free(&skiff_g.c); /* the starter stops and reaps it */
        } else
            skiff_container_stop(&skiff_g.c, &err);
        kill_ns_members();
        skiff_g.started = false;
        if (skiff_g.debug)
            slurm_info("skiff: %s: timing: stop %.1f ms", skiff_g.node, skiff_now_ms() - t0);
    }
    if (skiff_g.save_path[0] && !skiff_g.failed && skiff_g.named[0]) {
        if (skiff_as_user(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, skiff_g.cwd, do_save, NULL,
                          &err) < 0)
            slurm_error("skiff: save: %s", err.msg);
    }
    if (skiff_g.temp_named &&
        skiff_as_user(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, NULL, do_remove_named, NULL,
                      &err) < 0)
        slurm_error("skiff: save: remove %s: %s", skiff_g.named, err.msg);
    if (skiff_g.is_batch && skiff_g.args.scope == SKIFF_SCOPE_JOB &&
        skiff_remove_job_containers(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, skiff_g.node,
                                    skiff_g.jobid, &skiff_g.cfg, &err) < 0)
        slurm_error("skiff: cleanup: %s", err.msg);
    if (skiff_g.args.importer[0])
        skiff_as_user(skiff_g.uid, skiff_g.gid, skiff_g.groups, skiff_g.ngroups, NULL, do_release, NULL, &err);
    free(skiff_g.groups);
    skiff_g.groups = NULL;
    free(batch_script_mount);
    batch_script_mount = NULL;
    free(skiff_g.hook_env);
    skiff_g.hook_env = NULL;
    return 0;
}
