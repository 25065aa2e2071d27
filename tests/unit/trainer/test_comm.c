/* The TCP store and ring collectives with real sockets on localhost: P ranks
 * as threads of this process (each with its own store client and ring). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "store.h"

static int test_port(void)
{
    return 20000 + (int)(getpid() % 20000);
}

struct rank_ctx {
    int rank, world, port;
    int (*body)(struct rank_ctx *, struct tr_comm *, skiff_err *);
    int rc;
    skiff_err err;
    float out[4096];
};

static void *rank_main(void *p)
{
    struct rank_ctx *r = p;
    struct tr_store *s = NULL;
    struct tr_comm *c = NULL;
    r->rc = -1;
    if (tr_store_open("127.0.0.1", r->port, r->rank == 0, 10000, &s, &r->err) < 0)
        return NULL;
    if (tr_store_rendezvous(s, r->rank, r->world, &r->err) == 0 &&
        tr_comm_tcp_create(s, r->rank, r->world, r->rank, 10000, &c, &r->err) == 0) {
        r->rc = r->body(r, c, &r->err);
        /* keep rank 0's store alive until everyone is done with it */
        if (r->rc == 0)
            r->rc = tr_barrier(c, &r->err);
    }
    tr_comm_destroy(c);
    tr_store_close(s);
    return NULL;
}

static void run_ranks(int world, int (*body)(struct rank_ctx *, struct tr_comm *, skiff_err *), struct rank_ctx *ctx)
{
    pthread_t th[8];
    int port = test_port();
    for (int r = 0; r < world; r++) {
        ctx[r] = (struct rank_ctx){.rank = r, .world = world, .port = port, .body = body};
        pthread_create(&th[r], NULL, rank_main, &ctx[r]);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < world; r++)
        cr_assert_eq(ctx[r].rc, 0, "rank %d: %s", r, ctx[r].err.msg);
}

static float val(int rank, size_t i)
{
    return (float)((rank + 1) * 0.37 + (double)i * 0.001);
}

enum { N = 1001 };

static int body_allreduce(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    for (size_t i = 0; i < N; i++)
        r->out[i] = val(r->rank, i);
    if (tr_allreduce_sum(c, r->out, N, TR_F32, err) < 0)
        return -1;
    /* n smaller than world: most chunks are empty */
    float small[2] = {(float)r->rank, 1.0f};
    if (tr_allreduce_sum(c, small, 2, TR_F32, err) < 0)
        return -1;
    r->out[N] = small[0];
    r->out[N + 1] = small[1];
    return 0;
}

Test(comm, allreduce_matches_sum_and_is_identical_on_all_ranks)
{
    for (int world = 1; world <= 4; world++) {
        struct rank_ctx ctx[4];
        run_ranks(world, body_allreduce, ctx);
        for (size_t i = 0; i < N; i++) {
            double want = 0;
            for (int k = 0; k < world; k++)
                want += val(k, i);
            cr_assert_float_eq(ctx[0].out[i], want, 1e-4, "world %d elem %zu", world, i);
            for (int k = 1; k < world; k++)
                cr_assert(memcmp(&ctx[0].out[i], &ctx[k].out[i], 4) == 0, "rank %d differs", k);
        }
        cr_assert_float_eq(ctx[0].out[N], world * (world - 1) / 2.0, 1e-6);
        cr_assert_float_eq(ctx[0].out[N + 1], (double)world, 1e-6);
    }
}

Test(comm, allreduce_is_deterministic)
{
    struct rank_ctx a[3], b[3];
    run_ranks(3, body_allreduce, a);
    run_ranks(3, body_allreduce, b);
    cr_assert(memcmp(a[1].out, b[1].out, sizeof a[1].out) == 0, "two runs differ");
}

