/* The start request (runtime/lib/container/request.c): what the encoder
 * writes the decoder reads back, and the decoder holds everything else to
 * its bounds. */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "records.h"
#include "request.h"

static skiff_err err;
static struct skiff_config cfg;

static void setup(void)
{
    skiff_config_for_user(1000, "u", "/home/u");
}
TestSuite(request, .init = setup);

Test(request, round_trip)
{
    const char *mounts[] = {"/a:/b:ro", "tmpfs:/t", NULL};
    const char *env[] = {"KEEP", "SET=x=y", NULL};
    const char *command[] = {"python3", NULL};
    const char *job[] = {"ENROOT_PASSWORD=tok", "HOME=/home/u", NULL};
    struct skiff_start_request in, out;
    skiff_start_request_init(&in);
    in.image = "docker://x:1";
    in.name = "c.n1";
    in.name_given = "c";
    in.name_mode = SKIFF_NAME_EXEC;
    in.mounts = mounts;
    in.env = env;
    in.env_file = "./run.env";
    in.command = command;
    in.writable = true;
    in.use_entrypoint = false;
    in.unshare_flags = CLONE_NEWNET | CLONE_NEWUTS;
    in.timeout_s = 300;
    in.enroot_env = job;       /* the job's, for enroot's $VAR passwords and site files */
    in.enroot_user_dir = "/x"; /* not on the wire */
    in.no_warm = true;         /* not on the wire */
    struct skiff_config c0;
    cr_assert_eq(skiff_config_load(&c0, "/dev/null", false, &err), 0, "%s", err.msg);
    snprintf(c0.data_path, sizeof(c0.data_path), "/d/${UID}");
    struct skiff_recbuf b = {0};
    cr_assert_eq(skiff_start_request_encode(&c0, &in, &b, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_start_request_decode(b.p, b.len, &cfg, &out, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.data_path, "/d/${UID}"); /* as root expanded it: not again */
    cr_assert_str_eq(out.image, "docker://x:1");
    cr_assert_str_eq(out.name, "c.n1");
    cr_assert_str_eq(out.name_given, "c");
    cr_assert_eq(out.name_mode, SKIFF_NAME_EXEC);
    cr_assert(out.writable && !out.remap_root && !out.use_entrypoint && !out.no_warm);
    cr_assert_eq(out.unshare_flags, CLONE_NEWNET | CLONE_NEWUTS);
    cr_assert_eq(out.timeout_s, 300);
    cr_assert_str_eq(out.mounts[1], "tmpfs:/t");
    cr_assert_null(out.mounts[2]);
    cr_assert_str_eq(out.env[0], "KEEP");
    cr_assert_str_eq(out.env[1], "SET=x=y");
    cr_assert_str_eq(out.env_file, "./run.env");
    cr_assert_str_eq(out.command[0], "python3");
    cr_assert_null(out.hook_env);
    cr_assert_str_eq(out.enroot_env[0], "ENROOT_PASSWORD=tok");
    cr_assert_str_eq(out.enroot_env[1], "HOME=/home/u");
    cr_assert_null(out.enroot_env[2]);
    cr_assert_null(out.enroot_user_dir);
    cr_assert_null(out.workdir);
    cr_assert_eq(out.fuse_fd, -1);
    skiff_start_request_free(&out);
    skiff_recbuf_free(&b);
}

/* decode's answer for records given as "T:value" strings */
static int decode(int n, const char *const *recs)
{
    struct skiff_recbuf b = {0};
    struct skiff_start_request r;
    for (int i = 0; i < n; i++)
        cr_assert_eq(skiff_rec_put(&b, recs[i][0], recs[i] + 2, &err), 0);
    skiff_err_clear(&err);
    int rc = skiff_start_request_decode(b.p, b.len, &cfg, &r, &err);
    skiff_start_request_free(&r);
    skiff_recbuf_free(&b);
    return rc;
}
#define DECODE(...) decode((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), (const char *[]){__VA_ARGS__})
#define REFUSED(why, ...)                                                                                              \
    do {                                                                                                               \
        cr_assert_eq(DECODE(__VA_ARGS__), -1);                                                                         \
        cr_assert(strstr(err.msg, why), "'%s' lacks '%s'", err.msg, why);                                              \
    } while (0)

Test(request, decoding_is_strict)
{
    cr_assert_eq(DECODE("o:timeout_s=300", "o:locale_env=LANG=C.UTF-8"), 0, "%s", err.msg);
    REFUSED("unknown field 'bogus", "o:bogus=1");
    REFUSED("unknown record 0x78", "x:y");
    REFUSED("bad configuration record", "c:no-equals");
    REFUSED("no_such_key", "c:no_such_key=1");
    REFUSED("given twice", "o:image=/a", "o:image=/b");
    REFUSED("not 0 or 1", "o:writable=yes");
    REFUSED("not a count", "o:timeout_s=-1");
    REFUSED("not a count", "o:unshare_flags=0x40000000");
    REFUSED("not a count", "o:name_mode=99999999999");
    REFUSED("timeout_s 86401 is over", "o:timeout_s=86401");
    REFUSED("name_mode 4", "o:name_mode=4");
    REFUSED("other namespaces", "o:unshare_flags=131072"); /* CLONE_NEWNS */
    REFUSED("unknown configuration key", "c:=x");
}

Test(request, lists_are_bounded)
{
    struct skiff_recbuf b = {0};
    struct skiff_start_request r;
    for (int i = 0; i <= SKIFF_REQUEST_LIST_MAX; i++)
        cr_assert_eq(skiff_rec_putf(&b, SKIFF_REQ_FIELD, &err, "mounts=/m%d:/m%d", i, i), 0);
    cr_assert_eq(skiff_start_request_decode(b.p, b.len, &cfg, &r, &err), -1);
    cr_assert(strstr(err.msg, "more than 4096 entries in mounts"), "%s", err.msg);
    skiff_start_request_free(&r);
    skiff_recbuf_free(&b);
}
