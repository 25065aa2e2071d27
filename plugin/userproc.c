/* See userproc.h. */
#include "userproc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "ns.h"

#define HELPER_NAME "skiff-helper"

/* Root-owned and writable by nobody else: the plugin runs it for every
 * user, so whoever could change it could run code as any of them. */
static int root_only(const char *path, bool dir, skiff_err *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return skiff_error(err, errno, "helper %s", path);
    if ((dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) || st.st_uid != 0 || (st.st_mode & 022))
        return skiff_error(err, 0,
                           "helper %s must be a %s owned by root and writable only by root (plugstack.conf: "
                           "helper=PATH)",
                           path, dir ? "directory" : "regular file");
    return 0;
}

/* Where `make install` and the packages put the helpers (LIBEXECDIR/skiff):
 * the plugin itself goes to Slurm's plugin directory, which is Slurm's and
 * holds plugins only. */
#ifndef SKIFF_HELPER_DIR_DEFAULT
#define SKIFF_HELPER_DIR_DEFAULT "/usr/local/libexec/skiff"
#endif

int skiff_helper_path(const char *helper, bool full, char *out, size_t n, skiff_err *err)
{
    int w;
    if (helper && helper[0]) {
        w = snprintf(out, n, "%s%s", helper, full ? "-full" : "");
    } else {
        /* beside spank_skiff.so first (a build tree: build/plugin/), else
         * the installed helper directory */
        Dl_info info;
        if (!dladdr((void *)skiff_helper_path, &info) || !info.dli_fname || info.dli_fname[0] != '/')
            return skiff_error(err, 0, "cannot tell where spank_skiff.so is (plugstack.conf: set helper=PATH)");
        const char *slash = strrchr(info.dli_fname, '/');
        w = snprintf(out, n, "%.*s/" HELPER_NAME "%s", (int)(slash - info.dli_fname), info.dli_fname,
                     full ? "-full" : "");
        if (w >= 0 && (size_t)w < n && access(out, F_OK) < 0 && errno == ENOENT)
            w = snprintf(out, n, SKIFF_HELPER_DIR_DEFAULT "/" HELPER_NAME "%s", full ? "-full" : "");
    }
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "helper path");
    if (root_only(out, false, err) < 0)
        return -1;
    char dir[PATH_MAX];
    const char *slash = strrchr(out, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash == out ? 1 : (int)(slash - out), out);
    return root_only(dir, true, err);
}

/* In the child, before the exec: reports a failure the way the helper
 * would, so root's reader gives the real reason. */
static void child_fail(const char *what, int e)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "S-1%cpmount%cn%d%ce%s: %s%cZ%c", 0, 0, e, 0, what, strerror(e), 0, 0);
    if (n > 0)
        (void)!write(SKIFF_HELPER_REP_FD, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf));
}

