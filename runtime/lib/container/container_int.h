/* Private to the container module, whose API is container.h: what its files
 * share. container.c forks the holder and reads its report, joins and
 * exports; holder.c is the holder's setup in order; assemble.c builds the
 * root filesystem (lower + overlay, system mounts, user mounts); hookrun.c
 * runs the hooks (ABI: doc/hooks.md); imgcompat.c adjusts the environment;
 * command.c chooses the command's argv and spawns it; runstate.c keeps a
 * container's runtime state (state directory, state file, prune, load) and
 * stops it. The CLI and the plugin must not include this header. */
#ifndef SKIFF_CONTAINER_INT_H
#define SKIFF_CONTAINER_INT_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "container.h"
#include "error.h"
#include "named.h"
#include "records.h"
#include "strv.h"

/* The PATH every container (and every hook) starts from. */
#define SKIFF_DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct skiff_fuse;

/* What the holder knows while it sets the container up. */
struct skiff_holder {
    const struct skiff_config *cfg;
    const struct skiff_start_request *o;
    const char *state_dir;
    char image[SKIFF_PATH_MAX];
    char upper[SKIFF_PATH_MAX];   /* the named container's directory, or "" */
    struct skiff_named_use named; /* how this container uses it (named.h) */
    bool writable;
    bool rootfs_only; /* export: lower + overlay, no system mounts, no pivot */
    char stage[SKIFF_PATH_MAX];
    char home[SKIFF_PATH_MAX]; /* the user's home (--mount-home), looked up before the namespace */
    struct skiff_fuse *fuse;   /* the image's FUSE server (NULL: extracted) */
    sigset_t caller_mask;      /* the caller's signal mask, for the spawned command */
    pid_t caller;              /* the process that forked the holder */
    bool failed_in_hooks;      /* setup failed in the hooks (reported as status -2) */
};

/* h->stage/sub into out (n bytes): the staging tmpfs the holder builds the
 * container in (lower, upper, root, the hooks' files). */
static inline int skiff_stage_path(const struct skiff_holder *h, const char *sub, char *out, size_t n, skiff_err *err)
{
    int w = snprintf(out, n, "%s/%s", h->stage, sub);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "staging path");
    return 0;
}

/* ---- holder.c ---- */

/* The holder's setup, in the order of a start: namespaces, root
 * filesystem, mounts, hooks, environment, report (appended to out, and
 * written as the state file), pivot_root, the command (opts->spawn). With
 * h->rootfs_only (export) it stops after the root filesystem. */
int skiff_holder_setup(struct skiff_holder *h, struct skiff_recbuf *out, skiff_err *err);

/* The holder process after the fork: skiff_holder_setup, its status and
 * report (or error) on wfd, then it parks until killed. Never returns. */
__attribute__((noreturn)) void skiff_holder_main(struct skiff_holder *h, int wfd);

/* ---- command.c ---- */

/* skiff_container_argv's choice, from the image's Entrypoint and Cmd. */
int skiff_command_argv(char *const *entrypoint, char *const *cmd, bool use_entrypoint, const char *const *user_argv,
                       char ***argvp, skiff_err *err);

/* opts->spawn: starts argv with envp in wd from the holder (inside the
 * namespaces, after pivot_root) as a child of the caller; its pid. */
pid_t skiff_command_spawn(const struct skiff_holder *h, char **argv, char **envp, const char *wd, skiff_err *err);

/* ---- runstate.c ---- */

/* An export's temporary image is OUTDIR/.NAME SKIFF_EXPORT_TMP PID, named
 * in its state directory's SKIFF_EXPORT_MARK file, so that pruning the
 * state of a killed export removes the partial image too. */
#define SKIFF_EXPORT_TMP ".tmp.export-"
#define SKIFF_EXPORT_MARK "export-tmp"

