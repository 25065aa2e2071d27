/* spank_skiff.so entry points. Each slurm_spank_* function is a small
 * dispatcher on spank_context(): srun/sbatch/salloc only parse and check
 * options, slurmstepd (remote.c) runs the container, the job epilog
 * (epilog.c) removes job-scoped named containers.
 *
 * Never exit() here: these functions run inside srun and slurmstepd. */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

SPANK_PLUGIN(skiff, 1)

struct skiff_plugin skiff_g;

static const char *getenv_local(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    skiff_err err;
    skiff_err_clear(&err);
    skiff_log_init();
    if (!skiff_g.args_ok) {
        skiff_opts_init(&skiff_g.opts);
        if (skiff_plugin_args_parse(&skiff_g.args, ac, av, &err) < 0) {
            /* A broken plugstack.conf must be noticed by the admin at once. */
            skiff_log_error("skiff: %s", err.msg);
            return -1;
        }
        skiff_g.args_ok = true;
    }
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
    case S_CTX_ALLOCATOR:
        return skiff_spank_register_options(sp);
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
        if (skiff_opts_check(&skiff_g.opts, &err) < 0 ||
            skiff_opts_from_env(&skiff_g.opts, getenv_local, NULL, &err) < 0) {
            skiff_log_error("skiff: %s", err.msg);
            return -1;
        }
        if (skiff_opts_active(&skiff_g.opts) && skiff_opts_check(&skiff_g.opts, &err) < 0) {
            skiff_log_error("skiff: %s", err.msg);
            return -1;
        }
        return 0;
    case S_CTX_REMOTE:
        return skiff_remote_post_opt(sp);
    default:
        return 0;
    }
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_remote_user_init(sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_remote_task_init(sp) : 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? skiff_remote_task_exit(sp) : 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    int rv = spank_context() == S_CTX_REMOTE ? skiff_remote_exit(sp) : 0;
    skiff_opts_free(&skiff_g.opts);
    return rv;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    return skiff_epilog(sp, ac, av);
}
