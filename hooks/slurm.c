/* Hook "slurm": passes the step's SLURM_* variables into the container's
 * environment (SKIFF_ENV_FILE). The container is shared by all tasks of
 * the step on a node, so per-task variables (SLURM_PROCID, SLURM_LOCALID,
 * SLURM_TASK_PID, CPU binding, SLURM_STEP_GPUS) are left out: each task has its own already
 * and the per-task training variables come from ddp_env. */
#include <stdio.h>
#include <string.h>

#include "hookutil.h"

extern char **environ;

/* SLURM_STEP_GPUS too: with --gpus-per-task (or --gpu-bind) Slurm gives
 * each task its own GPUs there, as in CUDA_VISIBLE_DEVICES */
static const char *const per_task[] = {"SLURM_PROCID=",    "SLURM_LOCALID=",
                                       "SLURM_TASK_PID=",  "SLURM_CPU_BIND",
                                       "SLURM_GTIDS=",     "SLURM_STEP_LAUNCHER_PORT=",
                                       "SLURM_STEP_GPUS=", NULL};

int main(void)
{
    skiff_err err = {0};
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "SLURM_", 6) && strncmp(*e, "SLURMD_NODENAME=", 16))
            continue;
        int skip = 0;
        for (size_t i = 0; per_task[i]; i++)
            skip |= !strncmp(*e, per_task[i], strlen(per_task[i]));
        const char *eq = strchr(*e, '=');
        if (skip || !eq || strpbrk(eq, "\n\r"))
            continue;
        char name[256];
        if ((size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        if (skiff_hook_setenv(name, eq + 1, &err) < 0) {
            fprintf(stderr, "skiff hook slurm: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}
