/* Host list expansion, compression and malformed input, as tables. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"

struct expand_case {
    const char *in;
    const char *out; /* expanded hosts joined by ' ' */
};

static const struct expand_case expand_cases[] = {
    {"n1", "n1"},
    {"login", "login"},
    {"n[1-3]", "n1 n2 n3"},
    {"n[1,3,5]", "n1 n3 n5"},
    {"n[1-2,5,7-8]", "n1 n2 n5 n7 n8"},
    {"n[01-03]", "n01 n02 n03"},
    {"n[08-11]", "n08 n09 n10 n11"},
    {"n[9-11]", "n9 n10 n11"},
    {"n[001-002]", "n001 n002"},
    {"n[0]", "n0"},
    {"n[00]", "n00"},
    {"n[1-1]", "n1"},
    {"a,b,c", "a b c"},
    {"n[1-2],m[3-4]", "n1 n2 m3 m4"},
    {"gpu-a[01-02]-b[3,5]", "gpu-a01-b3 gpu-a01-b5 gpu-a02-b3 gpu-a02-b5"},
    {"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
    {"[1-3]", "1 2 3"},
    {"n[1-2]x", "n1x n2x"},
    {"rack[1,2]-node[08-09].cluster", "rack1-node08.cluster rack1-node09.cluster rack2-node08.cluster "
                                      "rack2-node09.cluster"},
    {"a.b_c-d", "a.b_c-d"},
    {"n[1-3],n2", "n1 n2 n3 n2"},
    {"n[3,1,2]", "n3 n1 n2"},
    {"login1,gpu[1-2],cpu[10-11]", "login1 gpu1 gpu2 cpu10 cpu11"},
    {"x[01,3-4,006]", "x01 x3 x4 x006"},
    {"h[0-0]", "h0"},
    {"node1-2", "node1-2"},
    {"a[1]b[2]c[3]", "a1b2c3"},
};

static char *join_expand(const char *in)
{
    struct skiff_hostlist hl;
    skiff_err err = {0};
    if (skiff_hostlist_expand(in, 0, &hl, &err) < 0) {
        cr_log_error("expand %s: %s", in, err.msg);
        return NULL;
    }
    size_t len = 1;
    for (size_t i = 0; i < hl.n; i++)
        len += strlen(hl.hosts[i]) + 1;
    char *s = calloc(1, len);
    for (size_t i = 0; i < hl.n; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, hl.hosts[i]);
    }
    skiff_hostlist_free(&hl);
    return s;
}

Test(hostlist, expand_table)
{
    for (size_t i = 0; i < sizeof(expand_cases) / sizeof(expand_cases[0]); i++) {
        const struct expand_case *c = &expand_cases[i];
        if (!c->out)
            continue;
        char *got = join_expand(c->in);
        cr_assert_not_null(got, "expand %s failed", c->in);
        cr_expect_str_eq(got, c->out, "expand %s", c->in);
        /* count and nth agree with the full expansion */
        size_t n;
        skiff_err err = {0};
        cr_assert_eq(skiff_hostlist_count(c->in, &n, &err), 0);
        struct skiff_hostlist hl;
        cr_assert_eq(skiff_hostlist_expand(c->in, 0, &hl, &err), 0);
        cr_expect_eq(n, hl.n, "count %s", c->in);
        for (size_t k = 0; k < hl.n; k++) {
            char buf[300];
            cr_assert_eq(skiff_hostlist_nth(c->in, k, buf, sizeof(buf), &err), 0, "%s", err.msg);
            cr_expect_str_eq(buf, hl.hosts[k], "nth %s #%zu", c->in, k);
        }
        skiff_hostlist_free(&hl);
        free(got);
    }
}

struct bad_case {
    const char *in;
    const char *msg; /* substring of the error */
};

