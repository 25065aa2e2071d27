/* ddp_env scenarios: "this environment in -> these variables out". The
 * inputs were taken from real tasks on the local test cluster (het job,
 * cyclic, batch step, array) and from the MPI launchers' documentation. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ddp_env.h"

#define MAXV 48
/* The getter context is the const table; the API takes void *. */
#define CTX(p) ((void *)(uintptr_t)(p))

struct scenario {
    const char *name;
    const char *env[MAXV];    /* "K=V" inputs */
    const char *expect[MAXV]; /* "K=V" that must be in the output */
    const char *absent[MAXV]; /* names that must not be in the output */
    const char *source;
    const char *error; /* substring of the error, NULL = must succeed */
};

static const char *table_get(void *ctx, const char *name)
{
    const char *const *env = ctx;
    size_t n = strlen(name);
    for (size_t i = 0; i < MAXV && env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

#define STEP3(rank, local, node)                                                                                       \
    "SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "SLURM_PROCID=" #rank, "SLURM_LOCALID=" #local, "SLURM_NODEID=" #node,       \
        "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NODELIST=gpu-a[01-03]",                        \
        "SLURM_STEP_TASKS_PER_NODE=3,2(x2)"

static const struct scenario scenarios[] = {
    {"block -N3 -n7, task 4 on node 1",
     {STEP3(4, 1, 1)},
     {"RANK=4", "WORLD_SIZE=7", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "NODE_RANK=1", "GROUP_RANK=1",
      "GROUP_WORLD_SIZE=3", "ROLE_RANK=4", "ROLE_WORLD_SIZE=7", "ROLE_NAME=default", "MASTER_ADDR=gpu-a01",
      "OMP_NUM_THREADS=1", "SKIFF_DDP_ENV_TASK=slurm:42.0.4"},
     {NULL},
     "slurm",
     NULL},
    {"block -N3 -n7, task 0",
     {STEP3(0, 0, 0)},
     {"RANK=0", "LOCAL_WORLD_SIZE=3", "NODE_RANK=0", "MASTER_ADDR=gpu-a01"},
     {NULL},
     "slurm",
     NULL},
    {"cyclic -N3 -n7: rank 3 is local 1 on node 0 (not rank mod tasks-per-node)",
     {"SLURM_JOB_ID=6", "SLURM_STEP_ID=0", "SLURM_PROCID=3", "SLURM_LOCALID=1", "SLURM_NODEID=0",
      "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NODELIST=n[1-3]", "SLURM_STEP_TASKS_PER_NODE=5,1(x2)",
      "SLURM_STEP_NUM_NODES=3", "SLURMD_NODENAME=n1"},
     {"RANK=3", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=5", "NODE_RANK=0", "MASTER_ADDR=n1"},
     {NULL},
     "slurm",
     NULL},
    {"cyclic, rank 2 alone on node 2: no OMP_NUM_THREADS",
     {"SLURM_JOB_ID=6", "SLURM_STEP_ID=0", "SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURM_NODEID=2",
      "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NODELIST=n[1-3]", "SLURM_STEP_TASKS_PER_NODE=5,1(x2)"},
     {"LOCAL_WORLD_SIZE=1", "GROUP_WORLD_SIZE=3"},
     {"OMP_NUM_THREADS"},
     "slurm",
     NULL},
    {"uneven -N2 -n5 (3,2), task on node 1",
     {"SLURM_JOB_ID=7", "SLURM_STEP_ID=1", "SLURM_PROCID=4", "SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_NTASKS=5",
      "SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=3,2", "SLURM_NNODES=2"},
     {"WORLD_SIZE=5", "LOCAL_WORLD_SIZE=2", "GROUP_WORLD_SIZE=2", "MASTER_ADDR=n1"},
     {NULL},
     "slurm",
     NULL},
    {"step variables win over job variables",
     {"SLURM_JOB_ID=7", "SLURM_STEP_ID=2", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=8",
      "SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_NODELIST=n[1-4]", "SLURM_STEP_NODELIST=n[3-4]", "SLURM_TASKS_PER_NODE=2(x4)",
      "SLURM_STEP_TASKS_PER_NODE=1(x2)"},
     {"WORLD_SIZE=2", "MASTER_ADDR=n3", "LOCAL_WORLD_SIZE=1"},
     {NULL},
     "slurm",
     NULL},
    {"SLURM_GTIDS gives this node's task count",
     {"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_NODELIST=n[1-3]", "SLURM_STEP_TASKS_PER_NODE=2,1(x2)", "SLURM_GTIDS=1,2",
      "SLURMD_NODENAME=n1"},
     {"LOCAL_WORLD_SIZE=2"},
     {NULL},
     "slurm",
     NULL},
    /* Observed on the test cluster: salloc -w n3 -n1 : -w n1,n2 -n3, then
     * srun --het-group=0,1. The node list is sorted (n1 first) but rank 0
     * runs on n3, node id 0. */
    {"het step, component 0 on n3: rank 0's host is n3",
     {"SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NODELIST=n[1-3]",
      "SLURM_STEP_TASKS_PER_NODE=2,1(x2)", "SLURMD_NODENAME=n1", "SLURM_HET_SIZE=2",
      "SLURM_JOB_NODELIST_HET_GROUP_0=n3", "SLURM_JOB_NODELIST_HET_GROUP_1=n[1-2]"},
     {"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "NODE_RANK=1", "MASTER_ADDR=n3"},
     {NULL},
     "slurm",
     NULL},
    {"het step, task on n3 (node id 0) without SLURM_GTIDS: position of n3 in the list",
     {"SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
      "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_NODELIST=n[1-3]", "SLURM_STEP_TASKS_PER_NODE=2,1(x2)", "SLURMD_NODENAME=n3",
      "SLURM_HET_SIZE=2", "SLURM_JOB_NODELIST_HET_GROUP_0=n3", "SLURM_JOB_NODELIST_HET_GROUP_1=n[1-2]"},
     {"LOCAL_WORLD_SIZE=1", "MASTER_ADDR=n3"},
     {"OMP_NUM_THREADS"},
     "slurm",
     NULL},
    {"het job, step on component 1 only: its own first node",
     {"SLURM_JOB_ID=9", "SLURM_STEP_ID=1", "SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NODELIST=n[1-2]", "SLURM_STEP_TASKS_PER_NODE=2,1", "SLURMD_NODENAME=n2",
      "SLURM_HET_SIZE=2", "SLURM_JOB_NODELIST_HET_GROUP_0=n3", "SLURM_JOB_NODELIST_HET_GROUP_1=n[1-2]"},
     {"MASTER_ADDR=n1", "LOCAL_WORLD_SIZE=1", "WORLD_SIZE=3"},
     {NULL},
     "slurm",
     NULL},
    {"batch step: one process",
     {"SLURM_JOB_ID=12", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=2",
      "SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=2", "SLURMD_NODENAME=n1"},
     {"RANK=0", "WORLD_SIZE=1", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=n1", "SKIFF_DDP_ENV_TASK=slurm:12.batch.0"},
     {"OMP_NUM_THREADS"},
     "slurm",
     NULL},
    {"user's RANK and MASTER_ADDR are kept",
     {STEP3(4, 1, 1), "RANK=99", "MASTER_ADDR=head"},
     {"WORLD_SIZE=7"},
     {"RANK", "MASTER_ADDR"},
     "slurm",
     NULL},
    {"an empty user value counts as set",
     {STEP3(4, 1, 1), "OMP_NUM_THREADS="},
     {"RANK=4"},
     {"OMP_NUM_THREADS"},
     "slurm",
     NULL},
    {"already computed for this task: nothing to do",
     {STEP3(4, 1, 1), "RANK=4", "WORLD_SIZE=7", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "NODE_RANK=1", "GROUP_RANK=1",
      "GROUP_WORLD_SIZE=3", "ROLE_RANK=4", "ROLE_WORLD_SIZE=7", "ROLE_NAME=default", "MASTER_ADDR=gpu-a01",
      "MASTER_PORT=1", "OMP_NUM_THREADS=1", "SKIFF_DDP_ENV_TASK=slurm:42.0.4", "SKIFF_DDP_ENV_VARS=RANK:00000000"},
     {NULL},
     {"RANK", "SKIFF_DDP_ENV_TASK"},
     "slurm",
     NULL},
    {"SLURM_CPUS_PER_TASK sets OMP_NUM_THREADS when tasks share a node",
     {STEP3(4, 1, 1), "SLURM_CPUS_PER_TASK=4"},
     {"OMP_NUM_THREADS=4"},
     {NULL},
     "slurm",
     NULL},
    {"turned off per job", {STEP3(4, 1, 1), "SKIFF_DDP_ENV=0"}, {NULL}, {"RANK", "MASTER_PORT"}, "disabled", NULL},
    {"turned off with 'off'", {STEP3(4, 1, 1), "SKIFF_DDP_ENV=off"}, {NULL}, {"RANK"}, "disabled", NULL},
    {"bad SKIFF_DDP_ENV", {STEP3(4, 1, 1), "SKIFF_DDP_ENV=maybe"}, {NULL}, {NULL}, NULL, "SKIFF_DDP_ENV"},
    {"nothing to go on", {"HOME=/root"}, {NULL}, {"RANK"}, "none", NULL},
    {"no dependence on PYTORCH_VERSION", {STEP3(0, 0, 0)}, {"RANK=0"}, {NULL}, "slurm", NULL},
    {"open mpi under mpirun inside an allocation: OMPI rank wins over the daemon step's SLURM_PROCID",
     {"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_NODELIST=n[1-2]", "OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=8",
      "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=4", "OMPI_MCA_ess_base_jobid=123"},
     {"RANK=6", "WORLD_SIZE=8", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=n1", "OMP_NUM_THREADS=1"},
     {"NODE_RANK", "GROUP_RANK"},
     "openmpi",
     NULL},
    {"srun --mpi=pmix: PMIX_RANK agrees with SLURM_PROCID, Slurm's richer view is used",
     {STEP3(4, 1, 1), "PMIX_RANK=4", "PMIX_NAMESPACE=slurm.pmix.42.0"},
     {"RANK=4", "NODE_RANK=1", "LOCAL_WORLD_SIZE=2"},
     {NULL},
     "slurm",
     NULL},
    {"mpich hydra without Slurm: no MASTER_ADDR, advice given",
     {"PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2"},
     {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_PORT=29500"},
     {"MASTER_ADDR"},
     "pmi",
     NULL},
    {"mpich hydra with MASTER_ADDR set by the user",
     {"PMI_RANK=0", "PMI_SIZE=2", "MASTER_ADDR=head"},
     {"RANK=0", "WORLD_SIZE=2"},
     {"MASTER_ADDR"},
     "pmi",
     NULL},
    {"pmix alone: rank only",
     {"PMIX_RANK=2", "PMIX_NAMESPACE=prterun-x-1@1"},
     {"RANK=2"},
     {"WORLD_SIZE", "MASTER_ADDR"},
     "pmix",
     NULL},
    {"open mpi rank beyond size",
     {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"},
     {NULL},
     {NULL},
     NULL,
     "rank 4 is not below the task count 4"},
    {"rank beyond task count", {STEP3(7, 1, 1)}, {NULL}, {NULL}, NULL, "rank 7 is not below"},
    {"non-numeric rank",
     {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=x", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=1"},
     {NULL},
     {NULL},
     NULL,
     "SLURM_PROCID='x'"},
    {"bad node list",
     {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=1",
      "SLURM_STEP_NODELIST=n[1-"},
     {NULL},
     {NULL},
     NULL,
     "SLURM_STEP_NODELIST: host list \"n[1-\""},
    {"bad tasks per node",
     {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=1",
      "SLURM_STEP_TASKS_PER_NODE=2(3)"},
     {NULL},
     {NULL},
     NULL,
     "SLURM_STEP_TASKS_PER_NODE: tasks per node"},
    {"local id beyond this node's tasks",
     {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=2", "SLURM_NODEID=0", "SLURM_NTASKS=4",
      "SLURM_STEP_TASKS_PER_NODE=2(x2)"},
     {NULL},
     {NULL},
     NULL,
     "local rank 2"},
    {"missing SLURM_LOCALID in a step",
     {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NODEID=0", "SLURM_NTASKS=1"},
     {NULL},
     {NULL},
     NULL,
     "SLURM_LOCALID is not set"},
    {"a step id that is not a number still gives a port",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=interactive", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
      "SLURM_NTASKS=1", "SLURM_STEP_NODELIST=n1"},
     {"RANK=0", "MASTER_ADDR=n1", "SKIFF_DDP_ENV_TASK=slurm:3.interactive.0"},
     {NULL},
     "slurm",
     NULL},
    {"port range from the environment",
     {STEP3(0, 0, 0), "SKIFF_DDP_PORT_RANGE=40000-40000"},
     {"MASTER_PORT=40000"},
     {NULL},
     "slurm",
     NULL},
    {"bad port range", {STEP3(0, 0, 0), "SKIFF_DDP_PORT_RANGE=80-90"}, {NULL}, {NULL}, NULL, "SKIFF_DDP_PORT_RANGE"},
    {"control characters in a value are neutralised",
     {"SLURM_JOB_ID=12", "SLURM_PROCID=0", "SLURMD_NODENAME=n1\nexport X=1"},
     {"MASTER_ADDR=n1_export X=1"},
     {NULL},
     "slurm",
     NULL},
};

/* Like a plugin's spank_getenv wrapper: one buffer, overwritten by every
 * call, so the library must not keep pointers between calls. */
static const char *one_buffer_get(void *ctx, const char *name)
{
    static char buf[4096];
    const char *v = table_get(ctx, name);
    if (!v)
        return NULL;
    snprintf(buf, sizeof(buf), "%s", v);
    return buf;
}

static void run_scenario_with(const struct scenario *sc, skiff_getenv_fn get)
{
    struct skiff_ddp_env out;
    skiff_err err = {0};
    int rc = skiff_ddp_env_compute(get, CTX(sc->env), NULL, &out, &err);
    if (sc->error) {
        cr_expect_eq(rc, -1, "[%s] should fail", sc->name);
        cr_expect(strstr(err.msg, sc->error) != NULL, "[%s] message '%s' lacks '%s'", sc->name, err.msg, sc->error);
        return;
    }
    cr_assert_eq(rc, 0, "[%s] failed: %s", sc->name, err.msg);
    cr_expect_str_eq(out.source, sc->source, "[%s] source", sc->name);
    for (size_t i = 0; i < MAXV && sc->expect[i]; i++) {
        const char *eq = strchr(sc->expect[i], '=');
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - sc->expect[i]), sc->expect[i]);
        const char *got = skiff_ddp_env_get(&out, name);
        cr_expect_not_null(got, "[%s] %s not set", sc->name, name);
        if (got)
            cr_expect_str_eq(got, eq + 1, "[%s] %s", sc->name, name);
    }
    for (size_t i = 0; i < MAXV && sc->absent[i]; i++)
        cr_expect_null(skiff_ddp_env_get(&out, sc->absent[i]), "[%s] %s should not be set", sc->name, sc->absent[i]);
    for (size_t i = 0; i < out.n; i++) {
        /* never overwrite: nothing in the output is set by the user */
        const char *in = table_get(CTX(sc->env), out.vars[i].name);
        int ours = strncmp(out.vars[i].name, "SKIFF_DDP_ENV_", 14) == 0;
        const char *marker = table_get(CTX(sc->env), "SKIFF_DDP_ENV_VARS");
        if (in && !ours)
            cr_expect(marker && strstr(marker, out.vars[i].name), "[%s] overwrote %s", sc->name, out.vars[i].name);
        char kv[600];
        snprintf(kv, sizeof(kv), "%s=%s", out.vars[i].name, out.vars[i].value);
        cr_expect_str_eq(out.vars[i].kv, kv);
    }
}

Test(ddp_env, scenarios)
{
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        run_scenario_with(&scenarios[i], table_get);
}

Test(ddp_env, scenarios_with_a_getter_that_reuses_one_buffer)
{
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        run_scenario_with(&scenarios[i], one_buffer_get);
}

Test(ddp_env, hydra_note_says_what_to_set)
{
    const char *env[] = {"PMI_RANK=1", "PMI_SIZE=2", NULL};
    struct skiff_ddp_env out;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), NULL, &out, &err), 0);
    cr_expect(strstr(out.notes, "MASTER_ADDR: not set") != NULL, "%s", out.notes);
    cr_expect(strstr(out.notes, "-x MASTER_ADDR") != NULL, "%s", out.notes);
}

static unsigned port_for(const char *job, const char *step)
{
    char j[64], s[64];
    snprintf(j, sizeof(j), "SLURM_JOB_ID=%s", job);
    snprintf(s, sizeof(s), "SLURM_STEP_ID=%s", step);
    const char *env[] = {j, s, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=1", NULL};
    struct skiff_ddp_env out;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), NULL, &out, &err), 0, "%s", err.msg);
    const char *p = skiff_ddp_env_get(&out, "MASTER_PORT");
    cr_assert_not_null(p);
    return (unsigned)atoi(p);
}

Test(ddp_env, master_port_formula)
{
    /* documented: lo + (job*7919 + het*1009 + step) mod (hi-lo+1) */
    cr_expect_eq(skiff_ddp_master_port(42, 0, 0, 20000, 29999), 20000 + (42 * 7919) % 10000);
    cr_expect_eq(skiff_ddp_master_port(42, 3, 1, 20000, 29999), 20000 + (42 * 7919 + 1009 + 3) % 10000);
    cr_expect_eq(port_for("42", "0"), skiff_ddp_master_port(42, 0, 0, 20000, 29999));
    /* every port in range, never the ephemeral range */
    for (unsigned long long j = 0; j < 5000; j += 7)
        for (unsigned long long s = 0; s < 40; s++) {
            unsigned p = skiff_ddp_master_port(j, s, 0, 0, 0);
            cr_assert(p >= 20000 && p <= 29999);
        }
    /* huge ids do not wrap into collisions of consecutive steps */
    unsigned a = skiff_ddp_master_port(~0ULL, 4294967294ULL, 0, 20000, 29999);
    unsigned b = skiff_ddp_master_port(~0ULL, 4294967295ULL, 0, 20000, 29999);
    cr_expect_neq(a, b);
}

Test(ddp_env, concurrent_steps_get_different_ports)
{
    unsigned seen[64];
    for (unsigned s = 0; s < 64; s++) {
        char step[16];
        snprintf(step, sizeof(step), "%u", s);
        seen[s] = port_for("123456", step);
        for (unsigned k = 0; k < s; k++)
            cr_expect_neq(seen[k], seen[s], "steps %u and %u share port %u", k, s, seen[s]);
    }
}

Test(ddp_env, array_tasks_use_their_own_job_id)
{
    /* Array task 1 of array 11 has SLURM_JOB_ID=12, task 2 keeps 11. */
    const char *t1[] = {"SLURM_JOB_ID=12", "SLURM_ARRAY_JOB_ID=11", "SLURM_ARRAY_TASK_ID=1",
                        "SLURM_STEP_ID=0", "SLURM_PROCID=0",        "SLURM_LOCALID=0",
                        "SLURM_NODEID=0",  "SLURM_NTASKS=1",        NULL};
    const char *t2[] = {"SLURM_JOB_ID=11", "SLURM_ARRAY_JOB_ID=11", "SLURM_ARRAY_TASK_ID=2",
                        "SLURM_STEP_ID=0", "SLURM_PROCID=0",        "SLURM_LOCALID=0",
                        "SLURM_NODEID=0",  "SLURM_NTASKS=1",        NULL};
    struct skiff_ddp_env o1, o2;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(t1), NULL, &o1, &err), 0);
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(t2), NULL, &o2, &err), 0);
    cr_expect_str_neq(skiff_ddp_env_get(&o1, "MASTER_PORT"), skiff_ddp_env_get(&o2, "MASTER_PORT"));
}