static int body_rs_ag(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    size_t n = 12;
    for (size_t i = 0; i < n; i++)
        r->out[i] = val(r->rank, i);
    if (tr_reduce_scatter(c, r->out, n, TR_F32, err) < 0)
        return -1;
    size_t per = n / (size_t)c->world;
    /* keep only our shard, poison the rest, then gather */
    for (size_t i = 0; i < n; i++)
        if (i / per != (size_t)c->rank)
            r->out[i] = -1000;
    if (tr_all_gather(c, r->out, n, TR_F32, err) < 0)
        return -1;
    /* not a multiple of world: refused with a message */
    skiff_err e;
    if (c->world > 1 && tr_reduce_scatter(c, r->out, n + 1, TR_F32, &e) == 0)
        return skiff_error(err, 0, "n %% world != 0 accepted");
    return 0;
}

Test(comm, reduce_scatter_then_all_gather_is_allreduce)
{
    struct rank_ctx ctx[3];
    run_ranks(3, body_rs_ag, ctx);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < 12; i++)
            cr_assert_float_eq(ctx[k].out[i], val(0, i) + val(1, i) + val(2, i), 1e-5);
}

/* All-gather is a copy, so 16-bit elements (ZeRO gathers bf16 weights) move
 * too, with shards that are not a multiple of 4 bytes. */
static int body_ag16(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    uint16_t b[15];
    size_t per = 15 / (size_t)c->world;
    for (size_t i = 0; i < 15; i++)
        b[i] = i / per == (size_t)c->rank ? (uint16_t)(1000 + i) : 0;
    if (tr_all_gather(c, b, 15, TR_BF16, err) < 0)
        return -1;
    for (size_t i = 0; i < 15; i++)
        r->out[i] = b[i];
    /* reductions stay fp32-only */
    skiff_err e;
    if (c->world > 1 && tr_allreduce_sum(c, b, 15, TR_BF16, &e) == 0)
        return skiff_error(err, 0, "a 16-bit all-reduce was accepted");
    return 0;
}

Test(comm, all_gather_of_16_bit_elements)
{
    struct rank_ctx ctx[3];
    run_ranks(3, body_ag16, ctx);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < 15; i++)
            cr_assert_eq(ctx[k].out[i], 1000.0f + i, "rank %d [%zu]", k, i);
}

static int body_bcast(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    size_t n = (3u << 20) + 5; /* several pieces */
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = c->rank == 1 ? (unsigned char)(i * 7) : 0;
    int rc = tr_broadcast(c, b, n, 1, err);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != (unsigned char)(i * 7);
    free(b);
    r->out[0] = (float)bad;
    return rc;
}

Test(comm, broadcast_from_any_root)
{
    struct rank_ctx ctx[4];
    run_ranks(4, body_bcast, ctx);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(ctx[k].out[0], 0.0f, "rank %d got wrong bytes", k);
}

static int body_async(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    float a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = b[i] = (float)c->rank;
    struct tr_comm_req *qa, *qb;
    if (tr_comm_start(c, TR_COMM_ALLREDUCE, a, 64, TR_F32, &qa, err) < 0)
        return -1;
    if (tr_comm_start(c, TR_COMM_ALLREDUCE, b, 64, TR_F32, &qb, err) < 0)
        return -1;
    if (tr_comm_wait(c, qb, err) < 0 || tr_comm_wait(c, qa, err) < 0)
        return -1;
    r->out[0] = a[63];
    r->out[1] = b[0];
    return 0;
}

Test(comm, async_in_issue_order)
{
    struct rank_ctx ctx[3];
    run_ranks(3, body_async, ctx);
    cr_assert_eq(ctx[2].out[0], 3.0f);
    cr_assert_eq(ctx[2].out[1], 3.0f);
}

/* Sub-communicators (process groups): world 4 split two ways, {0,1} {2,3}
 * and {0,2} {1,3}; each group sums only its members, ranks count from 0
 * inside it, and the world ring still works afterwards. */
