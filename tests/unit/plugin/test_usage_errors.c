/* The error contract for the plugin's --container-* values
 * (doc/error_handling.md): a bad value is refused with a message that says
 * what is wrong (code 0), never with a strerror text such as
 * ": Invalid argument" appended. */
#include <criterion/criterion.h>
#include <string.h>

#include "options.h"

static const struct {
    const char *flag;
    const char *arg;
} bad[] = {
    {"container-image", "foo.sqsh"},
    {"container-image", "not an image"},
    {"container-image", ""},
    {"container-mounts", "/a:/b:bogus"},
    {"container-mounts", "/a:/b:c:d"},
    {"container-mounts", "/a:/b:x-create=maybe"},
    {"container-mounts", "tmpfs"},
    {"container-mounts", "/tmp:"},
    {"container-mounts", "/a:/b:suid"},
    {"container-mounts", "rel:/b"},
    {"container-mounts", "/a:/b,,/c:/d"},
    {"container-name", "bad name"},
    {"container-name", "ok:often"},
    {"container-save", "/"},
    {"container-env", "1BAD"},
    {"container-unshare", "pid"},
};

Test(usage_errors, bad_values_say_why_without_a_strerror_suffix)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct skiff_opts o;
        skiff_err err;
        skiff_opts_init(&o);
        skiff_err_clear(&err);
        int rc = skiff_opts_set(&o, bad[i].flag, bad[i].arg, &err);
        cr_assert_eq(rc, -1, "--%s='%s' was accepted", bad[i].flag, bad[i].arg);
        cr_assert_neq(err.msg[0], '\0', "--%s='%s': no message", bad[i].flag, bad[i].arg);
        cr_assert_null(strstr(err.msg, ": Invalid argument"), "--%s='%s': %s", bad[i].flag, bad[i].arg, err.msg);
        cr_assert_eq(err.code, 0, "--%s='%s': code %d (%s)", bad[i].flag, bad[i].arg, err.code, err.msg);
        skiff_opts_free(&o);
    }
}

Test(usage_errors, boolean_pairs_given_both_ways)
{
    struct skiff_opts o;
    skiff_err err;
    skiff_opts_init(&o);
    skiff_err_clear(&err);
    cr_assert_eq(skiff_opts_set(&o, "container-readonly", NULL, &err), 0);
    cr_assert_eq(skiff_opts_set(&o, "container-writable", NULL, &err), -1);
    cr_assert_null(strstr(err.msg, ": Invalid argument"), "%s", err.msg);
    cr_assert_eq(err.code, 0);
    skiff_opts_free(&o);
}
