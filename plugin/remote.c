/* slurmstepd side of spank_skiff.so: one container per step and node.
 *
 * Root does as little as it can, and nothing with the user's files (the
 * rules: doc/SECURITY.md). Everything that touches the user's images,
 * containers and directories runs in skiff-helper (helper.c), exec'd as the
 * job's user through userproc.c:
 *
 *   init_post_opt (root)   options, the admin's config, the per-user runtime
 *                          directory under a root-owned base; then the
 *                          starter: skiff-helper start (as the user) resolves
 *                          the image and starts the container while Slurm
 *                          goes on setting up the step (a PMIx step's
 *                          starter waits for user_init: Slurm's PMIx
 *                          directory exists only then)
 *   user_init (euid=user)  read its answer (bounded in size and time) and
 *                          check the holder it names: the helper's child,
 *                          running as the job's uid, in a mount namespace
 *                          the user's own user namespace owns
 *   task_init (the task, as the user, once per task)
 *                          join the holder's namespaces, apply the image
 *                          env, --container-env, then the per-task training
 *                          env (ddp_env); report any earlier error here,
 *                          because user_init's failures never reach srun
 *   task_exit (root)       after the last task: close the control pipe, and
 *                          the helper stops the container; with
 *                          --container-save, also what exit does up to the
 *                          save, so that srun returns after the image is
 *                          written (Slurm sends the tasks' exit to srun
 *                          after this callback)
 *   exit (root)            wait for the helper (bounded), kill what is left
 *                          in the container's namespace as the user, then
 *                          --container-save (unless task_exit did it) and
 *                          job-scoped cleanup through the helper
 *
 * Errors are "skiff: PHASE: CAUSE" with PHASE one of config, import, mount,
 * hook, join, env, save. No exit() here: this is slurmstepd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "ddp_env.h"
#include "named.h"
#include "ns.h"
#include "plugin.h"
#include "proto.h"
#include "userproc.h"

/* Stores the first error for task_init and logs it for the admin. */
static int fail(const char *phase, const skiff_err *err)
{
    if (!skiff_g.failed) {
        skiff_g.failed = true;
        snprintf(skiff_g.phase, sizeof(skiff_g.phase), "%s", phase);
        skiff_g.err = *err;
    }
    /* task_init prints it as an error, once per task; here only for the log */
    skiff_log_verbose("skiff: %s: %s", phase, err->msg);
    return 0; /* fail in task_init, where srun sees it */
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

/* REL under the root-owned directory bfd, as an O_PATH fd: no symlink is
 * followed and no mount crossed (EXDEV), so root never asks a filesystem
 * the user mounted in their own directory (a FUSE server that never
 * answers) anything. Kernels without openat2: fstatat's rules (no link
 * followed, but mounts crossed). */
static int open_user_path(int bfd, const char *rel)
{
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    long fd = syscall(SYS_openat2, bfd, rel, &how, sizeof(how));
    if (fd < 0 && errno == ENOSYS)
        fd = openat(bfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    return (int)fd;
}

/* BASE/UID for the job's user (BASE: plugstack.conf's arg=, runtime_path
 * or block_cache_path): BASE is made by root (0755) and must be root's and
 * writable by nobody else, so no user can take a name in it first; UID is
 * made by root inside it (by fd: nothing is followed, no mount is crossed)
 * and given to the user. */
static int make_user_dir(const char *base, const char *arg, skiff_err *err)
{
    if (mkdir(base, 0755) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s %s", arg, base);
    cleanup_close int bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (bfd < 0 || fstat(bfd, &st) < 0)
        return skiff_error(err, errno, "open %s %s", arg, base);
    if (st.st_uid != 0 || (st.st_mode & 022))
        return skiff_error(err, 0,
                           "%s %s must be a directory owned by root and writable only by root (an admin "
                           "must remove it, or set %s= in plugstack.conf)",
                           arg, base, arg);
    char uid[16];
    snprintf(uid, sizeof(uid), "%u", (unsigned)skiff_g.uid);
    if (mkdirat(bfd, uid, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s/%s", base, uid);
    cleanup_close int ufd = open_user_path(bfd, uid);
    if (ufd < 0 && errno == EXDEV)
        return skiff_error(err, 0, "%s/%s has a filesystem mounted on it: unmount it (fusermount3 -u)", base, uid);
    if (ufd < 0 || fstat(ufd, &st) < 0)
        return skiff_error(err, errno, "stat %s/%s", base, uid);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, 0, "%s/%s is not a directory (an admin must remove it)", base, uid);
    if ((st.st_uid != skiff_g.uid || st.st_gid != skiff_g.gid) &&
        fchownat(ufd, "", skiff_g.uid, skiff_g.gid, AT_EMPTY_PATH) < 0)
        return skiff_error(err, errno, "chown %s/%s", base, uid);
    return 0;
}

static char **build_hook_env(spank_t sp);
static int spawn_starter(spank_t sp, skiff_err *err);

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
            skiff_log_error("skiff: config: %s", err.msg);
        return 0;
    }
    skiff_g.active = true;
    skiff_g.mntns_fd = -1;
    skiff_g.c.server_pidfd = -1;
    if (skiff_opts_check(&skiff_g.opts, &err) < 0)
        return fail("config", &err);
    char buf[SKIFF_PATH_MAX];
    if ((spank_getenv(sp, "PWD", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/') ||
        (spank_getenv(sp, "SLURM_SUBMIT_DIR", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/'))
        snprintf(skiff_g.cwd, sizeof(skiff_g.cwd), "%s", buf);
    else
        snprintf(skiff_g.cwd, sizeof(skiff_g.cwd), "%s", skiff_g.home);

    if (skiff_load_user_config(&skiff_g.args, skiff_g.uid, skiff_g.user, skiff_g.home, &skiff_g.cfg, &err) < 0 ||
        make_user_dir(skiff_g.args.runtime_path, "runtime_path", &err) < 0)
        return fail("config", &err);
    if (skiff_g.args.block_cache_path[0] && skiff_g.cfg.block_cache_mb > 0) {
        /* the block cache is an optimisation: a base someone else took
         * turns it off (and tells the admin), the step goes on */
        char dir[SKIFF_PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/%u", skiff_g.args.block_cache_path, (unsigned)skiff_g.uid);
        if (make_user_dir(skiff_g.args.block_cache_path, "block_cache_path", &err) < 0 ||
            skiff_config_set(&skiff_g.cfg, "block_cache_path", dir, &err) < 0) {
            skiff_log_error("skiff: %s: %s; the block cache is off for this step", skiff_g.node, err.msg);
            skiff_g.cfg.block_cache_mb = 0;
            skiff_err_clear(&err);
        }
    }

    if (skiff_g.opts.save && absolute(skiff_g.opts.save, skiff_g.save_path, sizeof(skiff_g.save_path), &err) < 0)
        return fail("config", &err);
    if (skiff_g.opts.name) {
        /* Nodes may share the user's data_path (home on NFS): a name is
         * stored per node, and per job when container_scope=job. */
        int w = skiff_g.args.scope == SKIFF_SCOPE_JOB
                    ? snprintf(skiff_g.named, sizeof(skiff_g.named), "%s.%s.job%u", skiff_g.opts.name, skiff_g.node,
                               (unsigned)skiff_g.jobid)
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
    /* Slurm's PMIx plugin makes the step's server directory (which the
     * pmix hook binds) after init_post_opt, and says where only then: a
     * PMIx step's container starts in user_init. SLURM_MPI_TYPE here is
     * slurmstepd's own environment, set by Slurm (MpiDefault included). */
    const char *mpi = getenv("SLURM_MPI_TYPE");
    if (mpi && !strncmp(mpi, "pmix", 4) && !skiff_g.is_batch) {
        skiff_g.start_in_user_init = true;
        return 0;
    }
    if (spawn_starter(sp, &err) < 0)
        return fail("config", &err);
    return 0;
}

/* ---- the request to the helper -------------------------------------------- */

static bool hook_var(const char *kv)
{
    return !strncmp(kv, "SLURM_", 6) || !strncmp(kv, "CUDA_VISIBLE_DEVICES=", 21) || !strncmp(kv, "NVIDIA_", 7) ||
           !strncmp(kv, "PMIX_", 5);
}

/* The job's SLURM_*, GPU and PMIx variables, borrowed from Slurm for the
 * duration of the start. Slurm 22.05 sets PMIX_SERVER_TMPDIR (the step's
 * PMIx server directory under SlurmdSpoolDir) only in slurmstepd's own
 * environment before user_init, and in each task's after it: the pmix
 * hook gets it from there (Slurm wrote it; the job cannot). */
static char **build_hook_env(spank_t sp)
{
    extern char **environ;
    static const char srv[] = "PMIX_SERVER_TMPDIR=";
    char **env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
        return NULL;
    char *own_srv = NULL;
    for (size_t i = 0; environ && environ[i]; i++)
        if (!strncmp(environ[i], srv, sizeof(srv) - 1))
            own_srv = environ[i];
    size_t n = 0;
    for (size_t i = 0; env[i]; i++) {
        n += hook_var(env[i]);
        if (!strncmp(env[i], srv, sizeof(srv) - 1))
            own_srv = NULL; /* the job's environment has it (newer Slurm) */
    }
    char **out = calloc(n + 2, sizeof(char *));
    if (!out)
        return NULL;
    n = 0;
    for (size_t i = 0; env[i]; i++)
        if (hook_var(env[i]))
            out[n++] = env[i];
    if (own_srv)
        out[n++] = own_srv;
    return out;
}

static int req_opt(struct skiff_recbuf *b, const char *key, const char *value, skiff_err *err)
{
    if (!value)
        return 0;
    return skiff_rec_putf(b, 'o', err, "%s=%s", key, value);
}

/* What every verb needs: the user's configuration and where the step runs. */
static int request_base(struct skiff_recbuf *b, const struct skiff_config *cfg, const char *cwd, skiff_err *err)
{
    char kv[SKIFF_PATH_MAX + 64];
    for (size_t i = 0;; i++) {
        int r = skiff_config_entry(cfg, i, kv, sizeof(kv));
        if (r == 0)
            break;
        if (r < 0 || skiff_rec_put(b, 'c', kv, err) < 0)
            return r < 0 ? skiff_error(err, ENAMETOOLONG, "configuration entry") : -1;
    }
    return req_opt(b, SKIFF_REQ_CWD, cwd, err) < 0 || req_opt(b, SKIFF_REQ_NODE, skiff_g.node, err) < 0 ? -1 : 0;
}

static const char *name_mode_word(enum skiff_name_mode m)
{
    switch (m) {
    case SKIFF_NAME_CREATE:
        return "create";
    case SKIFF_NAME_EXEC:
        return "exec";
    case SKIFF_NAME_NO_EXEC:
        return "no_exec";
    default:
        return "auto";
    }
}

/* The job's LANG and LC_* (the container falls back to C.UTF-8 for a
 * locale its image lacks: imgcompat.c). */
static spank_t request_sp;
static int request_locale(struct skiff_recbuf *b, skiff_err *err)
{
    char **env = NULL;
    if (!request_sp || spank_get_item(request_sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
        return 0;
    size_t n = 0;
    for (size_t i = 0; env[i] && n < 64; i++)
        if ((!strncmp(env[i], "LANG=", 5) || !strncmp(env[i], "LC_", 3)) && strlen(env[i]) < 256) {
            if (skiff_rec_put(b, 'l', env[i], err) < 0)
                return -1;
            n++;
        }
    return 0;
}

/* Set when the running container this step was to join ended before root
 * saw it: the helper is asked again, to start this step's own. */
static bool no_attach;

static int request_start(struct skiff_recbuf *b, skiff_err *err)
{
    const struct skiff_opts *o = &skiff_g.opts;
    char num[16];
    char *key = skiff_g.state_key;
    if (skiff_g.is_batch)
        snprintf(key, sizeof(skiff_g.state_key), "%s.%u.batch", skiff_g.node, (unsigned)skiff_g.jobid);
    else
        snprintf(key, sizeof(skiff_g.state_key), "%s.%u.%u", skiff_g.node, (unsigned)skiff_g.jobid,
                 (unsigned)skiff_g.stepid);
    snprintf(num, sizeof(num), "%d", o->unshare_flags);
    bool ep = o->entrypoint == 1 || (o->entrypoint < 0 && skiff_g.args.execute_entrypoint);
    if (request_base(b, &skiff_g.cfg, skiff_g.cwd, err) < 0 || req_opt(b, SKIFF_REQ_IMAGE, o->image, err) < 0 ||
        req_opt(b, SKIFF_REQ_NAME, o->name, err) < 0 ||
        req_opt(b, SKIFF_REQ_NAMED, skiff_g.named[0] ? skiff_g.named : NULL, err) < 0 ||
        req_opt(b, SKIFF_REQ_NAME_MODE, no_attach ? "no_exec" : name_mode_word(o->name_mode), err) < 0 ||
        req_opt(b, SKIFF_REQ_TEMP, skiff_g.temp_named ? "1" : "0", err) < 0 ||
        req_opt(b, SKIFF_REQ_IMPORTER, skiff_g.args.importer[0] ? skiff_g.args.importer : NULL, err) < 0 ||
        req_opt(b, SKIFF_REQ_WORKDIR, o->workdir, err) < 0 ||
        req_opt(b, SKIFF_REQ_WRITABLE, o->writable != 0 ? "1" : "0", err) < 0 ||
        req_opt(b, SKIFF_REQ_REMAP_ROOT, o->remap_root == 1 ? "1" : "0", err) < 0 ||
        req_opt(b, SKIFF_REQ_MOUNT_HOME, o->mount_home == 1 ? "1" : "0", err) < 0 ||
        req_opt(b, SKIFF_REQ_ENTRYPOINT, ep ? "1" : "0", err) < 0 || req_opt(b, SKIFF_REQ_UNSHARE, num, err) < 0 ||
        req_opt(b, SKIFF_REQ_COMMAND, skiff_g.command0, err) < 0 || req_opt(b, SKIFF_REQ_STATE_KEY, key, err) < 0)
        return -1;
    snprintf(num, sizeof(num), "%d", skiff_g.args.timeout_s);
    if (req_opt(b, SKIFF_REQ_TIMEOUT, num, err) < 0)
        return -1;
    /* mounts: relative sources against the step's working directory */
    for (size_t i = 0; i < o->nmounts; i++) {
        const char *m = o->mounts[i];
        if ((m[0] == '.' ? skiff_rec_putf(b, 'm', err, "%s/%s", skiff_g.cwd, m) : skiff_rec_put(b, 'm', m, err)) < 0)
            return -1;
    }
    if (batch_script_mount && skiff_rec_put(b, 'm', batch_script_mount, err) < 0)
        return -1;
    for (size_t i = 0; skiff_g.hook_env && skiff_g.hook_env[i]; i++)
        if (skiff_rec_put(b, 'h', skiff_g.hook_env[i], err) < 0)
            return -1;
    return request_locale(b, err);
}

static struct skiff_user job_user(void)
{
    return (struct skiff_user){.uid = skiff_g.uid,
                               .gid = skiff_g.gid,
                               .groups = skiff_g.groups,
                               .ngroups = skiff_g.ngroups,
                               .name = skiff_g.user,
                               .home = skiff_g.home};
}

/* Proxy settings of the job reach the helper (a registry behind a proxy). */
static const char *const proxy_vars[] = {"http_proxy",  "https_proxy", "no_proxy",  "HTTP_PROXY",
                                         "HTTPS_PROXY", "NO_PROXY",    "all_proxy", "ALL_PROXY"};

static char **proxy_env(spank_t sp)
{
    char **env = calloc(sizeof(proxy_vars) / sizeof(proxy_vars[0]) + 1, sizeof(char *));
    char buf[4096];
    size_t n = 0;
    for (size_t i = 0; env && i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++)
        if (spank_getenv(sp, proxy_vars[i], buf, sizeof(buf)) == ESPANK_SUCCESS &&
            asprintf(&env[n], "%s=%s", proxy_vars[i], buf) > 0)
            n++;
    return env;
}

/* ---- the starter: the container is started while Slurm sets the step up ----
 *
 * Between init_post_opt and user_init slurmstepd spends 5-15 ms on its own
 * setup. The helper, started at the end of init_post_opt (PMIx steps: at
 * the start of user_init, after Slurm's PMIx setup), resolves the
 * image and starts the holder meanwhile; user_init only collects its
 * answer. The helper stays the holder's parent until its control pipe
 * closes, then stops the container. */
static struct skiff_helper_proc starter = SKIFF_HELPER_PROC_INIT;
static char helper_program[SKIFF_PATH_MAX];

static int spawn_starter(spank_t sp, skiff_err *err)
{
    struct skiff_recbuf req = {0};
    int rc = -1;
    char **penv = NULL;
    free(skiff_g.hook_env);
    skiff_g.hook_env = build_hook_env(sp);
    request_sp = sp;
    if (skiff_helper_path(skiff_g.args.helper, false, helper_program, sizeof(helper_program), err) < 0 ||
        request_start(&req, err) < 0)
        goto out;
    penv = proxy_env(sp);
    struct skiff_user u = job_user();
    rc = skiff_helper_spawn(helper_program, "start", &u, &req, (const char *const *)penv, true, &starter, err);
out:
    skiff_recbuf_free(&req);
    skiff_strv_free(penv);
    return rc;
}

/* /proc/PID/stat's parent pid; -1 when unreadable. */
static int parent_of(pid_t pid)
{
    char state;
    int ppid;
    return skiff_proc_stat(pid, &state, &ppid) == 0 ? ppid : -1;
}

/* Whether all four uids of /proc/PID/status (real, effective, saved, fs) are uid. */
static bool runs_as(pid_t pid, uid_t uid)
{
    char p[64], buf[4096];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *l = strstr(buf, "\nUid:");
    unsigned r, e, sv, fs;
    return l && sscanf(l + 5, "%u %u %u %u", &r, &e, &sv, &fs) == 4 && r == uid && e == uid && sv == uid && fs == uid;
}

/* The holder the helper names is accepted only if it is the helper's child
 * (the helper is ours: its pid cannot be reused before we reap it), runs
 * as the job's uid, and lives in a mount namespace owned by a user
 * namespace of that uid; all checked through a pidfd, so the pid cannot
 * change under us. Returns the namespace, held open, or -1.
 *
 * A running container to attach to (attached) is another step's: it is
 * not the helper's child, so that check is left out. Root does nothing
 * with it but this check: the tasks join it as the user (the kernel's
 * rules decide), and no one on this step's side ever kills in it. The
 * checks give a clear error for a process that is not a container of the
 * job's user (another user's, root's, the user's own outside any
 * container). */
static int verify_holder(pid_t holder, bool attached, bool *gone, skiff_err *err)
{
    int pidfd = pidfd_open(holder, 0);
    *gone = pidfd < 0 && errno == ESRCH;
    if (pidfd < 0)
        return skiff_error(err, 0, "the container process %d the helper named is not running", (int)holder);
    int mnt = -1;
    if ((!attached && parent_of(holder) != starter.pid) || !runs_as(holder, skiff_g.uid)) {
        skiff_error(err, 0,
                    attached ? "process %d is not a running container of the job's user (refused)"
                             : "process %d is not the helper's container process (refused)",
                    (int)holder);
        goto fail;
    }
    char nsp[64];
    snprintf(nsp, sizeof(nsp), "/proc/%d/ns/mnt", (int)holder);
    mnt = open(nsp, O_RDONLY | O_CLOEXEC);
    /* still the same process now that its /proc files were read */
    if (mnt < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) {
        skiff_error(err, 0, "the container process %d went away", (int)holder);
        goto fail;
    }
    if (!skiff_ns_owned_by(mnt, skiff_g.uid)) {
        skiff_error(err, 0, "process %d is not in a container's mount namespace (refused)", (int)holder);
        goto fail;
    }
    close(pidfd);
    return mnt;
fail:
    if (mnt >= 0)
        close(mnt);
    close(pidfd);
    return -1;
}

static void take_reply(struct skiff_reply *r)
{
    /* the plugin never holds the container's FUSE server (the helper
     * does): -1, or skiff_container_free would close fd 0, which Slurm
     * keeps on /dev/null */
    skiff_g.c.server_pidfd = -1;
    skiff_g.c.holder = r->holder;
    snprintf(skiff_g.c.workdir, sizeof(skiff_g.c.workdir), "%s", r->workdir);
    skiff_g.c.env = r->env;
    skiff_g.c.entrypoint = r->entrypoint;
    skiff_g.c.cmd = r->cmd;
    r->env = r->entrypoint = r->cmd = NULL;
    skiff_g.t_resolve_ms = r->t_resolve_ms;
    skiff_g.t_start_ms = r->t_start_ms;
}

static void show_progress(char tag, const char *s, void *ctx);

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
    if (skiff_g.start_in_user_init) {
        if (spawn_starter(sp, &err) < 0)
            return fail("config", &err);
    }
    if (starter.pid <= 0) {
        skiff_error(&err, 0, "the container helper was not started");
        return fail("mount", &err);
    }
    /* one deadline for all of user_init, a second helper included */
    double deadline = t0 + skiff_g.args.timeout_s * 1000.0;
    int mnt;
    for (;;) {
        struct skiff_reply r;
        int shown = 0;
        int rc = skiff_helper_reply(&starter, deadline, skiff_g.args.timeout_s, show_progress, &shown, &r, &err);
        skiff_g.t_wait_ms = skiff_now_ms() - t0;
        if (rc < 0) {
            skiff_reply_free(&r);
            /* no answer in time, or none root takes: it is killed now, not
             * waited for again at exit */
            skiff_helper_finish(&starter, 0);
            return fail("mount", &err);
        }
        if (r.status < 0) {
            char phase[SKIFF_PHASE_MAX];
            snprintf(phase, sizeof(phase), "%s", r.phase);
            err = r.err;
            skiff_reply_free(&r);
            return fail(phase, &err);
        }
        take_reply(&r);
        skiff_g.attached = r.attached;
        snprintf(skiff_g.notice, sizeof(skiff_g.notice), "%s", r.notice);
        skiff_reply_free(&r);
        /* Kept so exit can kill what is left in the container after the
         * helper stopped it. The fd keeps the namespace alive: otherwise
         * its inode number could be reused by another step's container. An
         * attached step's container is another step's to stop: not kept. */
        bool gone = false;
        mnt = verify_holder(skiff_g.c.holder, skiff_g.attached, &gone, &err);
        if (mnt >= 0 || !skiff_g.attached || !gone || no_attach || skiff_g.opts.name_mode == SKIFF_NAME_EXEC)
            break;
        /* --container-name=NAME (auto): the running container ended
         * between the helper's look and ours (two steps starting one name
         * at once): this step starts its own, as :no_exec would have. The
         * first helper has nothing left to do: killed, not waited for. */
        skiff_helper_finish(&starter, 0);
        skiff_strv_free(skiff_g.c.env);
        skiff_strv_free(skiff_g.c.entrypoint);
        skiff_strv_free(skiff_g.c.cmd);
        skiff_g.c.env = skiff_g.c.entrypoint = skiff_g.c.cmd = NULL;
        skiff_g.attached = false;
        no_attach = true;
        skiff_err_clear(&err);
        if (spawn_starter(sp, &err) < 0)
            return fail("config", &err);
    }
    if (mnt < 0) {
        /* it named a process root refuses: nothing it does is used */
        skiff_helper_finish(&starter, 0);
        return fail(skiff_g.attached ? "join" : "mount", &err);
    }
    if (skiff_g.attached)
        close(mnt);
    else
        skiff_g.mntns_fd = mnt;
    skiff_g.started = true;
    return 0;
}

/* Progress of an import, live in srun (skiff_log_step: at every Slurm
 * version and level, as pyxis's import lines). Bounded: a helper that
 * floods records gets a few lines shown, no more. */
static void show_progress(char tag, const char *s, void *ctx)
{
    int *shown = ctx;
    char line[400];
    if (*shown < 4 && skiff_progress_line(tag, s, line, sizeof(line)) == 0) {
        (*shown)++;
        skiff_log_step("skiff: %s", line);
    }
}

/* Options that only shape a container as it starts: a step that joins a
 * running one says it ignores them. */
static void warn_ignored(void)
{
    static const enum skiff_opt_id start_only[] = {SKIFF_OPT_MOUNTS,    SKIFF_OPT_MOUNT_HOME, SKIFF_OPT_REMAP_ROOT,
                                                   SKIFF_OPT_WRITABLE,  SKIFF_OPT_UNSHARE,    SKIFF_OPT_SAVE,
                                                   SKIFF_OPT_ENTRYPOINT};
    char list[512] = "";
    size_t n = 0, k = 0;
    for (size_t i = 0; i < sizeof(start_only) / sizeof(start_only[0]); i++) {
        if (!skiff_opts_isset(&skiff_g.opts, start_only[i]))
            continue;
        const char *flag = skiff_opt_flag(start_only[i]);
        if (start_only[i] == SKIFF_OPT_WRITABLE && skiff_g.opts.writable == 0)
            flag = "container-readonly";
        int w = snprintf(list + n, sizeof(list) - n, "%s--%s", k++ ? ", " : "", flag);
        if (w > 0 && (size_t)w < sizeof(list) - n)
            n += (size_t)w;
    }
    if (k)
        skiff_log_task("skiff: %s: joining the running container '%s': ignoring %s (%s only when a container starts)",
                       skiff_g.node, skiff_g.opts.name, list, k > 1 ? "they apply" : "it applies");
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
        skiff_log_error("skiff: %s: %s", skiff_g.phase, skiff_g.err.msg);
        return -1;
    }
    if (!skiff_g.active || !skiff_g.started)
        return 0;
    skiff_err err;
    skiff_err_clear(&err);
    double t0 = skiff_now_ms();
    if (skiff_container_join(skiff_g.c.holder, skiff_g.c.workdir[0] ? skiff_g.c.workdir : "/", SKIFF_JOIN_KEEP_CAPS,
                             &err) < 0) {
        skiff_log_error("skiff: join: %s", err.msg);
        return -1;
    }
    if (apply_env(sp, &err) < 0) {
        skiff_log_error("skiff: env: %s", err.msg);
        return -1;
    }
    if (apply_ddp_env(sp, &err) < 0) {
        skiff_log_error("skiff: env: training environment: %s", err.msg);
        return -1;
    }
    double t1 = skiff_now_ms();
    int local = -1;
    spank_get_item(sp, S_TASK_ID, &local);
    if (local == 0 && skiff_g.attached)
        warn_ignored();
    if (local == 0 && skiff_g.notice[0])
        skiff_log_task("skiff: %s: %s", skiff_g.node, skiff_g.notice);
    if (local == 0) {
        char dbg[16];
        if (spank_getenv(sp, "SKIFF_DEBUG", dbg, sizeof(dbg)) == ESPANK_SUCCESS && dbg[0] && strcmp(dbg, "0")) {
            skiff_log_task("skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms (during Slurm's own "
                           "%.1f ms of step setup; user_init waited %.1f ms), join+env %.1f ms",
                           skiff_g.node, skiff_g.t_config_ms, skiff_g.t_resolve_ms, skiff_g.t_start_ms,
                           skiff_g.t_gap_ms, skiff_g.t_wait_ms, t1 - t0);
        }
        skiff_log_verbose("skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms, join+env %.1f ms",
                          skiff_g.node, skiff_g.t_config_ms, skiff_g.t_resolve_ms, skiff_g.t_start_ms, t1 - t0);
    }
    bool ep = !skiff_g.attached &&
              (skiff_g.opts.entrypoint == 1 || (skiff_g.opts.entrypoint < 0 && skiff_g.args.execute_entrypoint));
    if (ep && exec_entrypoint(sp, &err) < 0) {
        skiff_log_error("skiff: entrypoint: %s", err.msg);
        return -1;
    }
    return 0;
}

static void stop_container(const struct skiff_user *u);
static void save_container(void);

/* task_exit (slurmstepd, root, once per task): when the node's last task
 * is gone the control pipe closes, so that the helper stops the container
 * (the kernel tears the namespace and the FUSE mount down) while Slurm
 * finishes the step; exit() waits for it. */
int skiff_remote_task_exit(spank_t sp)
{
    if (!skiff_g.active || !skiff_g.started || starter.ctl < 0)
        return 0;
    uint32_t ntasks = 0;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS)
        return 0;
    if (++skiff_g.tasks_exited >= ntasks) {
        close(starter.ctl);
        starter.ctl = -1;
        /* Steps that joined this container run on: the helper stops it
         * when they are done, and this step waits for that here, before
         * Slurm kills the step's processes (the helper among them), up to
         * the deadline. Without joined steps the helper says nothing and
         * closes the pipe at once. */
        if (!skiff_g.attached && skiff_helper_joined(&starter, 2000) &&
            skiff_helper_finish(&starter, skiff_g.args.timeout_s) == -1)
            skiff_log_error("skiff: %s: the steps that joined this container did not end within %d s; it was stopped",
                            skiff_g.node, skiff_g.args.timeout_s);
        /* A script's next line often starts the saved image: srun must not
         * return before it exists. */
        if (skiff_g.save_path[0]) {
            struct skiff_user u = job_user();
            stop_container(&u);
            save_container();
        }
    }
    return 0;
}

/* ---- exit: slurmstepd, root ----------------------------------------------------- */

/* Runs an exit-time verb of the helper as the job's user. */
static int helper_verb(const char *verb, const char *cwd, const char *key, const char *value, skiff_err *err)
{
    struct skiff_recbuf req = {0};
    int rc = -1;
    char program[SKIFF_PATH_MAX];
    if (skiff_helper_path(skiff_g.args.helper, true, program, sizeof(program), err) < 0)
        goto out;
    if (request_base(&req, &skiff_g.cfg, cwd, err) < 0 ||
        req_opt(&req, SKIFF_REQ_NAMED, skiff_g.named[0] ? skiff_g.named : NULL, err) < 0 ||
        req_opt(&req, SKIFF_REQ_IMPORTER, skiff_g.args.importer[0] ? skiff_g.args.importer : NULL, err) < 0 ||
        (key && req_opt(&req, key, value, err) < 0))
        goto out;
    struct skiff_user u = job_user();
    rc = skiff_helper_call(program, verb, &u, &req, skiff_g.args.timeout_s, err);
out:
    skiff_recbuf_free(&req);
    return rc;
}

static int remove_state_fn(void *arg)
{
    (void)arg;
    skiff_err e;
    return skiff_container_remove_state(&skiff_g.cfg, skiff_g.state_key, &e);
}

/* Whether the step's state directory is still there: looked up from the
 * root-owned base, never following a link nor crossing a mount. */
static bool state_left(void)
{
    if (!skiff_g.state_key[0])
        return false;
    cleanup_close int bfd = open(skiff_g.args.runtime_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char rel[600];
    snprintf(rel, sizeof(rel), "%u/%s", (unsigned)skiff_g.uid, skiff_g.state_key);
    if (bfd < 0)
        return false;
    cleanup_close int fd = open_user_path(bfd, rel);
    /* a mount in the way: the user's child that removes it finds out (bounded) */
    return fd >= 0 || errno == EXDEV;
}

int skiff_remove_job_containers(const struct skiff_user *u, const char *node, uint32_t jobid,
                                const struct skiff_config *cfg, skiff_err *err)
{
    char suffix[300], program[SKIFF_PATH_MAX];
    snprintf(suffix, sizeof(suffix), ".%s.job%u", node, (unsigned)jobid);
    struct skiff_recbuf req = {0};
    int rc = -1;
    if (skiff_helper_path(skiff_g.args.helper, true, program, sizeof(program), err) < 0 ||
        request_base(&req, cfg, NULL, err) < 0 || req_opt(&req, SKIFF_REQ_SUFFIX, suffix, err) < 0)
        goto out;
    rc = skiff_helper_call(program, "sweep", u, &req, skiff_g.args.timeout_s, err);
out:
    skiff_recbuf_free(&req);
    return rc;
}

/* Stops the step's container and waits for it to be gone (bounded): the
 * helper, a state directory Slurm's kill left behind, a task's daemon that
 * left the step's process tree. Each part runs once, from task_exit or exit. */
static void stop_container(const struct skiff_user *u)
{
    double t0 = skiff_now_ms();
    if (starter.pid > 0 && skiff_helper_finish(&starter, skiff_g.args.timeout_s) == -1)
        skiff_log_error("skiff: %s: the container helper did not stop within %d s; it was killed", skiff_g.node,
                        skiff_g.args.timeout_s);
    if (state_left())
        /* Slurm killed the helper with the step's processes before it could
         * stop the container: its state directory is removed as the user */
        if (skiff_fork_as_user(u, NULL, 0, remove_state_fn, NULL, skiff_g.args.timeout_s) < 0)
            skiff_log_error("skiff: %s: could not remove the state of %s", skiff_g.node, skiff_g.state_key);
    if (skiff_g.mntns_fd >= 0) {
        /* a task's daemon that left the step's process tree */
        skiff_kill_ns_as_user(skiff_g.mntns_fd, u, skiff_g.args.timeout_s);
        close(skiff_g.mntns_fd);
        skiff_g.mntns_fd = -1;
    }
    if (skiff_g.started) {
        skiff_container_free(&skiff_g.c);
        skiff_g.started = false;
        if (skiff_g.debug)
            skiff_log_info("skiff: %s: timing: stop %.1f ms", skiff_g.node, skiff_now_ms() - t0);
    }
}

/* --container-save, once: squashes the stopped named container. */
static void save_container(void)
{
    if (!skiff_g.save_path[0] || skiff_g.saved || skiff_g.failed || skiff_g.attached || !skiff_g.named[0])
        return;
    skiff_g.saved = true;
    skiff_err err;
    skiff_err_clear(&err);
    if (helper_verb("save", skiff_g.cwd, SKIFF_REQ_SAVE, skiff_g.save_path, &err) < 0)
        skiff_log_error("skiff: save: %s", err.msg);
}

int skiff_remote_exit(spank_t sp)
{
    (void)sp;
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_user u = job_user();
    if (skiff_g.sweep_only) {
        if (skiff_remove_job_containers(&u, skiff_g.node, skiff_g.jobid, &skiff_g.cfg, &err) < 0)
            skiff_log_error("skiff: cleanup: %s", err.msg);
        free(skiff_g.groups);
        skiff_g.groups = NULL;
        return 0;
    }
    if (!skiff_g.active)
        return 0;
    stop_container(&u);
    save_container();
    if (skiff_g.temp_named && helper_verb("remove", NULL, NULL, NULL, &err) < 0)
        skiff_log_error("skiff: save: remove %s: %s", skiff_g.named, err.msg);
    if (skiff_g.is_batch && skiff_g.args.scope == SKIFF_SCOPE_JOB &&
        skiff_remove_job_containers(&u, skiff_g.node, skiff_g.jobid, &skiff_g.cfg, &err) < 0)
        skiff_log_error("skiff: cleanup: %s", err.msg);
    if (skiff_g.args.importer[0] && helper_verb("release", NULL, NULL, NULL, &err) < 0)
        skiff_log_error("skiff: importer release: %s", err.msg);
    free(skiff_g.groups);
    skiff_g.groups = NULL;
    free(batch_script_mount);
    batch_script_mount = NULL;
    free(skiff_g.hook_env);
    skiff_g.hook_env = NULL;
    return 0;
}