Test(ddp_env, site_port_range_option)
{
    const char *env[] = {"SLURM_JOB_ID=1",
                         "SLURM_STEP_ID=0",
                         "SLURM_PROCID=0",
                         "SLURM_LOCALID=0",
                         "SLURM_NODEID=0",
                         "SLURM_NTASKS=1",
                         NULL};
    struct skiff_ddp_opts o = {.port_lo = 50000, .port_hi = 50009};
    struct skiff_ddp_env out;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), &o, &out, &err), 0);
    int p = atoi(skiff_ddp_env_get(&out, "MASTER_PORT"));
    cr_expect(p >= 50000 && p <= 50009, "%d", p);
    struct skiff_ddp_opts bad = {.port_lo = 10, .port_hi = 5};
    cr_expect_eq(skiff_ddp_env_compute(table_get, CTX(env), &bad, &out, &err), -1);
}

struct tpn_case {
    const char *in;
    unsigned long node, tasks, nodes;
};

static const struct tpn_case tpn_cases[] = {
    {"2", 0, 2, 1},
    {"2(x3),1", 0, 2, 4},
    {"2(x3),1", 2, 2, 4},
    {"2(x3),1", 3, 1, 4},
    {"5,1(x2)", 1, 1, 3},
    {"3,2", 1, 2, 2},
    {"1(x1000000)", 999999, 1, 1000000},
    {"4(x2),3(x2),8", 4, 8, 5},
    {"0,2", 0, 0, 2},
};

