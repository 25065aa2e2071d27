/* skiff containers: start (holder process), join, environment, stop.
 *
 * One implementation shared by the `skiff` CLI and the SPANK plugin.
 *
 *   skiff_container_start()  forks a "holder": it (optionally) drops to the
 *       given uid/gid/groups, unshares user + mount (+ opts->unshare_flags)
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
 *   skiff_container_env()    the container environment (image Env, then
 *       hook env files, then opts->env: later wins), K=V strings.
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
#include "strv.h"

struct lz_image;

struct skiff_start_opts {
    const char *image;             /* squashfs path (NULL when name is an existing container) */
    const char *name;              /* named container (persistent upper), or NULL */
    const char *const *mounts;     /* pyxis-style specs "SRC:DST[:FLAGS]", NULL-terminated, or NULL */
    const char *const *env;        /* extra K=V (win over image and hook env), or NULL */
    const char *workdir;           /* NULL: the image's WorkingDir, else "/" */
    bool writable;                 /* overlay over a tmpfs upper (implied by name) */
    bool remap_root;               /* map the user to uid/gid 0 in the container */
    bool mount_home;               /* bind the user's home directory (from passwd) */
    bool use_entrypoint;           /* skiff_container_argv: prepend the image's Entrypoint */
    char *const *command;          /* the command the caller will run (NULL: the image's); only
                                      used to warm its executable while setting up (warm.h) */
    bool no_warm;                  /* do not warm it (diagnostics: SKIFF_NO_WARM=1 in the CLI) */
    int unshare_flags;             /* extra namespaces: CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS */
    const char *const *hook_env;   /* K=V passed to hooks (the plugin passes SLURM_*), or NULL */
    const char *const *locale_env; /* the caller's LANG / LC_* as K=V (the plugin passes the
                                    job's): a locale the image lacks becomes C.UTF-8 in the
                                    container env, unless the image sets the variable */
    const char *extra_hooks_dir;   /* the user's hooks, run with cfg->hooks_dir's (the CLI's
                                      $SKIFF_HOOKS_DIR; doc/hooks.md), or NULL */
    const char *state_key;         /* unique key for runtime state (plugin: node.job.step); NULL = auto */
    int fuse_fd;                   /* an open /dev/fuse fd (root may pass one), or -1 to open it */
    int hook_timeout_s;            /* per hook; 0 = 60 s */
    bool die_with_parent;          /* holder gets SIGKILL when the starting thread dies (CLI) */
    bool trace;                    /* print phase timestamps (CLOCK_MONOTONIC ms) to stderr */
    /* The holder starts the command itself (Entrypoint/Cmd/command as
     * skiff_container_argv chooses, the container env plus default_env's
     * entries for keys it lacks) as a child of the caller (CLONE_PARENT),
     * with the caller's stdio and signal mask: already in the namespaces, it
     * needs no join. Its pid is c->command; the caller waits for it. The CLI
     * uses this; the plugin joins per task instead. */
    bool spawn;
    const char *const *default_env;
    /* The caller is a child subreaper (PR_SET_CHILD_SUBREAPER) whose only
     * children are this container's processes: the container's orphans and
     * the holder's FUSE server come to it, so stop kills and reaps its
     * children instead of scanning /proc for the container's mount namespace
     * (which it still does when `skiff exec` joined, see mark_joined). */
    bool subreaper;
    /* A lazy image (image/lazy.h): image (or the named container's) is a
     * lazy image's directory, lazy the image opened for serving, lazy_chan
     * the channel to its fetcher (skiff_lazy_run_begin sets both). */
    struct lz_image *lazy;
    int lazy_chan;
};

/* Default options: everything off, fuse_fd = -1, use_entrypoint = true. */
void skiff_start_opts_init(struct skiff_start_opts *opts);

/* Where a failed start failed (the plugin names it: "skiff: hook: ..."). */
enum skiff_start_failure {
    SKIFF_START_FAILED_SETUP, /* image, mounts, namespaces, working directory */
    SKIFF_START_FAILED_HOOKS, /* a hook, or what a hook asked for */
};

struct skiff_container {
    pid_t holder;                   /* the parked process holding the namespaces; 0 = none */
    pid_t command;                  /* the command started with opts->spawn (our child); 0 = none */
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
};

int skiff_container_start(const struct skiff_config *cfg, const struct skiff_start_opts *opts,
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
int skiff_lazy_run_begin(const struct skiff_config *cfg, struct skiff_start_opts *o, const char *program,
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

/* Reads the state of a running container by holder pid or state key from
 * runtime_path (for `skiff exec`): fills c (holder, workdir, env). */
int skiff_container_load(const struct skiff_config *cfg, pid_t pid, struct skiff_container *c, skiff_err *err);

/* Squashes the merged view (image + persistent upper) of the named container
 * into out_path (atomically: temp + rename). */
int skiff_container_export(const struct skiff_config *cfg, const char *name, const char *out_path, skiff_err *err);

#endif
