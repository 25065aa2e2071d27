/* ddp_env: torchrun's per-worker environment from Slurm / MPI launcher
 * variables. The rules (and why) are in doc/training-env.md; this file
 * follows that document's order: pick a source, read it, validate, emit. */
#include "ddp_env.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf.h"
#include "hostlist.h"

#define BATCH_STEP_ID 0xfffffffbULL /* Slurm's SLURM_BATCH_SCRIPT step id */
#define TORCH_DEFAULT_PORT 29500

const char *skiff_ddp_getenv_process(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* Copies of every value read: the getter may reuse one buffer per call
 * (spank_getenv fills the caller's), while several values are in use at
 * once here. Freed before skiff_ddp_env_compute returns. */
struct held {
    char **p;
    size_t n, cap;
    int oom;
};

struct ddp_in {
    skiff_getenv_fn get;
    void *ctx;
    struct held *held;
    const char *source;
    unsigned long long rank, world, local_rank, local_world, node, nnodes;
    int have_world, have_local_rank, have_local_world, have_node, have_nnodes;
    char master[SKIFF_HOSTLIST_MAX_NAME + 1];
    int have_port;
    unsigned long long job, step;
    unsigned het;
    unsigned port_lo, port_hi;
    unsigned long long cpus_per_task; /* 0: not given */
    char identity[160];
};

static const char *E(const struct ddp_in *in, const char *name)
{
    const char *v = in->get(in->ctx, name);
    if (!v)
        return NULL;
    struct held *h = in->held;
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        char **np = reallocarray(h->p, nc, sizeof(char *));
        if (!np) {
            h->oom = 1;
            return NULL;
        }
        h->p = np;
        h->cap = nc;
    }
    char *c = strdup(v);
    if (!c) {
        h->oom = 1;
        return NULL;
    }
    h->p[h->n++] = c;
    return c;
}

static void held_free(struct held *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->p[i]);
    free(h->p);
    memset(h, 0, sizeof(*h));
}

/* The first of several names that is set, or NULL; *which gets its name. */
static const char *E2(const struct ddp_in *in, const char *a, const char *b, const char **which)
{
    const char *v = E(in, a);
    if (v) {
        if (which)
            *which = a;
        return v;
    }
    v = b ? E(in, b) : NULL;
    if (v && which)
        *which = b;
    return v;
}

static int parse_num(const char *name, const char *v, unsigned long long *out, skiff_err *err)
{
    if (!v || !*v)
        return skiff_error(err, 0, "%s is empty: expected a non-negative integer", name);
    unsigned long long x = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9' || p - v >= 19)
            return skiff_error(err, 0, "%s='%.40s': not a non-negative integer", name, v);
        x = x * 10 + (unsigned long long)(*p - '0');
    }
    *out = x;
    return 0;
}

/* Reads a required numeric variable. */
static int need_num(const struct ddp_in *in, const char *name, unsigned long long *out, skiff_err *err)
{
    const char *v = E(in, name);
    if (!v)
        return skiff_error(err, 0, "%s is not set (the launcher's environment is incomplete)", name);
    return parse_num(name, v, out, err);
}