static const struct bad_case bad_cases[] = {
    {"", "empty"},
    {"n[1-3", "missing ']'"},
    {"n[", "missing ']'"},
    {"n1]", "']' without '['"},
    {"n[3-1]", "reversed range"},
    {"n[]", "expected a number"},
    {"n[a-b]", "expected a number"},
    {"n[1-]", "expected a number"},
    {"n[-1]", "expected a number"},
    {"n[1,]", "expected a number"},
    {"n[1[2]]", "nested"},
    {"n[1;2]", "unexpected character"},
    {"a,,b", "empty host name"},
    {",a", "empty host name"},
    {"a,", "empty host name after ','"},
    {"n 1", "not allowed"},
    {"n$1", "not allowed"},
    {"n[1-2000000]", "limit"},
    {"n[0-999999],m[0-999999]", "limit"},
    {"a[1-1024]b[1-1024]c[1-2]", "limit"},
    {"n[1234567890123456789]", "18 digits"},
    {"n[0-99999999999999999]", "limit"},
    {"n[1-2]]", "']' without '['"},
    {"n[1-2-3]", "unexpected character"},
};

Test(hostlist, malformed_table)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct skiff_hostlist hl;
        skiff_err err = {0};
        cr_expect_eq(skiff_hostlist_expand(c->in, 0, &hl, &err), -1, "expand '%s' should fail", c->in);
        cr_expect(strstr(err.msg, c->msg) != NULL, "'%s': message '%s' lacks '%s'", c->in, err.msg, c->msg);
        cr_expect_null(hl.hosts, "'%s': nothing allocated on failure", c->in);
        size_t n;
        cr_expect_eq(skiff_hostlist_count(c->in, &n, &err), -1, "count '%s' should fail", c->in);
    }
}

Test(hostlist, long_name_rejected)
{
    char in[400];
    memset(in, 'a', 300);
    in[300] = '\0';
    struct skiff_hostlist hl;
    skiff_err err = {0};
    cr_assert_eq(skiff_hostlist_expand(in, 0, &hl, &err), -1);
    cr_expect(strstr(err.msg, "255") != NULL, "%s", err.msg);
}

Test(hostlist, max_hosts_argument)
{
    struct skiff_hostlist hl;
    skiff_err err = {0};
    cr_expect_eq(skiff_hostlist_expand("n[1-10]", 9, &hl, &err), -1);
    cr_expect_eq(skiff_hostlist_expand("n[1-10]", 10, &hl, &err), 0);
    cr_expect_eq(hl.n, 10);
    skiff_hostlist_free(&hl);
}

Test(hostlist, million_hosts_ok)
{
    struct skiff_hostlist hl;
    skiff_err err = {0};
    cr_assert_eq(skiff_hostlist_expand("n[1-1048576]", 0, &hl, &err), 0, "%s", err.msg);
    cr_expect_eq(hl.n, 1048576);
    cr_expect_str_eq(hl.hosts[1048575], "n1048576");
    skiff_hostlist_free(&hl);
    char buf[64];
    cr_assert_eq(skiff_hostlist_nth("n[1-1048576]", 524287, buf, sizeof(buf), &err), 0);
    cr_expect_str_eq(buf, "n524288");
    cr_expect_eq(skiff_hostlist_nth("n[1-3]", 3, buf, sizeof(buf), &err), -1);
    cr_expect(strstr(err.msg, "no host number 3") != NULL, "%s", err.msg);
}

struct compress_case {
    const char *hosts; /* space-separated */
    const char *out;
};

