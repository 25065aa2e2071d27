/* ddp_env: the environment torchrun gives each worker (RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, ...), computed per task from what Slurm or an MPI
 * launcher already put in the task's environment. Every variable, its source,
 * the precedence rules and the MASTER_PORT formula: doc/training-env.md.
 *
 * The library never sets anything itself: it reads variables through a getter
 * (getenv for skiff-ddp-env, spank_getenv for the SPANK plugin) and returns
 * the list of NAME=VALUE pairs to set. A variable the getter reports as set
 * (even empty) is never in the list: what the user set wins. */
#ifndef SKIFF_DDP_ENV_H
#define SKIFF_DDP_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Returns the value of name, or NULL when it is not set. The returned string
 * need only stay valid until the next call: the library copies it (so one
 * buffer filled by spank_getenv is enough; make it large enough for node
 * lists, which skiff accepts up to 1 MiB). */
typedef const char *(*skiff_getenv_fn)(void *ctx, const char *name);

/* A getter over the calling process's environment (ctx unused). */
const char *skiff_ddp_getenv_process(void *ctx, const char *name);

#define SKIFF_DDP_PORT_LO_DEFAULT 20000
#define SKIFF_DDP_PORT_HI_DEFAULT 29999

struct skiff_ddp_opts {
    unsigned port_lo, port_hi; /* MASTER_PORT range, inclusive; 0,0 = default */
};

#define SKIFF_DDP_MAX_VARS 24
#define SKIFF_DDP_NAME_MAX 32
#define SKIFF_DDP_VALUE_MAX 256
#define SKIFF_DDP_NOTES_MAX 1024

struct skiff_ddp_var {
    char name[SKIFF_DDP_NAME_MAX];
    char value[SKIFF_DDP_VALUE_MAX];
    char kv[SKIFF_DDP_NAME_MAX + SKIFF_DDP_VALUE_MAX]; /* "NAME=VALUE" */
};

struct skiff_ddp_env {
    const char *source; /* "slurm", "openmpi", "pmi", "pmix", "disabled", "none" */
    size_t n;           /* entries in vars, in a fixed documented order */
    struct skiff_ddp_var vars[SKIFF_DDP_MAX_VARS];
    /* Advice for the user, one per line ("MASTER_ADDR: not set: ..."), or ""
     * when there is none. The plugin logs it; skiff-ddp-env prints it to
     * stderr. It never means failure. */
    char notes[SKIFF_DDP_NOTES_MAX];
};

/* Computes the variables to set for the task whose environment get reads.
 * opts may be NULL (defaults). Returns 0 (also when there is nothing to do:
 * out->n == 0 and out->source says why) or -1 with err set when the launcher's
 * variables are malformed (bad host list, a rank that is not a number, a rank
 * beyond the task count, ...): the task would otherwise start with a wrong
 * rank. Allocates nothing that the caller must free. */
int skiff_ddp_env_compute(skiff_getenv_fn get, void *ctx, const struct skiff_ddp_opts *opts, struct skiff_ddp_env *out,
                          skiff_err *err);

/* Looks a computed variable up by name; NULL when it is not in the list. */
const char *skiff_ddp_env_get(const struct skiff_ddp_env *env, const char *name);

/* MASTER_PORT: lo + (job * 7919 + het_offset * 1009 + step) mod (hi - lo + 1).
 * Concurrent steps of one job (step ids differing by less than the range
 * size) always get different ports. Exposed for the tests and the docs. */
unsigned skiff_ddp_master_port(unsigned long long job, unsigned long long step, unsigned het_offset, unsigned lo,
                               unsigned hi);

/* Tasks-per-node lists in Slurm's compressed form, "2(x3),1": the count for
 * node index node (0-based) into *tasks, and the number of nodes the list
 * covers into *nodes (either pointer may be NULL). */
int skiff_tasks_per_node(const char *s, unsigned long node, unsigned long *tasks, unsigned long *nodes, skiff_err *err);

/* Parses "LO-HI" (ports, 1024 < LO <= HI <= 65535). */
int skiff_ddp_parse_port_range(const char *s, unsigned *lo, unsigned *hi, skiff_err *err);

/* Writes value as one shell word (single quotes when needed) into buf. */
int skiff_shell_quote(const char *value, char *buf, size_t len, skiff_err *err);

#endif
