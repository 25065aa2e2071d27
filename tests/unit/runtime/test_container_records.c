/* A container as records (skiff_container_encode/decode, runstate.c): the
 * one format of the holder's report, the state file and the plugin helper's
 * answer. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "container.h"
#include "container_int.h"
#include "records.h"

static int decode_all(const struct skiff_recbuf *b, struct skiff_container *c, skiff_err *err)
{
    size_t off = 0;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(b->p, b->len, &off, &tag, &s)) > 0)
        if (skiff_container_decode(c, tag, s, err) != 1)
            return -1;
    return more;
}

Test(container_records, round_trip)
{
    char e0[] = "PATH=/bin", e1[] = "A=b=c", p0[] = "/bin/sh", p1[] = "-c", c0[] = "echo hi";
    char *env[] = {e0, e1, NULL}, *ep[] = {p0, p1, NULL}, *cmd[] = {c0, NULL};
    struct skiff_container in = {.holder = 4242, .server_pidfd = -1, .env = env, .entrypoint = ep, .cmd = cmd};
    snprintf(in.workdir, sizeof(in.workdir), "/work");
    struct skiff_recbuf b = {0};
    skiff_err err;
    cr_assert_eq(skiff_container_encode(&in, &b, &err), 0, "%s", err.msg);
    struct skiff_container out = {.server_pidfd = -1};
    cr_assert_eq(decode_all(&b, &out, &err), 0, "%s", err.msg);
    cr_assert_eq(out.holder, 4242);
    cr_assert_str_eq(out.workdir, "/work");
    cr_assert_str_eq(out.env[1], "A=b=c");
    cr_assert_null(out.env[2]);
    cr_assert_str_eq(out.entrypoint[1], "-c");
    cr_assert_str_eq(out.cmd[0], "echo hi");
    cr_assert_null(out.cmd[1]);
    skiff_container_free(&out);
    skiff_recbuf_free(&b);
}

Test(container_records, empty_workdir_is_the_root)
{
    struct skiff_container in = {.holder = 7, .server_pidfd = -1};
    struct skiff_recbuf b = {0};
    skiff_err err;
    cr_assert_eq(skiff_container_encode(&in, &b, &err), 0);
    struct skiff_container out = {.server_pidfd = -1};
    cr_assert_eq(decode_all(&b, &out, &err), 0, "%s", err.msg);
    cr_assert_str_eq(out.workdir, "/");
    cr_assert_null(out.env);
    skiff_recbuf_free(&b);
}

Test(container_records, decode_is_strict)
{
    struct skiff_container c = {.server_pidfd = -1};
    skiff_err err;
    cr_assert_eq(skiff_container_decode(&c, 'H', "-1", &err), -1);
    cr_assert_eq(skiff_container_decode(&c, 'H', "0", &err), -1);
    cr_assert_eq(skiff_container_decode(&c, 'H', "12x", &err), -1);
    cr_assert_eq(c.holder, 0);
    cr_assert_eq(skiff_container_decode(&c, 'W', "relative", &err), -1);
    cr_assert_eq(skiff_container_decode(&c, 'E', "NOEQUALS", &err), -1);
    cr_assert_eq(skiff_container_decode(&c, 'E', "=x", &err), -1);
    cr_assert_null(c.env);
    /* not one of the container's tags: the caller's to handle */
    cr_assert_eq(skiff_container_decode(&c, 'S', "0", &err), 0);
    cr_assert_eq(skiff_container_decode(&c, 'X', "5", &err), 0);
    cr_assert_eq(skiff_container_decode(&c, 'H', "99", &err), 1);
    cr_assert_eq(c.holder, 99);
}

/* The holder's report and the state file carry what the hooks told the user
 * ('U'), which the plugin's helper passes on to srun. */
Test(container_records, state_keeps_the_hooks_notice)
{
    struct skiff_recbuf b = {0};
    skiff_err err;
    cr_assert_eq(skiff_rec_put(&b, 'H', "77", &err), 0);
    cr_assert_eq(skiff_rec_put(&b, 'U', "hook 45-rdma: this 2-node step's container has no RDMA device", &err), 0);
    struct skiff_container c = {.server_pidfd = -1};
    cr_assert_eq(skiff_state_parse(b.p, b.len, &c, &err), 0, "%s", err.msg);
    cr_expect_eq(c.holder, 77);
    cr_expect_str_eq(c.notice, "hook 45-rdma: this 2-node step's container has no RDMA device");
    skiff_recbuf_free(&b);
}
