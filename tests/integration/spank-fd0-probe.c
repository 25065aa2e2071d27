/* spank_fd0_probe.so: a SPANK plugin for tests/integration/plugin-attacks.sh
 * (issue 23, finding 3). Listed after spank_skiff.so in plugstack.conf, so
 * each of its callbacks runs right after skiff's; it appends one line per
 * remote callback to the file named by its argument out=PATH:
 *   JOBID.STEPID CALLBACK fd0=TARGET
 * where TARGET is where slurmstepd's fd 0 points (readlink of
 * /proc/self/fd/0, or "closed"). Slurm keeps fd 0 on /dev/null; a plugin
 * that closes it makes the next file or socket slurmstepd opens fd 0. */
#include <fcntl.h>
#include <limits.h>
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

SPANK_PLUGIN(fd0_probe, 1)

int slurm_spank_init(spank_t sp, int ac, char **av);
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av);
int slurm_spank_user_init(spank_t sp, int ac, char **av);
int slurm_spank_task_exit(spank_t sp, int ac, char **av);
int slurm_spank_exit(spank_t sp, int ac, char **av);

static void probe(spank_t sp, int ac, char **av, const char *cb)
{
    if (spank_context() != S_CTX_REMOTE)
        return;
    const char *out = NULL;
    for (int i = 0; i < ac; i++)
        if (!strncmp(av[i], "out=", 4))
            out = av[i] + 4;
    if (!out)
        return;
    char target[PATH_MAX] = "closed";
    ssize_t n = readlink("/proc/self/fd/0", target, sizeof(target) - 1);
    if (n >= 0)
        target[n] = '\0';
    uint32_t job = 0, step = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    int fd = open(out, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    dprintf(fd, "%u.%u %s fd0=%s\n", (unsigned)job, (unsigned)step, cb, target);
    close(fd);
}

/* one callback per phase, each recording under its own name */
#define PROBE(cb)                                                                                                      \
    int slurm_spank_##cb(spank_t sp, int ac, char **av)                                                                \
    {                                                                                                                  \
        probe(sp, ac, av, #cb);                                                                                        \
        return 0;                                                                                                      \
    }

PROBE(init)
PROBE(init_post_opt)
PROBE(user_init)
PROBE(task_exit)
PROBE(exit)
