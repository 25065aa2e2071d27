/* Collectives: the vtable wrappers and the CPU backend, a ring of TCP
 * connections driven by one communication thread.
 *
 * Hand-written rather than linking gloo or MPI: neither is in Debian's C
 * world without C++/MPI launchers, and the ring is ~300 lines. The ring is
 * the bandwidth-optimal schedule for large buffers (each rank sends
 * 2(P-1)/P of the data for an all-reduce), and its reduction order is fixed:
 * chunk c is summed starting at rank c+1 around the ring to rank c, so
 * identical inputs give identical bits on every run. */
#include "comm.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"
#include "store.h"

size_t tr_dtype_size(enum tr_dtype t) { return t == TR_F32 ? 4 : 2; }

int tr_allreduce_sum(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return c->ops->allreduce_sum(c, buf, n, t, err);
}
int tr_reduce_scatter(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return c->ops->reduce_scatter(c, buf, n, t, err);
}
int tr_all_gather(struct tr_comm *c, void *buf, size_t n, enum tr_dtype t, skiff_err *err)
{
    return c->ops->all_gather(c, buf, n, t, err);
}
int tr_broadcast(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err)
{
    return c->ops->broadcast(c, buf, bytes, root, err);
}
int tr_barrier(struct tr_comm *c, skiff_err *err) { return c->ops->barrier(c, err); }
int tr_comm_start(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype t, struct tr_comm_req **req,
                  skiff_err *err)
{
    return c->ops->start(c, op, buf, n, t, req, err);
}
int tr_comm_wait(struct tr_comm *c, struct tr_comm_req *req, skiff_err *err) { return c->ops->wait(c, req, err); }
void tr_comm_destroy(struct tr_comm *c)
{
    if (c) c->ops->destroy(c);
}
int tr_comm_start_group(struct tr_comm *c, int op, void *const *bufs, const size_t *ns, int count, enum tr_dtype t,
                        struct tr_comm_req **req, skiff_err *err)
{
    if (!c->ops->start_group) return skiff_error(err, 0, "the %s backend has no grouped collectives", c->ops->name);
    return c->ops->start_group(c, op, bufs, ns, count, t, req, err);
}
int tr_sendrecv(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes, int from,
                skiff_err *err)
{
    if (!c->ops->sendrecv)
        return skiff_error(err, ENOTSUP, "the %s backend has no point-to-point operations", c->ops->name);
    return c->ops->sendrecv(c, sbuf, sbytes, to, rbuf, rbytes, from, err);
}
int tr_send(struct tr_comm *c, const void *buf, size_t bytes, int to, skiff_err *err)
{
    return tr_sendrecv(c, buf, bytes, to, NULL, 0, -1, err);
}
int tr_recv(struct tr_comm *c, void *buf, size_t bytes, int from, skiff_err *err)
{
    return tr_sendrecv(c, NULL, 0, -1, buf, bytes, from, err);
}

/* ---- TCP ring --------------------------------------------------------------- */

enum {
    OP_ALLREDUCE = TR_COMM_ALLREDUCE,
    OP_RS = TR_COMM_REDUCE_SCATTER,
    OP_AG = TR_COMM_ALL_GATHER,
    OP_BCAST,
    OP_BARRIER,
    OP_SENDRECV
};

struct tr_comm_req {
    int op;
    void *buf;
    size_t n;   /* elements, or bytes for broadcast */
    size_t esz; /* bytes per element (all-gather moves any type) */
    int root;
    /* sendrecv: n bytes of sbuf to `to`; rn bytes into rbuf from `from` */
    const void *sbuf;
    void *rbuf;
    size_t rn;
    int to, from;
    int done, rc;
    skiff_err err;
    struct tr_comm_req *next;
};

struct tcp {
    struct tr_comm *c;
    int left_fd, right_fd;              /* the ring: receive from rank-1, send to rank+1 */
    char left_name[32], right_name[32]; /* the neighbours' world ranks, for errors */
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tr_comm_req *head, *tail;
    int stop;
    int failed;
    skiff_err fail_err;
    float *tmp;
    size_t tmp_cap;
};

