/* Hook "pmix": makes `srun --mpi=pmix` programs work inside the container.
 *
 * A PMIx client reaches the node's PMIx server (in slurmstepd) through the
 * URI in its environment (tcp on the node's loopback, which the container
 * shares), and reads the job's data from shared-memory files in the
 * server's directory, PMIX_SERVER_TMPDIR (SlurmdSpoolDir/pmix.JOB.STEP/).
 * That directory is bound at the same path; the SPANK plugin passes its
 * name (Slurm 22.05 tells only slurmstepd itself before the tasks exist)
 * and starts PMIx steps' containers once Slurm made it.
 *
 * Nothing else is bound: PMIX_SYSTEM_TMPDIR is /tmp by default, and the
 * host's /tmp must not replace the container's; the client's session
 * directory (Slurm's TmpFS/spmix_appdir_UID_JOB.STEP) is created inside
 * by the client, where every rank of the node (one container) shares it.
 * No variable is written either: each task already has Slurm's PMIx and
 * PMI-2 variables (PMIX_RANK, PMI_FD, ...), and a line in the container's
 * environment file would override all of them with one value. PMI-2
 * (`--mpi=pmi2`) needs nothing: the task inherits Slurm's socket (PMI_FD). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hookutil.h"

static int run(skiff_err *err)
{
    const char *d = getenv("PMIX_SERVER_TMPDIR");
    if (!d || !*d)
        return 0; /* not a PMIx step */
    char dir[4096];
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/')
        n--; /* Slurm writes ".../pmix.J.S/" */
    if (d[0] != '/' || n >= sizeof(dir))
        return skiff_error(err, 0, "PMIX_SERVER_TMPDIR '%s' is not an absolute path", d);
    memcpy(dir, d, n);
    dir[n] = '\0';
    struct stat st;
    if (stat(dir, &st) < 0)
        return skiff_error(err, errno, "PMIx server directory %s (PMIX_SERVER_TMPDIR)", dir);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, ENOTDIR, "PMIx server directory %s (PMIX_SERVER_TMPDIR)", dir);
    return skiff_hook_mount(dir, dir, "none", "rw,bind,noexec,x-create=dir", err);
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
