/* --container-* option parsing (plugin/options.c): pyxis names and meaning,
 * tolerance to being called twice, environment fallbacks, clear errors. */
#include <criterion/criterion.h>
#include <sched.h>
#include <string.h>

#include "options.h"

static struct skiff_opts o;
static skiff_err err;

static size_t count(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static void setup(void)
{
    skiff_opts_init(&o);
    skiff_err_clear(&err);
}
static void teardown(void)
{
    skiff_opts_free(&o);
}
TestSuite(options, .init = setup, .fini = teardown);

Test(options, image_path_uri_and_bare)
{
    cr_assert_eq(skiff_opts_set(&o, "container-image", "./a.sqsh", &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-image", "/x/a.sqsh", &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-image", "docker://nvcr.io#nvidia/pytorch:24.01", &err), 0, "%s",
                 err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-image", "ubuntu:22.04", &err), 0, "%s", err.msg);
    cr_assert_str_eq(o.req.image, "ubuntu:22.04"); /* last value wins */
    cr_assert(skiff_opts_active(&o));
}

Test(options, sqsh_without_path_says_what_to_write)
{
    cr_assert_eq(skiff_opts_set(&o, "container-image", "foo.sqsh", &err), -1);
    cr_assert(strstr(err.msg, "write ./foo.sqsh"), "%s", err.msg);
    cr_assert(strstr(err.msg, "--container-image"), "%s", err.msg);
    cr_assert_null(o.req.image);
}

Test(options, invalid_image_says_neither)
{
    cr_assert_eq(skiff_opts_set(&o, "container-image", "Bad Image!", &err), -1);
    cr_assert(strstr(err.msg, "neither a file path"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-image", "", &err), -1);
    cr_assert(strstr(err.msg, "needs an argument"), "%s", err.msg);
}

Test(options, mounts_split_dedupe_and_validate)
{
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/a:/b,/c:/d:ro+rbind,tmpfs:/t", &err), 0, "%s", err.msg);
    cr_assert_eq(count(o.req.mounts), 3);
    /* Slurm calls callbacks twice: the same entries are not added again */
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/a:/b,/c:/d:ro+rbind,tmpfs:/t", &err), 0);
    cr_assert_eq(count(o.req.mounts), 3);
    cr_assert_str_eq(o.req.mounts[1], "/c:/d:ro+rbind");
    cr_assert_null(o.req.mounts[3]);
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "./rel:/r", &err), 0, "%s", err.msg);
    cr_assert_eq(count(o.req.mounts), 4);
}

Test(options, mounts_errors)
{
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/a:/b:bogus", &err), -1);
    cr_assert(strstr(err.msg, "bogus"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/a:/b,,/c:/d", &err), -1);
    cr_assert(strstr(err.msg, "empty mount entry"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/a:/b,", &err), -1);
    /* pyxis: a target that is neither absolute nor ./relative, at srun */
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "/tmp:mnt:ro", &err), -1);
    cr_assert(strstr(err.msg, "neither absolute nor relative"), "%s", err.msg);
    /* umount:DST and a ./relative source are fine */
    cr_assert_eq(skiff_opts_set(&o, "container-mounts", "umount:/root,./data:./mnt", &err), 0, "%s", err.msg);
}

Test(options, workdir_absolute_or_relative)
{
    /* a relative one is resolved where the container starts (pyxis) */
    cr_assert_eq(skiff_opts_set(&o, "container-workdir", "../", &err), 0, "%s", err.msg);
    cr_assert_str_eq(o.req.workdir, "../");
    cr_assert_eq(skiff_opts_set(&o, "container-workdir", "/w", &err), 0);
    cr_assert_str_eq(o.req.workdir, "/w");
    cr_assert_eq(skiff_opts_set(&o, "container-workdir", "", &err), -1);
}

Test(options, name_modes)
{
    cr_assert_eq(skiff_opts_set(&o, "container-name", "c1", &err), 0);
    cr_assert_eq(o.req.name_mode, SKIFF_NAME_AUTO);
    cr_assert_eq(skiff_opts_set(&o, "container-name", "c1:create", &err), 0);
    cr_assert_eq(o.req.name_mode, SKIFF_NAME_CREATE);
    cr_assert_str_eq(o.req.name_given, "c1");
    cr_assert_eq(skiff_opts_set(&o, "container-name", "c1:exec", &err), 0);
    cr_assert_eq(o.req.name_mode, SKIFF_NAME_EXEC);
    cr_assert_eq(skiff_opts_set(&o, "container-name", "c1:no_exec", &err), 0);
    cr_assert_eq(o.req.name_mode, SKIFF_NAME_NO_EXEC);
    cr_assert_eq(skiff_opts_set(&o, "container-name", "c1:often", &err), -1);
    cr_assert(strstr(err.msg, "unknown mode 'often'"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-name", "a/b", &err), -1);
    cr_assert(strstr(err.msg, "not a valid container name"), "%s", err.msg);
    cr_assert(skiff_opts_active(&o)); /* a name alone is a container */
}

Test(options, save_not_a_directory)
{
    cr_assert_eq(skiff_opts_set(&o, "container-save", "/out/", &err), -1);
    cr_assert(strstr(err.msg, "is a directory"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-save", "./out.sqsh", &err), 0);
}

Test(options, boolean_pairs_refuse_both)
{
    cr_assert(o.req.writable, "writable unless said otherwise (pyxis)");
    cr_assert_eq(skiff_opts_set(&o, "container-readonly", NULL, &err), 0);
    cr_assert(!o.req.writable);
    cr_assert_eq(skiff_opts_set(&o, "container-readonly", NULL, &err), 0, "Slurm may pass a flag twice");
    cr_assert_eq(skiff_opts_set(&o, "container-writable", NULL, &err), -1);
    cr_assert(strstr(err.msg, "--container-readonly and --container-writable contradict each other"), "%s", err.msg);
    cr_assert(!o.req.writable);
    cr_assert_eq(skiff_opts_set(&o, "container-remap-root", NULL, &err), 0);
    cr_assert_eq(skiff_opts_set(&o, "container-remap-root", NULL, &err), 0);
    cr_assert(o.req.remap_root);
    cr_assert_eq(skiff_opts_set(&o, "no-container-remap-root", NULL, &err), -1);
    cr_assert(strstr(err.msg, "--container-remap-root and --no-container-remap-root"), "%s", err.msg);
    /* the flags given that only a starting container uses, as a joining step names them */
    char list[256];
    cr_assert_eq(skiff_opts_start_only(&o, list, sizeof(list)), 2);
    cr_assert_str_eq(list, "--container-remap-root, --container-readonly");
}

Test(options, env_names_and_assignments)
{
    cr_assert_eq(skiff_opts_set(&o, "container-env", "A,B_2,C=x=y", &err), 0, "%s", err.msg);
    cr_assert_eq(count(o.req.env), 3);
    cr_assert_str_eq(o.req.env[2], "C=x=y");
    cr_assert_eq(skiff_opts_set(&o, "container-env", "1BAD", &err), -1);
    cr_assert(strstr(err.msg, "not a variable name"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-env", "A,", &err), -1);
}

Test(options, env_file_only_when_a_container_starts)
{
    cr_assert_eq(skiff_opts_set(&o, "container-env-file", "./run.env", &err), 0, "%s", err.msg);
    cr_assert_str_eq(o.req.env_file, "./run.env");
    cr_assert_eq(skiff_opts_check(&o, &err), -1, "needs a container");
    cr_assert(strstr(err.msg, "--container-env-file needs --container-image"), "%s", err.msg);
    cr_assert_eq(skiff_opts_set(&o, "container-image", "/i.sqsh", &err), 0);
    char list[128];
    cr_assert_eq(skiff_opts_start_only(&o, list, sizeof(list)), 1);
    cr_assert_str_eq(list, "--container-env-file");
    cr_assert_eq(skiff_opts_set(&o, "container-env-file", "", &err), -1);
    cr_assert(strstr(err.msg, "needs an argument"), "%s", err.msg);
}

Test(options, unshare)
{
    cr_assert_eq(skiff_opts_set(&o, "container-unshare", "net,ipc,uts", &err), 0);
    cr_assert_eq(o.req.unshare_flags, CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS);
    cr_assert_eq(skiff_opts_set(&o, "container-unshare", "pid", &err), -1);
    cr_assert(strstr(err.msg, "unknown namespace 'pid'"), "%s", err.msg);
}

static const char *fake_env(void *ctx, const char *name)
{
    const char *const *kv = ctx;
    for (size_t i = 0; kv[i]; i += 2)
        if (!strcmp(kv[i], name))
            return kv[i + 1];
    return NULL;
}

Test(options, env_fallbacks_skiff_then_pyxis_cli_wins)
{
    const char *env[] = {"SKIFF_CONTAINER_IMAGE",
                         "/s.sqsh",
                         "PYXIS_CONTAINER_IMAGE",
                         "/p.sqsh",
                         "PYXIS_CONTAINER_WORKDIR",
                         "/pw",
                         "SKIFF_CONTAINER_READONLY",
                         "yes",
                         "PYXIS_CONTAINER_REMAP_ROOT",
                         "1",
                         "SKIFF_CONTAINER_MOUNTS",
                         "/a:/b",
                         NULL};
    skiff_opts_set(&o, "container-workdir", "/cli", &err);
    cr_assert_eq(skiff_opts_from_env(&o, fake_env, env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(o.req.image, "/s.sqsh");
    cr_assert_str_eq(o.req.workdir, "/cli");
    cr_assert(!o.req.writable);
    cr_assert(o.req.remap_root);
    cr_assert_eq(count(o.req.mounts), 1);
}

Test(options, env_fallback_bad_bool_names_variable)
{
    const char *env[] = {"PYXIS_CONTAINER_MOUNT_HOME", "maybe", NULL};
    cr_assert_eq(skiff_opts_from_env(&o, fake_env, env, &err), -1);
    cr_assert(strstr(err.msg, "PYXIS_CONTAINER_MOUNT_HOME='maybe'"), "%s", err.msg);
}

Test(options, check_combinations)
{
    skiff_opts_set(&o, "container-mounts", "/a:/b", &err);
    cr_assert_eq(skiff_opts_check(&o, &err), -1);
    cr_assert(strstr(err.msg, "needs --container-image"), "%s", err.msg);
    skiff_opts_set(&o, "container-image", "/i.sqsh", &err);
    cr_assert_eq(skiff_opts_check(&o, &err), 0);
    skiff_opts_set(&o, "container-save", "/o.sqsh", &err);
    skiff_opts_set(&o, "container-readonly", NULL, &err);
    cr_assert_eq(skiff_opts_check(&o, &err), -1);
    cr_assert(strstr(err.msg, "nothing to save"), "%s", err.msg);
}

Test(options, parse_bool)
{
    cr_assert_eq(skiff_parse_bool("YES"), 1);
    cr_assert_eq(skiff_parse_bool("0"), 0);
    cr_assert_eq(skiff_parse_bool("n"), 0);
    cr_assert_eq(skiff_parse_bool("2"), -1);
    cr_assert_eq(skiff_parse_bool(NULL), -1);
}
