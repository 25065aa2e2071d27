/* Socket helpers shared by the store and the TCP ring: full reads/writes
 * with a deadline, so a dead or silent peer becomes an error, not a hang. */
#ifndef SKIFF_TRAINER_NET_H
#define SKIFF_TRAINER_NET_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Connects to host:port, retrying (connection refused, name not yet
 * resolvable) until timeout_ms; returns the fd or -1. */
int net_connect_retry(const char *host, int port, int timeout_ms, skiff_err *err);
/* Listens on host:port (host NULL/""/"*" = any; port 0 = kernel's choice).
 * Returns the fd; *bound_port gets the port. */
int net_listen(const char *host, int port, int *bound_port, skiff_err *err);
/* Accepts one connection within timeout_ms. */
int net_accept(int lfd, int timeout_ms, skiff_err *err);
/* Sends/receives exactly len bytes within timeout_ms of no progress.
 * what names the peer for messages ("rank 2"). EOF is an error. */
int net_send_all(int fd, const void *buf, size_t len, int timeout_ms, const char *what, skiff_err *err);
int net_recv_all(int fd, void *buf, size_t len, int timeout_ms, const char *what, skiff_err *err);
/* Sets TCP_NODELAY, keepalive and large buffers; non-blocking when nb. */
void net_tune(int fd, int nb);
/* The local IP address (text) of a connected socket. */
int net_local_addr(int fd, char *buf, size_t len, skiff_err *err);

#endif