int skiff_tasks_per_node(const char *s, unsigned long node, unsigned long *tasks, unsigned long *nodes, skiff_err *err)
{
    unsigned long long seen = 0;
    int found = 0;
    const char *p = s;
    if (!s || !*s)
        return skiff_error(err, 0, "tasks per node: empty list");
    for (;;) {
        unsigned long long count = 0, rep = 1;
        const char *start = p;
        if (*p < '0' || *p > '9')
            return skiff_error(err, 0, "tasks per node \"%.60s\": expected a number at offset %zu", s, (size_t)(p - s));
        while (*p >= '0' && *p <= '9') {
            if (p - start >= 9)
                return skiff_error(err, 0, "tasks per node \"%.60s\": number too large at offset %zu", s,
                                   (size_t)(start - s));
            count = count * 10 + (unsigned long long)(*p++ - '0');
        }
        if (p[0] == '(') {
            if (p[1] != 'x')
                return skiff_error(err, 0, "tasks per node \"%.60s\": expected '(xN)' at offset %zu", s,
                                   (size_t)(p - s));
            p += 2;
            const char *rs = p;
            rep = 0;
            while (*p >= '0' && *p <= '9') {
                if (p - rs >= 9)
                    return skiff_error(err, 0, "tasks per node \"%.60s\": repeat count too large", s);
                rep = rep * 10 + (unsigned long long)(*p++ - '0');
            }
            if (p == rs || *p != ')' || rep == 0)
                return skiff_error(err, 0, "tasks per node \"%.60s\": bad repeat '(xN)' at offset %zu", s,
                                   (size_t)(rs - 2 - s));
            p++;
        }
        if (!found && node < seen + rep) {
            if (tasks)
                *tasks = (unsigned long)count;
            found = 1;
        }
        seen += rep;
        if (seen > SKIFF_HOSTLIST_MAX_HOSTS)
            return skiff_error(err, 0, "tasks per node \"%.60s\": more than %u nodes", s, SKIFF_HOSTLIST_MAX_HOSTS);
        if (*p == '\0')
            break;
        if (*p != ',')
            return skiff_error(err, 0, "tasks per node \"%.60s\": unexpected '%c' at offset %zu", s, *p,
                               (size_t)(p - s));
        p++;
    }
    if (nodes)
        *nodes = (unsigned long)seen;
    if (!found && tasks)
        return skiff_error(err, 0, "tasks per node \"%.60s\": covers %llu nodes, no node %lu", s, seen, node);
    return 0;
}

unsigned skiff_ddp_master_port(unsigned long long job, unsigned long long step, unsigned het_offset, unsigned lo,
                               unsigned hi)
{
    if (lo == 0 || hi < lo) {
        lo = SKIFF_DDP_PORT_LO_DEFAULT;
        hi = SKIFF_DDP_PORT_HI_DEFAULT;
    }
    uint64_t n = (uint64_t)hi - lo + 1;
    /* Reduce each term first so the sum cannot wrap: wrapping would break
     * "consecutive steps get consecutive ports". */
    uint64_t k = ((job % n) * 7919 % n + (uint64_t)het_offset % n * 1009 % n + step % n) % n;
    return lo + (unsigned)k;
}

int skiff_ddp_parse_port_range(const char *s, unsigned *lo, unsigned *hi, skiff_err *err)
{
    unsigned long a, b;
    char tail;
    if (!s || sscanf(s, "%5lu-%5lu%c", &a, &b, &tail) != 2)
        return skiff_error(err, 0, "port range '%.40s': expected LO-HI, e.g. 20000-29999", s ? s : "");
    if (a <= 1024 || b > 65535 || a > b)
        return skiff_error(err, 0, "port range '%.40s': need 1024 < LO <= HI <= 65535", s);
    *lo = (unsigned)a;
    *hi = (unsigned)b;
    return 0;
}

int skiff_shell_quote(const char *v, char *buf, size_t len, skiff_err *err)
{
    int plain = *v != '\0';
    for (const char *p = v; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("_.,:/@%+=-", *p)))
            plain = 0;
    size_t o = 0;
#define PUT(c)                                                                                                         \
    do {                                                                                                               \
        if (o + 1 >= len)                                                                                              \
            return skiff_error(err, ENAMETOOLONG, "shell quoting: value too long");                                    \
        buf[o++] = (c);                                                                                                \
    } while (0)
    if (!plain)
        PUT('\'');
    for (const char *p = v; *p; p++) {
        if (*p == '\'' && !plain) {
            PUT('\'');
            PUT('\\');
            PUT('\'');
            PUT('\'');
        } else {
            PUT(*p);
        }
    }
    if (!plain)
        PUT('\'');
#undef PUT
    buf[o] = '\0';
    return 0;
}

static void note(struct skiff_ddp_env *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct skiff_ddp_env *out, const char *fmt, ...)
{
    size_t n = strlen(out->notes);
    if (n + 2 >= sizeof(out->notes))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->notes + n, sizeof(out->notes) - n - 1, fmt, ap);
    va_end(ap);
    n = strlen(out->notes);
    out->notes[n] = '\n';
    out->notes[n + 1] = '\0';
}

/* Index of host in list, -1 when absent. */
static int host_index(const char *list, const char *host, long *idx, skiff_err *err)
{
    struct skiff_hostlist hl;
    if (skiff_hostlist_expand(list, 0, &hl, err) < 0)
        return -1;
    *idx = -1;
    for (size_t i = 0; i < hl.n; i++)
        if (strcmp(hl.hosts[i], host) == 0) {
            *idx = (long)i;
            break;
        }
    skiff_hostlist_free(&hl);
    return 0;
}

