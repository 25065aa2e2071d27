/* A container's runtime state and its end; see container_int.h.
 *
 * Each container has a directory runtime_path/KEY (KEY: the plugin's
 * node.job.step, or pid-HOLDER for `skiff start`) holding the state file
 * (the holder's report, records of records.h) that `skiff exec` loads, the
 * holder's staging mount point and whatever hooks keep there. Stop kills
 * the holder, its FUSE server and what is left in the container, then
 * removes the directory. */
#include "container_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomicfile.h"
#include "clock.h"
#include "fdio.h"
#include "fsutil.h"
#include "named.h"
#include "ns.h"

#define STATE_FILE "state"
/* A state file is a few KiB (env and argv); one this large is not ours. */
#define STATE_MAX (4u << 20)

/* ---- a container as records (records.h) ----
 * 'H' holder pid, 'W' workdir, 'E' env entry, 'P' Entrypoint word, 'C' Cmd
 * word (skiff_container_encode/decode: the holder's report to its starter,
 * the state file, the plugin helper's answer to root); and, in the holder's
 * report and the state file only, 'X' the spawned command's pid, 'F' the
 * FUSE server's, 'N' the named container it runs, 'R' (it is a reader
 * instance of it, named.h), 'M' "DEV:INO" of its mount namespace and 'U'
 * what its hooks told the user. */

int skiff_container_encode(const struct skiff_container *c, struct skiff_recbuf *b, skiff_err *err)
{
    if (skiff_rec_putf(b, 'H', err, "%d", (int)c->holder) < 0 ||
        skiff_rec_put(b, 'W', c->workdir[0] ? c->workdir : "/", err) < 0)
        return -1;
    for (size_t i = 0; c->env && c->env[i]; i++)
        if (skiff_rec_put(b, 'E', c->env[i], err) < 0)
            return -1;
    for (size_t i = 0; c->entrypoint && c->entrypoint[i]; i++)
        if (skiff_rec_put(b, 'P', c->entrypoint[i], err) < 0)
            return -1;
    for (size_t i = 0; c->cmd && c->cmd[i]; i++)
        if (skiff_rec_put(b, 'C', c->cmd[i], err) < 0)
            return -1;
    return 0;
}

int skiff_container_decode(struct skiff_container *c, char tag, const char *s, skiff_err *err)
{
    switch (tag) {
    case 'H': {
        /* a pid that does not parse is an error, never -1: kill(-1, ...)
         * signals every process the caller may signal */
        pid_t pid = skiff_rec_pid(s);
        if (pid < 0)
            return skiff_error(err, 0, "bad holder pid '%.20s'", s);
        c->holder = pid;
        return 1;
    }
    case 'W':
        if (s[0] != '/' || strlen(s) >= sizeof(c->workdir))
            return skiff_error(err, 0, "bad working directory");
        snprintf(c->workdir, sizeof(c->workdir), "%s", s);
        return 1;
    case 'E':
        if (!strchr(s, '=') || s[0] == '=')
            return skiff_error(err, 0, "bad environment entry");
        return skiff_strv_push(&c->env, s, err) < 0 ? -1 : 1;
    case 'P':
        return skiff_strv_push(&c->entrypoint, s, err) < 0 ? -1 : 1;
    case 'C':
        return skiff_strv_push(&c->cmd, s, err) < 0 ? -1 : 1;
    default:
        return 0;
    }
}

int skiff_state_parse(const char *p, size_t len, struct skiff_container *c, skiff_err *err)
{
    size_t off = 0;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(p, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, 0, "truncated container state");
        if (tag == 'X' || tag == 'F') {
            pid_t pid = skiff_rec_pid(s);
            if (pid < 0)
                return skiff_error(err, 0, "corrupt container state: bad pid '%.20s'", s);
            *(tag == 'X' ? &c->command : &c->server) = pid;
            continue;
        }
        if (tag == 'N' || tag == 'R' || tag == 'M' || tag == 'U') {
            unsigned long long dev, ino;
            if (tag == 'N')
                snprintf(c->name, sizeof(c->name), "%s", s);
            else if (tag == 'U')
                snprintf(c->notice, sizeof(c->notice), "%s", s);
            else if (tag == 'R')
                c->shared = true;
            else if (sscanf(s, "%llu:%llu", &dev, &ino) == 2) {
                c->mntns_dev = (dev_t)dev;
                c->mntns_ino = (ino_t)ino;
            }
            continue;
        }
        int rc = skiff_container_decode(c, tag, s, err);
        if (rc < 0)
            return skiff_err_wrap(err, "corrupt container state");
        if (rc == 0)
            return skiff_error(err, 0, "corrupt container state: unknown record 0x%02x", (unsigned char)tag);
    }
    return 0;
}