int skiff_helper_spawn(const char *program, const char *verb, const struct skiff_user *u,
                       const struct skiff_recbuf *req, const char *const *env, bool control,
                       struct skiff_helper_proc *hp, skiff_err *err)
{
    *hp = (struct skiff_helper_proc)SKIFF_HELPER_PROC_INIT;
    /* the request: a sealed memory file, so the helper reads what root wrote */
    cleanup_close int req_fd = memfd_create("skiff-request", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (req_fd < 0)
        return skiff_error(err, errno, "helper request");
    if ((req->len && skiff_write_all(req_fd, req->p, req->len) < 0) ||
        fcntl(req_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0 ||
        lseek(req_fd, 0, SEEK_SET) < 0)
        return skiff_error(err, errno, "helper request");

    /* everything the child needs is made before the fork: the child of a
     * multithreaded process must not allocate */
    char e_home[SKIFF_PATH_MAX + 8], e_user[300], e_logname[300];
    snprintf(e_home, sizeof(e_home), "HOME=%s", u->home ? u->home : "/");
    snprintf(e_user, sizeof(e_user), "USER=%s", u->name ? u->name : "");
    snprintf(e_logname, sizeof(e_logname), "LOGNAME=%s", u->name ? u->name : "");
    const char *envp[40] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", e_home, e_user,
                            e_logname};
    size_t ne = 4;
    for (size_t i = 0; env && env[i] && ne < sizeof(envp) / sizeof(envp[0]) - 1; i++)
        envp[ne++] = env[i];
    envp[ne] = NULL;
    const char *argv[] = {program, verb, NULL};

    int rep[2] = {-1, -1}, ctl[2] = {-1, -1};
    if (pipe2(rep, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "helper pipe");
    if (control && pipe2(ctl, O_CLOEXEC) < 0) {
        int e = errno;
        close(rep[0]);
        close(rep[1]);
        return skiff_error(err, e, "helper pipe");
    }
    pid_t parent = getpid();
    /* Signals stay blocked across the fork, until the child has set its
     * dispositions: Slurm's step signals (SIGTERM at the job's end, scancel
     * --signal) are ignored from the first instruction on (helper.c says
     * why), everything else is back to its default. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL}, ign = {.sa_handler = SIG_IGN};
        for (int s = 1; s < NSIG; s++)
            sigaction(s, &dfl, NULL);
        static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};
        for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
            sigaction(ignored[i], &ign, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        int r = fcntl(req_fd, F_DUPFD_CLOEXEC, 10), w = fcntl(rep[1], F_DUPFD_CLOEXEC, 10);
        int c = control ? fcntl(ctl[0], F_DUPFD_CLOEXEC, 10) : -1;
        if (nul < 0 || r < 0 || w < 0 || (control && c < 0) || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 ||
            dup2(nul, 2) < 0 || dup2(r, SKIFF_HELPER_REQ_FD) < 0 || dup2(w, SKIFF_HELPER_REP_FD) < 0 ||
            (control && dup2(c, SKIFF_HELPER_CTL_FD) < 0))
            _exit(126);
        /* nothing of root's stays open: only 0-2 (/dev/null) and 3-5 */
        close_range(control ? SKIFF_HELPER_CTL_FD + 1 : SKIFF_HELPER_REP_FD + 1, ~0U, 0);
        skiff_err e;
        if (skiff_ns_drop_creds(u->uid, u->gid, u->groups, (size_t)(u->ngroups > 0 ? u->ngroups : 0), &e) < 0) {
            child_fail("drop to the job's user", e.code ? e.code : EPERM);
            _exit(126);
        }
        /* the credential change cleared both: no parent-death signal and
         * not dumpable (it holds root's memory until the exec) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
            _exit(126);
        execve(program, (char *const *)(void *)argv, (char *const *)(void *)envp);
        child_fail(program, errno);
        _exit(127);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(rep[1]);
    if (control)
        close(ctl[0]);
    if (pid < 0) {
        close(rep[0]);
        if (control)
            close(ctl[1]);
        return skiff_error(err, fork_errno, "fork the helper");
    }
    hp->pid = pid;
    hp->pidfd = pidfd_open(pid, 0); /* our child, not reaped: it is that process */
    hp->rep = rep[0];
    hp->ctl = control ? ctl[1] : -1;
    return 0;
}

int skiff_helper_reply(struct skiff_helper_proc *hp, int timeout_s, skiff_rec_seen_fn seen, void *ctx,
                       struct skiff_reply *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    char *data = NULL;
    size_t len = 0;
    bool timed_out = false;
    /* (rep stays open until skiff_helper_finish: a start helper's word
     * after its answer, skiff_helper_joined) */
    int rc =
        skiff_rec_read_fd_cb(hp->rep, SKIFF_REPLY_MAX, timeout_s * 1000, 'Z', seen, ctx, &data, &len, &timed_out, err);
    if (rc < 0) {
        if (timed_out)
            return skiff_error(err, 0,
                               "no answer from the user-side helper within %d s (plugstack.conf timeout=%d; a "
                               "large import may need more)",
                               timeout_s, timeout_s);
        return skiff_err_wrap(err, "user-side helper");
    }
    if (len == 0) {
        free(data);
        /* it closed its end: it has exited, or is about to */
        int st = skiff_helper_finish(hp, 5);
        if (st != -1 && WIFSIGNALED(st))
            return skiff_error(err, 0, "the user-side helper was killed by signal %d before it answered", WTERMSIG(st));
        return skiff_error(err, 0, "the user-side helper exited (status %d) without an answer",
                           st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    rc = skiff_reply_parse(data, len, r, err);
    free(data);
    if (rc < 0)
        return skiff_err_wrap(err, "bad answer from the user-side helper");
    return 0;
}

bool skiff_helper_joined(struct skiff_helper_proc *hp, int timeout_ms)
{
    if (hp->rep < 0)
        return false;
    struct pollfd p = {.fd = hp->rep, .events = POLLIN};
    double end = skiff_now_ms() + timeout_ms;
    int r;
    while ((r = poll(&p, 1, (int)(end - skiff_now_ms() > 0 ? end - skiff_now_ms() : 0))) < 0 && errno == EINTR)
        ;
    char ch = 0;
    return r == 1 && (p.revents & POLLIN) && read(hp->rep, &ch, 1) == 1 && ch == 'w';
}

/* Waits for the pidfd to become readable (the process exited). */
static bool wait_exit(int pidfd, int timeout_ms)
{
    if (pidfd < 0)
        return false;
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    for (;;) {
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue; /* (a signal restarts the whole wait: bounded by the caller's timeout again) */
        return r > 0;
    }
}

int skiff_helper_finish(struct skiff_helper_proc *hp, int timeout_s)
{
    if (hp->ctl >= 0)
        close(hp->ctl);
    if (hp->rep >= 0)
        close(hp->rep);
    hp->ctl = hp->rep = -1;
    if (hp->pid <= 0)
        return -1;
    int st = 0, rv = 0;
    if (!wait_exit(hp->pidfd, timeout_s * 1000)) {
        /* our own unreaped child: the pidfd can only be that process */
        if (hp->pidfd < 0 || syscall(SYS_pidfd_send_signal, hp->pidfd, SIGKILL, NULL, 0) < 0)
            kill(hp->pid, SIGKILL);
        rv = -1;
    }
    while (waitpid(hp->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (hp->pidfd >= 0)
        close(hp->pidfd);
    hp->pidfd = -1;
    hp->pid = 0;
    return rv < 0 ? -1 : st;
}

int skiff_helper_call(const char *program, const char *verb, const struct skiff_user *u, const struct skiff_recbuf *req,
                      int timeout_s, skiff_err *err)
{
    struct skiff_helper_proc hp;
    if (skiff_helper_spawn(program, verb, u, req, NULL, false, &hp, err) < 0)
        return -1;
    struct skiff_reply r;
    int rc = skiff_helper_reply(&hp, timeout_s, NULL, NULL, &r, err);
    if (rc == 0 && r.status < 0) {
        *err = r.err;
        rc = -1;
    }
    skiff_reply_free(&r);
    skiff_helper_finish(&hp, rc < 0 ? 1 : timeout_s);
    return rc;
}

/* In the child, as the user: a few passes over /proc, until one kills none. */
static void kill_ns_members(int mntns_fd)
{
    struct stat ns;
    if (fstat(mntns_fd, &ns) < 0)
        return;
    for (int pass = 0; pass < 5 && skiff_ns_kill_members(&ns, 0, 0) > 0; pass++)
        ;
}

int skiff_fork_as_user(const struct skiff_user *u, const int *keep, size_t nkeep, int (*fn)(void *arg), void *arg,
                       int timeout_s)
{
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0)
            _exit(1);
        skiff_close_fds_except(keep, nkeep);
        skiff_err e;
        if (skiff_ns_drop_creds(u->uid, u->gid, u->groups, (size_t)(u->ngroups > 0 ? u->ngroups : 0), &e) < 0)
            _exit(1);
        _exit(fn(arg) < 0 ? 1 : 0);
    }
    if (pid < 0)
        return -1;
    int pidfd = pidfd_open(pid, 0);
    int st = -1;
    if (!wait_exit(pidfd, timeout_s * 1000))
        kill(pid, SIGKILL); /* our unreaped child */
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (pidfd >= 0)
        close(pidfd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int kill_ns_fn(void *arg)
{
    kill_ns_members(*(const int *)arg);
    return 0;
}

void skiff_kill_ns_as_user(int mntns_fd, const struct skiff_user *u, int timeout_s)
{
    if (!skiff_ns_owned_by(mntns_fd, u->uid))
        return;
    const int keep[] = {mntns_fd};
    skiff_fork_as_user(u, keep, 1, kill_ns_fn, &mntns_fd, timeout_s);
}
