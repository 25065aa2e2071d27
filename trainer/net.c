#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

void net_tune(int fd, int nb)
{
    int one = 1, big = 4 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, nb ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

int net_connect_retry(const char *host, int port, int timeout_ms, skiff_err *err)
{
    double deadline = skiff_now_ms() + timeout_ms;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int last_errno = 0;
    const char *last_what = "connect";
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(host, ps, &hints, &res);
        if (g == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
                if (fd < 0) continue;
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                    freeaddrinfo(res);
                    net_tune(fd, 0);
                    return fd;
                }
                last_errno = errno;
                last_what = "connect";
                close(fd);
            }
            freeaddrinfo(res);
        } else {
            last_errno = g == EAI_SYSTEM ? errno : 0;
            last_what = gai_strerror(g);
        }
        if (skiff_now_ms() >= deadline) break;
        usleep(50 * 1000);
    }
    return skiff_error(err, last_errno ? last_errno : ETIMEDOUT, "could not connect to %s:%d for %.1f s (%s)", host,
                       port, timeout_ms / 1000.0, last_what);
}

int net_listen(const char *host, int port, int *bound_port, skiff_err *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    if (host && (!*host || !strcmp(host, "*"))) host = NULL;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) return skiff_error(err, 0, "resolving %s: %s", host ? host : "*", gai_strerror(g));
    int saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            getsockname(fd, (struct sockaddr *)&ss, &sl);
            if (bound_port)
                *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
            freeaddrinfo(res);
            return fd;
        }
        saved = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return skiff_error(err, saved, "listening on %s:%d", host ? host : "*", port);
}

int net_accept(int lfd, int timeout_ms, skiff_err *err)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r < 0) return skiff_error(err, errno, "poll");
    if (r == 0) return skiff_error(err, ETIMEDOUT, "no connection within %.1f s", timeout_ms / 1000.0);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return skiff_error(err, errno, "accept");
    net_tune(fd, 0);
    return fd;
}

static int wait_fd(int fd, short ev, int timeout_ms, const char *what, const char *dir, skiff_err *err)
{
    struct pollfd p = {.fd = fd, .events = ev};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r < 0) return skiff_error(err, errno, "poll");
    if (r == 0)
        return skiff_error(err, ETIMEDOUT, "%s %s nothing for %.1f s (stuck or dead?)", what, dir, timeout_ms / 1000.0);
    return 0;
}

int net_send_all(int fd, const void *buf, size_t len, int timeout_ms, const char *what, skiff_err *err)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, timeout_ms, what, "accepted", err) < 0) return -1;
            continue;
        }
        return skiff_error(err, errno, "sending to %s (did it exit?)", what);
    }
    return 0;
}

int net_recv_all(int fd, void *buf, size_t len, int timeout_ms, const char *what, skiff_err *err)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return skiff_error(err, ECONNRESET, "%s closed the connection (did it exit?)", what);
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, timeout_ms, what, "sent", err) < 0) return -1;
            continue;
        }
        return skiff_error(err, errno, "receiving from %s (did it exit?)", what);
    }
    return 0;
}

int net_local_addr(int fd, char *buf, size_t len, skiff_err *err)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return skiff_error(err, errno, "getsockname");
    const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                             : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if (!inet_ntop(ss.ss_family, a, buf, (socklen_t)len)) return skiff_error(err, errno, "inet_ntop");
    return 0;
}
