/* skiff containers: start (holder process), join, environment, stop.
 *
 * One implementation shared by the `skiff` CLI and the SPANK plugin.
 *
 *   skiff_container_start()  starts what a request (request.h) asks for:
 *       it forks a "holder", which unshares user + mount (+ req->unshare_flags)
 *       namespaces, mounts the squashfs image (in-process FUSE server, or
 *       extraction into a tmpfs as the fallback), overlays a tmpfs upper when
 *       writable, mounts /proc /dev /sys /tmp, hosts/resolv.conf/hostname and
 *       the user's mounts, runs the hooks, pivot_roots and then parks. It
 *       returns once the container is ready, or -1 with the child's real
 *       reason (mount error, hook name + status + stderr) in err.
 *   skiff_container_join()   in the calling (single-threaded) process:
 *       setns into the holder's namespaces, chroot to the container root,
 *       chdir workdir, drop capabilities and set no_new_privs. After it
 *       returns the caller execs the command (argv, env of its choice).
 *   skiff_container_env()    the container's own environment (image Env,
 *       hook env files, the locale fallback, then req->env: later wins),
 *       K=V strings; a command's is skiff_env_compose's (env.h).
 *   skiff_container_stop()   kills the holder and whatever else runs in the
 *       container, reaps the holder, waits until its FUSE server is gone (so
 *       nothing stays mounted or running) and removes the state directory.
 *
 * No globals: every call works on the structs passed in, so the plugin can
 * start several containers in one process. Usable from a PIC .so. */
#ifndef SKIFF_CONTAINER_H
#define SKIFF_CONTAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"
#include "request.h"
#include "strv.h"

/* The most of what hooks say to the user that a container keeps. */
#define SKIFF_NOTICE_LEN 512

/* Where a failed start failed (the plugin names it: "skiff: hook: ..."). */
enum skiff_start_failure {
    SKIFF_START_FAILED_SETUP, /* image, mounts, namespaces, working directory */
    SKIFF_START_FAILED_HOOKS, /* a hook, or what a hook asked for */
};

struct skiff_container {
    pid_t holder;                   /* the parked process holding the namespaces; 0 = none */
    pid_t command;                  /* the command started with req->spawn (our child); 0 = none */
    pid_t server;                   /* the holder's FUSE server; 0 = none (extracted image) */
    int server_pidfd;               /* a pidfd of it (start only), or -1 */
    char state_dir[SKIFF_PATH_MAX]; /* runtime_path/KEY */
    char workdir[SKIFF_PATH_MAX];   /* resolved working directory inside the container */
    char **env;                     /* container env, NULL-terminated (owned) */
    char **entrypoint;              /* image Entrypoint (owned, may be NULL) */
    char **cmd;                     /* image Cmd (owned, may be NULL) */
    bool owns_state;                /* stop removes state_dir */
    bool subreaper;                 /* from opts->subreaper */
    dev_t mntns_dev;                /* the container's mount namespace (subreaper stop) */
    ino_t mntns_ino;
    bool trace;                            /* from opts->trace */
    enum skiff_start_failure failed_phase; /* after skiff_container_start failed */
    char name[256];                        /* the named container it runs, or "" */
    bool shared;                           /* a second instance of a named container in use: its
                                              changes are not kept (named.h, skiff_named_use) */
    char notice[SKIFF_NOTICE_LEN];         /* what the hooks told the user at the start (their
                                              stderr when they succeeded), one line, or "" */
};

int skiff_container_start(const struct skiff_config *cfg, const struct skiff_start_request *req,
                          struct skiff_container *c, skiff_err *err);

/* A start of a lazy image (image/lazy.h) needs its span fetcher, started
 * by the front end before the container's namespaces are made. When the
 * image of o (o->image, or o->name's) is a lazy image, this opens it,
 * execs `PROGRAM VERB DIR` (the front end's program that runs
 * skiff_lazy_fetch_main, with the channel as fd chan_fd and the nkeep fds
 * of keep kept) and sets o->lazy and o->lazy_chan; otherwise it does
 * nothing. After the container stopped (or failed to start),
 * skiff_lazy_run_end kills and reaps the fetcher and closes the image. */
struct skiff_lazy_run {
    struct lz_image *im;
    int chan;
    pid_t fetcher;
};
int skiff_lazy_run_begin(const struct skiff_config *cfg, struct skiff_start_request *o, const char *program,
                         const char *verb, int chan_fd, const int *keep, size_t nkeep, struct skiff_lazy_run *run,
                         skiff_err *err);
void skiff_lazy_run_end(struct skiff_lazy_run *run);

