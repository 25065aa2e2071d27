/* Hook "pmix": makes `srun --mpi=pmix` (and pmi2) programs work inside. The
 * PMIx client finds its server through a rendezvous directory on the host
 * (PMIX_SERVER_TMPDIR, PMIX_SYSTEM_TMPDIR, under slurmd's spool): each one
 * that exists is bound at the same path. The step-wide PMIx/PMI variables
 * are passed into the container; per-task ones (PMIX_RANK, PMI_RANK, PMI_FD)
 * are not, since all tasks of the step share the container. Without PMIx
 * variables there is nothing to do. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hookutil.h"

extern char **environ;

static const char *const dirs[] = {"PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR", "SLURM_PMIX_TMPDIR", NULL};
static const char *const per_task[] = {"PMIX_RANK=", "PMI_RANK=", "PMI_FD=", "PMI_SIZE=", NULL};

static int run(skiff_err *err)
{
    char done[3][4096] = {{0}};
    for (size_t i = 0; dirs[i]; i++) {
        const char *d = getenv(dirs[i]);
        struct stat st;
        if (!d || d[0] != '/' || strlen(d) >= sizeof(done[0]) || stat(d, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        int dup = 0;
        for (size_t k = 0; k < i; k++)
            dup |= !strcmp(done[k], d);
        if (dup)
            continue;
        snprintf(done[i], sizeof(done[i]), "%s", d);
        if (skiff_hook_mount(d, d, "none", "rw,bind,x-create=dir", err) < 0)
            return skiff_err_wrap(err, "%s", dirs[i]);
    }
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "PMIX_", 5) && strncmp(*e, "PMI_", 4) && strncmp(*e, "SLURM_PMIX", 10))
            continue;
        int skip = 0;
        for (size_t i = 0; per_task[i]; i++)
            skip |= !strncmp(*e, per_task[i], strlen(per_task[i]));
        const char *eq = strchr(*e, '=');
        char name[256];
        if (skip || !eq || strpbrk(eq, "\n\r") || (size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        if (skiff_hook_setenv(name, eq + 1, err) < 0)
            return -1;
    }
    return 0;
}

int main(void)
{
    skiff_err err = {0};
    if (run(&err) < 0) {
        fprintf(stderr, "skiff hook pmix: %s\n", err.msg);
        return 1;
    }
    return 0;
}
