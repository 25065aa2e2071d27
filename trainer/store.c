/* The rendezvous store: rank 0 runs a server thread; every rank is a client.
 * Wire format (both ways little-endian host order, same machine type
 * assumed, as torch's TCPStore does): request = u8 op, u32 key_len,
 * u32 val_len, key, val; reply = u8 status, u32 val_len, val.
 * GET never blocks on the server: clients poll until their deadline, so a
 * client that gives up leaves no half-answered request behind. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3 };
#define STORE_MAX_CLIENTS 1024
#define STORE_IO_MS 2000 /* one request must arrive whole within this */

struct kv {
    char *key;
    void *val;
    size_t len;
};

struct tr_store {
    int fd; /* client connection */
    int timeout_ms;
    char local_addr[64];
    char where[300]; /* "host:port" for messages */
    /* server side (rank 0) */
    int lfd;
    int stop_pipe[2];
    pthread_t thread;
    int have_thread;
    struct kv *kvs;
    size_t nkv;
};

struct hdr {
    uint8_t op;
    uint32_t klen, vlen;
} __attribute__((packed));

static struct kv *kv_find(struct tr_store *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (!strcmp(s->kvs[i].key, key)) return &s->kvs[i];
    return NULL;
}

static int kv_set(struct tr_store *s, const char *key, const void *val, size_t len)
{
    struct kv *e = kv_find(s, key);
    void *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, val, len);
    ((char *)copy)[len] = 0;
    if (e) {
        free(e->val);
        e->val = copy;
        e->len = len;
        return 0;
    }
    struct kv *n = realloc(s->kvs, (s->nkv + 1) * sizeof *n);
    char *k = strdup(key);
    if (!n || !k) {
        free(copy);
        free(k);
        if (n) s->kvs = n;
        return -1;
    }
    s->kvs = n;
    s->kvs[s->nkv++] = (struct kv){k, copy, len};
    return 0;
}

static int serve_one(struct tr_store *s, int fd)
{
    skiff_err e;
    struct hdr h;
    if (net_recv_all(fd, &h, sizeof h, STORE_IO_MS, "store client", &e) < 0) return -1;
    if (h.klen > 4096 || h.vlen > (64u << 20)) return -1;
    char *key = malloc(h.klen + 1), *val = malloc(h.vlen + 1);
    int rc = -1;
    if (!key || !val) goto out;
    if (net_recv_all(fd, key, h.klen, STORE_IO_MS, "store client", &e) < 0 ||
        net_recv_all(fd, val, h.vlen, STORE_IO_MS, "store client", &e) < 0)
        goto out;
    key[h.klen] = 0;
    uint8_t status = 1;
    const void *rv = NULL;
    uint32_t rlen = 0;
    int64_t num = 0;
    if (h.op == OP_SET) {
        if (kv_set(s, key, val, h.vlen) < 0) status = 0;
    } else if (h.op == OP_GET) {
        struct kv *kv = kv_find(s, key);
        if (kv) {
            rv = kv->val;
            rlen = (uint32_t)kv->len;
        } else {
            status = 0;
        }
    } else if (h.op == OP_ADD && h.vlen == sizeof(int64_t)) {
        struct kv *kv = kv_find(s, key);
        if (kv && kv->len == sizeof num) memcpy(&num, kv->val, sizeof num);
        int64_t d;
        memcpy(&d, val, sizeof d);
        num += d;
        if (kv_set(s, key, &num, sizeof num) < 0) status = 0;
        rv = &num;
        rlen = sizeof num;
    } else {
        goto out;
    }
    uint8_t rh[5];
    rh[0] = status;
    memcpy(rh + 1, &rlen, 4);
    if (net_send_all(fd, rh, sizeof rh, STORE_IO_MS, "store client", &e) < 0 ||
        net_send_all(fd, rv, rlen, STORE_IO_MS, "store client", &e) < 0)
        goto out;
    rc = 0;
out:
    free(key);
    free(val);
    return rc;
}