static int body_groups(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    (void)c;
    struct tr_store *s = NULL;
    if (tr_store_open("127.0.0.1", r->port, 0, 10000, &s, err) < 0)
        return -1;
    int half[2] = {r->rank / 2 * 2, r->rank / 2 * 2 + 1}, stride[2] = {r->rank % 2, r->rank % 2 + 2};
    char hn[32], sn[32];
    snprintf(hn, sizeof hn, "half/%d", r->rank / 2);
    snprintf(sn, sizeof sn, "stride/%d", r->rank % 2);
    struct tr_comm *h = NULL, *st = NULL;
    int rc = -1;
    if (tr_comm_tcp_create_group(s, hn, half, 2, r->rank % 2, 0, 10000, &h, err) == 0 &&
        tr_comm_tcp_create_group(s, sn, stride, 2, r->rank / 2, 0, 10000, &st, err) == 0) {
        float a = (float)(1 << r->rank), b = a;
        rc = tr_allreduce_sum(h, &a, 1, TR_F32, err) == 0 && tr_allreduce_sum(st, &b, 1, TR_F32, err) == 0 ? 0 : -1;
        r->out[0] = a;
        r->out[1] = b;
        r->out[2] = (float)h->rank;
        r->out[3] = (float)st->world;
        if (rc == 0)
            rc = tr_barrier(h, err);
    }
    tr_comm_destroy(st);
    tr_comm_destroy(h);
    tr_store_close(s);
    return rc;
}

Test(comm, groups_reduce_over_their_members_only)
{
    struct rank_ctx ctx[4];
    run_ranks(4, body_groups, ctx);
    for (int k = 0; k < 4; k++) {
        float half = (float)(3 << (k / 2 * 2)), stride = (float)(5 << (k % 2));
        cr_assert_eq(ctx[k].out[0], half, "rank %d: half-group sum %g", k, ctx[k].out[0]);
        cr_assert_eq(ctx[k].out[1], stride, "rank %d: stride-group sum %g", k, ctx[k].out[1]);
        cr_assert_eq(ctx[k].out[2], (float)(k % 2));
        cr_assert_eq(ctx[k].out[3], 2.0f);
    }
}

/* Point to point: a shift right and a shift left on the world ring, then
 * (world 2) both ranks sending 8 MiB to each other at once, which would
 * deadlock if a rank sent before it received. A non-neighbour is refused
 * with a message and leaves the ring usable. */
enum { BIG = 8 << 20 };

static int body_p2p(struct rank_ctx *r, struct tr_comm *c, skiff_err *err)
{
    int P = c->world, me = c->rank, right = (me + 1) % P, left = (me + P - 1) % P;
    float s = (float)me, got_l = -1, got_r = -1;
    if (tr_sendrecv(c, &s, 4, right, &got_l, 4, left, err) < 0 || tr_send(c, &s, 4, left, err) < 0 ||
        tr_recv(c, &got_r, 4, right, err) < 0)
        return -1;
    r->out[0] = got_l;
    r->out[1] = got_r;
    unsigned char *out = malloc(BIG), *in = malloc(BIG);
    for (size_t i = 0; i < BIG; i++)
        out[i] = (unsigned char)(i * 13 + (size_t)me);
    int rc = tr_sendrecv(c, out, BIG, right, in, BIG, left, err);
    size_t bad = 0;
    for (size_t i = 0; rc == 0 && i < BIG; i++)
        bad += in[i] != (unsigned char)(i * 13 + (size_t)left);
    free(out);
    free(in);
    r->out[2] = (float)bad;
    if (rc < 0)
        return -1;
    skiff_err e;
    if (P > 3 && tr_send(c, &s, 4, (me + 2) % P, &e) == 0)
        return skiff_error(err, 0, "a send to a non-neighbour was accepted");
    if (P > 3 && !strstr(e.msg, "only ring neighbours"))
        return skiff_error(err, 0, "unclear error: %s", e.msg);
    return 0;
}

Test(comm, sendrecv_between_ring_neighbours)
{
    int worlds[] = {2, 4};
    for (int w = 0; w < 2; w++) {
        int P = worlds[w];
        struct rank_ctx ctx[4];
        run_ranks(P, body_p2p, ctx);
        for (int k = 0; k < P; k++) {
            cr_assert_eq(ctx[k].out[0], (float)((k + P - 1) % P), "world %d rank %d from the left", P, k);
            cr_assert_eq(ctx[k].out[1], (float)((k + 1) % P), "world %d rank %d from the right", P, k);
            cr_assert_eq(ctx[k].out[2], 0.0f, "world %d rank %d: %g bytes wrong", P, k, ctx[k].out[2]);
        }
    }
}