/* ---- paths ---- */

int skiff_state_private_dir(const char *path, skiff_err *err)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return skiff_error(err, errno, "create %s", path);
    struct stat st;
    if (lstat(path, &st) < 0)
        return skiff_error(err, errno, "stat %s", path);
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
        return skiff_error(err, EPERM,
                           "%s must be a directory owned by uid %u and writable only by it (remove it, "
                           "or set runtime_path)",
                           path, (unsigned)geteuid());
    return 0;
}

int skiff_state_dir_for(const struct skiff_config *cfg, const char *key, pid_t pid, char *out, skiff_err *err)
{
    char autokey[32];
    if (!key || !*key) {
        snprintf(autokey, sizeof(autokey), "pid-%d", (int)pid);
        key = autokey;
    }
    if (!skiff_name_valid(key))
        return skiff_error(err, 0, "state key '%s' may only contain letters, digits, '.', '_', '-'", key);
    if ((size_t)snprintf(out, SKIFF_PATH_MAX, "%s/%s", cfg->runtime_path, key) >= SKIFF_PATH_MAX)
        return skiff_error(err, ENAMETOOLONG, "runtime path");
    return 0;
}

int skiff_state_write(const char *state_dir, const struct skiff_recbuf *rec, skiff_err *err)
{
    /* written atomically: `skiff exec` may read it at any time; not synced:
     * it describes processes, which a crash ends too */
    char fin[SKIFF_PATH_MAX + 16];
    if (skiff_fmt_path(fin, sizeof(fin), err, "%s/" STATE_FILE, state_dir) < 0)
        return -1;
    return skiff_atomic_write(fin, rec->p, rec->len, 0600, SKIFF_ATOMIC_NOSYNC, err);
}

/* Removes the state dir and whatever hooks left in it (they may use
 * SKIFF_STATE_DIR as scratch). Every caller runs as the state's owner (the
 * plugin starts containers from its user-side helper, never as root). */
/* A killed export's partial image, named in its state (container_int.h):
 * removed when the name is one an export makes (.NAME.tmp.export-PID). */
static void remove_export_tmp(const char *state_dir)
{
    char mark[SKIFF_PATH_MAX + 32];
    skiff_err e;
    if (skiff_fmt_path(mark, sizeof(mark), &e, "%s/" SKIFF_EXPORT_MARK, state_dir) < 0)
        return;
    cleanup_free char *tmp = skiff_read_file(mark, O_NOFOLLOW, SKIFF_PATH_MAX + 64, NULL, &e);
    const char *base = tmp ? strrchr(tmp, '/') : NULL;
    if (base && tmp[0] == '/' && base[1] == '.' && strstr(base, SKIFF_EXPORT_TMP))
        unlink(tmp);
}

void skiff_state_remove(const char *state_dir)
{
    struct stat st;
    if (lstat(state_dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return;
    remove_export_tmp(state_dir);
    skiff_err e;
    skiff_remove_tree(state_dir, &e);
}

/* A holder of ours is alive: the process exists, is not a zombie (an
 * orphan waits for init to reap it), and is ours (signalling it works: a
 * pid reused by another user's process is not our holder). */
static bool holder_alive(pid_t pid)
{
    char state;
    int ppid;
    if (kill(pid, 0) < 0)
        return false;
    return skiff_proc_stat(pid, &state, &ppid) < 0 || state != 'Z'; /* unreadable: kept, to be safe */
}

int skiff_container_remove_state(const struct skiff_config *cfg, const char *key, skiff_err *err)
{
    char dir[SKIFF_PATH_MAX];
    if (!key || !*key)
        return skiff_error(err, 0, "no state key");
    if (skiff_state_dir_for(cfg, key, 0, dir, err) < 0)
        return -1;
    skiff_state_remove(dir);
    return 0;
}

void skiff_container_prune(const struct skiff_config *cfg)
{
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "pid-", 4) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + 4, &end, 10);
        if (*end || pid <= 0 || pid > INT_MAX)
            continue;
        if (holder_alive((pid_t)pid))
            continue;
        char p[SKIFF_PATH_MAX + 300];
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", cfg->runtime_path, e->d_name) < sizeof(p))
            skiff_state_remove(p);
    }
    closedir(d);
}

/* Whether pid's parent is parent. */
bool skiff_is_child_of(pid_t pid, pid_t parent)
{
    char state;
    int ppid;
    return skiff_proc_stat(pid, &state, &ppid) == 0 && ppid == (int)parent;
}