static void *server_main(void *arg)
{
    struct tr_store *s = arg;
    struct pollfd *p = calloc(STORE_MAX_CLIENTS + 2, sizeof *p);
    if (!p) return NULL;
    size_t n = 2;
    p[0] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = s->stop_pipe[0], .events = POLLIN};
    for (;;) {
        int r = poll(p, n, -1);
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (p[0].revents & POLLIN) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                if (n < STORE_MAX_CLIENTS + 2) {
                    net_tune(fd, 0);
                    p[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
                } else {
                    close(fd);
                }
            }
        }
        for (size_t i = 2; i < n; i++) {
            if (!p[i].revents) continue;
            if ((p[i].revents & (POLLHUP | POLLERR)) && !(p[i].revents & POLLIN)) {
                close(p[i].fd);
                p[i--] = p[--n];
                continue;
            }
            if (serve_one(s, p[i].fd) < 0) {
                close(p[i].fd);
                p[i--] = p[--n];
            }
        }
    }
    for (size_t i = 2; i < n; i++) close(p[i].fd);
    free(p);
    return NULL;
}

void tr_store_close(struct tr_store *s)
{
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    if (s->have_thread) {
        if (write(s->stop_pipe[1], "x", 1) < 0) { /* the thread also exits on close */
        }
        pthread_join(s->thread, NULL);
    }
    if (s->stop_pipe[0] >= 0) close(s->stop_pipe[0]);
    if (s->stop_pipe[1] >= 0) close(s->stop_pipe[1]);
    if (s->lfd >= 0) close(s->lfd);
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kvs[i].key);
        free(s->kvs[i].val);
    }
    free(s->kvs);
    free(s);
}

