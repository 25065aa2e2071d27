/* The helper's reply as root parses it (plugin/proto.c): everything in it
 * comes from a process the user controls. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "records.h"

static struct skiff_reply r;
static skiff_err err;

static int parse_buf(const struct skiff_recbuf *b)
{
    skiff_err_clear(&err);
    skiff_reply_free(&r);
    return skiff_reply_parse(b->p, b->len, &r, &err);
}

/* records from "T:value" strings, e.g. rec("S:0", "H:12", "Z:") */
static int parse_recs(int n, const char *const *in)
{
    struct skiff_recbuf b = {0};
    for (int i = 0; i < n; i++)
        cr_assert_eq(skiff_rec_put(&b, in[i][0], in[i] + 2, &err), 0);
    int rc = parse_buf(&b);
    skiff_recbuf_free(&b);
    return rc;
}
#define PARSE(...)                                                                                                     \
    parse_recs((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), (const char *[]){__VA_ARGS__})

Test(proto, a_start_reply)
{
    cr_assert_eq(PARSE("S:0", "H:4242", "T:1.5 2.25", "W:/opt/work", "E:PATH=/bin", "E:A=b=c", "P:/bin/echo", "C:hi",
                       "C:there", "Z:"),
                 0, "%s", err.msg);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.holder, 4242);
    cr_assert_str_eq(r.workdir, "/opt/work");
    cr_assert_str_eq(r.env[0], "PATH=/bin");
    cr_assert_str_eq(r.env[1], "A=b=c");
    cr_assert_null(r.env[2]);
    cr_assert_str_eq(r.entrypoint[0], "/bin/echo");
    cr_assert_str_eq(r.cmd[1], "there");
    cr_assert_float_eq(r.t_start_ms, 2.25, 1e-9);
}

Test(proto, a_failure_is_sanitised_and_its_phase_checked)
{
    cr_assert_eq(PARSE("S:-1", "p:hook", "n:2", "e:bad\nslurmstepd: forged log line\x1b[31m\xc2\x9b\xe2\x80\xae", "Z:"),
                 0, "%s", err.msg);
    cr_assert_eq(r.status, -1);
    cr_assert_str_eq(r.phase, "hook");
    cr_assert_eq(r.err.code, 2);
    cr_assert_str_eq(r.err.msg, "bad\\nslurmstepd: forged log line\\x1b[31m\\u009b\\u202e");
    cr_assert_eq(PARSE("S:-1", "p:root-owned", "e:x", "Z:"), 0);
    cr_assert_str_eq(r.phase, "mount");
    cr_assert_eq(PARSE("S:-1", "Z:"), 0);
    cr_assert_str_eq(r.err.msg, "failed without a reason");
    cr_assert_eq(PARSE("S:-1", "n:99999", "e:x", "Z:"), 0);
    cr_assert_eq(r.err.code, 0);
}

Test(proto, malformed_answers_are_errors)
{
    cr_assert_eq(PARSE("H:12", "S:0", "Z:"), -1);
    cr_assert(strstr(err.msg, "does not start with its status"), "%s", err.msg);
    cr_assert_eq(PARSE("S:1", "Z:"), -1);
    cr_assert_eq(PARSE("S:0", "S:0", "Z:"), -1);
    cr_assert_eq(PARSE("S:0", "H:12"), -1);
    cr_assert(strstr(err.msg, "no end"), "%s", err.msg);
    cr_assert_eq(PARSE("S:0", "Z:", "H:12"), -1);
    cr_assert(strstr(err.msg, "after the end"), "%s", err.msg);
    cr_assert_eq(PARSE("S:0", "q:what", "Z:"), -1);
    cr_assert(strstr(err.msg, "unknown record"), "%s", err.msg);
    cr_assert_eq(PARSE("S:0", "E:NOEQUALS", "Z:"), -1);
    cr_assert_eq(PARSE("S:0", "E:=x", "Z:"), -1);
    cr_assert_eq(PARSE("S:0", "W:relative", "Z:"), -1);
}

Test(proto, holder_pids_are_checked)
{
    const char *bad[] = {"0", "-1", "12a", "", " 12", "+12", "99999999999", "2147483648", "012"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char h[32];
        snprintf(h, sizeof(h), "H:%s", bad[i]);
        cr_assert_eq(PARSE("S:0", h, "Z:"), -1, "pid '%s' accepted", bad[i]);
    }
    cr_assert_eq(PARSE("S:0", "H:2147483647", "Z:"), 0);
}