Test(ddp_env, tasks_per_node_table)
{
    for (size_t i = 0; i < sizeof(tpn_cases) / sizeof(tpn_cases[0]); i++) {
        const struct tpn_case *c = &tpn_cases[i];
        unsigned long t = 99, n = 99;
        skiff_err err = {0};
        cr_assert_eq(skiff_tasks_per_node(c->in, c->node, &t, &n, &err), 0, "%s: %s", c->in, err.msg);
        cr_expect_eq(t, c->tasks, "%s node %lu", c->in, c->node);
        cr_expect_eq(n, c->nodes, "%s nodes", c->in);
    }
    const char *bad[] = {"", "x", "2(x)", "2(3)", "2(x0)", "2,", ",2", "2(x3", "2;3", "1(x2000000)", "12345678901"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned long t;
        skiff_err err = {0};
        cr_expect_eq(skiff_tasks_per_node(bad[i], 0, &t, NULL, &err), -1, "'%s' should fail", bad[i]);
        cr_expect(err.msg[0] != '\0');
    }
    unsigned long t;
    skiff_err err = {0};
    cr_expect_eq(skiff_tasks_per_node("2(x3)", 3, &t, NULL, &err), -1);
    cr_expect(strstr(err.msg, "no node 3") != NULL, "%s", err.msg);
}

