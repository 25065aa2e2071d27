/* Internal state of spank_skiff.so, shared by the per-context files:
 *   spank_skiff.c  the entry points: a dispatcher on spank_context()
 *   spank_opts.c   the --container-* option table and its callbacks
 *   remote.c       slurmstepd: resolve, start, join, env, stop, save
 *   epilog.c       job epilog: job-scoped named containers
 *   log.c          the sinks: every line for slurmd's log or srun's terminal
 * One process holds one copy (srun, sbatch, one slurmstepd per step). */
#ifndef SKIFF_PLUGIN_H
#define SKIFF_PLUGIN_H

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

struct skiff_plugin {
    struct skiff_plugin_args args;
    bool args_ok;
    struct skiff_opts opts;

    /* remote (slurmstepd) */
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
    char image_path[SKIFF_PATH_MAX]; /* the resolved squashfs file */
    char named[512];                 /* named container as stored: NAME.NODE[.jobID] */
    bool named_exists;
    bool temp_named; /* made only to keep the upper for --container-save */
    char save_path[SKIFF_PATH_MAX];
    char state_key[512]; /* NODE.JOB.STEP: the container's runtime state */
    char *command0;      /* the step's argv[0]: warmed while the container starts */
    struct skiff_container c;
    bool started;
    bool start_in_user_init;       /* a PMIx step: start once Slurm made its PMIx directory */
    bool attached;                 /* the tasks join a running container (--container-name) */
    char notice[SKIFF_NOTICE_MAX]; /* the helper's notice for the user, shown by task 0 */
    uint32_t tasks_exited;
    bool saved;   /* --container-save ran (task_exit or exit) */
    int mntns_fd; /* the container's mount namespace, held open */
    dev_t mntns_dev;
    ino_t mntns_ino;

    /* an error kept for task_init (user_init's own return value is lost) */
    bool failed;
    char phase[SKIFF_PHASE_MAX];
    skiff_err err;

    bool debug;                                   /* SKIFF_DEBUG in the job's environment: timings */
    double t_config_ms, t_resolve_ms, t_start_ms; /* for verbose timing lines */
    double t_post_opt_end, t_gap_ms;              /* Slurm's own work between init_post_opt and user_init */
    double t_wait_ms;                             /* what user_init still waited for the starter */
    char **hook_env;                              /* SLURM_* etc. for hooks (strings borrowed from Slurm's env) */
};

extern struct skiff_plugin skiff_g;

/* log.c: the only ways to slurmd's log and srun's terminal. Each formats
 * the line, then passes it whole through skiff_sanitize (common/sanitize.h):
 * one printable line, whatever the values a user gave. _task writes to the
 * task's stderr (srun's terminal), from task_init only. */
__attribute__((format(printf, 1, 2))) void skiff_log_error(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void skiff_log_info(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void skiff_log_verbose(const char *fmt, ...);
/* to the step's srun (and a batch job's output) on every Slurm, at any level */
__attribute__((format(printf, 1, 2))) void skiff_log_step(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void skiff_log_task(const char *fmt, ...);
/* Sends userproc.c's reports (plugin/userproc.h) to skiff_log_error. */
void skiff_log_init(void);

/* spank_opts.c */
int skiff_spank_register_options(spank_t sp);

/* remote.c */
int skiff_remote_post_opt(spank_t sp);
int skiff_remote_user_init(spank_t sp);
int skiff_remote_task_init(spank_t sp);
int skiff_remote_task_exit(spank_t sp);
int skiff_remote_exit(spank_t sp);

/* epilog.c */
int skiff_epilog(spank_t sp, int ac, char **av);

/* remote.c helpers shared with epilog.c */
struct skiff_user;
/* Removes the job-scoped named containers of jobid on node, through the
 * user-side helper running as u. */
int skiff_remove_job_containers(const struct skiff_user *u, const char *node, uint32_t jobid,
                                const struct skiff_config *cfg, skiff_err *err);
/* The user's config (skiff.conf + the plugstack arguments). */
int skiff_load_user_config(const struct skiff_plugin_args *a, uid_t uid, const char *user, const char *home,
                           struct skiff_config *cfg, skiff_err *err);

#endif
