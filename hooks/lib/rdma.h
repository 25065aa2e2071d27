/* The node's RDMA devices and which of them a container gets: what the rdma
 * hook (hooks/rdma.c) decides, following enroot's 99-mellanox hook.
 *
 * Devices are the entries of SYS/class/infiniband (InfiniBand and RoCE
 * HCAs, AWS EFA, iWARP, ...), in natural order of their names (mlx5_0,
 * mlx5_1, ..., mlx5_10), numbered from 0 in that order: the indices of
 * MELLANOX_VISIBLE_DEVICES. Each one's character devices come from the
 * kernel's own class directories: SYS/class/infiniband_verbs/uverbsN/ibdev
 * and SYS/class/infiniband_mad/{umadN,issmN}/ibdev name the device they
 * belong to. SYS is /sys on a real node and a fixture's tree in tests. */
#ifndef SKIFF_RDMA_H
#define SKIFF_RDMA_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SKIFF_RDMA_MAX 64
#define SKIFF_RDMA_NODES 16 /* umad and issm nodes of one device (two per port) */

struct skiff_rdma_dev {
    char name[64];   /* mlx5_0, efa_0, ... */
    char driver[64]; /* the kernel driver of its device (mlx5_core, efa, ...), "" when unknown */
    char uverbs[32]; /* "uverbsN", "" when it has none */
    size_t nmad;
    char mad[SKIFF_RDMA_NODES][32]; /* "umadN", "issmN" */
};

/* Lists the devices under sys (at most max) into v, *n of them. A node
 * without SYS/class/infiniband has none (not an error). */
int skiff_rdma_list(const char *sys, struct skiff_rdma_dev *v, size_t max, size_t *n, skiff_err *err);

enum skiff_rdma_vis { SKIFF_RDMA_VOID, SKIFF_RDMA_ALL, SKIFF_RDMA_LIST };

struct skiff_rdma_set {
    enum skiff_rdma_vis kind;
    size_t n;
    unsigned idx[SKIFF_RDMA_MAX];
    const char *from; /* the variable it came from, or "default" */
};

/* MELLANOX_VISIBLE_DEVICES: "all", "none", "void" or "" (none and void
 * both mean no device, as in enroot), or device indices "0,2". */
int skiff_rdma_parse(const char *s, struct skiff_rdma_set *set, skiff_err *err);

/* The job's MELLANOX_VISIBLE_DEVICES (get), else the image's (image_get),
 * else dflt (the admin's default, 40-rdma.conf's default_visible). */
int skiff_rdma_select(const char *(*get)(void *, const char *), void *ctx,
                      const char *(*image_get)(void *, const char *), void *image_ctx, const char *dflt,
                      struct skiff_rdma_set *set, skiff_err *err);

/* A libibverbs provider configuration file (/etc/libibverbs.d/NAME.driver):
 * its "driver NAME-OR-PATH" line, into out. */
int skiff_rdma_parse_driver_file(const char *text, char *out, size_t n, skiff_err *err);

/* The libibverbs provider that serves a device: by its kernel driver
 * (mlx5_core: mlx5, mlx4_core: mlx4, bnxt_en: bnxt_re, ...), else its
 * name without the trailing number ("efa_0": efa, "rxe0": rxe). */
void skiff_rdma_provider(const struct skiff_rdma_dev *d, char *out, size_t n);

#endif