/* Kills the processes left in the container's mount namespace (a command's
 * background children), and waits until each is dead, so nothing of the
 * container runs once stop returns. */
static void kill_leftovers(pid_t holder, const struct stat *ns)
{
    skiff_ns_kill_members(ns, holder, 2000);
}

/* The FUSE server dies with the holder anyway (PR_SET_PDEATHSIG), but only
 * once the holder has torn its namespace down: killed now, both exit at
 * once. */
static void kill_server(struct skiff_container *c)
{
    if (c->server_pidfd < 0)
        return;
    pidfd_send_signal(c->server_pidfd, SIGKILL, NULL, 0);
    close(c->server_pidfd);
    c->server_pidfd = -1;
}

#define JOINED_FILE "joined"

int skiff_container_mark_joined(const struct skiff_container *c, skiff_err *err)
{
    if (!c->state_dir[0])
        return skiff_error(err, ENOENT, "container state directory unknown");
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/" JOINED_FILE, c->state_dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "mark %s as joined", c->state_dir);
    close(fd);
    return 0;
}

/* Subreaper stop: SIGKILLs every child of ours and reaps it, until none is
 * left (orphans of the container come to us as their parents die). -1
 * when /proc cannot list our children. */
static int kill_children(void)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/task/%d/children", (int)getpid());
    for (;;) {
        char buf[4096];
        cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n < 0)
            return -1; /* (waiting blind could wait for a child never killed) */
        buf[n] = '\0';
        for (char *q = buf, *end; *q; q = end) {
            long pid = strtol(q, &end, 10);
            if (end == q)
                break;
            if (pid > 0)
                kill((pid_t)pid, SIGKILL);
        }
        if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD)
            return 0;
    }
}

static bool was_joined(const char *state_dir)
{
    char p[SKIFF_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/" JOINED_FILE, state_dir);
    return state_dir[0] && access(p, F_OK) == 0;
}

int skiff_container_stop(struct skiff_container *c, skiff_err *err)
{
    (void)err;
    if (c->subreaper && (c->holder > 0 || c->mntns_ino)) {
        /* the holder first: once it is reaped, nobody can join any more,
         * so the mark below is final */
        if (c->holder > 0) {
            kill(c->holder, SIGKILL);
            kill_server(c);
            while (waitpid(c->holder, NULL, 0) < 0 && errno == EINTR)
                ;
            c->holder = 0;
        }
        skiff_trace(c->trace, "stop: holder reaped");
        if (was_joined(c->state_dir) && c->mntns_ino) {
            struct stat ns = {.st_dev = c->mntns_dev, .st_ino = c->mntns_ino};
            kill_leftovers(0, &ns);
        }
        if (kill_children() < 0 && c->mntns_ino) {
            struct stat ns = {.st_dev = c->mntns_dev, .st_ino = c->mntns_ino};
            kill_leftovers(0, &ns);
        }
        c->mntns_ino = 0;
        skiff_trace(c->trace, "stop: children reaped");
    }
    if (c->holder > 0) {
        /* kill first, clean up while the kernel tears the namespace down,
         * reap last */
        char p[64];
        struct stat ns;
        snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)c->holder);
        bool have_ns = stat(p, &ns) == 0;
        int pfd = pidfd_open(c->holder, 0);
        kill(c->holder, SIGKILL);
        kill_server(c);
        if (have_ns)
            kill_leftovers(c->holder, &ns);
        skiff_trace(c->trace, "stop: killed");
        if (waitpid(c->holder, NULL, 0) < 0 && errno == ECHILD && pfd >= 0) {
            /* not our child: wait until it is gone */
            struct pollfd pf = {.fd = pfd, .events = POLLIN};
            poll(&pf, 1, 5000);
        }
        if (pfd >= 0)
            close(pfd);
        c->holder = 0;
        skiff_trace(c->trace, "stop: holder reaped");
    }
    kill_server(c); /* (its holder was gone already) */
    if (c->owns_state && c->state_dir[0])
        skiff_state_remove(c->state_dir);
    c->state_dir[0] = '\0';
    skiff_strv_free(c->env);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->env = c->entrypoint = c->cmd = NULL;
    return 0;
}

void skiff_container_free(struct skiff_container *c)
{
    if (c->server_pidfd >= 0)
        close(c->server_pidfd);
    c->server_pidfd = -1;
    skiff_strv_free(c->env);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->env = c->entrypoint = c->cmd = NULL;
    c->holder = 0;
}