static int first_host(const char *name, const char *list, char *buf, size_t len, skiff_err *err)
{
    if (skiff_hostlist_nth(list, 0, buf, len, err) < 0)
        return skiff_err_wrap(err, "%s", name);
    return 0;
}

/* ---- Slurm ---- */

static unsigned long long fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static int from_slurm(struct ddp_in *in, struct skiff_ddp_env *out, skiff_err *err)
{
    const char *stepv = E2(in, "SLURM_STEP_ID", "SLURM_STEPID", NULL);
    const char *jobv = E(in, "SLURM_JOB_ID");
    in->source = "slurm";
    if (need_num(in, "SLURM_PROCID", &in->rank, err) < 0)
        return -1;
    if (jobv) {
        if (parse_num("SLURM_JOB_ID", jobv, &in->job, err) < 0)
            return -1;
        in->have_port = 1;
    }
    const char *cpt = E(in, "SLURM_CPUS_PER_TASK");
    if (cpt && parse_num("SLURM_CPUS_PER_TASK", cpt, &in->cpus_per_task, err) < 0)
        return -1;

    if (!stepv) {
        /* The batch script (or salloc's shell on the first node): one process. */
        in->step = BATCH_STEP_ID;
        in->world = in->local_world = in->nnodes = 1;
        in->rank = in->local_rank = in->node = 0;
        in->have_world = in->have_local_rank = in->have_local_world = in->have_node = in->have_nnodes = 1;
        const char *self = E(in, "SLURMD_NODENAME");
        const char *nl = E2(in, "SLURM_JOB_NODELIST", "SLURM_NODELIST", NULL);
        if (self && *self)
            snprintf(in->master, sizeof(in->master), "%s", self);
        else if (nl && first_host("SLURM_JOB_NODELIST", nl, in->master, sizeof(in->master), err) < 0)
            return -1;
        snprintf(in->identity, sizeof(in->identity), "slurm:%.40s.batch.0", jobv ? jobv : "-");
        note(out, "batch script: these values describe this one process; tasks of srun steps get their own "
                  "(the skiff plugin sets them, or run skiff-ddp-env inside each task)");
        return 0;
    }
    if (parse_num("SLURM_STEP_ID", stepv, &in->step, err) < 0) {
        /* Not a number (a special step named by Slurm): any value that is
         * the same on every task of the step will do for the port. */
        skiff_err_clear(err);
        in->step = fnv1a(stepv) % 4294967296ULL;
    }
    const char *which;
    const char *wv = E2(in, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &which);
    if (!wv)
        wv = E2(in, "SLURM_NPROCS", NULL, &which);
    if (!wv)
        return skiff_error(err, 0, "SLURM_STEP_NUM_TASKS is not set (the launcher's environment is incomplete)");
    if (parse_num(which, wv, &in->world, err) < 0)
        return -1;
    if (need_num(in, "SLURM_LOCALID", &in->local_rank, err) < 0 || need_num(in, "SLURM_NODEID", &in->node, err) < 0)
        return -1;
    in->have_world = in->have_local_rank = in->have_node = 1;

    const char *nlname;
    const char *nl = E2(in, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &nlname);
    if (!nl)
        nl = E2(in, "SLURM_NODELIST", NULL, &nlname);
    const char *tpnname;
    const char *tpn = E2(in, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", &tpnname);
    const char *nnv = E2(in, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", &which);
    if (nnv) {
        if (parse_num(which, nnv, &in->nnodes, err) < 0)
            return -1;
        in->have_nnodes = 1;
    } else if (tpn) {
        unsigned long n;
        if (skiff_tasks_per_node(tpn, 0, NULL, &n, err) < 0)
            return skiff_err_wrap(err, "%s", tpnname);
        in->nnodes = n;
        in->have_nnodes = 1;
    }

    /* LOCAL_WORLD_SIZE. SLURM_GTIDS (the global ids of this node's tasks)
     * is exact. Without it, index the tasks-per-node list by this node's
     * position in the node list: in a heterogeneous step SLURM_NODEID
     * follows component order while both lists are sorted by name, so
     * SLURM_NODEID is only the last resort. */
    const char *gtids = E(in, "SLURM_GTIDS");
    const char *self = E(in, "SLURMD_NODENAME");
    if (gtids && *gtids) {
        unsigned long long c = 1;
        for (const char *p = gtids; *p; p++) {
            if (*p == ',')
                c++;
            else if (*p < '0' || *p > '9')
                return skiff_error(err, 0, "SLURM_GTIDS='%.40s': expected a comma-separated list of numbers", gtids);
        }
        in->local_world = c;
        in->have_local_world = 1;
    } else if (tpn) {
        long idx = -1;
        if (self && *self && nl) {
            if (host_index(nl, self, &idx, err) < 0)
                return skiff_err_wrap(err, "%s", nlname);
        }
        unsigned long t;
        if (skiff_tasks_per_node(tpn, idx >= 0 ? (unsigned long)idx : (unsigned long)in->node, &t, NULL, err) < 0)
            return skiff_err_wrap(err, "%s", tpnname);
        in->local_world = t;
        in->have_local_world = 1;
    }

    /* MASTER_ADDR: the host of rank 0. In a step spanning heterogeneous
     * components, rank 0 is the first task of the lowest component in the
     * step, on that component's first node; the step's node list is sorted
     * by name and does not say which node that is. */
    if (nl) {
        unsigned long long hs = 0;
        const char *hsv = E2(in, "SLURM_HET_SIZE", "SLURM_PACK_SIZE", &which);
        if (hsv && parse_num(which, hsv, &hs, err) < 0)
            return -1;
        for (unsigned long long c = 0; c < hs && c < 128 && !in->master[0]; c++) {
            char var[64], h[SKIFF_HOSTLIST_MAX_NAME + 1];
            snprintf(var, sizeof(var), "SLURM_JOB_NODELIST_HET_GROUP_%llu", c);
            const char *cl = E(in, var);
            if (!cl)
                continue;
            long idx;
            if (first_host(var, cl, h, sizeof(h), err) < 0 || host_index(nl, h, &idx, err) < 0)
                return -1;
            if (idx >= 0)
                snprintf(in->master, sizeof(in->master), "%s", h);
        }
        if (!in->master[0] && first_host(nlname, nl, in->master, sizeof(in->master), err) < 0)
            return -1;
    }
    const char *hoff = E(in, "SLURM_HET_JOB_OFFSET");
    unsigned long long ho = 0;
    if (hoff && parse_num("SLURM_HET_JOB_OFFSET", hoff, &ho, err) < 0)
        return -1;
    in->het = (unsigned)ho;
    snprintf(in->identity, sizeof(in->identity), "slurm:%.40s.%.20s.%llu", jobv ? jobv : "-", stepv, in->rank);
    return 0;
}

/* ---- MPI launchers ---- */

struct mpi_probe {
    const char *source;
    const char *rank, *size, *local_rank, *local_size;
};

static const struct mpi_probe mpi_probes[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"pmix", "PMIX_RANK", NULL, NULL, NULL},
};

static int from_mpi(struct ddp_in *in, const struct mpi_probe *pr, struct skiff_ddp_env *out, skiff_err *err)
{
    in->source = pr->source;
    if (need_num(in, pr->rank, &in->rank, err) < 0)
        return -1;
    const char *v;
    if (pr->size && (v = E(in, pr->size))) {
        if (parse_num(pr->size, v, &in->world, err) < 0)
            return -1;
        in->have_world = 1;
    }
    if (pr->local_rank && (v = E(in, pr->local_rank))) {
        if (parse_num(pr->local_rank, v, &in->local_rank, err) < 0)
            return -1;
        in->have_local_rank = 1;
    }
    if (pr->local_size && (v = E(in, pr->local_size))) {
        if (parse_num(pr->local_size, v, &in->local_world, err) < 0)
            return -1;
        in->have_local_world = 1;
    }
    if (!in->have_world)
        note(out, "WORLD_SIZE: %s gives no task count; set WORLD_SIZE for all ranks", pr->source);

    /* mpirun inside a Slurm allocation maps rank 0 to the allocation's first
     * node unless told otherwise; outside Slurm nothing says where rank 0 is. */
    const char *nl = E2(in, "SLURM_JOB_NODELIST", "SLURM_NODELIST", NULL);
    if (nl) {
        if (first_host("SLURM_JOB_NODELIST", nl, in->master, sizeof(in->master), err) < 0)
            return -1;
    } else if (!E(in, "MASTER_ADDR")) {
        note(out,
             "MASTER_ADDR: not set, and %s does not say which host runs rank 0; set it for all ranks, "
             "e.g. mpirun -x MASTER_ADDR=$(hostname) ...",
             pr->source);
    }

    /* The port must be equal on every rank: take only what every rank of one
     * mpirun shares (the Slurm job id, the launcher's job name), never the
     * Slurm step id (ranks started by mpirun itself and by its daemons'
     * step differ there). */
    const char *jobname = E(in, "PMIX_NAMESPACE");
    if (!jobname)
        jobname = E(in, "OMPI_MCA_ess_base_jobid");
    if (!jobname)
        jobname = E(in, "PMI_KVSNAME");
    const char *jobv = E(in, "SLURM_JOB_ID");
    if (jobv && parse_num("SLURM_JOB_ID", jobv, &in->job, err) < 0)
        return -1;
    if (jobv || jobname) {
        in->have_port = 1;
        in->step = jobname ? fnv1a(jobname) % 1000003ULL : 0;
    }
    snprintf(in->identity, sizeof(in->identity), "%s:%.40s.%.60s.%llu", pr->source, jobv ? jobv : "-",
             jobname ? jobname : "-", in->rank);
    return 0;
}

/* ---- emission ---- */

struct emitter {
    struct ddp_in *in;
    struct skiff_ddp_env *out;
    int stale;        /* our markers describe another task */
    const char *ours; /* SKIFF_DDP_ENV_VARS inherited: "NAME:HASH,..." */
    char names[1024]; /* entries for what is emitted now */
};

/* The marker lists each variable skiff set with a hash of the value it set,
 * so a value the user changed afterwards is recognised as the user's. */
static unsigned value_hash(const char *v)
{
    return (unsigned)(fnv1a(v) & 0xffffffffu);
}

/* Finds NAME's entry in a "NAME:HASH,..." list; *hash gets its hash. */
static int entry_find(const char *list, const char *name, unsigned *hash)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l > n + 1 && strncmp(p, name, n) == 0 && p[n] == ':') {
            char *end;
            unsigned long h = strtoul(p + n + 1, &end, 16);
            if (end == p + l) {
                *hash = (unsigned)h;
                return 1;
            }
        }
        p = c ? c + 1 : p + l;
    }
    return 0;
}

