/* What the files of spank_skiff.so share:
 *   spank_skiff.c  the entry points: a dispatcher on spank_context(), and
 *                  the process's one plugstack configuration, options and step
 *   spank_opts.c   the --container-* options registered with Slurm (options.c's table)
 *   start.c, task.c, exit.c  slurmstepd's phases of a step (step.h)
 *   epilog.c       job epilog: job-scoped named containers
 *   log.c          the sinks: every line for slurmd's log or srun's terminal
 * Nothing here is global: each phase gets the step it works on. */
#ifndef SKIFF_PLUGIN_H
#define SKIFF_PLUGIN_H

#include <slurm/spank.h>

#include "args.h"
#include "options.h"

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
/* The lines above are bounded per process (a step): once the budget is
 * spent they are dropped, and this says, in one line, how many (at the
 * step's end; nothing when none was). */
void skiff_log_dropped(void);

/* spank_opts.c: registers the --container-* flags; Slurm's callbacks fill
 * opts. */
int skiff_spank_register_options(spank_t sp, struct skiff_opts *opts);

/* epilog.c: container_scope=job's cleanup at the job's end. */
int skiff_epilog(spank_t sp, const struct skiff_plugin_args *args);

#endif
