/* The --container-* options as Slurm sees them: options.c's table, each
 * flag registered with spank_option_register() from slurm_spank_init (not
 * a static spank_options[] table, which reaches srun only) so that sbatch
 * and salloc accept the options too. */
#include <stdint.h>
#include <string.h>

#include "plugin.h"

/* Slurm's option callbacks take no context: the options they fill are
 * the one the dispatcher registered them for (one per process). */
static struct skiff_opts *target;

/* Room for every flag (options.c: at most 64 options, two flags each). */
#define FLAGS_MAX 128
static struct spank_option table[FLAGS_MAX];

/* val: the flag's index in options.c's table (skiff_opts_flag). */
static int callback(int val, const char *optarg, int remote)
{
    (void)remote;
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_opt_flag f;
    if (!target || skiff_opts_flag((size_t)val, &f) < 0)
        return -1;
    if (skiff_opts_set(target, f.name, optarg, &err) < 0) {
        skiff_log_error("skiff: %s", err.msg);
        return -1;
    }
    return 0;
}

/* Slurm's struct takes char * for what are constant strings; it never
 * writes them, so the const is dropped (through uintptr_t, which says so
 * on purpose). */
#define S(x) ((char *)(uintptr_t)(x))

int skiff_spank_register_options(spank_t sp, struct skiff_opts *opts)
{
    target = opts;
    struct skiff_opt_flag f;
    for (size_t i = 0; skiff_opts_flag(i, &f) == 0; i++) {
        if (i >= FLAGS_MAX) {
            skiff_log_error("skiff: more than %d option flags", FLAGS_MAX);
            return -1;
        }
        table[i] = (struct spank_option){S(f.name), S(f.arginfo), S(f.usage), f.has_arg, (int)i, callback};
        spank_err_t rc = spank_option_register(sp, &table[i]);
        if (rc != ESPANK_SUCCESS) {
            skiff_log_error("skiff: cannot register --%s: %s", f.name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}
