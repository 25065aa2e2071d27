/* The end of a step (step.h): task_exit and exit, in slurmstepd, as root.
 * The container stops when its control pipe closes (after the last task);
 * what the step leaves behind (a state directory, a task's daemon, the
 * temporary container of --container-save, job-scoped named containers)
 * is removed as the user, each part bounded in time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "plugin.h"
#include "step.h"

static void stop_container(struct step *s, const struct skiff_user *u);
static void save_container(struct step *s);

/* task_exit (slurmstepd, root, once per task): when the node's last task
 * is gone the control pipe closes, so that the helper stops the container
 * (the kernel tears the namespace and the FUSE mount down) while Slurm
 * finishes the step; exit() waits for it. */
int skiff_step_task_exit(struct step *s, spank_t sp)
{
    if (!s->active || !s->started || s->starter.ctl < 0)
        return 0;
    uint32_t ntasks = 0;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS)
        return 0;
    if (++s->tasks_exited >= ntasks) {
        close(s->starter.ctl);
        s->starter.ctl = -1;
        /* Steps that joined this container run on: the helper stops it
         * when they are done, and this step waits for that here, before
         * Slurm kills the step's processes (the helper among them), up to
         * the deadline. Without joined steps the helper says nothing and
         * closes the pipe at once. */
        if (!s->attached && skiff_helper_joined(&s->starter, 2000) &&
            skiff_helper_finish(&s->starter, s->args->timeout_s) == -1)
            skiff_log_error("skiff: %s: the steps that joined this container did not end within %d s; it was stopped",
                            s->node, s->args->timeout_s);
        /* A script's next line often starts the saved image: srun must not
         * return before it exists. */
        if (s->opts->req.save) {
            struct skiff_user u = skiff_step_user(s);
            stop_container(s, &u);
            save_container(s);
        }
    }
    return 0;
}

/* ---- exit ----------------------------------------------------------------- */

/* Runs an exit-time verb of the helper as the job's user. */
static int helper_verb(const struct step *s, const char *verb, const char *cwd, const char *save, skiff_err *err)
{
    struct skiff_recbuf req = {0};
    int rc = -1;
    char program[SKIFF_PATH_MAX];
    struct skiff_start_request r;
    skiff_start_request_init(&r);
    r.cwd = cwd;
    r.node = s->node;
    r.name = s->named[0] ? s->named : NULL;
    r.importer = s->args->importer[0] ? s->args->importer : NULL;
    r.save = save;
    if (skiff_helper_path(s->args->helper, true, program, sizeof(program), err) < 0 ||
        skiff_start_request_encode(&s->cfg, &r, &req, err) < 0)
        goto out;
    struct skiff_user u = skiff_step_user(s);
    rc = skiff_helper_call(program, verb, &u, &req, s->args->timeout_s, err);
out:
    skiff_recbuf_free(&req);
    return rc;
}

static int remove_state_fn(void *arg)
{
    const struct step *s = arg;
    skiff_err e;
    return skiff_container_remove_state(&s->cfg, s->state_key, &e);
}

/* Whether the step's state directory is still there: looked up from the
 * root-owned base, never following a link nor crossing a mount. */
static bool state_left(const struct step *s)
{
    if (!s->state_key[0])
        return false;
    cleanup_close int bfd = open(s->args->runtime_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char rel[600];
    snprintf(rel, sizeof(rel), "%u/%s", (unsigned)s->uid, s->state_key);
    if (bfd < 0)
        return false;
    cleanup_close int fd = skiff_step_open_user_path(bfd, rel);
    /* a mount in the way: the user's child that removes it finds out (bounded) */
    return fd >= 0 || errno == EXDEV;
}

int skiff_remove_job_containers(const struct skiff_plugin_args *a, const struct skiff_user *u, const char *node,
                                uint32_t jobid, const struct skiff_config *cfg, skiff_err *err)
{
    char suffix[300], program[SKIFF_PATH_MAX];
    snprintf(suffix, sizeof(suffix), ".%s.job%u", node, (unsigned)jobid);
    struct skiff_recbuf req = {0};
    int rc = -1;
    struct skiff_start_request r;
    skiff_start_request_init(&r);
    r.node = node;
    r.sweep_suffix = suffix;
    if (skiff_helper_path(a->helper, true, program, sizeof(program), err) < 0 ||
        skiff_start_request_encode(cfg, &r, &req, err) < 0)
        goto out;
    rc = skiff_helper_call(program, "sweep", u, &req, a->timeout_s, err);
out:
    skiff_recbuf_free(&req);
    return rc;
}

/* Stops the step's container and waits for it to be gone (bounded): the
 * helper, a state directory Slurm's kill left behind, a task's daemon that
 * left the step's process tree. Each part runs once, from task_exit or exit. */
static void stop_container(struct step *s, const struct skiff_user *u)
{
    double t0 = skiff_now_ms();
    if (s->starter.pid > 0 && skiff_helper_finish(&s->starter, s->args->timeout_s) == -1)
        skiff_log_error("skiff: %s: the container helper did not stop within %d s; it was killed", s->node,
                        s->args->timeout_s);
    if (state_left(s))
        /* Slurm killed the helper with the step's processes before it could
         * stop the container: its state directory is removed as the user */
        if (skiff_fork_as_user(u, NULL, 0, remove_state_fn, s, s->args->timeout_s) < 0)
            skiff_log_error("skiff: %s: could not remove the state of %s", s->node, s->state_key);
    if (s->mntns_fd >= 0) {
        /* a task's daemon that left the step's process tree */
        skiff_kill_ns_as_user(s->mntns_fd, u, s->args->timeout_s);
        close(s->mntns_fd);
        s->mntns_fd = -1;
    }
    if (s->started) {
        skiff_container_free(&s->c);
        s->started = false;
        if (s->debug)
            skiff_log_info("skiff: %s: timing: stop %.1f ms", s->node, skiff_now_ms() - t0);
    }
}

/* --container-save, once: squashes the stopped named container. */
static void save_container(struct step *s)
{
    if (!s->opts->req.save || s->saved || s->failed || s->attached || !s->named[0])
        return;
    s->saved = true;
    skiff_err err;
    skiff_err_clear(&err);
    if (helper_verb(s, "save", s->cwd, s->opts->req.save, &err) < 0)
        skiff_log_error("skiff: save: %s", err.msg);
}

int skiff_step_exit(struct step *s, spank_t sp)
{
    (void)sp;
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_user u = skiff_step_user(s);
    if (s->sweep_only) {
        if (skiff_remove_job_containers(s->args, &u, s->node, s->jobid, &s->cfg, &err) < 0)
            skiff_log_error("skiff: cleanup: %s", err.msg);
        free(s->groups);
        s->groups = NULL;
        return 0;
    }
    if (!s->active)
        return 0;
    stop_container(s, &u);
    save_container(s);
    if (s->temp_named && helper_verb(s, "remove", NULL, NULL, &err) < 0)
        skiff_log_error("skiff: save: remove %s: %s", s->named, err.msg);
    if (s->is_batch && s->args->scope == SKIFF_SCOPE_JOB &&
        skiff_remove_job_containers(s->args, &u, s->node, s->jobid, &s->cfg, &err) < 0)
        skiff_log_error("skiff: cleanup: %s", err.msg);
    if (s->args->importer[0] && helper_verb(s, "release", NULL, NULL, &err) < 0)
        skiff_log_error("skiff: importer release: %s", err.msg);
    free(s->groups);
    s->groups = NULL;
    free(s->hook_env);
    s->hook_env = NULL;
    return 0;
}
