/* See step.h: what the phases of a step share. */
#include "step.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "named.h"
#include "plugin.h"

void skiff_step_init(struct step *s, const struct skiff_plugin_args *args, struct skiff_opts *opts)
{
    memset(s, 0, sizeof(*s));
    s->args = args;
    s->opts = opts;
    s->starter = (struct skiff_helper_proc)SKIFF_HELPER_PROC_INIT;
    s->mntns_fd = -1;
    s->c.server_pidfd = -1;
}

int skiff_step_fail(struct step *s, const char *phase, const skiff_err *err)
{
    if (!s->failed) {
        s->failed = true;
        snprintf(s->phase, sizeof(s->phase), "%s", phase);
        s->err = *err;
    }
    /* task_init prints it as an error, once per task; here only for the log */
    skiff_log_verbose("skiff: %s: %s", phase, err->msg);
    return 0; /* fail in task_init, where srun sees it */
}

int skiff_step_identity(struct step *s, spank_t sp, skiff_err *err)
{
    if (spank_get_item(sp, S_JOB_UID, &s->uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &s->gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &s->jobid) != ESPANK_SUCCESS) {
        return skiff_error(err, 0, "cannot read the job's uid, gid or id from Slurm");
    }
    gid_t *groups = NULL;
    int ngroups = 0;
    if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups) == ESPANK_SUCCESS && ngroups > 0) {
        s->groups = calloc((size_t)ngroups, sizeof(gid_t));
        if (s->groups) {
            memcpy(s->groups, groups, (size_t)ngroups * sizeof(gid_t));
            s->ngroups = ngroups;
        }
    }
    if (!s->groups) {
        s->groups = calloc(1, sizeof(gid_t));
        if (s->groups) {
            s->groups[0] = s->gid;
            s->ngroups = 1;
        }
    }
    struct passwd pw, *pwp = NULL;
    char pwbuf[4096];
    if (getpwuid_r(s->uid, &pw, pwbuf, sizeof(pwbuf), &pwp) != 0 || !pwp) {
        return skiff_error(err, 0, "uid %u has no passwd entry on this node", (unsigned)s->uid);
    }
    snprintf(s->user, sizeof(s->user), "%s", pw.pw_name);
    snprintf(s->home, sizeof(s->home), "%s", pw.pw_dir);
    skiff_named_this_node(s->node, sizeof(s->node));
    return 0;
}

struct skiff_user skiff_step_user(const struct step *s)
{
    return (struct skiff_user){
        .uid = s->uid, .gid = s->gid, .groups = s->groups, .ngroups = s->ngroups, .name = s->user, .home = s->home};
}

int skiff_load_user_config(const struct skiff_plugin_args *a, uid_t uid, const char *user, const char *home,
                           struct skiff_config *cfg, skiff_err *err)
{
    skiff_config_for_user(uid, user, home);
    /* slurmstepd's environment is slurmd's, not the user's: no SKIFF_* overrides */
    if (skiff_config_load(cfg, a->config[0] ? a->config : NULL, false, err) < 0)
        return -1;
    if (a->default_registry[0] && skiff_config_set(cfg, "default_registry", a->default_registry, err) < 0)
        return -1;
    if (a->runtime_path[0]) {
        /* an admin's shared directory: one private subdirectory per user */
        char p[SKIFF_PATH_MAX + 32];
        snprintf(p, sizeof(p), "%s/%u", a->runtime_path, (unsigned)uid);
        if (strlen(p) >= sizeof(cfg->runtime_path))
            return skiff_error(err, ENAMETOOLONG, "runtime_path too long");
        snprintf(cfg->runtime_path, sizeof(cfg->runtime_path), "%s", p);
    }
    return 0;
}

/* A getter over the job's environment. Every value it returns stays valid
 * until skiff_envget_free: callers (ddp_env) may hold several at once. */
#define ENVGET_MAX 128
struct skiff_envget {
    spank_t sp;
    char buf[8192];
    char *kept[ENVGET_MAX];
    size_t n;
};

struct skiff_envget *skiff_envget_new(spank_t sp)
{
    struct skiff_envget *e = calloc(1, sizeof(*e));
    if (e)
        e->sp = sp;
    return e;
}

const char *skiff_envget(void *ctx, const char *name)
{
    struct skiff_envget *e = ctx;
    if (spank_getenv(e->sp, name, e->buf, sizeof(e->buf)) != ESPANK_SUCCESS)
        return NULL;
    if (e->n >= ENVGET_MAX)
        return NULL;
    char *v = strdup(e->buf);
    if (!v)
        return NULL;
    e->kept[e->n++] = v;
    return v;
}

void skiff_envget_free(struct skiff_envget *e)
{
    for (size_t i = 0; e && i < e->n; i++)
        free(e->kept[i]);
    free(e);
}

/* No symlink is
 * followed and no mount crossed (EXDEV), so root never asks a filesystem
 * the user mounted in their own directory (a FUSE server that never
 * answers) anything. Kernels without openat2: fstatat's rules (no link
 * followed, but mounts crossed). */
int skiff_step_open_user_path(int bfd, const char *rel)
{
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    long fd = syscall(SYS_openat2, bfd, rel, &how, sizeof(how));
    if (fd < 0 && errno == ENOSYS)
        fd = openat(bfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    return (int)fd;
}

/* BASE is made by root (0755) and must be root's and
 * writable by nobody else, so no user can take a name in it first; UID is
 * made by root inside it (by fd: nothing is followed, no mount is crossed)
 * and given to the user. */
int skiff_step_user_dir(const struct step *s, const char *base, const char *arg, skiff_err *err)
{
    if (mkdir(base, 0755) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s %s", arg, base);
    cleanup_close int bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (bfd < 0 || fstat(bfd, &st) < 0)
        return skiff_error(err, errno, "open %s %s", arg, base);
    if (st.st_uid != 0 || (st.st_mode & 022))
        return skiff_error(err, 0,
                           "%s %s must be a directory owned by root and writable only by root (an admin "
                           "must remove it, or set %s= in plugstack.conf)",
                           arg, base, arg);
    char uid[16];
    snprintf(uid, sizeof(uid), "%u", (unsigned)s->uid);
    if (mkdirat(bfd, uid, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s/%s", base, uid);
    cleanup_close int ufd = skiff_step_open_user_path(bfd, uid);
    if (ufd < 0 && errno == EXDEV)
        return skiff_error(err, 0, "%s/%s has a filesystem mounted on it: unmount it (fusermount3 -u)", base, uid);
    if (ufd < 0 || fstat(ufd, &st) < 0)
        return skiff_error(err, errno, "stat %s/%s", base, uid);
    if (!S_ISDIR(st.st_mode))
        return skiff_error(err, 0, "%s/%s is not a directory (an admin must remove it)", base, uid);
    if ((st.st_uid != s->uid || st.st_gid != s->gid) && fchownat(ufd, "", s->uid, s->gid, AT_EMPTY_PATH) < 0)
        return skiff_error(err, errno, "chown %s/%s", base, uid);
    return 0;
}
