#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "error.h"

Test(error, sets_message_and_code)
{
    skiff_err err;
    skiff_err_clear(&err);
    cr_assert_eq(skiff_error(&err, ENOENT, "open %s", "/x"), -1);
    cr_assert_eq(err.code, ENOENT);
    cr_assert_str_eq(err.msg, "open /x: No such file or directory");
}

Test(error, wrap_prefixes_context)
{
    skiff_err err;
    skiff_error(&err, 0, "bad digest");
    cr_assert_eq(skiff_err_wrap(&err, "layer %d", 3), -1);
    cr_assert_str_eq(err.msg, "layer 3: bad digest");
    cr_assert_eq(err.code, 0);
}

Test(error, wrap_truncates_without_overflow)
{
    skiff_err err;
    char big[3000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    skiff_error(&err, EINVAL, "%s", big);
    skiff_err_wrap(&err, "%s", big);
    cr_assert_lt(strlen(err.msg), (size_t)SKIFF_ERR_MSG_MAX);
}