static int user_set(const struct emitter *em, const char *name)
{
    const char *v = E(em->in, name);
    if (!v)
        return 0;
    /* Set by skiff-ddp-env or the plugin for another task (inherited from a
     * batch script through srun) and unchanged since: not the user's, so
     * recompute it. */
    unsigned h;
    if (em->stale && entry_find(em->ours, name, &h) && h == value_hash(v))
        return 0;
    return 1;
}

static void add_entry(char *names, size_t size, const char *name, unsigned hash)
{
    size_t l = strlen(names);
    snprintf(names + l, size - l, "%s%s:%08x", l ? "," : "", name, hash);
}

static void put_raw(struct skiff_ddp_env *out, const char *name, const char *value)
{
    if (out->n >= SKIFF_DDP_MAX_VARS)
        return;
    struct skiff_ddp_var *v = &out->vars[out->n++];
    snprintf(v->name, sizeof(v->name), "%s", name);
    snprintf(v->value, sizeof(v->value), "%s", value);
    /* Values come partly from the environment (job names, node names):
     * keep them one printable line, so env files and `eval` stay safe. */
    for (char *c = v->value; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '_';
    size_t nl = strlen(v->name), vl = strlen(v->value);
    memcpy(v->kv, v->name, nl);
    v->kv[nl] = '=';
    memcpy(v->kv + nl + 1, v->value, vl + 1);
}

static void put(struct emitter *em, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(struct emitter *em, const char *name, const char *fmt, ...)
{
    if (user_set(em, name))
        return;
    char value[SKIFF_DDP_VALUE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    put_raw(em->out, name, value);
    add_entry(em->names, sizeof(em->names), name, value_hash(em->out->vars[em->out->n - 1].value));
}

static int validate(const struct ddp_in *in, skiff_err *err)
{
    if (in->have_world && in->world == 0)
        return skiff_error(err, 0, "%s: the task count is 0", in->source);
    if (in->have_world && in->rank >= in->world)
        return skiff_error(err, 0, "%s: rank %llu is not below the task count %llu", in->source, in->rank, in->world);
    if (in->have_local_world && in->local_world == 0)
        return skiff_error(err, 0, "%s: this node's task count is 0", in->source);
    if (in->have_local_rank && in->have_local_world && in->local_rank >= in->local_world)
        return skiff_error(err, 0, "%s: local rank %llu is not below this node's task count %llu", in->source,
                           in->local_rank, in->local_world);
    if (in->have_world && in->have_local_world && in->local_world > in->world)
        return skiff_error(err, 0, "%s: this node's task count %llu exceeds the task count %llu", in->source,
                           in->local_world, in->world);
    if (in->have_node && in->have_nnodes && in->node >= in->nnodes)
        return skiff_error(err, 0, "%s: node index %llu is not below the node count %llu", in->source, in->node,
                           in->nnodes);
    return 0;
}

static int enabled(const struct ddp_in *in, int *on, skiff_err *err)
{
    const char *v = E(in, "SKIFF_DDP_ENV");
    *on = 1;
    if (!v || !*v)
        return 0;
    int b = skiff_parse_bool(v);
    if (b >= 0) {
        *on = b;
        return 0;
    }
    return skiff_error(err, 0, "SKIFF_DDP_ENV='%.20s': use 0 to turn the training environment off, 1 for on", v);
}

static int compute(struct held *held, skiff_getenv_fn get, void *ctx, const struct skiff_ddp_opts *opts,
                   struct skiff_ddp_env *out, skiff_err *err)
{
    memset(out, 0, sizeof(*out));
    out->source = "none";
    struct ddp_in in = {.get = get ? get : skiff_ddp_getenv_process, .ctx = ctx, .held = held};
    in.port_lo = opts && opts->port_lo ? opts->port_lo : SKIFF_DDP_PORT_LO_DEFAULT;
    in.port_hi = opts && opts->port_lo ? opts->port_hi : SKIFF_DDP_PORT_HI_DEFAULT;
    if (in.port_lo <= 1024 || in.port_hi > 65535 || in.port_lo > in.port_hi)
        return skiff_error(err, 0, "port range %u-%u: need 1024 < LO <= HI <= 65535", in.port_lo, in.port_hi);

    int on;
    if (enabled(&in, &on, err) < 0)
        return -1;
    if (!on) {
        out->source = "disabled";
        return 0;
    }
    const char *pr = E(&in, "SKIFF_DDP_PORT_RANGE");
    if (pr && skiff_ddp_parse_port_range(pr, &in.port_lo, &in.port_hi, err) < 0)
        return skiff_err_wrap(err, "SKIFF_DDP_PORT_RANGE");

    /* Source: an MPI launcher's rank wins over Slurm's unless both agree
     * (srun launched the MPI ranks itself: Slurm's view is richer). Ranks
     * started by mpirun inside an allocation inherit SLURM_PROCID of the
     * batch step or of mpirun's daemon step, which is not their rank. */
    const struct mpi_probe *mpi = NULL;
    for (size_t i = 0; i < sizeof(mpi_probes) / sizeof(mpi_probes[0]); i++)
        if (E(&in, mpi_probes[i].rank)) {
            mpi = &mpi_probes[i];
            break;
        }
    const char *procid = E(&in, "SLURM_PROCID");
    int slurm_step = procid && E2(&in, "SLURM_STEP_ID", "SLURM_STEPID", NULL);
    int use_slurm = 0;
    if (mpi && slurm_step) {
        unsigned long long mr, sr, ms, ss;
        const char *msz = mpi->size ? E(&in, mpi->size) : NULL;
        const char *ssz = E2(&in, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL);
        use_slurm =
            parse_num(mpi->rank, E(&in, mpi->rank), &mr, err) == 0 &&
            parse_num("SLURM_PROCID", procid, &sr, err) == 0 && mr == sr &&
            (!msz || !ssz ||
             (parse_num(mpi->size, msz, &ms, err) == 0 && parse_num("SLURM_NTASKS", ssz, &ss, err) == 0 && ms == ss));
        skiff_err_clear(err);
    } else if (!mpi && procid) {
        use_slurm = 1;
    }
    int rc;
    if (use_slurm)
        rc = from_slurm(&in, out, err);
    else if (mpi)
        rc = from_mpi(&in, mpi, out, err);
    else {
        note(out, "no launcher variables found (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK): "
                  "run inside srun or mpirun");
        return 0;
    }
    if (rc < 0 || validate(&in, err) < 0) {
        out->notes[0] = '\0';
        return -1;
    }
    out->source = in.source;

    struct emitter em = {.in = &in, .out = out};
    const char *marker = E(&in, "SKIFF_DDP_ENV_TASK");
    em.ours = E(&in, "SKIFF_DDP_ENV_VARS");
    em.stale = marker && strcmp(marker, in.identity) != 0;

    put(&em, "RANK", "%llu", in.rank);
    if (in.have_world)
        put(&em, "WORLD_SIZE", "%llu", in.world);
    if (in.have_local_rank)
        put(&em, "LOCAL_RANK", "%llu", in.local_rank);
    if (in.have_local_world)
        put(&em, "LOCAL_WORLD_SIZE", "%llu", in.local_world);
    if (in.have_node) {
        put(&em, "NODE_RANK", "%llu", in.node);
        put(&em, "GROUP_RANK", "%llu", in.node);
    }
    if (in.have_nnodes)
        put(&em, "GROUP_WORLD_SIZE", "%llu", in.nnodes);
    /* One role ("default") as torchrun has without --role: role rank and
     * size equal the global ones. */
    put(&em, "ROLE_RANK", "%llu", in.rank);
    if (in.have_world)
        put(&em, "ROLE_WORLD_SIZE", "%llu", in.world);
    put(&em, "ROLE_NAME", "%s", "default");
    if (in.master[0])
        put(&em, "MASTER_ADDR", "%s", in.master);
    if (in.have_port) {
        put(&em, "MASTER_PORT", "%u", skiff_ddp_master_port(in.job, in.step, in.het, in.port_lo, in.port_hi));
    } else if (!user_set(&em, "MASTER_PORT")) {
        put(&em, "MASTER_PORT", "%d", TORCH_DEFAULT_PORT);
        note(out, "MASTER_PORT: no job id to derive it from; using torch's default %d", TORCH_DEFAULT_PORT);
    }
    if (in.have_local_world && in.local_world > 1)
        put(&em, "OMP_NUM_THREADS", "%llu",
            in.cpus_per_task && strcmp(in.source, "slurm") == 0 ? in.cpus_per_task : 1ULL);

    if (out->n > 0) {
        /* Markers, so that a task that inherits these (srun from a batch
         * script that ran skiff-ddp-env) recomputes them instead of taking
         * them for the user's own. */
        char names[sizeof(em.names)];
        snprintf(names, sizeof(names), "%s", em.names);
        if (!em.stale && em.ours) {
            /* computed again for the same task: keep the earlier entries */
            for (const char *p = em.ours; *p;) {
                const char *c = strchr(p, ',');
                size_t n = c ? (size_t)(c - p) : strlen(p);
                const char *colon = memchr(p, ':', n);
                char one[SKIFF_DDP_NAME_MAX];
                unsigned h, dummy;
                if (colon && (size_t)(colon - p) < sizeof(one)) {
                    memcpy(one, p, (size_t)(colon - p));
                    one[colon - p] = '\0';
                    if (entry_find(p, one, &h) && !entry_find(names, one, &dummy))
                        add_entry(names, sizeof(names), one, h);
                }
                p = c ? c + 1 : p + n;
            }
        }
        put_raw(out, "SKIFF_DDP_ENV_TASK", in.identity);
        put_raw(out, "SKIFF_DDP_ENV_VARS", names);
    }
    return 0;
}

int skiff_ddp_env_compute(skiff_getenv_fn get, void *ctx, const struct skiff_ddp_opts *opts, struct skiff_ddp_env *out,
                          skiff_err *err)
{
    struct held held = {0};
    int rc = compute(&held, get, ctx, opts, out, err);
    int oom = held.oom;
    held_free(&held);
    if (rc == 0 && oom) {
        memset(out, 0, sizeof(*out));
        out->source = "none";
        return skiff_error(err, ENOMEM, "training environment: out of memory reading the environment");
    }
    return rc;
}

const char *skiff_ddp_env_get(const struct skiff_ddp_env *env, const char *name)
{
    for (size_t i = 0; i < env->n; i++)
        if (strcmp(env->vars[i].name, name) == 0)
            return env->vars[i].value;
    return NULL;
}
