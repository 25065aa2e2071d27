/* The training environment (hooks/lib/ddp_env.c): RANK, WORLD_SIZE,
 * MASTER_ADDR, ... computed from what Slurm or an MPI launcher put in a
 * task's environment (host lists, tasks-per-node lists, ranks), which the
 * SPANK plugin does as root in slurmstepd for every task.
 * Input: the environment, NAME=VALUE lines (the first of a name counts),
 * read through a getter that reuses one buffer, as spank_getenv's does.
 * Properties: a failure says why; an accepted result has at most
 * SKIFF_DDP_MAX_VARS distinct names, each entry "NAME=VALUE" with a
 * printable value, nothing the environment sets (unless skiff set it
 * earlier: SKIFF_DDP_ENV_VARS; its two markers are always new), RANK below WORLD_SIZE, LOCAL_RANK below
 * LOCAL_WORLD_SIZE, GROUP_RANK below GROUP_WORLD_SIZE, and a MASTER_PORT
 * above 1024. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_env.h"
#include "fuzzlib.h"

static const char *get(void *ctx, const char *name)
{
    static char buf[1 << 16];
    size_t n = strlen(name);
    for (const char *l = ctx; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        if (len > n && !strncmp(l, name, n) && l[n] == '=') {
            size_t vl = len - n - 1 < sizeof(buf) - 1 ? len - n - 1 : sizeof(buf) - 1;
            memcpy(buf, l + n + 1, vl);
            buf[vl] = '\0';
            return buf;
        }
        l = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static bool number(const struct skiff_ddp_env *e, const char *name, unsigned long long *v)
{
    const char *s = skiff_ddp_env_get(e, name);
    if (!s)
        return false;
    char *end;
    *v = strtoull(s, &end, 10);
    FUZZ_CHECK(*s && !*end, "%s='%s' is not a number", name, s);
    return true;
}

static void below(const struct skiff_ddp_env *e, const char *a, const char *b)
{
    unsigned long long x, y;
    if (number(e, a, &x) && number(e, b, &y))
        FUZZ_CHECK(x < y, "%s=%llu is not below %s=%llu", a, x, b, y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *env = fuzz_str(data, size);
    struct skiff_ddp_env out;
    skiff_err err = {0};
    int rc = skiff_ddp_env_compute(get, env, NULL, &out, &err);
    fuzz_check_failure(rc, &err, "skiff_ddp_env_compute");
    if (rc == 0) {
        FUZZ_CHECK(out.n <= SKIFF_DDP_MAX_VARS && out.source, "%zu variables", out.n);
        bool stale = get(env, "SKIFF_DDP_ENV_VARS") != NULL;
        for (size_t i = 0; i < out.n; i++) {
            const struct skiff_ddp_var *v = &out.vars[i];
            char kv[sizeof(v->kv)];
            snprintf(kv, sizeof(kv), "%s=%s", v->name, v->value);
            FUZZ_CHECK(v->name[0] && !strcmp(kv, v->kv), "entry '%s' for %s", v->kv, v->name);
            for (const char *c = v->value; *c; c++)
                FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f, "%s has a control character", v->name);
            for (size_t k = 0; k < i; k++)
                FUZZ_CHECK(strcmp(out.vars[k].name, v->name), "%s twice", v->name);
            /* (skiff's own markers are always written anew) */
            bool marker = !strncmp(v->name, "SKIFF_DDP_ENV_", 14);
            FUZZ_CHECK(stale || marker || !get(env, v->name), "%s is set already and was computed again", v->name);
        }
        below(&out, "RANK", "WORLD_SIZE");
        below(&out, "LOCAL_RANK", "LOCAL_WORLD_SIZE");
        below(&out, "GROUP_RANK", "GROUP_WORLD_SIZE");
        unsigned long long port;
        if (number(&out, "MASTER_PORT", &port))
            FUZZ_CHECK(port > 1024 && port <= 65535, "MASTER_PORT=%llu", port);
    }
    /* the pieces, on their own */
    unsigned long tasks, nodes;
    const char *tpn = get(env, "SLURM_STEP_TASKS_PER_NODE");
    if (tpn) {
        char *copy = strdup(tpn);
        rc = skiff_tasks_per_node(copy, 0, &tasks, &nodes, &err);
        fuzz_check_failure(rc, &err, "skiff_tasks_per_node");
        free(copy);
    }
    free(env);
    return 0;
}