Test(proto, a_truncated_record_is_an_error)
{
    static const char data[] = {'S', '0', 0, 'H', '1', '2'};
    skiff_err_clear(&err);
    cr_assert_eq(skiff_reply_parse(data, sizeof(data), &r, &err), -1);
    cr_assert(strstr(err.msg, "inside a record"), "%s", err.msg);
    skiff_reply_free(&r);
}

Test(proto, the_record_count_is_bounded)
{
    struct skiff_recbuf b = {0};
    cr_assert_eq(skiff_rec_put(&b, 'S', "0", &err), 0);
    for (int i = 0; i <= SKIFF_REPLY_RECORDS_MAX; i++)
        cr_assert_eq(skiff_rec_put(&b, 'C', "x", &err), 0);
    cr_assert_eq(skiff_rec_put(&b, 'Z', "", &err), 0);
    cr_assert_eq(parse_buf(&b), -1);
    cr_assert(strstr(err.msg, "more than"), "%s", err.msg);
    skiff_recbuf_free(&b);
    skiff_reply_free(&r);
}

Test(proto, attach_notice_and_progress)
{
    /* progress records may come before the status, nowhere else */
    cr_assert_eq(PARSE("I:docker://ubuntu:24.04", "i:1048576 2500 docker://ubuntu:24.04", "S:0", "H:77", "W:/", "E:K=v",
                       "J:1", "U:container 'c' is in use\nforged", "Z:"),
                 0, "%s", err.msg);
    cr_assert_eq(r.holder, 77);
    cr_assert(r.attached);
    cr_assert_str_eq(r.notice, "container 'c' is in use\\nforged");
    cr_assert_eq(PARSE("S:0", "H:5", "Z:"), 0);
    cr_assert(!r.attached);
    cr_assert_eq(PARSE("S:0", "I:x", "H:5", "Z:"), -1, "progress after the status");
    cr_assert_eq(PARSE("S:0", "H:5", "J:yes", "Z:"), -1, "a join record says 1");
}

Test(proto, progress_lines_are_bounded_and_sanitised)
{
    char line[400];
    cr_assert_eq(skiff_progress_line('I', "docker://ubuntu:24.04", line, sizeof(line)), 0);
    cr_assert_str_eq(line, "importing docker://ubuntu:24.04 \u2026");
    cr_assert_eq(skiff_progress_line('i', "52428800 12345 oci:/l:b\x1b[2J\xc2\x9b", line, sizeof(line)), 0);
    cr_assert_str_eq(line, "imported oci:/l:b\\x1b[2J\\u009b (50 MB, 12.3 s)");
    cr_assert_eq(skiff_progress_line('i', "12 x oci:/l", line, sizeof(line)), -1);
    cr_assert_eq(skiff_progress_line('i', "12 34", line, sizeof(line)), -1);
    cr_assert_eq(skiff_progress_line('S', "0", line, sizeof(line)), -1);
    char longuri[2000];
    memset(longuri, 'a', sizeof(longuri) - 1);
    longuri[sizeof(longuri) - 1] = '\0';
    cr_assert_eq(skiff_progress_line('I', longuri, line, sizeof(line)), 0);
    cr_assert_lt(strlen(line), sizeof(line));
}

Test(proto, a_lazy_start_line)
{
    char line[400];
    /* a progress record before the status, like an import's */
    cr_assert_eq(PARSE("L:2097152 68157440 docker://r#lazy/smoke:1", "S:0", "H:5", "Z:"), 0, "%s", err.msg);
    cr_assert_eq(skiff_progress_line('L', "2097152 68157440 docker://r#lazy/smoke:1", line, sizeof(line)), 0);
    cr_assert_str_eq(line, "lazy start of docker://r#lazy/smoke:1: fetched 2.0 of 65 MB (the rest as it is read)");
    cr_assert_eq(skiff_progress_line('L', "0 1048576 oci:/l\x1b[2J", line, sizeof(line)), 0);
    cr_assert_str_eq(line, "lazy start of oci:/l\\x1b[2J: fetched 0.0 of 1 MB (the rest as it is read)");
    cr_assert_eq(skiff_progress_line('L', "1 2", line, sizeof(line)), -1, "no image");
    cr_assert_eq(skiff_progress_line('L', "x 2 docker://r#i", line, sizeof(line)), -1);
}
