/* One job step on this node, as slurmstepd runs it: one container per step
 * and node. The phase files share this struct, passed to each explicitly:
 *
 *   start.c  init_post_opt (root): options, identity, the admin's config,
 *            the per-user runtime directory under a root-owned base, the
 *            start request; then the starter: skiff-helper start (as the
 *            user) resolves the image and starts the container while Slurm
 *            goes on setting up the step (a PMIx step's starter waits for
 *            user_init: Slurm's PMIx directory exists only then).
 *            user_init (euid=user): read its answer (bounded in size and
 *            time) and check the holder it names: the helper's child,
 *            running as the job's uid, in a mount namespace the user's own
 *            user namespace owns.
 *   task.c   task_init (the task, as the user, once per task): join the
 *            holder's namespaces, the environment (env.h: the job's, the
 *            container's, --container-env), then the per-task training env
 *            (ddp_env) and CUDA_VISIBLE_DEVICES renumbered to the container's
 *            GPUs; report any earlier error here, because user_init's
 *            failures never reach srun.
 *   exit.c   task_exit (root): after the last task, close the control pipe
 *            and the helper stops the container; with --container-save, also
 *            what exit does up to the save, so that srun returns after the
 *            image is written (Slurm sends the tasks' exit to srun after
 *            this callback). exit (root): wait for the helper (bounded), kill
 *            what is left in the container's namespace as the user, then
 *            --container-save (unless task_exit did it) and job-scoped
 *            cleanup through the helper.
 *   step.c   what they share: who and where, the first error, the user's
 *            configuration and directories, the job's environment.
 *
 * Root does as little as it can, and nothing with the user's files (the
 * rules: doc/SECURITY.md): everything that touches the user's images,
 * containers and directories runs in skiff-helper (helper/), exec'd as
 * the job's user through userproc.c. Errors are "skiff: PHASE: CAUSE"
 * with PHASE one of proto.h's skiff_reply_phases. No exit() here: this is
 * slurmstepd. */
#ifndef SKIFF_PLUGIN_STEP_H
#define SKIFF_PLUGIN_STEP_H

#include <slurm/spank.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "args.h"
#include "config.h"
#include "container.h"
#include "error.h"
#include "options.h"
#include "proto.h"
#include "userproc.h"

struct step {
    const struct skiff_plugin_args *args; /* plugstack.conf's */
    struct skiff_opts *opts;              /* the user's; opts->req is the start request */

    /* what the step is (start.c) */
    bool active;     /* this step runs in a container */
    bool is_batch;   /* the batch step (sbatch script) */
    bool sweep_only; /* batch step without a container: job-scope cleanup only */
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    int ngroups;
    uint32_t jobid, stepid;
    char node[256];
    char user[256];
    char home[SKIFF_PATH_MAX];
    char cwd[SKIFF_PATH_MAX]; /* relative image/mount/save paths start here */
    struct skiff_config cfg;
    char named[512];        /* named container as stored: NAME.NODE[.jobID] */
    bool temp_named;        /* made only to keep the upper for --container-save */
    char state_key[512];    /* NODE.JOB.STEP: the container's runtime state */
    char *command0;         /* the step's argv[0]: warmed while the container starts */
    const char *command[2]; /* {command0, NULL}: the request's command */
    char **hook_env;        /* SLURM_* etc. for hooks (strings borrowed from Slurm's env) */

    /* the starter: the helper that starts the container and holds it */
    struct skiff_helper_proc starter;
    bool start_in_user_init; /* a PMIx step: start once Slurm made its PMIx directory */
    bool no_attach;          /* the running container to join ended first: start one */
    struct skiff_container c;
    bool started;
    bool attached;                 /* the tasks join a running container (--container-name) */
    char notice[SKIFF_NOTICE_MAX]; /* the helper's notice for the user, shown by task 0 */
    int mntns_fd;                  /* the container's mount namespace, held open */

    /* exit.c */
    uint32_t tasks_exited;
    bool saved; /* --container-save ran (task_exit or exit) */

    /* an error kept for task_init (user_init's own return value is lost) */
    bool failed;
    char phase[SKIFF_PHASE_MAX];
    skiff_err err;

    bool debug;                                   /* SKIFF_DEBUG in the job's environment: timings */
    double t_config_ms, t_resolve_ms, t_start_ms; /* for verbose timing lines */
    double t_post_opt_end, t_gap_ms;              /* Slurm's own work between init_post_opt and user_init */
    double t_wait_ms;                             /* what user_init still waited for the starter */
};

/* Before anything else: no container, no helper, nothing open. */
void skiff_step_init(struct step *s, const struct skiff_plugin_args *args, struct skiff_opts *opts);

/* start.c */
int skiff_step_init_post_opt(struct step *s, spank_t sp);
int skiff_step_user_init(struct step *s, spank_t sp);
/* task.c */
int skiff_step_task_init(struct step *s, spank_t sp);
/* exit.c */
int skiff_step_task_exit(struct step *s, spank_t sp);
int skiff_step_exit(struct step *s, spank_t sp);

/* ---- step.c: what the phases share ---- */

/* Stores the first error for task_init and logs it for the admin; 0 (the
 * phase goes on: it fails in task_init, where srun sees it). */
int skiff_step_fail(struct step *s, const char *phase, const skiff_err *err);

/* Who and where: the job's user, groups, id and this node's name. */
int skiff_step_identity(struct step *s, spank_t sp, skiff_err *err);

/* The job's user, for userproc.c. */
struct skiff_user skiff_step_user(const struct step *s);

/* BASE/UID for the job's user (BASE: plugstack.conf's arg=, runtime_path
 * or block_cache_path), made and checked by root without following a
 * link or crossing a mount. */
int skiff_step_user_dir(const struct step *s, const char *base, const char *arg, skiff_err *err);

/* REL under the root-owned directory bfd, as an O_PATH fd, never
 * following a link nor crossing a mount (EXDEV). */
int skiff_step_open_user_path(int bfd, const char *rel);

/* A getter over the job's environment (options.h, ddp_env.h): every value
 * it returns stays valid until skiff_envget_free. */
struct skiff_envget;
struct skiff_envget *skiff_envget_new(spank_t sp);
const char *skiff_envget(void *ctx, const char *name);
void skiff_envget_free(struct skiff_envget *e);

/* The user's config (skiff.conf + the plugstack arguments). */
int skiff_load_user_config(const struct skiff_plugin_args *a, uid_t uid, const char *user, const char *home,
                           struct skiff_config *cfg, skiff_err *err);

/* exit.c, for the epilog too: removes the job-scoped named containers of
 * jobid on node, through the user-side helper running as u. */
int skiff_remove_job_containers(const struct skiff_plugin_args *a, const struct skiff_user *u, const char *node,
                                uint32_t jobid, const struct skiff_config *cfg, skiff_err *err);

#endif
