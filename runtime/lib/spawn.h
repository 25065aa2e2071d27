/* Running a helper program: argv array + explicit environment, no shell,
 * stderr captured for error messages, a timeout. */
#ifndef SKIFF_SPAWN_H
#define SKIFF_SPAWN_H

#include <stddef.h>

#include "error.h"

struct skiff_spawn_result {
    int status;         /* wait status */
    int timed_out;      /* 1 when killed for exceeding timeout_ms */
    char err_tail[640]; /* the end of what it wrote to stderr */
};

/* Runs argv[0] (a path, or a name looked up in envp's PATH) with envp.
 * stdin is /dev/null, stdout goes to stdout_fd (-1: our stderr), stderr is
 * captured (and also copied to our stderr when echo is set). timeout_ms <= 0:
 * none. Returns 0 when it ran (check r->status), -1 when it could not. */
int skiff_spawn(const char *const *argv, const char *const *envp, int stdout_fd, int timeout_ms, int echo,
                struct skiff_spawn_result *r, skiff_err *err);

/* "exit status N" / "killed by signal N" / "timed out after N ms". */
void skiff_spawn_describe(const struct skiff_spawn_result *r, int timeout_ms, char *buf, size_t n);

#endif
