/* Root's side of the user-side helper (see proto.h): start it, read its
 * answer, wait for it, each bounded in time; and kill what is left in a
 * container's mount namespace, as the user.
 *
 * The rules this file keeps (doc/SECURITY.md):
 *  - what runs as the user is exec'd: the child closes every fd but the
 *    request, reply and control channels, drops to the job's uid, gid and
 *    groups (and checks none can be had back) and execs the helper; until
 *    the exec it is not dumpable, so the user cannot look into the copy of
 *    root's memory it holds;
 *  - root reads at most SKIFF_REPLY_MAX bytes from it, before a deadline;
 *  - root never waits for a user process without a deadline, not even for
 *    one it killed: a process in uninterruptible sleep (a request to a FUSE
 *    server of the user's that never answers) outlives SIGKILL. After
 *    SKIFF_KILL_GRACE_MS root says so once in the log (pid, state, where it
 *    waits, the user's FUSE mounts) and goes on; it reaps the process later
 *    if it ever exits (or slurmstepd's exit leaves it to init);
 *  - root kills only its own unreaped child (through a pidfd), and kills
 *    in a container's namespace only from a child that runs as the user. */
#ifndef SKIFF_PLUGIN_USERPROC_H
#define SKIFF_PLUGIN_USERPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "proto.h"
#include "records.h"

struct skiff_user {
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    int ngroups;
    const char *name; /* login name, for USER/LOGNAME */
    const char *home;
};

struct skiff_helper_proc {
    pid_t pid;     /* 0: none */
    int pidfd;     /* of pid */
    int rep;       /* read end of its reply pipe, or -1 */
    int ctl;       /* write end of its control pipe (start), or -1 */
    uid_t uid;     /* whose it is (for the report of one that outlives SIGKILL) */
    char verb[16]; /* what it was asked to do (the same) */
};

#define SKIFF_HELPER_PROC_INIT                                                                                         \
    {                                                                                                                  \
        0, -1, -1, -1, 0, ""                                                                                           \
    }

/* How long root waits for a process it SIGKILLed to be gone. */
#define SKIFF_KILL_GRACE_MS 2000

/* Where the report of a process that outlived SIGKILL goes (the plugin's
 * error sink, which sanitises it); NULL: nowhere. */
void skiff_userproc_set_log(void (*log)(const char *line));

/* The helper program to run: helper if set, else skiff-helper in the
 * directory spank_skiff.so was loaded from, else (none there) in the
 * directory the helpers are installed to (SKIFF_HELPER_DIR_DEFAULT,
 * LIBEXECDIR/skiff); with full, that name + "-full"
 * (skiff-helper-full: imports and the exit-time verbs). It must be a
 * regular file owned by root and writable by nobody else, in a directory
 * the same holds for. */
int skiff_helper_path(const char *helper, bool full, char *out, size_t n, skiff_err *err);

/* Forks and execs `PROGRAM VERB` as u with the request req (see proto.h).
 * env: extra K=V for the helper's environment (proxies), or NULL. */
int skiff_helper_spawn(const char *program, const char *verb, const struct skiff_user *u,
                       const struct skiff_recbuf *req, const char *const *env, bool control,
                       struct skiff_helper_proc *hp, skiff_err *err);

/* Reads and parses the helper's answer, until *deadline_ms (skiff_now_ms's
 * clock; w->seen may move it, within a bound the caller keeps; timeout_s
 * is the plugstack setting the error names); w (or NULL) gets each record
 * as it arrives (progress, proto.h) and may stop the wait (records.h). On
 * a timeout (err->code ETIMEDOUT), a stop (w's error) or a malformed
 * answer err says so. Free r with skiff_reply_free in every case. */
int skiff_helper_reply(struct skiff_helper_proc *hp, const double *deadline_ms, int timeout_s,
                       const struct skiff_rec_watch *w, struct skiff_reply *r, skiff_err *err);

/* After the control pipe of a start helper closed: whether it says that
 * steps joined its container (SKIFF_REPLY_WAIT on the reply pipe, within timeout_ms; it
 * then stops the container only when they are done, so the caller waits
 * for it with skiff_helper_finish before Slurm kills the step's
 * processes). Reads one byte at most. */
bool skiff_helper_joined(struct skiff_helper_proc *hp, int timeout_ms);

/* Closes the control pipe (the helper stops its container), waits up to
 * timeout_s for the helper to exit, then kills it; reaps it (bounded, see
 * above) and closes every fd. Returns its wait status, or -1 when it had
 * to be killed. timeout_s 0: killed at once, not waited for. */
int skiff_helper_finish(struct skiff_helper_proc *hp, int timeout_s);

/* spawn + reply + finish, for the verbs that end by themselves. */
int skiff_helper_call(const char *program, const char *verb, const struct skiff_user *u, const struct skiff_recbuf *req,
                      int timeout_s, skiff_err *err);

/* Runs fn(arg) in a child of the caller that keeps only the fds in keep
 * (and 0-2 on /dev/null), drops to u and is made not dumpable first thing
 * and again after the drop (whatever fs.suid_dumpable says): for work
 * that needs no user namespace (it does not exec, so Slurm's process
 * tracking, which spares processes named slurmstepd, lets it finish at the
 * step's end). 0 when fn returned >= 0 within timeout_s. */
int skiff_fork_as_user(const struct skiff_user *u, const int *keep, size_t nkeep, int (*fn)(void *arg), void *arg,
                       int timeout_s);

/* Kills (SIGKILL) every process in the mount namespace mntns_fd from a
 * child running as u, so the kernel refuses anything not the user's; the
 * namespace must belong to a user namespace owned by u->uid (checked
 * again). Waits at most timeout_s. */
void skiff_kill_ns_as_user(int mntns_fd, const struct skiff_user *u, int timeout_s);

#endif