Test(ddp_env, shell_quote)
{
    char b[64];
    skiff_err err = {0};
    const char *cases[][2] = {{"n1", "n1"},     {"a b", "'a b'"},    {"it's", "'it'\\''s'"},
                              {"", "''"},       {"$(x)", "'$(x)'"},  {"slurm:1.0.4", "slurm:1.0.4"},
                              {"a;b", "'a;b'"}, {"RANK,X", "RANK,X"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(skiff_shell_quote(cases[i][0], b, sizeof(b), &err), 0);
        cr_expect_str_eq(b, cases[i][1]);
    }
    cr_expect_eq(
        skiff_shell_quote("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b, sizeof(b), &err),
        -1);
}

/* env = base inputs + every NAME=VALUE of prev (as srun would pass them on) */
static size_t chain(const char **env, const char *const *base, const struct skiff_ddp_env *prev)
{
    size_t n = 0;
    for (size_t i = 0; base[i]; i++)
        env[n++] = base[i];
    for (size_t i = 0; prev && i < prev->n; i++)
        env[n++] = prev->vars[i].kv;
    env[n] = NULL;
    return n;
}

Test(ddp_env, inherited_from_a_batch_script)
{
    const char *batch[] = {"SLURM_JOB_ID=42", "SLURM_PROCID=0", "SLURMD_NODENAME=n9", NULL};
    const char *task[] = {STEP3(4, 1, 1), NULL};
    const char *env[MAXV + SKIFF_DDP_MAX_VARS];
    struct skiff_ddp_env b, t, again, user;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(batch), NULL, &b, &err), 0, "%s", err.msg);
    cr_assert_str_eq(skiff_ddp_env_get(&b, "RANK"), "0");
    cr_assert_str_eq(skiff_ddp_env_get(&b, "WORLD_SIZE"), "1");

    /* srun passes the batch script's exports to the task: recomputed */
    chain(env, task, &b);
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), NULL, &t, &err), 0, "%s", err.msg);
    cr_expect_str_eq(skiff_ddp_env_get(&t, "RANK"), "4");
    cr_expect_str_eq(skiff_ddp_env_get(&t, "WORLD_SIZE"), "7");
    cr_expect_str_eq(skiff_ddp_env_get(&t, "MASTER_ADDR"), "gpu-a01");
    cr_expect_str_eq(skiff_ddp_env_get(&t, "SKIFF_DDP_ENV_TASK"), "slurm:42.0.4");

    /* the same task computing again (plugin, then skiff-ddp-env inside): nothing changes */
    const char *env2[2 * MAXV];
    size_t n = 0;
    for (size_t i = 0; task[i]; i++)
        env2[n++] = task[i];
    for (size_t i = 0; i < t.n; i++)
        env2[n++] = t.vars[i].kv;
    env2[n] = NULL;
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env2), NULL, &again, &err), 0);
    cr_expect_eq(again.n, 0, "recomputed %zu variables for the same task", again.n);

    /* the user changed RANK after the eval (RANK=5 srun ...): that one is theirs */
    n = chain(env, task, &b);
    for (size_t i = 0; i < n; i++)
        if (!strncmp(env[i], "RANK=", 5))
            env[i] = "RANK=5";
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), NULL, &user, &err), 0);
    cr_expect_null(skiff_ddp_env_get(&user, "RANK"), "the user's RANK=5 was overwritten");
    cr_expect_str_eq(skiff_ddp_env_get(&user, "WORLD_SIZE"), "7");
}

Test(ddp_env, marker_without_hashes_is_not_trusted)
{
    /* a hand-written marker cannot make skiff overwrite the user's values */
    const char *env[] = {STEP3(4, 1, 1), "RANK=0", "SKIFF_DDP_ENV_TASK=slurm:42.batch.0", "SKIFF_DDP_ENV_VARS=RANK",
                         NULL};
    struct skiff_ddp_env out;
    skiff_err err = {0};
    cr_assert_eq(skiff_ddp_env_compute(table_get, CTX(env), NULL, &out, &err), 0);
    cr_expect_null(skiff_ddp_env_get(&out, "RANK"));
}
