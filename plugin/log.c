/* The plugin's sinks: every line it gives slurmd's log (slurm_error,
 * slurm_info, slurm_verbose: in srun also its terminal), the step's srun
 * (slurm_spank_log) or a task's stderr (srun's terminal) is formatted here and passed through the one sanitiser
 * (common/sanitize.h) as a whole, so that no value a user wrote (an option,
 * an environment variable, anything the user-side helper answered) can
 * start a line of its own, move the cursor or reorder the text. Nothing
 * else in plugin/ calls Slurm's log functions or writes to fd 2
 * (tests/integration/plugin-attacks.sh checks). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "plugin.h"
#include "sanitize.h"
#include "userproc.h"

enum sink { SINK_ERROR, SINK_INFO, SINK_VERBOSE, SINK_STEP, SINK_TASK_STDERR };

/* What one process (slurmstepd runs one per step; srun, sbatch and the
 * epilog one each) may put in slurmd's log at info level and above
 * (slurm_spank_log logs at error level too): much of it is what a user
 * chose (a value, the helper's records, which the user can forge), so a
 * step can never fill the log. Errors have a reserve of their own beyond
 * the budget, so that a step flooded with progress lines still says why
 * it failed; what is dropped is counted, and skiff_log_dropped says how
 * much once. */
#define LOG_LINES 128
#define LOG_BYTES (64 * 1024)
#define LOG_ERROR_LINES 16
#define LOG_ERROR_BYTES (8 * 1024)

static struct {
    unsigned lines, dropped;
    size_t bytes, dropped_bytes;
} budget;

static bool within_budget(enum sink to, size_t len)
{
    if (to == SINK_VERBOSE || to == SINK_TASK_STDERR)
        return true; /* below info (not logged by default), or the task's own stderr */
    bool err = to == SINK_ERROR;
    if (budget.lines < LOG_LINES + (err ? LOG_ERROR_LINES : 0) &&
        budget.bytes + len <= LOG_BYTES + (err ? LOG_ERROR_BYTES : 0)) {
        budget.lines++;
        budget.bytes += len;
        return true;
    }
    budget.dropped++;
    budget.dropped_bytes += len;
    return false;
}

__attribute__((format(printf, 2, 0))) static void sink(enum sink to, const char *fmt, va_list ap)
{
    char raw[2 * SKIFF_SAFE_MAX], line[SKIFF_SAFE_MAX + 1];
    int w = vsnprintf(raw, sizeof(raw), fmt, ap);
    if (w < 0)
        return;
    size_t len = skiff_sanitize_mem(line, sizeof(line), raw, (size_t)w < sizeof(raw) ? (size_t)w : sizeof(raw) - 1);
    if (!within_budget(to, len))
        return;
    switch (to) {
    case SINK_ERROR:
        slurm_error("%s", line);
        break;
    case SINK_INFO:
        slurm_info("%s", line);
        break;
    case SINK_VERBOSE:
        slurm_verbose("%s", line);
        break;
    case SINK_STEP:
        /* slurmstepd's info lines reach srun only with SLURMD_DEBUG, which
         * Slurm 23.02 and later refuse to users; this one always does */
        slurm_spank_log("%s", line);
        break;
    case SINK_TASK_STDERR:
        dprintf(STDERR_FILENO, "%s\n", line);
        break;
    }
}

#define SINK_FN(name, to)                                                                                              \
    void name(const char *fmt, ...)                                                                                    \
    {                                                                                                                  \
        va_list ap;                                                                                                    \
        va_start(ap, fmt);                                                                                             \
        sink(to, fmt, ap);                                                                                             \
        va_end(ap);                                                                                                    \
    }

SINK_FN(skiff_log_error, SINK_ERROR)
SINK_FN(skiff_log_info, SINK_INFO)
SINK_FN(skiff_log_verbose, SINK_VERBOSE)
SINK_FN(skiff_log_step, SINK_STEP)
SINK_FN(skiff_log_task, SINK_TASK_STDERR)

void skiff_log_dropped(void)
{
    if (!budget.dropped)
        return;
    /* past the budget by design: the one line that says what it cost */
    slurm_error("skiff: %u more line(s) of this step (%zu bytes) were not logged: a step logs at most %d lines "
                "(%d KiB) at info level and above, and %d more for errors",
                budget.dropped, budget.dropped_bytes, LOG_LINES, LOG_BYTES / 1024, LOG_ERROR_LINES);
    budget.dropped = 0;
    budget.dropped_bytes = 0;
}

/* userproc.c's report of a process that outlived SIGKILL */
static void userproc_report(const char *line)
{
    skiff_log_error("skiff: %s", line);
}

void skiff_log_init(void)
{
    skiff_userproc_set_log(userproc_report);
}
