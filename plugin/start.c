/* The start of a step (step.h): init_post_opt and user_init, both in
 * slurmstepd. init_post_opt makes the step's start request (the options'
 * request, with who and where it runs) and execs the starter; user_init
 * reads its answer and checks the container process it names. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "named.h"
#include "ns.h"
#include "plugin.h"
#include "step.h"
#include "strv.h"

static int spawn_starter(struct step *s, spank_t sp, skiff_err *err);

/* Where the step runs (its working directory), the user's configuration
 * and directories under the root-owned bases. */
static int where(struct step *s, spank_t sp, skiff_err *err)
{
    char buf[SKIFF_PATH_MAX];
    if ((spank_getenv(sp, "PWD", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/') ||
        (spank_getenv(sp, "SLURM_SUBMIT_DIR", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/'))
        snprintf(s->cwd, sizeof(s->cwd), "%s", buf);
    else
        snprintf(s->cwd, sizeof(s->cwd), "%s", s->home);
    if (skiff_load_user_config(s->args, s->uid, s->user, s->home, &s->cfg, err) < 0 ||
        skiff_step_user_dir(s, s->args->runtime_path, "runtime_path", err) < 0)
        return -1;
    /* pyxis hands enroot the job's ENROOT_CONFIG_PATH (where its credentials
     * are); a path the helper reads as the user, never root */
    if (spank_getenv(sp, "ENROOT_CONFIG_PATH", buf, sizeof(buf)) == ESPANK_SUCCESS && buf[0] == '/' &&
        skiff_config_set_raw(&s->cfg, "enroot_config_path", buf, err) < 0)
        return -1;
    if (s->args->block_cache_path[0] && s->cfg.block_cache_mb > 0) {
        /* the block cache is an optimisation: a base someone else took
         * turns it off (and tells the admin), the step goes on */
        char dir[SKIFF_PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/%u", s->args->block_cache_path, (unsigned)s->uid);
        if (skiff_step_user_dir(s, s->args->block_cache_path, "block_cache_path", err) < 0 ||
            skiff_config_set(&s->cfg, "block_cache_path", dir, err) < 0) {
            skiff_log_error("skiff: %s: %s; the block cache is off for this step", s->node, err->msg);
            s->cfg.block_cache_mb = 0;
            skiff_err_clear(err);
        }
    }
    return 0;
}

/* The named container as stored: per node (nodes may share the user's
 * data_path, home on NFS), and per job when container_scope=job; or, for
 * --container-save of an unnamed container, a private name for the step
 * that keeps its changes on disk to export, removed at exit. */
static int container_name(struct step *s, skiff_err *err)
{
    const char *name = s->opts->req.name_given;
    if (name) {
        if (skiff_named_step_name(name, s->node, s->args->scope == SKIFF_SCOPE_JOB ? (unsigned)s->jobid : 0, s->named,
                                  sizeof(s->named), err) < 0)
            return -1;
    } else if (s->opts->req.save) {
        snprintf(s->named, sizeof(s->named), "save.%s.%u.%u", s->node, (unsigned)s->jobid, (unsigned)s->stepid);
        s->temp_named = true;
    }
    return 0;
}

/* The start request: what the options filled, and the step around it. */
static int fill_request(struct step *s, spank_t sp, skiff_err *err)
{
    struct skiff_start_request *r = &s->opts->req;
    int argc = 0;
    char **argv = NULL;
    bool have = spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 && argv[0];
    if (have && s->is_batch && argv[0][0] == '/') {
        /* the batch script lives in slurmd's spool directory, outside the
         * image: bind-mounted read-only at the same path */
        char *script = NULL;
        if (asprintf(&script, "%s:%s:ro+x-create=file", argv[0], argv[0]) < 0)
            return skiff_error(err, ENOMEM, "out of memory");
        int added = skiff_opts_add_mount(s->opts, script, err);
        free(script);
        if (added < 0)
            return -1;
    }
    if (have && !s->is_batch)
        s->command0 = strdup(argv[0]); /* NULL (no warming) is fine */
    s->command[0] = s->command0;
    r->command = s->command0 ? s->command : NULL;
    if (s->is_batch)
        snprintf(s->state_key, sizeof(s->state_key), "%s.%u.batch", s->node, (unsigned)s->jobid);
    else
        snprintf(s->state_key, sizeof(s->state_key), "%s.%u.%u", s->node, (unsigned)s->jobid, (unsigned)s->stepid);
    r->state_key = s->state_key;
    r->cwd = s->cwd;
    r->node = s->node;
    r->name = s->named[0] ? s->named : NULL;
    r->temp_name = s->temp_named;
    r->importer = s->args->importer[0] ? s->args->importer : NULL;
    r->timeout_s = s->args->timeout_s;
    r->import_timeout_s = s->args->import_timeout_s;
    return 0;
}

int skiff_step_init_post_opt(struct step *s, spank_t sp)
{
    double t0 = skiff_now_ms();
    skiff_err err;
    skiff_err_clear(&err);
    uint32_t stepid = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
        return 0;
    s->stepid = stepid;
    if (stepid == SLURM_EXTERN_CONT)
        return 0; /* the extern step holds no user task */
    s->is_batch = stepid == SLURM_BATCH_SCRIPT;
    struct skiff_envget *eg = skiff_envget_new(sp);
    if (!eg)
        return 0;
    int rc = skiff_opts_from_env(s->opts, skiff_envget, eg, &err);
    skiff_envget_free(eg);
    if (rc < 0)
        return skiff_step_fail(s, "config", &err);
    /* the batch step of a job-scoped job removes its named containers at
     * exit even when the batch script itself runs outside a container */
    bool sweep = s->is_batch && s->args->scope == SKIFF_SCOPE_JOB;
    bool want = skiff_opts_active(s->opts) && !(s->is_batch && !s->args->sbatch_support);
    if (!want && !sweep)
        return 0;
    if (skiff_step_identity(s, sp, &err) < 0)
        return skiff_step_fail(s, "config", &err);
    if (!want) {
        s->sweep_only = true;
        if (skiff_load_user_config(s->args, s->uid, s->user, s->home, &s->cfg, &err) < 0)
            skiff_log_error("skiff: config: %s", err.msg);
        return 0;
    }
    s->active = true;
    if (skiff_opts_check(s->opts, &err) < 0 || where(s, sp, &err) < 0 ||
        skiff_opts_finish(s->opts, s->args->execute_entrypoint, s->cwd, &err) < 0 || container_name(s, &err) < 0 ||
        fill_request(s, sp, &err) < 0)
        return skiff_step_fail(s, "config", &err);
    s->t_config_ms = skiff_now_ms() - t0;
    s->t_post_opt_end = skiff_now_ms();
    /* Slurm's PMIx plugin makes the step's server directory (which the
     * pmix hook binds) after init_post_opt, and says where only then: a
     * PMIx step's container starts in user_init. SLURM_MPI_TYPE here is
     * slurmstepd's own environment, set by Slurm (MpiDefault included). */
    const char *mpi = getenv("SLURM_MPI_TYPE");
    if (mpi && !strncmp(mpi, "pmix", 4) && !s->is_batch) {
        s->start_in_user_init = true;
        return 0;
    }
    if (spawn_starter(s, sp, &err) < 0)
        return skiff_step_fail(s, "config", &err);
    return 0;
}

/* ---- the start request ---------------------------------------------------- */

static bool hook_var(const char *kv)
{
    return !strncmp(kv, "SLURM_", 6) || !strncmp(kv, "CUDA_VISIBLE_DEVICES=", 21) || !strncmp(kv, "NVIDIA_", 7) ||
           !strncmp(kv, "PMIX_", 5) || !strncmp(kv, "MELLANOX_", 9);
}

/* The job's SLURM_*, GPU, RDMA and PMIx variables, borrowed from Slurm for the
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

/* The job's LANG and LC_* (the container falls back to C.UTF-8 for a
 * locale its image lacks: imgcompat.c), borrowed from Slurm's copy. */
static const char **job_locale(spank_t sp)
{
    char **env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
        return NULL;
    const char **out = calloc(65, sizeof(*out));
    size_t n = 0;
    for (size_t i = 0; out && env[i] && n < 64; i++)
        if ((!strncmp(env[i], "LANG=", 5) || !strncmp(env[i], "LC_", 3)) && strlen(env[i]) < 256)
            out[n++] = env[i];
    return out;
}

/* The job's environment, as enroot would have had it, borrowed from
 * Slurm's copy: enroot's credentials file's $VAR passwords (JAX-Toolbox's
 * sbatch --export=ENROOT_PASSWORD=...) and enroot_compat's site files. The
 * user's own values, for a process of the user's: nothing root acts on. */
static const char **job_env(spank_t sp)
{
    char **env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
        return NULL;
    size_t n = 0;
    while (env[n] && n < SKIFF_REQUEST_LIST_MAX)
        n++;
    const char **out = calloc(n + 1, sizeof(*out));
    size_t k = 0;
    for (size_t i = 0; out && i < n; i++)
        if (strchr(env[i], '=') && strlen(env[i]) < 65536)
            out[k++] = env[i];
    return out;
}

/* The start request as the helper gets it: with the job's hook, locale
 * and other variables as Slurm has them now (a PMIx step's, in user_init). */
static int request_start(struct step *s, spank_t sp, struct skiff_recbuf *b, skiff_err *err)
{
    struct skiff_start_request *r = &s->opts->req;
    if (s->no_attach)
        r->name_mode = SKIFF_NAME_NO_EXEC;
    r->hook_env = (const char *const *)s->hook_env;
    const char **locale = job_locale(sp), **job = job_env(sp);
    r->locale_env = locale;
    r->enroot_env = job;
    int rc = skiff_start_request_encode(&s->cfg, r, b, err);
    r->locale_env = NULL;
    r->enroot_env = NULL;
    free(locale);
    free(job);
    return rc;
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
static int spawn_starter(struct step *s, spank_t sp, skiff_err *err)
{
    char helper_program[SKIFF_PATH_MAX];
    struct skiff_recbuf req = {0};
    int rc = -1;
    char **penv = NULL;
    free(s->hook_env);
    s->hook_env = build_hook_env(sp);
    if (skiff_helper_path(s->args->helper, false, helper_program, sizeof(helper_program), err) < 0 ||
        request_start(s, sp, &req, err) < 0)
        goto out;
    penv = proxy_env(sp);
    struct skiff_user u = skiff_step_user(s);
    rc = skiff_helper_spawn(helper_program, "start", &u, &req, (const char *const *)penv, true, &s->starter, err);
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
static int verify_holder(const struct step *s, pid_t holder, bool attached, bool *gone, skiff_err *err)
{
    int pidfd = pidfd_open(holder, 0);
    *gone = pidfd < 0 && errno == ESRCH;
    if (pidfd < 0)
        return skiff_error(err, 0, "the container process %d the helper named is not running", (int)holder);
    int mnt = -1;
    if ((!attached && parent_of(holder) != s->starter.pid) || !runs_as(holder, s->uid)) {
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
    if (!skiff_ns_owned_by(mnt, s->uid)) {
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

static void take_reply(struct step *s, struct skiff_reply *r)
{
    /* the plugin never holds the container's FUSE server (the helper
     * does): -1, or skiff_container_free would close fd 0, which Slurm
     * keeps on /dev/null */
    s->c.server_pidfd = -1;
    s->c.holder = r->holder;
    snprintf(s->c.workdir, sizeof(s->c.workdir), "%s", r->workdir);
    s->c.env = r->env;
    s->c.entrypoint = r->entrypoint;
    s->c.cmd = r->cmd;
    r->env = r->entrypoint = r->cmd = NULL;
    s->t_resolve_ms = r->t_resolve_ms;
    s->t_start_ms = r->t_start_ms;
}

/* What root saw of an import while it waited for the helper's answer. */
struct progress_seen {
    const struct step *s;
    int shown;           /* lines shown */
    double last_dl_ms;   /* when a download line was last shown */
    double *deadline_ms; /* root's deadline for the answer, set by an import */
    double bound_ms;     /* what no record moves it past: user_init's start + timeout= + import_timeout= */
    bool importing;      /* an import (or the wait for another's) began */
    bool imported;       /* and ended */
};

/* Progress of an import, live in srun (skiff_log_step: at every Slurm
 * version and level, as pyxis's import lines). Bounded: a helper that
 * floods records gets a download line every 10 s at most and a few hundred
 * lines in all (and plugin/log.c bounds the step's lines). The first
 * record of an import (or of the wait for another node's) gives it
 * import_timeout= from then, be it longer or shorter than timeout=; the
 * first of its end gives the rest of the start timeout= again. Records
 * only inform: the helper is the user's (its records can be forged, and
 * any number of them written), so no record after those two changes the
 * deadline, and none moves it past bound_ms, which user_init fixed when
 * it began. */
static void show_progress(char tag, const char *text, void *ctx)
{
    struct progress_seen *ps = ctx;
    double now = skiff_now_ms();
    if ((tag == SKIFF_REPLY_IMPORTING || tag == SKIFF_REPLY_WAITING) && !ps->importing) {
        ps->importing = true;
        *ps->deadline_ms = now + ps->s->args->import_timeout_s * 1000.0;
    } else if (tag == SKIFF_REPLY_IMPORTED && ps->importing && !ps->imported) {
        ps->imported = true;
        *ps->deadline_ms = now + ps->s->args->timeout_s * 1000.0;
    }
    if (*ps->deadline_ms > ps->bound_ms)
        *ps->deadline_ms = ps->bound_ms;
    if (tag == SKIFF_REPLY_DOWNLOAD && ps->last_dl_ms > 0 && now - ps->last_dl_ms < 10000)
        return;
    char line[400];
    if (ps->shown < 400 && skiff_progress_line(tag, text, line, sizeof(line)) == 0) {
        ps->shown++;
        if (tag == SKIFF_REPLY_DOWNLOAD)
            ps->last_dl_ms = now;
        skiff_log_step("skiff: %s", line);
    }
}

/* Whether Slurm's controller says the job no longer runs (scancel, its
 * time limit, a failed node): READY_JOB_STATE gone from
 * slurm_job_node_ready's answer, or the job unknown. Slurm does not signal
 * a step before it is RUNNING, so a step cancelled in user_init would
 * otherwise hold the node for as long as user_init waits. The function is
 * libslurmfull's, which slurmstepd has loaded: found at run time (the
 * plugin links no Slurm library), and without it nothing is asked. An
 * unanswered question (READY_JOB_ERROR) counts as "still running"; each is
 * bounded by Slurm's MessageTimeout, the admin's. */
static bool job_ended(uint32_t jobid)
{
#if defined(SLURM_VERSION_NUMBER) && SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
    slurm_step_id_t id = {.job_id = jobid, .step_het_comp = NO_VAL, .step_id = NO_VAL};
#else
    uint32_t id = jobid;
#endif
    static int (*ready)(__typeof__(id));
    static bool looked;
    if (!looked) {
        looked = true;
        /* A Slurm with auth_setuid_lock (24.11 has it, 22.05 not) holds
         * the auth plugins' lock for writing while slurmstepd runs
         * user_init with the user's euid: a question to slurmctld from
         * here then kills slurmstepd ("auth_g_create:
         * pthread_rwlock_rdlock(): Resource deadlock avoided", seen with
         * 24.11.5). Where that lock exists, nothing is asked. */
        if (!dlsym(RTLD_DEFAULT, "auth_setuid_lock"))
            *(void **)&ready = dlsym(RTLD_DEFAULT, "slurm_job_node_ready");
    }
    if (!ready)
        return false;
    int rc = ready(id);
    return rc == READY_JOB_FATAL || (rc >= 0 && !(rc & READY_JOB_STATE));
}

/* How often user_init asks whether the job still runs while it waits: not
 * in its first seconds (most steps have their answer by then), then every
 * few, so that a cancelled job leaves within seconds while a thousand
 * nodes waiting for one import ask slurmctld a few hundred cheap
 * questions a second at most. */
#define JOB_ASK_AFTER_MS 2000
#define JOB_ASK_EVERY_MS 3000

struct job_watch {
    uint32_t jobid;
    double next_ms; /* when to ask next */
};

static bool stop_if_ended(void *ctx, skiff_err *err)
{
    struct job_watch *jw = ctx;
    double now = skiff_now_ms();
    if (now < jw->next_ms)
        return false;
    jw->next_ms = now + JOB_ASK_EVERY_MS;
    if (!job_ended(jw->jobid))
        return false;
    skiff_error(err, ECANCELED,
                "job %u was cancelled (or ended) while its container started: not waiting for the "
                "user-side helper any longer",
                (unsigned)jw->jobid);
    return true;
}

/* The records' two listeners: progress (which may set the deadline) and
 * the job's end (which stops the wait). */
struct reply_watch {
    struct progress_seen seen;
    struct job_watch job;
};

static void watch_seen(char tag, const char *text, void *ctx)
{
    show_progress(tag, text, &((struct reply_watch *)ctx)->seen);
}

static bool watch_stop(void *ctx, skiff_err *err)
{
    return stop_if_ended(&((struct reply_watch *)ctx)->job, err);
}

int skiff_step_user_init(struct step *s, spank_t sp)
{
    if (!s->active || s->failed)
        return 0;
    skiff_err err;
    skiff_err_clear(&err);
    char dbg[16];
    s->debug = spank_getenv(sp, "SKIFF_DEBUG", dbg, sizeof(dbg)) == ESPANK_SUCCESS && dbg[0] && strcmp(dbg, "0");
    double t0 = skiff_now_ms();
    s->t_gap_ms = t0 - s->t_post_opt_end;
    if (s->start_in_user_init) {
        if (spawn_starter(s, sp, &err) < 0)
            return skiff_step_fail(s, "config", &err);
    }
    if (s->starter.pid <= 0) {
        skiff_error(&err, 0, "the container helper was not started");
        return skiff_step_fail(s, "mount", &err);
    }
    /* one deadline for all of user_init, a second helper included; an
     * import sets it (show_progress), never past the bound fixed here */
    double deadline = t0 + s->args->timeout_s * 1000.0;
    const double bound = deadline + s->args->import_timeout_s * 1000.0;
    struct reply_watch rw = {.seen = {.s = s, .deadline_ms = &deadline, .bound_ms = bound},
                             .job = {.jobid = s->jobid, .next_ms = t0 + JOB_ASK_AFTER_MS}};
    const struct skiff_rec_watch w = {.seen = watch_seen, .stop = watch_stop, .tick_ms = 500, .ctx = &rw};
    int mnt;
    for (;;) {
        struct skiff_reply r;
        int rc = skiff_helper_reply(&s->starter, &deadline, s->args->timeout_s, &w, &r, &err);
        s->t_wait_ms = skiff_now_ms() - t0;
        if (rc < 0 && err.code == ETIMEDOUT && rw.seen.importing && !rw.seen.imported)
            skiff_error(&err, ETIMEDOUT,
                        "the image's import did not end within import_timeout=%d s (plugstack.conf; the rest of "
                        "the start has timeout=%d s)",
                        s->args->import_timeout_s, s->args->timeout_s);
        if (rc < 0) {
            skiff_reply_free(&r);
            /* no answer in time, or none root takes: it is killed now, not
             * waited for again at exit */
            skiff_helper_finish(&s->starter, 0);
            return skiff_step_fail(s, "mount", &err);
        }
        if (r.status < 0) {
            char phase[SKIFF_PHASE_MAX];
            snprintf(phase, sizeof(phase), "%s", r.phase);
            err = r.err;
            skiff_reply_free(&r);
            return skiff_step_fail(s, phase, &err);
        }
        take_reply(s, &r);
        s->attached = r.attached;
        snprintf(s->notice, sizeof(s->notice), "%s", r.notice);
        skiff_reply_free(&r);
        /* Kept so exit can kill what is left in the container after the
         * helper stopped it. The fd keeps the namespace alive: otherwise
         * its inode number could be reused by another step's container. An
         * attached step's container is another step's to stop: not kept. */
        bool gone = false;
        mnt = verify_holder(s, s->c.holder, s->attached, &gone, &err);
        if (mnt >= 0 || !s->attached || !gone || s->no_attach || s->opts->req.name_mode == SKIFF_NAME_EXEC)
            break;
        /* --container-name=NAME (auto): the running container ended
         * between the helper's look and ours (two steps starting one name
         * at once): this step starts its own, as :no_exec would have. The
         * first helper has nothing left to do: killed, not waited for. */
        skiff_helper_finish(&s->starter, 0);
        skiff_strv_free(s->c.env);
        skiff_strv_free(s->c.entrypoint);
        skiff_strv_free(s->c.cmd);
        s->c.env = s->c.entrypoint = s->c.cmd = NULL;
        s->attached = false;
        s->no_attach = true;
        skiff_err_clear(&err);
        if (spawn_starter(s, sp, &err) < 0)
            return skiff_step_fail(s, "config", &err);
    }
    if (mnt < 0) {
        /* it named a process root refuses: nothing it does is used */
        skiff_helper_finish(&s->starter, 0);
        return skiff_step_fail(s, s->attached ? "join" : "mount", &err);
    }
    if (s->attached)
        close(mnt);
    else
        s->mntns_fd = mnt;
    s->started = true;
    return 0;
}
