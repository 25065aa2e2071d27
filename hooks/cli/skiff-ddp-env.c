/* skiff-ddp-env: prints the torchrun-style environment for the current task.
 *   eval "$(skiff-ddp-env)"            in a task started by srun or mpirun
 *   skiff-ddp-env --env                NAME=VALUE lines (env files)
 *   skiff-ddp-env --expand LIST        one host per line (no scontrol needed)
 *   skiff-ddp-env --compress HOST...   the bracket form (or hosts on stdin)
 * Advice goes to stderr; exit 0 ok, 1 bad launcher variables, 2 usage (a
 * malformed host list given to --expand/--count/--compress included). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_env.h"
#include "hostlist.h"

static void usage(FILE *f)
{
    fputs("usage: skiff-ddp-env [--env] [--quiet]\n"
          "       skiff-ddp-env --expand HOSTLIST | --count HOSTLIST\n"
          "       skiff-ddp-env --compress [HOST...]   (hosts on stdin when none given)\n"
          "Prints `export NAME=VALUE` lines for RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
          "NODE_RANK, MASTER_ADDR, MASTER_PORT, ... computed from Slurm's or the MPI launcher's\n"
          "variables; variables already set are left alone. Use: eval \"$(skiff-ddp-env)\".\n"
          "SKIFF_DDP_ENV=0 turns it off; SKIFF_DDP_PORT_RANGE=LO-HI picks the port range.\n"
          "See doc/training-env.md.\n",
          f);
}

/* A host list the user gave that does not parse (err->code 0) is a usage
 * error; running out of memory is not. */
static int list_failed(const skiff_err *err)
{
    fprintf(stderr, "skiff-ddp-env: %s\n", err->msg);
    return err->code ? 1 : 2;
}

static int do_expand(const char *list, int count_only)
{
    skiff_err err = {0};
    if (count_only) {
        size_t n;
        if (skiff_hostlist_count(list, &n, &err) < 0)
            return list_failed(&err);
        printf("%zu\n", n);
        return 0;
    }
    struct skiff_hostlist hl;
    if (skiff_hostlist_expand(list, 0, &hl, &err) < 0)
        return list_failed(&err);
    for (size_t i = 0; i < hl.n; i++)
        puts(hl.hosts[i]);
    skiff_hostlist_free(&hl);
    return 0;
}

static int do_compress(char **hosts, int n)
{
    skiff_err err = {0};
    char **list = hosts;
    size_t count = (size_t)n, cap = 0;
    char *line = NULL;
    size_t llen = 0;
    if (n == 0) {
        list = NULL;
        count = 0;
        ssize_t r;
        while ((r = getline(&line, &llen, stdin)) >= 0) {
            while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r'))
                line[--r] = '\0';
            if (r == 0)
                continue;
            if (count == cap) {
                cap = cap ? cap * 2 : 64;
                char **nl = reallocarray(list, cap, sizeof(char *));
                if (!nl) {
                    fprintf(stderr, "skiff-ddp-env: out of memory\n");
                    return 1;
                }
                list = nl;
            }
            list[count] = strdup(line);
            if (!list[count]) {
                fprintf(stderr, "skiff-ddp-env: out of memory\n");
                return 1;
            }
            count++;
        }
        free(line);
    }
    char *s = skiff_hostlist_compress((const char *const *)list, count, &err);
    if (list != hosts) {
        for (size_t i = 0; i < count; i++)
            free(list[i]);
        free(list);
    }
    if (!s)
        return list_failed(&err);
    puts(s);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    int env_format = 0, quiet = 0;
    static const struct option opts[] = {
        {"env", no_argument, NULL, 'e'},          {"quiet", no_argument, NULL, 'q'},
        {"expand", required_argument, NULL, 'x'}, {"count", required_argument, NULL, 'n'},
        {"compress", no_argument, NULL, 'c'},     {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
    };
    /* getopt's messages name the program, however it was run */
    static char prog[] = "skiff-ddp-env";
    argv[0] = prog;
    int c;
    while ((c = getopt_long(argc, argv, "eqh", opts, NULL)) != -1) {
        switch (c) {
        case 'e':
            env_format = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'x':
            return do_expand(optarg, 0);
        case 'n':
            return do_expand(optarg, 1);
        case 'c':
            return do_compress(argv + optind, argc - optind);
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("skiff-ddp-env %s\n", SKIFF_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "skiff-ddp-env: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    skiff_err err = {0};
    struct skiff_ddp_env env;
    if (skiff_ddp_env_compute(skiff_ddp_getenv_process, NULL, NULL, &env, &err) < 0) {
        fprintf(stderr, "skiff-ddp-env: %s\n", err.msg);
        return 1;
    }
    if (!quiet && env.notes[0]) {
        for (char *p = env.notes, *nl; *p; p = nl + 1) {
            nl = strchr(p, '\n');
            if (!nl)
                break;
            fprintf(stderr, "skiff-ddp-env: %.*s\n", (int)(nl - p), p);
        }
    }
    for (size_t i = 0; i < env.n; i++) {
        if (env_format) {
            /* Values never hold newlines (numbers, host names, ids). */
            printf("%s\n", env.vars[i].kv);
            continue;
        }
        char q[2 * SKIFF_DDP_VALUE_MAX + 8];
        if (skiff_shell_quote(env.vars[i].value, q, sizeof(q), &err) < 0) {
            fprintf(stderr, "skiff-ddp-env: %s: %s\n", env.vars[i].name, err.msg);
            return 1;
        }
        printf("export %s=%s\n", env.vars[i].name, q);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