int tr_store_open(const char *addr, int port, int is_server, int timeout_ms, struct tr_store **out, skiff_err *err)
{
    struct tr_store *s = calloc(1, sizeof *s);
    if (!s) return skiff_error(err, ENOMEM, "allocating store");
    s->fd = s->lfd = -1;
    s->stop_pipe[0] = s->stop_pipe[1] = -1;
    s->timeout_ms = timeout_ms;
    snprintf(s->where, sizeof s->where, "%s:%d", addr, port);
    if (is_server) {
        /* Listen on every address: MASTER_ADDR may name this host by an
         * address other ranks use but that a bind would not accept
         * (e.g. a name resolving to 127.0.1.1). */
        s->lfd = net_listen(NULL, port, NULL, err);
        if (s->lfd < 0) {
            tr_store_close(s);
            return skiff_err_wrap(err,
                                  "rank 0: store on MASTER_PORT=%d (is the port in use? pick "
                                  "another MASTER_PORT)",
                                  port);
        }
        if (pipe2(s->stop_pipe, O_CLOEXEC) < 0 || pthread_create(&s->thread, NULL, server_main, s) != 0) {
            tr_store_close(s);
            return skiff_error(err, errno, "starting the store thread");
        }
        s->have_thread = 1;
    }
    s->fd = net_connect_retry(addr, port, timeout_ms, err);
    if (s->fd < 0) {
        tr_store_close(s);
        return skiff_err_wrap(err,
                              "rendezvous: rank 0's store at MASTER_ADDR:MASTER_PORT=%s:%d "
                              "not reachable (is rank 0 running? check MASTER_ADDR/"
                              "MASTER_PORT; --timeout or SKIFF_TRAIN_TIMEOUT sets the wait)",
                              addr, port);
    }
    if (net_local_addr(s->fd, s->local_addr, sizeof s->local_addr, err) < 0) {
        tr_store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

static int request(struct tr_store *s, uint8_t op, const char *key, const void *val, size_t len, uint8_t *status,
                   void **rval, size_t *rlen, skiff_err *err)
{
    struct hdr h = {op, (uint32_t)strlen(key), (uint32_t)len};
    char what[340];
    snprintf(what, sizeof what, "the store at %s (rank 0)", s->where);
    if (net_send_all(s->fd, &h, sizeof h, s->timeout_ms, what, err) < 0 ||
        net_send_all(s->fd, key, h.klen, s->timeout_ms, what, err) < 0 ||
        net_send_all(s->fd, val, len, s->timeout_ms, what, err) < 0)
        return -1;
    uint8_t rh[5];
    uint32_t l;
    if (net_recv_all(s->fd, rh, sizeof rh, s->timeout_ms, what, err) < 0) return -1;
    memcpy(&l, rh + 1, 4);
    char *buf = malloc((size_t)l + 1);
    if (!buf) return skiff_error(err, ENOMEM, "store reply");
    if (net_recv_all(s->fd, buf, l, s->timeout_ms, what, err) < 0) {
        free(buf);
        return -1;
    }
    buf[l] = 0;
    *status = rh[0];
    if (rval) {
        *rval = buf;
        if (rlen) *rlen = l;
    } else {
        free(buf);
    }
    return 0;
}

int tr_store_set(struct tr_store *s, const char *key, const void *val, size_t len, skiff_err *err)
{
    uint8_t st;
    if (request(s, OP_SET, key, val, len, &st, NULL, NULL, err) < 0) return skiff_err_wrap(err, "store set %s", key);
    if (!st) return skiff_error(err, ENOMEM, "store set %s: refused by the server", key);
    return 0;
}

int tr_store_check(struct tr_store *s, const char *key, skiff_err *err)
{
    uint8_t st;
    if (request(s, OP_GET, key, "", 0, &st, NULL, NULL, err) < 0) return skiff_err_wrap(err, "store check %s", key);
    return st ? 1 : 0;
}

int tr_store_get(struct tr_store *s, const char *key, void **val, size_t *len, skiff_err *err)
{
    double start = skiff_now_ms();
    for (;;) {
        uint8_t st;
        void *v = NULL;
        size_t l = 0;
        if (request(s, OP_GET, key, "", 0, &st, &v, &l, err) < 0) return skiff_err_wrap(err, "store get %s", key);
        if (st) {
            *val = v;
            if (len) *len = l;
            return 0;
        }
        free(v);
        if (skiff_now_ms() - start >= s->timeout_ms)
            return skiff_error(err, ETIMEDOUT, "store get %s: not set within %.1f s", key, s->timeout_ms / 1000.0);
        usleep(10 * 1000);
    }
}

int tr_store_wait(struct tr_store *s, const char *const *keys, size_t n, skiff_err *err)
{
    double start = skiff_now_ms();
    for (;;) {
        char missing[512] = "";
        size_t used = 0, nmissing = 0;
        for (size_t i = 0; i < n; i++) {
            int c = tr_store_check(s, keys[i], err);
            if (c < 0) return -1;
            if (c == 0) {
                nmissing++;
                if (used + strlen(keys[i]) + 2 < sizeof missing)
                    used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%s", nmissing > 1 ? ", " : "",
                                             keys[i]);
            }
        }
        if (!nmissing) return 0;
        double waited = skiff_now_ms() - start;
        if (waited >= s->timeout_ms)
            return skiff_error(err, ETIMEDOUT, "store wait: %zu key(s) not set within %.1f s: %s", nmissing,
                               waited / 1000.0, missing);
        usleep(10 * 1000);
    }
}

int tr_store_add(struct tr_store *s, const char *key, long delta, long *out, skiff_err *err)
{
    int64_t d = delta, r = 0;
    uint8_t st;
    void *v = NULL;
    size_t l = 0;
    if (request(s, OP_ADD, key, &d, sizeof d, &st, &v, &l, err) < 0) return skiff_err_wrap(err, "store add %s", key);
    if (l == sizeof r) memcpy(&r, v, sizeof r);
    free(v);
    if (out) *out = (long)r;
    return 0;
}

const char *tr_store_local_addr(const struct tr_store *s) { return s->local_addr; }
int tr_store_timeout_ms(const struct tr_store *s) { return s->timeout_ms; }

int tr_store_rendezvous(struct tr_store *s, int rank, int world, skiff_err *err)
{
    char key[64], host[256] = "?";
    gethostname(host, sizeof host - 1);
    char val[320];
    snprintf(val, sizeof val, "%s pid %d", host, (int)getpid());
    snprintf(key, sizeof key, "rank/%d", rank);
    if (tr_store_set(s, key, val, strlen(val), err) < 0) return -1;
    double start = skiff_now_ms();
    for (;;) {
        char missing[512] = "";
        size_t nmissing = 0, used = 0;
        for (int r = 0; r < world; r++) {
            snprintf(key, sizeof key, "rank/%d", r);
            int c = tr_store_check(s, key, err);
            if (c < 0) return skiff_err_wrap(err, "rendezvous");
            if (c == 0) {
                nmissing++;
                if (used + 16 < sizeof missing)
                    used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", nmissing > 1 ? "," : "", r);
            }
        }
        if (!nmissing) return 0;
        double waited = skiff_now_ms() - start;
        if (waited >= s->timeout_ms)
            return skiff_error(err, ETIMEDOUT,
                               "rendezvous: rank%s %s of WORLD_SIZE=%d did not arrive within "
                               "%.1f s (started? same MASTER_ADDR/MASTER_PORT? --timeout or "
                               "SKIFF_TRAIN_TIMEOUT sets the wait)",
                               nmissing > 1 ? "s" : "", missing, world, waited / 1000.0);
        usleep(20 * 1000);
    }
}