int skiff_container_load(const struct skiff_config *cfg, pid_t pid, struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    char p[64];
    struct stat want;
    snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
    if (stat(p, &want) < 0)
        return skiff_error(err, errno, "process %d (is it running, and yours?)", (int)pid);
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return skiff_error(err, errno, "no running containers (%s)", cfg->runtime_path);
    struct dirent *e;
    int rv = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sp[SKIFF_PATH_MAX + 300];
        snprintf(sp, sizeof(sp), "%s/%s/" STATE_FILE, cfg->runtime_path, e->d_name);
        skiff_err e2;
        size_t n;
        cleanup_free char *buf = skiff_read_file(sp, O_NOFOLLOW, STATE_MAX, &n, &e2);
        if (!buf || !n)
            continue;
        struct skiff_container t = {0};
        if (skiff_state_parse(buf, n, &t, &e2) == 0 && t.holder > 0) {
            struct stat hs;
            snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)t.holder);
            if (stat(p, &hs) == 0 && hs.st_ino == want.st_ino && hs.st_dev == want.st_dev) {
                *c = t;
                if ((size_t)snprintf(c->state_dir, sizeof(c->state_dir), "%s/%s", cfg->runtime_path, e->d_name) >=
                    sizeof(c->state_dir))
                    c->state_dir[0] = '\0';
                c->owns_state = false;
                rv = 0;
                break;
            }
        }
        skiff_strv_free(t.env);
        skiff_strv_free(t.entrypoint);
        skiff_strv_free(t.cmd);
    }
    closedir(d);
    if (rv < 0)
        skiff_error(err, ESRCH, "process %d is not in a skiff container of yours (see 'skiff list')", (int)pid);
    return rv;
}

/* The state of runtime_path/key into c, if its holder is alive, the
 * caller's (signal 0 works), not a zombie, and in the mount namespace the
 * state recorded (a reused pid is another process). 1, or 0 when not. */
static int load_live(const struct skiff_config *cfg, const char *key, struct skiff_container *c)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    char sp[SKIFF_PATH_MAX + 300];
    if ((size_t)snprintf(sp, sizeof(sp), "%s/%s/" STATE_FILE, cfg->runtime_path, key) >= sizeof(sp))
        return 0;
    skiff_err e;
    size_t len;
    cleanup_free char *data = skiff_read_file(sp, O_NOFOLLOW, STATE_MAX, &len, &e);
    if (!data || skiff_state_parse(data, len, c, &e) < 0 || c->holder <= 0 || !c->mntns_ino || !holder_alive(c->holder))
        goto no;
    skiff_err ignore;
    if (skiff_state_dir_for(cfg, key, 0, c->state_dir, &ignore) < 0)
        goto no;
    char p[64];
    struct stat ns;
    snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)c->holder);
    if (stat(p, &ns) < 0 || ns.st_ino != c->mntns_ino || ns.st_dev != c->mntns_dev)
        goto no;
    return 1;
no:
    skiff_container_free(c);
    return 0;
}

int skiff_container_find(const struct skiff_config *cfg, const char *key, const char *name, const char *prefix,
                         struct skiff_container *c, skiff_err *err)
{
    memset(c, 0, sizeof(*c));
    c->server_pidfd = -1;
    if (key)
        return skiff_name_valid(key) ? load_live(cfg, key, c) : 0;
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", cfg->runtime_path);
    struct dirent *e;
    int found = 0;
    size_t pl = strlen(prefix);
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, pl) || !skiff_name_valid(e->d_name))
            continue;
        struct skiff_container t;
        if (!load_live(cfg, e->d_name, &t))
            continue;
        if (strcmp(t.name, name) || (found && t.shared)) {
            skiff_container_free(&t);
            continue;
        }
        /* the writer wins over a reader found before it */
        if (found)
            skiff_container_free(c);
        *c = t;
        found = 1;
        if (!t.shared)
            break;
    }
    closedir(d);
    return found;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int skiff_container_each(const struct skiff_config *cfg,
                         void (*fn)(const char *key, const struct skiff_container *c, void *arg), void *arg,
                         skiff_err *err)
{
    DIR *d = opendir(cfg->runtime_path);
    if (!d)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "open %s", cfg->runtime_path);
    char **keys = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!skiff_name_valid(e->d_name))
            continue;
        char **nk = realloc(keys, (n + 1) * sizeof(*keys));
        if (!nk)
            break;
        keys = nk;
        if ((keys[n] = strdup(e->d_name)))
            n++;
    }
    closedir(d);
    if (n > 1)
        qsort(keys, n, sizeof(*keys), cmp_key);
    for (size_t i = 0; i < n; i++) {
        struct skiff_container c;
        if (load_live(cfg, keys[i], &c)) {
            fn(keys[i], &c, arg);
            skiff_container_free(&c);
        }
        free(keys[i]);
    }
    free(keys);
    return 0;
}
