/* plugstack.conf arguments (plugin/args.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

static struct skiff_plugin_args a;
static skiff_err err;

/* Slurm hands the plugin writable strings: copy the literals. */
static int parse(int n, const char *const *in)
{
    char *av[16];
    for (int i = 0; i < n; i++)
        av[i] = strdup(in[i]);
    skiff_err_clear(&err);
    int rv = skiff_plugin_args_parse(&a, n, av, &err);
    for (int i = 0; i < n; i++)
        free(av[i]);
    return rv;
}
#define PARSE(...) parse((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), (const char *[]){__VA_ARGS__})

Test(args, defaults_match_pyxis)
{
    cr_assert_eq(skiff_plugin_args_parse(&a, 0, NULL, &err), 0);
    cr_assert_eq(a.scope, SKIFF_SCOPE_GLOBAL);
    cr_assert(a.sbatch_support);
    cr_assert(!a.execute_entrypoint);
    cr_assert(a.ddp_env);
    cr_assert_str_eq(a.runtime_path, "/run/skiff");
    cr_assert_eq(a.timeout_s, 300);
    cr_assert_str_eq(a.helper, "");
}

Test(args, every_argument)
{
    cr_assert_eq(PARSE("runtime_path=/run/skiff", "execute_entrypoint=1", "container_scope=job", "sbatch_support=no",
                       "importer=/usr/bin/imp", "config=/etc/skiff/other.conf", "default_registry=reg.local:5000",
                       "ddp_env=0", "block_cache_path=/var/tmp/skiff-blocks"),
                 0, "%s", err.msg);
    cr_assert_str_eq(a.runtime_path, "/run/skiff");
    cr_assert_str_eq(a.block_cache_path, "/var/tmp/skiff-blocks");
    cr_assert(a.execute_entrypoint);
    cr_assert_eq(a.scope, SKIFF_SCOPE_JOB);
    cr_assert(!a.sbatch_support);
    cr_assert_str_eq(a.importer, "/usr/bin/imp");
    cr_assert_str_eq(a.config, "/etc/skiff/other.conf");
    cr_assert_str_eq(a.default_registry, "reg.local:5000");
    cr_assert(!a.ddp_env);
}

Test(args, pyxis_only_arguments_accepted)
{
    cr_assert_eq(PARSE("use_squashfuse=1", "use_enroot_load=0"), 0, "%s", err.msg);
    cr_assert(strstr(a.ignored, "use_squashfuse"));
}

Test(args, unknown_is_fatal_and_named)
{
    cr_assert_eq(PARSE("runtime_path=/r", "bogus=1"), -1);
    cr_assert(strstr(err.msg, "unknown argument 'bogus=1'"), "%s", err.msg);
    cr_assert_eq(PARSE("justaword"), -1);
    cr_assert(strstr(err.msg, "not KEY=VALUE"), "%s", err.msg);
}

Test(args, bad_values)
{
    cr_assert_eq(PARSE("container_scope=node"), -1);
    cr_assert(strstr(err.msg, "use job or global"), "%s", err.msg);
    cr_assert_eq(PARSE("runtime_path=relative"), -1);
    cr_assert(strstr(err.msg, "absolute path"), "%s", err.msg);
    cr_assert_eq(PARSE("timeout=0"), -1);
    cr_assert(strstr(err.msg, "timeout=0: give whole seconds"), "%s", err.msg);
    cr_assert_eq(PARSE("timeout=5m"), -1);
    cr_assert_eq(PARSE("helper=bin/skiff-helper"), -1);
    cr_assert(strstr(err.msg, "absolute path"), "%s", err.msg);
    cr_assert_eq(PARSE("timeout=30", "helper=/opt/skiff/helper"), 0, "%s", err.msg);
    cr_assert_eq(a.timeout_s, 30);
    cr_assert_str_eq(a.helper, "/opt/skiff/helper");
    cr_assert_eq(PARSE("sbatch_support=maybe"), -1);
    cr_assert(strstr(err.msg, "not a boolean"), "%s", err.msg);
    cr_assert_eq(PARSE("default_registry=a/b"), -1);
}