/* Fills c from the records of the holder's report or the state file. */
int skiff_state_parse(const char *p, size_t len, struct skiff_container *c, skiff_err *err);

/* runtime_path/KEY into out (SKIFF_PATH_MAX bytes); no key: "pid-PID". */
int skiff_state_dir_for(const struct skiff_config *cfg, const char *key, pid_t pid, char *out, skiff_err *err);

/* Creates path 0700 if missing and checks it is ours and private. */
int skiff_state_private_dir(const char *path, skiff_err *err);

/* Writes the state file (the holder's report) into state_dir, atomically. */
int skiff_state_write(const char *state_dir, const struct skiff_recbuf *rec, skiff_err *err);

/* Removes the state dir and whatever hooks left in it (and the partial
 * image of a killed export, SKIFF_EXPORT_MARK). */
void skiff_state_remove(const char *state_dir);

/* Whether pid's parent is parent. */
bool skiff_is_child_of(pid_t pid, pid_t parent);

/* ---- assemble.c ---- */

/* Lower (FUSE or extracted) + overlay on h->stage/root; returns an O_PATH
 * fd of the root, or -1. Sets h->fuse. */
int skiff_assemble_root(struct skiff_holder *h, skiff_err *err);

/* /proc, a minimal /dev (with /dev/shm and /dev/mqueue: private ones when
 * unshare_flags has CLONE_NEWIPC), /sys, /tmp and the host's
 * hosts/resolv.conf/hostname. */
int skiff_assemble_system_mounts(int rootfd, int unshare_flags, skiff_err *err);

/* The user's home (home: NULL for none) at its own path, a private tmpfs
 * on /root with root_tmpfs (pyxis's --container-mount-home under
 * --container-remap-root: root's home is not the user's), then the user's
 * mount specs. */
int skiff_assemble_user_mounts(int rootfd, const char *home, bool root_tmpfs, const char *const *specs, skiff_err *err);

/* ---- imgcompat.c ---- */

/* Adjusts the container environment (image Env + hooks' lines) before the
 * caller's own entries: APT_CONFIG for apt under remap-root, HOME=/root
 * with mount_home under remap-root, C.UTF-8 for each of o->locale_env's
 * variables whose locale the image lacks. rootfd: the assembled root, its
 * system mounts made. */
int skiff_compat_env(int rootfd, const struct skiff_start_request *o, char ***env, skiff_err *err);

/* ---- enrootsite.c: enroot's site configuration, when cfg->enroot_compat ---- */

/* environ.d: the variables of its .env files into *env. */
int skiff_enroot_environ(const struct skiff_holder *h, char ***env, skiff_err *err);

/* mounts.d: the mounts of its .fstab files in the root. */
int skiff_enroot_mounts(const struct skiff_holder *h, int rootfd, skiff_err *err);

/* hooks.d: its .sh executables with enroot's contract; then *env is what they left in
 * ENROOT_ENVIRON and ENROOT_MOUNTS's mounts are made. What they said to the user goes
 * into notice (skiff_hooks_run). */
int skiff_enroot_hooks(const struct skiff_holder *h, int rootfd, char ***env, char *notice, size_t n_notice,
                       skiff_err *err);

/* ---- hookrun.c ---- */

/* Applies the fstab lines of the file at path (hooks' mounts; a missing
 * file has none); errors say what (the file's role). */
int skiff_hooks_apply_fstab(int rootfd, const char *path, const char *what, skiff_err *err);

/* Adds the file's KEY=VALUE lines ('#' and blank lines skipped) to *env. */
int skiff_hooks_read_env(const char *path, char ***env, skiff_err *err);

/* Runs the hooks of the container h is setting up (doc/hooks.md), then adds
 * their env file lines to *env and applies their mounts file. What they
 * said to the user goes into notice (skiff_hooks_run). */
int skiff_hooks_container(const struct skiff_holder *h, char ***env, char *notice, size_t n_notice, skiff_err *err);

#endif
