/* "key = value" files and the boolean vocabulary (common/conf.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"

Test(conf, a_line_is_split_trimmed_and_unquoted)
{
    char a[] = "  key =  \"a value\"  # comment", b[] = "   # only a comment", c[] = "no equals sign", d[] = "k=v=w";
    char *k, *v;
    cr_assert_eq(skiff_conf_line(a, &k, &v), 1);
    cr_assert_str_eq(k, "key");
    cr_assert_str_eq(v, "a value");
    cr_assert_eq(skiff_conf_line(b, &k, &v), 0);
    cr_assert_eq(skiff_conf_line(c, &k, &v), -1);
    cr_assert_eq(skiff_conf_line(d, &k, &v), 1);
    cr_assert_str_eq(v, "v=w", "the first '=' splits");
}

Test(conf, one_boolean_vocabulary_in_any_case)
{
    static const char *const yes[] = {"yes", "YES", "True", "on", "Y", "1"}, *const no[] = {"no", "False", "OFF", "n",
                                                                                            "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        cr_assert_eq(skiff_parse_bool(yes[i]), 1, "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        cr_assert_eq(skiff_parse_bool(no[i]), 0, "%s", no[i]);
    cr_assert_eq(skiff_parse_bool("2"), -1);
    cr_assert_eq(skiff_parse_bool(""), -1);
    cr_assert_eq(skiff_parse_bool("yess"), -1);
    cr_assert_eq(skiff_parse_bool(NULL), -1);
}

static int collect(void *ctx, const char *key, const char *value, skiff_err *err)
{
    if (!strcmp(key, "bad"))
        return skiff_error(err, 0, "bad: '%s' refused", value);
    strcat(ctx, key);
    strcat(ctx, "=");
    strcat(ctx, value);
    strcat(ctx, ";");
    return 0;
}

Test(conf, a_file_is_read_in_order_and_errors_name_the_line)
{
    char path[] = "/tmp/skiff-conf-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("# header\na = 1\n\nb=two words\nbad = x\nc = 3\n", f);
    fclose(f);
    char got[256] = "";
    skiff_err err;
    cr_assert_eq(skiff_conf_read(path, "config", true, collect, got, &err), -1);
    cr_assert_str_eq(got, "a=1;b=two words;");
    char want[64];
    snprintf(want, sizeof want, "%s:5: bad: 'x' refused", path);
    cr_assert_str_eq(err.msg, want);
    f = fopen(path, "w");
    fputs("a = 1\nnonsense\n", f);
    fclose(f);
    cr_assert_eq(skiff_conf_read(path, "config", true, collect, got, &err), -1);
    snprintf(want, sizeof want, "%s:2: expected 'key = value'", path);
    cr_assert_str_eq(err.msg, want);
    unlink(path);
    cr_assert_eq(skiff_conf_read(path, "config", false, collect, got, &err), 0, "missing and optional");
    cr_assert_eq(skiff_conf_read(path, "config", true, collect, got, &err), -1);
    cr_assert(strstr(err.msg, "open config /tmp/skiff-conf-"), "%s", err.msg);
}

Test(conf, text_in_memory_reads_as_a_file_does)
{
    char got[256] = "";
    skiff_err err;
    cr_assert_eq(skiff_conf_parse("# header\na = 1\n\nb = \"two words\"\r\nc=3", "/etc/x.conf", collect, got, &err), 0,
                 "%s", err.msg);
    cr_assert_str_eq(got, "a=1;b=two words;c=3;", "a last line without a newline counts");
    cr_assert_eq(skiff_conf_parse("", "/etc/x.conf", collect, got, &err), 0, "empty text: no pairs");
    cr_assert_eq(skiff_conf_parse("a = 1\nbad = y\n", "/etc/x.conf", collect, got, &err), -1);
    cr_assert_str_eq(err.msg, "/etc/x.conf:2: bad: 'y' refused");
    cr_assert_eq(skiff_conf_parse("\n\nnonsense\n", "/etc/x.conf", collect, got, &err), -1);
    cr_assert_str_eq(err.msg, "/etc/x.conf:3: expected 'key = value'");
}
