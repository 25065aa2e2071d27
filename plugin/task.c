/* The tasks of a step (step.h): task_init, once per task, in the task
 * (forked by slurmstepd, running as the user, just before it execs the
 * step's command). It joins the container's namespaces and sets the task's
 * environment; it is where an error of init_post_opt or user_init reaches
 * srun. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "ddp_env.h"
#include "env.h"
#include "hookutil.h"
#include "plugin.h"
#include "step.h"
#include "strv.h"

/* Options that only shape a container as it starts: a step that joins a
 * running one says it ignores them. */
static void warn_ignored(const struct step *s)
{
    char list[512];
    size_t k = skiff_opts_start_only(s->opts, list, sizeof(list));
    if (k)
        skiff_log_task("skiff: %s: joining the running container '%s': ignoring %s (%s only when a container starts)",
                       s->node, s->opts->req.name_given, list, k > 1 ? "they apply" : "it applies");
}

/* The task's environment (env.h: the job's, the container's, then
 * --container-env), set where it differs from the job's. */
static int apply_env(const struct step *s, spank_t sp, skiff_err *err)
{
    char **job = NULL, **env = NULL;
    if (spank_get_item(sp, S_JOB_ENV, &job) != ESPANK_SUCCESS)
        return skiff_error(err, 0, "cannot read the job's environment from Slurm");
    struct skiff_start_request r;
    skiff_start_request_init(&r);
    r.env = s->opts->req.env;
    if (skiff_env_compose((const char *const *)job, (const char *const *)s->c.env, &r, &env, err) < 0)
        return -1;
    /* what to set, chosen before setting changes the job's list */
    size_t n = 0;
    for (size_t i = 0; env[i]; i++)
        if (!skiff_strv_contains(job, env[i]))
            env[n++] = env[i];
        else
            free(env[i]);
    env[n] = NULL;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *eq = strchr(env[i], '=');
        *eq = '\0';
        if (spank_setenv(sp, env[i], eq + 1, 1) != ESPANK_SUCCESS)
            rc = skiff_error(err, 0, "cannot set %s", env[i]);
    }
    skiff_strv_free(env);
    if (rc == 0 && s->c.workdir[0])
        spank_setenv(sp, "PWD", s->c.workdir, 1);
    return rc;
}

/* PMIx in the container as pyxis sets it up (enroot's pmix hook): an
 * image's own PMIx (Open MPI's) reads its MCA parameters, not Slurm's
 * module variables, so each PMIX_MCA_x follows Slurm's choice unless the
 * user or the image set it. Per task, so a step that joins a running
 * container or starts from a named one gets them too. */
static int apply_pmix_env(spank_t sp, skiff_err *err)
{
    static const char *const pairs[][2] = {{"PMIX_SECURITY_MODE", "PMIX_MCA_psec"},
                                           {"PMIX_GDS_MODULE", "PMIX_MCA_gds"},
                                           {"PMIX_PTL_MODULE", "PMIX_MCA_ptl"}};
    char v[1024], mine[16];
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        spank_err_t have = spank_getenv(sp, pairs[i][1], mine, sizeof(mine));
        if (have == ESPANK_SUCCESS || have == ESPANK_NOSPACE ||
            spank_getenv(sp, pairs[i][0], v, sizeof(v)) != ESPANK_SUCCESS || !v[0])
            continue;
        if (spank_setenv(sp, pairs[i][1], v, 0) != ESPANK_SUCCESS)
            return skiff_error(err, 0, "cannot set %s", pairs[i][1]);
    }
    return 0;
}

static int apply_ddp_env(const struct step *s, spank_t sp, skiff_err *err)
{
    if (!s->args->ddp_env)
        return 0;
    struct skiff_envget *eg = skiff_envget_new(sp);
    struct skiff_ddp_env *d = calloc(1, sizeof(*d));
    int rv = -1;
    if (!eg || !d) {
        skiff_error(err, ENOMEM, "out of memory");
        goto out;
    }
    if (skiff_ddp_env_compute(skiff_envget, eg, NULL, d, err) < 0)
        goto out;
    for (size_t i = 0; i < d->n; i++)
        /* overwrite: the list already leaves out what the user set, and what it
         * holds beyond that (values inherited from another task) must change */
        spank_setenv(sp, d->vars[i].name, d->vars[i].value, 1);
    rv = 0;
out:
    skiff_envget_free(eg);
    free(d);
    return rv;
}

