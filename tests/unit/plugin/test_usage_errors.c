/* The error contract for the plugin's --container-* values
 * (doc/error_handling.md): a bad value is refused with a message that says
 * what is wrong (code 0), never with a strerror text such as
 * ": Invalid argument" appended. */
#include <criterion/criterion.h>
#include <string.h>

#include "options.h"

static const struct {
    enum skiff_opt_id id;
    const char *arg;
} bad[] = {
    {SKIFF_OPT_IMAGE, "foo.sqsh"},
    {SKIFF_OPT_IMAGE, "not an image"},
    {SKIFF_OPT_IMAGE, ""},
    {SKIFF_OPT_MOUNTS, "/a:/b:bogus"},
    {SKIFF_OPT_MOUNTS, "/a:/b:c:d"},
    {SKIFF_OPT_MOUNTS, "/a:/b:x-create=maybe"},
    {SKIFF_OPT_MOUNTS, "tmpfs"},
    {SKIFF_OPT_MOUNTS, "/tmp:"},
    {SKIFF_OPT_MOUNTS, "/a:/b:suid"},
    {SKIFF_OPT_MOUNTS, "rel:/b"},
    {SKIFF_OPT_MOUNTS, "/a:/b,,/c:/d"},
    {SKIFF_OPT_NAME, "bad name"},
    {SKIFF_OPT_NAME, "ok:often"},
    {SKIFF_OPT_SAVE, "/"},
    {SKIFF_OPT_ENV, "1BAD"},
    {SKIFF_OPT_UNSHARE, "pid"},
};

Test(usage_errors, bad_values_say_why_without_a_strerror_suffix)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct skiff_opts o;
        skiff_err err;
        skiff_opts_init(&o);
        skiff_err_clear(&err);
        int rc = skiff_opts_set(&o, bad[i].id, 0, bad[i].arg, &err);
        cr_assert_eq(rc, -1, "--%s='%s' was accepted", skiff_opt_flag(bad[i].id), bad[i].arg);
        cr_assert_neq(err.msg[0], '\0', "--%s='%s': no message", skiff_opt_flag(bad[i].id), bad[i].arg);
        cr_assert_null(strstr(err.msg, ": Invalid argument"), "--%s='%s': %s", skiff_opt_flag(bad[i].id), bad[i].arg,
                       err.msg);
        cr_assert_eq(err.code, 0, "--%s='%s': code %d (%s)", skiff_opt_flag(bad[i].id), bad[i].arg, err.code, err.msg);
        skiff_opts_free(&o);
    }
}

Test(usage_errors, boolean_pairs_given_both_ways)
{
    struct skiff_opts o;
    skiff_err err;
    skiff_opts_init(&o);
    skiff_err_clear(&err);
    cr_assert_eq(skiff_opts_set(&o, SKIFF_OPT_WRITABLE, 0, NULL, &err), 0);
    cr_assert_eq(skiff_opts_set(&o, SKIFF_OPT_WRITABLE, 1, NULL, &err), -1);
    cr_assert_null(strstr(err.msg, ": Invalid argument"), "%s", err.msg);
    cr_assert_eq(err.code, 0);
    skiff_opts_free(&o);
}
