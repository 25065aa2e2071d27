/* Namespaces: creating the container's (unprivileged: a one-line uid/gid map
 * written by the process itself, no setuid helper) and joining them. */
#ifndef SKIFF_NS_H
#define SKIFF_NS_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"

/* Drops the calling process fully to uid/gid/groups (root only: the plugin's
 * child before it execs the user-side helper) and checks that neither root
 * nor setgroups can be had back. The process stays non-dumpable: it holds a
 * copy of root's memory until it execs. Async-signal-safe enough for a fork
 * of a multithreaded process (no allocation). */
int skiff_ns_drop_creds(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups, skiff_err *err);

/* unshare(CLONE_NEWUSER|CLONE_NEWNS|extra) and map the caller's euid/egid to
 * itself, or to 0 with remap_root. Mount propagation is made private; in a
 * new network namespace the loopback interface is brought up. */
int skiff_ns_create(int extra_flags, bool remap_root, skiff_err *err);

/* setns into pid's user, mount and (where they differ from ours) net, ipc,
 * uts namespaces, then chroot into pid's root. */
int skiff_ns_join(pid_t pid, skiff_err *err);

/* For a step that joins the running container pid with
 * --container-unshare=FLAGS (CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWNET): an
 * error naming each namespace asked for that the container shares with the
 * caller ("not in a separate UTS namespace", pyxis's words). */
int skiff_ns_check_unshared(pid_t pid, int flags, skiff_err *err);

/* State letter and parent pid of pid from /proc/PID/stat: 0, or -1 when it
 * is gone or unreadable. */
int skiff_proc_stat(pid_t pid, char *state, int *ppid);

/* SIGKILLs every process (but skip and the caller) whose mount namespace is
 * ns (the stat of a /proc/PID/ns/mnt): without a PID namespace that is how
 * a container's processes are found. With wait_ms > 0 it waits up to that
 * long for each to die. Returns how many it signalled. It can only signal
 * what the caller may: the plugin calls it as the job's user. */
int skiff_ns_kill_members(const struct stat *ns, pid_t skip, int wait_ms);

/* Whether mntns_fd is a mount namespace of uid's own: owned by a user
 * namespace that uid created (not the host's), and not the caller's. Root's
 * check of a container process a user-side helper names (plugin/start.c)
 * and of the namespace it is about to have killed. */
bool skiff_ns_owned_by(int mntns_fd, uid_t uid);

#endif