/* The task's CUDA_VISIBLE_DEVICES (host GPU numbers from Slurm; one GPU
 * per task with --gpus-per-task) renumbered to index the container's GPUs,
 * which the gpu hook named in SKIFF_GPU_MINORS (hookutil.h). */
static int apply_gpu_env(spank_t sp, skiff_err *err)
{
    struct skiff_envget *eg = skiff_envget_new(sp);
    char cvd[512];
    if (!eg)
        return skiff_error(err, ENOMEM, "out of memory");
    int rn = skiff_gpu_task_cvd(skiff_envget, eg, cvd, sizeof(cvd), err);
    skiff_envget_free(eg);
    if (rn > 0 && spank_setenv(sp, "CUDA_VISIBLE_DEVICES", cvd, 1) != ESPANK_SUCCESS)
        return skiff_error(err, 0, "cannot set CUDA_VISIBLE_DEVICES");
    return rn < 0 ? -1 : 0;
}

/* --container-entrypoint: Slurm cannot be told to run another argv, so the
 * task execs Entrypoint + the step's command itself, with the job's env. */
static int exec_entrypoint(const struct step *s, spank_t sp, skiff_err *err)
{
    if (!s->c.entrypoint || !s->c.entrypoint[0])
        return 0;
    int argc = 0;
    char **argv = NULL, **env = NULL;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS)
        return skiff_error(err, 0, "cannot read the step's command from Slurm");
    char **full = NULL;
    if (skiff_container_argv(&s->c, true, argv, &full, err) < 0)
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

int skiff_step_task_init(struct step *s, spank_t sp)
{
    if (s->failed) {
        skiff_log_error("skiff: %s: %s", s->phase, s->err.msg);
        return -1;
    }
    if (!s->active || !s->started)
        return 0;
    skiff_err err;
    skiff_err_clear(&err);
    double t0 = skiff_now_ms();
    if (skiff_container_join(s->c.holder, s->c.workdir[0] ? s->c.workdir : "/", SKIFF_JOIN_KEEP_CAPS, &err) < 0) {
        skiff_log_error("skiff: join: %s", err.msg);
        return -1;
    }
    if (apply_env(s, sp, &err) < 0 || apply_pmix_env(sp, &err) < 0) {
        skiff_log_error("skiff: env: %s", err.msg);
        return -1;
    }
    if (apply_ddp_env(s, sp, &err) < 0) {
        skiff_log_error("skiff: env: training environment: %s", err.msg);
        return -1;
    }
    if (apply_gpu_env(sp, &err) < 0) {
        skiff_log_error("skiff: env: %s", err.msg);
        return -1;
    }
    double t1 = skiff_now_ms();
    int local = -1;
    spank_get_item(sp, S_TASK_ID, &local);
    if (local == 0 && s->attached)
        warn_ignored(s);
    if (local == 0 && s->notice[0])
        skiff_log_task("skiff: %s: %s", s->node, s->notice);
    if (local == 0) {
        char dbg[16];
        if (spank_getenv(sp, "SKIFF_DEBUG", dbg, sizeof(dbg)) == ESPANK_SUCCESS && dbg[0] && strcmp(dbg, "0")) {
            skiff_log_task("skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms (during Slurm's own "
                           "%.1f ms of step setup; user_init waited %.1f ms), join+env %.1f ms",
                           s->node, s->t_config_ms, s->t_resolve_ms, s->t_start_ms, s->t_gap_ms, s->t_wait_ms, t1 - t0);
        }
        skiff_log_verbose("skiff: %s: timing: config %.1f ms, import %.1f ms, start %.1f ms, join+env %.1f ms", s->node,
                          s->t_config_ms, s->t_resolve_ms, s->t_start_ms, t1 - t0);
    }
    bool ep = !s->attached && s->opts->req.use_entrypoint;
    if (ep && exec_entrypoint(s, sp, &err) < 0) {
        skiff_log_error("skiff: entrypoint: %s", err.msg);
        return -1;
    }
    return 0;
}