/* How a process joins a container. */
enum skiff_join_flag {
    /* keep the capabilities of the container's user namespace (the SPANK
     * plugin's tasks, as under pyxis: root with remap-root may mount, and
     * with --container-unshare=uts set the hostname); without it every
     * capability is dropped (the CLI) */
    SKIFF_JOIN_KEEP_CAPS = 1 << 0,
};

/* Joins the holder's user, mount (and net/ipc/uts where they differ from the
 * caller's) namespaces, enters its root, chdirs to workdir (NULL: "/"), drops
 * all capabilities (or keeps the namespace's, see SKIFF_JOIN_KEEP_CAPS), sets
 * PR_SET_NO_NEW_PRIVS and installs the container's seccomp filter
 * (idfilter.h). The caller must be single-threaded (setns into a user
 * namespace requires it). */
int skiff_container_join(pid_t holder, const char *workdir, unsigned flags, skiff_err *err);

/* Copies the container environment into *envp (NULL-terminated, caller frees
 * with skiff_strv_free). */
int skiff_container_env(const struct skiff_container *c, char ***envp, skiff_err *err);

/* The argv to run: user_argv when it is non-empty, else Entrypoint + Cmd.
 * With use_entrypoint and user_argv, Entrypoint + user_argv (docker
 * semantics). Caller frees with skiff_strv_free. Error when nothing to run. */
int skiff_container_argv(const struct skiff_container *c, bool use_entrypoint, char *const *user_argv, char ***argvp,
                         skiff_err *err);

/* Removes the state left by `skiff start` containers whose holder is gone
 * (their CLI was killed before it could clean up): runtime_path/pid-N with no
 * process N here. State keyed by the plugin (node.job.step) is left alone:
 * its steps clean up themselves. */
void skiff_container_prune(const struct skiff_config *cfg);

/* Removes runtime_path/KEY, the state of a container whose holder is gone
 * (the plugin's helper was killed before it could stop it). */
int skiff_container_remove_state(const struct skiff_config *cfg, const char *key, skiff_err *err);

/* Before joining a container started with opts->subreaper (skiff exec):
 * marks it so that its stop looks for processes outside the starter's
 * children. */
int skiff_container_mark_joined(const struct skiff_container *c, skiff_err *err);

/* Kills (SIGKILL) and reaps the holder and every process left in the
 * container, removes the state dir, frees memory. Safe to call twice and on
 * a container whose start failed. */
int skiff_container_stop(struct skiff_container *c, skiff_err *err);

/* c as records (records.h): its holder pid 'H', workdir 'W', env 'E',
 * Entrypoint 'P' and Cmd 'C', appended to b. One format for the holder's
 * report to its starter, the state file `skiff exec` reads and the plugin
 * helper's answer to root (plugin/proto.h). */
struct skiff_recbuf;
int skiff_container_encode(const struct skiff_container *c, struct skiff_recbuf *b, skiff_err *err);

/* Applies one record of that format to c: 1 when tag is one of H W E P C,
 * 0 when it is not (a tag of the caller's), -1 with err when the value is
 * malformed. Strict, because root reads it from a user-side process: a
 * holder pid > 0, an absolute workdir that fits, env entries KEY=VALUE. */
int skiff_container_decode(struct skiff_container *c, char tag, const char *s, skiff_err *err);

/* Frees c's memory without touching the holder (after skiff_container_load). */
void skiff_container_free(struct skiff_container *c);

/* A running container of the caller's, to attach to: the one whose state
 * key is key, or else (key NULL) the instance of the named container name
 * among the state keys starting with prefix (the plugin's "NODE."),
 * preferring the instance that writes its persistent layer. Its holder
 * must be alive, the caller's, and in the mount namespace its state
 * recorded. Fills c (holder, workdir, env) from the state file.
 * 1 found, 0 none, -1 error. */
int skiff_container_find(const struct skiff_config *cfg, const char *key, const char *name, const char *prefix,
                         struct skiff_container *c, skiff_err *err);

/* Calls fn for each running container of the caller's in cfg->runtime_path
 * (state key, and the container: holder, name, shared, workdir, env),
 * sorted by key; one whose holder is gone or is not in the mount namespace
 * its state recorded is skipped. A missing runtime_path has none. */
int skiff_container_each(const struct skiff_config *cfg,
                         void (*fn)(const char *key, const struct skiff_container *c, void *arg), void *arg,
                         skiff_err *err);

/* Reads the state of a running container by holder pid or state key from
 * runtime_path (for `skiff exec`): fills c (holder, workdir, env). */
int skiff_container_load(const struct skiff_config *cfg, pid_t pid, struct skiff_container *c, skiff_err *err);

/* Squashes the merged view (image + persistent upper) of the named container
 * into out_path (atomically: temp + rename). */
int skiff_container_export(const struct skiff_config *cfg, const char *name, const char *out_path, skiff_err *err);

#endif