/* A group's dead or silent peer is named by its world rank: the group {0, 2}
 * of world 3, where rank 2 leaves without sending (rank 0's receive fails at
 * once) or stays and sends nothing (it fails after a 0.5 s timeout), naming rank 2, not "member 1". */
struct peer_case {
    struct rank_ctx r;
    int silent;
};

static void *quiet_peer_rank(void *p)
{
    struct peer_case *pc = p;
    struct rank_ctx *r = &pc->r;
    struct tr_store *s = NULL;
    struct tr_comm *g = NULL;
    int members[2] = {0, 2};
    r->rc = -1;
    if (tr_store_open("127.0.0.1", r->port, r->rank == 0, 10000, &s, &r->err) < 0)
        return NULL;
    if (tr_comm_tcp_create_group(s, "pair", members, 2, r->rank / 2, 0, 10000, &g, &r->err) == 0) {
        float x;
        g->timeout_ms = 500; /* connecting may be slow on a loaded machine; the receive is not */
        if (r->rank == 0)
            r->rc = tr_recv(g, &x, sizeof x, 1, &r->err);
        else if (pc->silent)
            r->rc = usleep(1500 * 1000); /* alive, says nothing */
        else
            r->rc = 0; /* leaves: its sockets close */
    }
    tr_comm_destroy(g);
    if (r->rank == 0)
        sleep(1); /* the store outlives the others' use of it */
    tr_store_close(s);
    return NULL;
}

static void peer_case(int silent, const char *want)
{
    struct peer_case pc[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r += 2) {
        pc[r] = (struct peer_case){.r = {.rank = r, .world = 3, .port = test_port()}, .silent = silent};
        pthread_create(&th[r], NULL, quiet_peer_rank, &pc[r]);
    }
    for (int r = 0; r < 3; r += 2)
        pthread_join(th[r], NULL);
    cr_assert_eq(pc[2].r.rc, 0, "%s", pc[2].r.err.msg);
    cr_assert_eq(pc[0].r.rc, -1);
    cr_assert(strstr(pc[0].r.err.msg, want), "%s", pc[0].r.err.msg);
}

Test(comm, dead_group_peer_is_named_by_world_rank)
{
    peer_case(0, "rank 2 closed the connection");
}

Test(comm, silent_group_peer_times_out_named_by_world_rank)
{
    peer_case(1, "rank 2 sent nothing for 0.5 s");
}

Test(store, rendezvous_timeout_names_missing_rank)
{
    struct tr_store *s;
    skiff_err err;
    cr_assert_eq(tr_store_open("127.0.0.1", test_port(), 1, 500, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(tr_store_set(s, "k", "v", 1, &err), 0);
    void *v = NULL;
    cr_assert_eq(tr_store_get(s, "k", &v, NULL, &err), 0);
    cr_assert_str_eq(v, "v");
    free(v);
    long n = 0;
    tr_store_add(s, "ctr", 2, &n, &err);
    tr_store_add(s, "ctr", 3, &n, &err);
    cr_assert_eq(n, 5);
    const char *keys[] = {"k", "absent"};
    cr_assert_eq(tr_store_wait(s, keys, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(tr_store_wait(s, keys, 2, &err), -1);
    cr_assert(strstr(err.msg, "not set within") && strstr(err.msg, "absent"), "%s", err.msg);
    cr_assert_eq(tr_store_rendezvous(s, 0, 3, &err), -1);
    cr_assert(strstr(err.msg, "ranks 1,2 of WORLD_SIZE=3 did not arrive"), "%s", err.msg);
    tr_store_close(s);
}

Test(store, unreachable_store_says_so)
{
    struct tr_store *s;
    skiff_err err;
    cr_assert_eq(tr_store_open("127.0.0.1", test_port(), 0, 300, &s, &err), -1);
    cr_assert(strstr(err.msg, "not reachable"), "%s", err.msg);
}