static const struct compress_case compress_cases[] = {
    {"n1", "n1"},
    {"n1 n2 n3", "n[1-3]"},
    {"n1 n3 n5", "n[1,3,5]"},
    {"n1 n2 n3 n5 n7 n8", "n[1-3,5,7-8]"},
    {"n01 n02 n03", "n[01-03]"},
    {"n9 n10 n11", "n[9-11]"},
    {"n08 n09 n10", "n[08-10]"},
    {"n9 n010", "n[9,010]"},
    {"n3 n1 n2", "n[3,1-2]"},
    {"login gpu1 gpu2", "login,gpu[1-2]"},
    {"a b c", "a,b,c"},
    {"gpu-a01-b3 gpu-a01-b5", "gpu-a01-b[3,5]"},
    {"n1 m1 n2", "n1,m1,n2"},
    {"n1 n1", "n[1,1]"},
    {"x1y x2y", "x1y,x2y"},
    {"n0 n00 n000", "n[0,00,000]"},
    {"c1 c2 d1 d2", "c[1-2],d[1-2]"},
};

Test(hostlist, compress_table_and_round_trip)
{
    for (size_t i = 0; i < sizeof(compress_cases) / sizeof(compress_cases[0]); i++) {
        const struct compress_case *c = &compress_cases[i];
        char *copy = strdup(c->hosts);
        const char *hosts[32];
        size_t n = 0;
        for (char *save, *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
            hosts[n++] = t;
        skiff_err err = {0};
        char *got = skiff_hostlist_compress(hosts, n, &err);
        cr_assert_not_null(got, "compress %s: %s", c->hosts, err.msg);
        cr_expect_str_eq(got, c->out, "compress %s", c->hosts);
        char *back = join_expand(got);
        cr_assert_not_null(back);
        cr_expect_str_eq(back, c->hosts, "round trip of %s via %s", c->hosts, got);
        free(back);
        free(got);
        free(copy);
    }
}

Test(hostlist, round_trip_from_expansion)
{
    const char *lists[] = {"n[1-3,5,7-8]", "gpu-a[01-02]-b[3,5]", "x[01,3-4,006]", "n[9-11],m[0001-0003]"};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        struct skiff_hostlist hl;
        skiff_err err = {0};
        cr_assert_eq(skiff_hostlist_expand(lists[i], 0, &hl, &err), 0);
        char *c = skiff_hostlist_compress((const char *const *)hl.hosts, hl.n, &err);
        cr_assert_not_null(c);
        struct skiff_hostlist back;
        cr_assert_eq(skiff_hostlist_expand(c, 0, &back, &err), 0, "%s: %s", c, err.msg);
        cr_assert_eq(back.n, hl.n, "%s", c);
        for (size_t k = 0; k < hl.n; k++)
            cr_expect_str_eq(back.hosts[k], hl.hosts[k]);
        skiff_hostlist_free(&back);
        skiff_hostlist_free(&hl);
        free(c);
    }
}

Test(hostlist, compress_refuses_what_would_not_read_back)
{
    /* 9126 names numbered in the middle: nothing compresses, the text would
     * exceed the parser's 1 MiB input limit (found by the fuzzer). */
    const char *list = "n0[0-1].n6666[1-3]8800009923[1-39]08BBB00284619923[1-39]08"
                       "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB82";
    struct skiff_hostlist hl;
    skiff_err err = {0};
    cr_assert_eq(skiff_hostlist_expand(list, 0, &hl, &err), 0, "%s", err.msg);
    cr_assert_eq(hl.n, 9126);
    char *c = skiff_hostlist_compress((const char *const *)hl.hosts, hl.n, &err);
    cr_expect_null(c);
    cr_expect(strstr(err.msg, "longer than the") != NULL, "%s", err.msg);
    free(c);
    skiff_hostlist_free(&hl);
}

Test(hostlist, compress_rejects_bad_names)
{
    skiff_err err = {0};
    const char *bad1[] = {"ok", "has space"};
    cr_expect_null(skiff_hostlist_compress(bad1, 2, &err));
    cr_expect(strstr(err.msg, "not allowed") != NULL, "%s", err.msg);
    const char *bad2[] = {""};
    cr_expect_null(skiff_hostlist_compress(bad2, 1, &err));
    const char *bad3[] = {"n[1]"};
    cr_expect_null(skiff_hostlist_compress(bad3, 1, &err));
}
