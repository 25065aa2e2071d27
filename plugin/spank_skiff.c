/* spank_skiff.so entry points. Each slurm_spank_* function is a small
 * dispatcher on spank_context(): srun/sbatch/salloc only parse and check
 * options, slurmstepd runs the step's container (start.c, task.c, exit.c
 * over step.h's struct step), the job epilog (epilog.c) removes job-scoped
 * named containers.
 *
 * Never exit() here: these functions run inside srun and slurmstepd. */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "step.h"

SPANK_PLUGIN(skiff, 1)

/* One process holds one of each (srun, sbatch, one slurmstepd per step,
 * slurmd for the epilog): Slurm's callbacks take no context of ours. */
static struct skiff_plugin_args args;
static bool args_ok;
static struct skiff_opts opts;
static struct step step;

static const char *getenv_local(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* plugstack.conf's arguments, once per process. what: "" or "epilog: ". */
static int load_args(int ac, char **av, const char *what)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (args_ok)
        return 0;
    if (skiff_plugin_args_parse(&args, ac, av, &err) < 0) {
        /* A broken plugstack.conf must be noticed by the admin at once. */
        skiff_log_error("skiff: %s%s", what, err.msg);
        return -1;
    }
    args_ok = true;
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    skiff_log_init();
    if (!args_ok) {
        skiff_opts_init(&opts);
        skiff_step_init(&step, &args, &opts);
    }
    if (load_args(ac, av, "") < 0)
        return -1;
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
    case S_CTX_ALLOCATOR:
        return skiff_spank_register_options(sp, &opts);
    default:
        return 0;
    }
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    skiff_err err;
    skiff_err_clear(&err);
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_ALLOCATOR:
        /* Options given on the command line must make sense on their own;
         * environment fallbacks are checked after they are applied. */
        if (skiff_opts_check(&opts, &err) < 0 || skiff_opts_from_env(&opts, getenv_local, NULL, &err) < 0) {
            skiff_log_error("skiff: %s", err.msg);
            return -1;
        }
        if (skiff_opts_active(&opts) && skiff_opts_check(&opts, &err) < 0) {
            skiff_log_error("skiff: %s", err.msg);
            return -1;
        }
        return 0;
    case S_CTX_REMOTE:
        return skiff_step_init_post_opt(&step, sp);
    default:
        return 0;
    }
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_step_user_init(&step, sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_step_task_init(&step, sp) : 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_step_task_exit(&step, sp) : 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    int rv = spank_context() == S_CTX_REMOTE ? skiff_step_exit(&step, sp) : 0;
    skiff_opts_free(&opts);
    skiff_log_dropped();
    return rv;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    skiff_log_init();
    /* slurmd may call the epilog without slurm_spank_init; a broken
     * plugstack.conf must not drain the node */
    if (load_args(ac, av, "epilog: ") < 0)
        return 0;
    return skiff_epilog(sp, &args);
}