/* Sends slen bytes on sfd while receiving rlen bytes on rfd, both at once
 * (a ring where everyone sent first would deadlock once the socket buffers
 * fill). sname and rname name the peers in errors. */
static int xfer_fd(struct tcp *t, int sfd, const char *sname, const void *sbuf, size_t slen, int rfd, const char *rname,
                   void *rbuf, size_t rlen, skiff_err *err)
{
    const char *sp = sbuf;
    char *rp = rbuf;
    int tmo = t->c->timeout_ms;
    while (slen || rlen) {
        struct pollfd p[2];
        int np = 0, si = -1, ri = -1;
        if (slen) {
            si = np;
            p[np++] = (struct pollfd){.fd = sfd, .events = POLLOUT};
        }
        if (rlen) {
            ri = np;
            p[np++] = (struct pollfd){.fd = rfd, .events = POLLIN};
        }
        int r = poll(p, (nfds_t)np, tmo);
        if (r < 0) {
            if (errno == EINTR) continue;
            return skiff_error(err, errno, "poll");
        }
        if (r == 0) {
            if (rlen)
                return skiff_error(err, ETIMEDOUT,
                                   "%s sent nothing for %.1f s (stuck or dead? --timeout sets "
                                   "the limit)",
                                   rname, tmo / 1000.0);
            return skiff_error(err, ETIMEDOUT, "%s accepted nothing for %.1f s (stuck or dead?)", sname, tmo / 1000.0);
        }
        if (si >= 0 && p[si].revents) {
            ssize_t n = send(sfd, sp, slen, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return skiff_error(err, errno, "sending to %s (did it exit?)", sname);
            if (n > 0) {
                sp += n;
                slen -= (size_t)n;
            }
        }
        if (ri >= 0 && p[ri].revents) {
            ssize_t n = recv(rfd, rp, rlen, MSG_DONTWAIT);
            if (n == 0) return skiff_error(err, ECONNRESET, "%s closed the connection (did it exit?)", rname);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return skiff_error(err, errno, "receiving from %s (did it exit?)", rname);
            if (n > 0) {
                rp += n;
                rlen -= (size_t)n;
            }
        }
    }
    return 0;
}

/* The ring's step: send to the right while receiving from the left. */
static int xfer(struct tcp *t, const void *sbuf, size_t slen, void *rbuf, size_t rlen, skiff_err *err)
{
    return xfer_fd(t, t->right_fd, t->right_name, sbuf, slen, t->left_fd, t->left_name, rbuf, rlen, err);
}

static size_t chunk_off(size_t n, int P, int c) { return (size_t)((__uint128_t)n * (unsigned)c / (unsigned)P); }
static int mod(int a, int P) { return ((a % P) + P) % P; }

static int ensure_tmp(struct tcp *t, size_t n, skiff_err *err)
{
    if (n <= t->tmp_cap) return 0;
    float *p = realloc(t->tmp, n * sizeof(float));
    if (!p) return skiff_error(err, ENOMEM, "comm scratch of %zu floats", n);
    t->tmp = p;
    t->tmp_cap = n;
    return 0;
}

/* After this, rank r holds the sum of chunk r. Step s: send chunk r-s-1,
 * receive chunk r-s-2 and add it to ours (local + incoming, in that order). */
static int ring_reduce_scatter(struct tcp *t, float *buf, size_t n, skiff_err *err)
{
    int P = t->c->world, r = t->c->rank;
    if (ensure_tmp(t, n / (size_t)P + 1, err) < 0) return -1;
    for (int s = 0; s < P - 1; s++) {
        int sc = mod(r - s - 1, P), rc = mod(r - s - 2, P);
        size_t so = chunk_off(n, P, sc), sl = chunk_off(n, P, sc + 1) - so;
        size_t ro = chunk_off(n, P, rc), rl = chunk_off(n, P, rc + 1) - ro;
        if (xfer(t, buf + so, sl * 4, t->tmp, rl * 4, err) < 0) return -1;
        float *dst = buf + ro;
        for (size_t i = 0; i < rl; i++) dst[i] = dst[i] + t->tmp[i];
        t->c->stats.bytes_sent += sl * 4;
    }
    return 0;
}

/* Rank r starts with chunk r; step s: send chunk r-s, receive chunk r-s-1.
 * Moves bytes only, so it serves every element type (esz bytes each). */
static int ring_all_gather(struct tcp *t, void *buf, size_t n, size_t esz, skiff_err *err)
{
    int P = t->c->world, r = t->c->rank;
    char *b = buf;
    for (int s = 0; s < P - 1; s++) {
        int sc = mod(r - s, P), rc = mod(r - s - 1, P);
        size_t so = chunk_off(n, P, sc), sl = chunk_off(n, P, sc + 1) - so;
        size_t ro = chunk_off(n, P, rc), rl = chunk_off(n, P, rc + 1) - ro;
        if (xfer(t, b + so * esz, sl * esz, b + ro * esz, rl * esz, err) < 0) return -1;
        t->c->stats.bytes_sent += sl * esz;
    }
    return 0;
}

#define BCAST_PIECE (1u << 20)

/* Along the ring from root; pieces are forwarded while the next arrives. */
static int ring_broadcast(struct tcp *t, char *buf, size_t bytes, int root, skiff_err *err)
{
    int P = t->c->world, r = t->c->rank;
    if (P == 1) return 0;
    size_t np = (bytes + BCAST_PIECE - 1) / BCAST_PIECE;
    int forward = mod(r + 1, P) != root;
    for (size_t i = 0; i <= np; i++) {
        const char *s = NULL;
        size_t sl = 0;
        char *d = NULL;
        size_t dl = 0;
        if (r == root) {
            if (i == np) break;
            s = buf + i * BCAST_PIECE;
            sl = bytes - i * BCAST_PIECE < BCAST_PIECE ? bytes - i * BCAST_PIECE : BCAST_PIECE;
        } else {
            if (i > 0 && forward) {
                s = buf + (i - 1) * BCAST_PIECE;
                sl = bytes - (i - 1) * BCAST_PIECE < BCAST_PIECE ? bytes - (i - 1) * BCAST_PIECE : BCAST_PIECE;
            }
            if (i < np) {
                d = buf + i * BCAST_PIECE;
                dl = bytes - i * BCAST_PIECE < BCAST_PIECE ? bytes - i * BCAST_PIECE : BCAST_PIECE;
            }
        }
        if (xfer(t, s, sl, d, dl, err) < 0) return -1;
        t->c->stats.bytes_sent += sl;
    }
    return 0;
}

/* Point to point over the ring's connections, which are two-way: to rank+1
 * on the right connection, to rank-1 back over the left one; from rank-1 on
 * the left, from rank+1 back over the right. With two ranks both neighbours
 * are the same rank and each direction keeps its own connection (0's right
 * is 1's left, 1's right is 0's left), so messages never cross. The ranks
 * were checked by tcp_sendrecv (neighbours only). */
static int ring_sendrecv(struct tcp *t, struct tr_comm_req *q)
{
    int P = t->c->world, r = t->c->rank;
    int sfd = -1, rfd = -1;
    const char *sname = "", *rname = "";
    if (q->n) {
        int fwd = q->to == mod(r + 1, P);
        sfd = fwd ? t->right_fd : t->left_fd;
        sname = fwd ? t->right_name : t->left_name;
    }
    if (q->rn) {
        int fwd = q->from == mod(r - 1, P);
        rfd = fwd ? t->left_fd : t->right_fd;
        rname = fwd ? t->left_name : t->right_name;
    }
    if (xfer_fd(t, sfd, sname, q->sbuf, q->n, rfd, rname, q->rbuf, q->rn, &q->err) < 0) return -1;
    t->c->stats.bytes_sent += q->n;
    return 0;
}

/* P-1 rounds of passing a byte to the right: after round k we know rank r-k
 * has arrived, so after P-1 rounds everyone has. */
static int ring_barrier(struct tcp *t, skiff_err *err)
{
    for (int s = 0; s < t->c->world - 1; s++) {
        char out = 1, in = 0;
        if (xfer(t, &out, 1, &in, 1, err) < 0) return -1;
    }
    return 0;
}

static int run_op(struct tcp *t, struct tr_comm_req *q)
{
    double t0 = skiff_now_s();
    int rc;
    switch (q->op) {
    case OP_ALLREDUCE:
        rc = ring_reduce_scatter(t, q->buf, q->n, &q->err);
        if (rc == 0) rc = ring_all_gather(t, q->buf, q->n, 4, &q->err);
        break;
    case OP_RS: rc = ring_reduce_scatter(t, q->buf, q->n, &q->err); break;
    case OP_AG: rc = ring_all_gather(t, q->buf, q->n, q->esz, &q->err); break;
    case OP_BCAST: rc = ring_broadcast(t, q->buf, q->n, q->root, &q->err); break;
    case OP_SENDRECV: rc = ring_sendrecv(t, q); break;
    default: rc = ring_barrier(t, &q->err); break;
    }
    t->c->stats.busy_s += skiff_now_s() - t0;
    t->c->stats.ops++;
    return rc;
}

static void *comm_main(void *arg)
{
    struct tcp *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->head && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->head) break;
        struct tr_comm_req *q = t->head;
        t->head = q->next;
        if (!t->head) t->tail = NULL;
        int failed = t->failed;
        pthread_mutex_unlock(&t->mu);
        int rc;
        if (failed) {
            q->err = t->fail_err; /* peers are gone: fail fast, same cause */
            rc = -1;
        } else {
            rc = run_op(t, q);
        }
        pthread_mutex_lock(&t->mu);
        if (rc < 0 && !t->failed) {
            t->failed = 1;
            t->fail_err = q->err;
        }
        q->rc = rc;
        q->done = 1;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Hands q to the comm thread (issue order). */
static void tcp_push(struct tcp *t, struct tr_comm_req *q)
{
    pthread_mutex_lock(&t->mu);
    if (t->tail)
        t->tail->next = q;
    else
        t->head = q;
    t->tail = q;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static int tcp_enqueue(struct tr_comm *c, int op, void *buf, size_t n, size_t esz, int root, struct tr_comm_req **out,
                       skiff_err *err)
{
    struct tr_comm_req *q = calloc(1, sizeof *q);
    if (!q) return skiff_error(err, ENOMEM, "comm request");
    q->op = op;
    q->buf = buf;
    q->n = n;
    q->esz = esz;
    q->root = root;
    tcp_push(c->impl, q);
    *out = q;
    return 0;
}

static int tcp_wait(struct tr_comm *c, struct tr_comm_req *q, skiff_err *err)
{
    struct tcp *t = c->impl;
    if (!q) return skiff_error(err, 0, "wait on no request");
    pthread_mutex_lock(&t->mu);
    while (!q->done) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    int rc = q->rc;
    if (rc < 0) *err = q->err;
    free(q);
    return rc;
}

static int check_f32(enum tr_dtype d, skiff_err *err)
{
    if (d != TR_F32) return skiff_error(err, ENOTSUP, "the TCP backend reduces float32 only");
    return 0;
}

static int tcp_sync(struct tr_comm *c, int op, void *buf, size_t n, size_t esz, int root, skiff_err *err)
{
    struct tr_comm_req *q = NULL;
    if (tcp_enqueue(c, op, buf, n, esz, root, &q, err) < 0) return -1;
    return tcp_wait(c, q, err);
}

static int tcp_allreduce(struct tr_comm *c, void *buf, size_t n, enum tr_dtype d, skiff_err *err)
{
    if (check_f32(d, err) < 0) return -1;
    return tcp_sync(c, OP_ALLREDUCE, buf, n, 4, 0, err);
}

static int check_div(struct tr_comm *c, size_t n, skiff_err *err)
{
    if (n % (size_t)c->world)
        return skiff_error(err, 0,
                           "sharded collective of %zu elements: not a multiple of "
                           "world size %d",
                           n, c->world);
    return 0;
}

static int tcp_reduce_scatter(struct tr_comm *c, void *buf, size_t n, enum tr_dtype d, skiff_err *err)
{
    if (check_f32(d, err) < 0 || check_div(c, n, err) < 0) return -1;
    return tcp_sync(c, OP_RS, buf, n, 4, 0, err);
}

static int tcp_all_gather(struct tr_comm *c, void *buf, size_t n, enum tr_dtype d, skiff_err *err)
{
    if (check_div(c, n, err) < 0) return -1;
    return tcp_sync(c, OP_AG, buf, n, tr_dtype_size(d), 0, err);
}

static int tcp_broadcast(struct tr_comm *c, void *buf, size_t bytes, int root, skiff_err *err)
{
    if (root < 0 || root >= c->world) return skiff_error(err, 0, "broadcast root %d", root);
    return tcp_sync(c, OP_BCAST, buf, bytes, 1, root, err);
}

static int tcp_barrier(struct tr_comm *c, skiff_err *err) { return tcp_sync(c, OP_BARRIER, NULL, 0, 1, 0, err); }

static int tcp_start(struct tr_comm *c, int op, void *buf, size_t n, enum tr_dtype d, struct tr_comm_req **req,
                     skiff_err *err)
{
    if (op != OP_ALLREDUCE && op != OP_RS && op != OP_AG) return skiff_error(err, 0, "async op %d", op);
    if (op != OP_AG && check_f32(d, err) < 0) return -1;
    if (op != OP_ALLREDUCE && check_div(c, n, err) < 0) return -1;
    return tcp_enqueue(c, op, buf, n, tr_dtype_size(d), 0, req, err);
}

/* Whether peer (a group rank, -1 for none) is one this rank exchanges with
 * directly; a usage error here is the caller's, so it is reported before the
 * request reaches the comm thread (whose errors fail the whole ring). */
static int check_peer(struct tr_comm *c, int peer, const char *what, skiff_err *err)
{
    int P = c->world, r = c->rank;
    if (peer < 0) return 0;
    if (P > 1 && (peer == mod(r + 1, P) || peer == mod(r - 1, P))) return 0;
    return skiff_error(err, EINVAL, "%s rank %d of a group of %d from rank %d: only ring neighbours (rank +-1) %s",
                       what, peer, P, r, P > 1 ? "exchange directly" : "exist, and a group of 1 has none");
}

static int tcp_sendrecv(struct tr_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf, size_t rbytes, int from,
                        skiff_err *err)
{
    if (check_peer(c, to, "send to", err) < 0 || check_peer(c, from, "receive from", err) < 0) return -1;
    struct tr_comm_req *q = calloc(1, sizeof *q);
    if (!q) return skiff_error(err, ENOMEM, "comm request");
    q->op = OP_SENDRECV;
    q->sbuf = sbuf;
    q->n = to >= 0 ? sbytes : 0;
    q->to = to;
    q->rbuf = rbuf;
    q->rn = from >= 0 ? rbytes : 0;
    q->from = from;
    tcp_push(c->impl, q);
    return tcp_wait(c, q, err);
}

static void tcp_destroy(struct tr_comm *c)
{
    struct tcp *t = c->impl;
    if (t) {
        if (t->have_thread) {
            pthread_mutex_lock(&t->mu);
            t->stop = 1;
            pthread_cond_broadcast(&t->cv);
            pthread_mutex_unlock(&t->mu);
            pthread_join(t->thread, NULL);
        }
        if (t->left_fd >= 0) close(t->left_fd);
        if (t->right_fd >= 0) close(t->right_fd);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t->tmp);
        free(t);
    }
    free(c);
}

static const struct tr_comm_ops tcp_ops = {
    .name = "tcp",
    .allreduce_sum = tcp_allreduce,
    .reduce_scatter = tcp_reduce_scatter,
    .all_gather = tcp_all_gather,
    .broadcast = tcp_broadcast,
    .barrier = tcp_barrier,
    .start = tcp_start,
    .wait = tcp_wait,
    .destroy = tcp_destroy,
    .start_group = NULL,
    .sendrecv = tcp_sendrecv,
};

/* Connects this member to the next one (rank+1) and accepts the previous
 * one; addresses go through the store under "NAME/R". */
static int ring_connect(struct tcp *t, struct tr_store *store, const char *name, const int *members, skiff_err *err)
{
    struct tr_comm *c = t->c;
    int P = c->world, r = c->rank, left = mod(r - 1, P), right = mod(r + 1, P);
    int port = 0;
    cleanup_close int lfd = net_listen(tr_store_local_addr(store), 0, &port, err);
    if (lfd < 0) return skiff_err_wrap(err, "%s: listening for rank %d", name, members[left]);
    char key[96], val[128];
    snprintf(key, sizeof key, "%s/%d", name, r);
    snprintf(val, sizeof val, "%d %s", port, tr_store_local_addr(store));
    if (tr_store_set(store, key, val, strlen(val), err) < 0) return -1;
    snprintf(key, sizeof key, "%s/%d", name, right);
    cleanup_free char *rv = NULL;
    if (tr_store_get(store, key, (void **)&rv, NULL, err) < 0)
        return skiff_err_wrap(err, "%s: address of rank %d", name, members[right]);
    int rport = 0;
    char host[100] = "";
    if (sscanf(rv, "%d %99s", &rport, host) != 2)
        return skiff_error(err, EPROTO, "%s: bad address '%s' from rank %d", name, rv, members[right]);
    t->right_fd = net_connect_retry(host, rport, c->timeout_ms, err);
    if (t->right_fd < 0) return skiff_err_wrap(err, "%s: connecting to rank %d", name, members[right]);
    int32_t me = r, who = -1;
    if (net_send_all(t->right_fd, &me, sizeof me, c->timeout_ms, t->right_name, err) < 0) return -1;
    t->left_fd = net_accept(lfd, c->timeout_ms, err);
    if (t->left_fd < 0) return skiff_err_wrap(err, "%s: waiting for rank %d to connect", name, members[left]);
    if (net_recv_all(t->left_fd, &who, sizeof who, c->timeout_ms, t->left_name, err) < 0) return -1;
    if (who != left)
        return skiff_error(err, EPROTO, "%s: expected rank %d to connect, got member %d of the group", name,
                           members[left], (int)who);
    net_tune(t->left_fd, 1);
    net_tune(t->right_fd, 1);
    return 0;
}

int tr_comm_tcp_create_group(struct tr_store *store, const char *name, const int *members, int n, int me,
                             int local_rank, int timeout_ms, struct tr_comm **out, skiff_err *err)
{
    if (n < 1 || me < 0 || me >= n) return skiff_error(err, 0, "comm group %s: member %d of %d", name, me, n);
    struct tr_comm *c = calloc(1, sizeof *c);
    struct tcp *t = calloc(1, sizeof *t);
    if (!c || !t) {
        free(c);
        free(t);
        return skiff_error(err, ENOMEM, "allocating comm");
    }
    c->ops = &tcp_ops; /* one rank: every collective is a local no-op in the same code */
    c->rank = me;
    c->world = n;
    c->local_rank = local_rank;
    c->timeout_ms = timeout_ms;
    c->impl = t;
    t->c = c;
    t->left_fd = t->right_fd = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    snprintf(t->left_name, sizeof t->left_name, "rank %d", members[mod(me - 1, n)]);
    snprintf(t->right_name, sizeof t->right_name, "rank %d", members[mod(me + 1, n)]);
    if (n > 1) {
        if (!store) {
            tr_comm_destroy(c);
            return skiff_error(err, 0, "comm: world %d needs a store", n);
        }
        if (ring_connect(t, store, name, members, err) < 0) {
            tr_comm_destroy(c);
            return skiff_err_wrap(err, "rank %d", members[me]);
        }
    }
    if (pthread_create(&t->thread, NULL, comm_main, t) != 0) {
        tr_comm_destroy(c);
        return skiff_error(err, EAGAIN, "starting the comm thread");
    }
    t->have_thread = 1;
    *out = c;
    return 0;
}

int tr_comm_tcp_create(struct tr_store *store, int rank, int world, int local_rank, int timeout_ms,
                       struct tr_comm **out, skiff_err *err)
{
    if (world < 1 || rank < 0 || rank >= world) return skiff_error(err, 0, "comm: rank %d of %d", rank, world);
    int *all = malloc((size_t)world * sizeof *all);
    if (!all) return skiff_error(err, ENOMEM, "allocating comm");
    for (int i = 0; i < world; i++) all[i] = i;
    int rc = tr_comm_tcp_create_group(store, "ring", all, world, rank, local_rank, timeout_ms, out, err);
    free(all);
    return rc;
}
