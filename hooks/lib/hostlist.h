/* Slurm-style host lists: "gpu-a[01-02]-b[3,5],login1".
 *
 * skiff expands and compresses host lists itself so that the per-task
 * environment needs no `scontrol show hostnames` (a fork + RPC per task) and
 * works outside Slurm too. Grammar, limits and expansion order are in
 * doc/training-env.md ("Host lists"). */
#ifndef SKIFF_HOSTLIST_H
#define SKIFF_HOSTLIST_H

#include <stddef.h>

#include "error.h"

/* Limits. Every check happens while parsing, before anything proportional to
 * the expanded size is allocated. */
#define SKIFF_HOSTLIST_MAX_INPUT (1u << 20)  /* bytes of host list text */
#define SKIFF_HOSTLIST_MAX_HOSTS (1u << 20)  /* hosts after expansion */
#define SKIFF_HOSTLIST_MAX_NAME 255          /* bytes of one host name */
#define SKIFF_HOSTLIST_MAX_BYTES (64u << 20) /* all expanded names together */

struct skiff_hostlist {
    size_t n;     /* number of hosts */
    char **hosts; /* n NUL-terminated names, in expansion order */
    char *buf;    /* storage behind hosts[] */
};

/* Validates s and counts its hosts without expanding them. */
int skiff_hostlist_count(const char *s, size_t *n, skiff_err *err);

/* Writes host number idx (0-based, expansion order) of s into buf without
 * expanding the others: this is how MASTER_ADDR is found. */
int skiff_hostlist_nth(const char *s, size_t idx, char *buf, size_t len, skiff_err *err);

/* Expands s into out (freed with skiff_hostlist_free). At most max_hosts
 * hosts (0 = SKIFF_HOSTLIST_MAX_HOSTS); more is an error, found before any
 * allocation of the result. */
int skiff_hostlist_expand(const char *s, size_t max_hosts, struct skiff_hostlist *out, skiff_err *err);
void skiff_hostlist_free(struct skiff_hostlist *hl);

/* Compresses n host names into the bracket form, keeping their order, so that
 * skiff_hostlist_expand(result) gives back exactly hosts[0..n-1]. Returns a
 * malloc'ed string, or NULL with err set (invalid host name). */
char *skiff_hostlist_compress(const char *const *hosts, size_t n, skiff_err *err);

#endif
