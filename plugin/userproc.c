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
#include "sanitize.h"

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
     * --signal) are ignored from the first instruction on (helper/helper.c says
     * why), everything else is back to its default. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        /* a copy of root's memory: nobody may look into it (the drop below
         * sets it again to fs.suid_dumpable, which may be 1) */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
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
        /* the credential change cleared the parent-death signal, and set
         * dumpable to fs.suid_dumpable: not dumpable until the exec, which
         * gives the user a fresh image of the helper */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
            getppid() != parent)
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
    hp->uid = u->uid;
    snprintf(hp->verb, sizeof(hp->verb), "%s", verb);
    return 0;
}

int skiff_helper_reply(struct skiff_helper_proc *hp, const double *deadline_ms, int timeout_s,
                       const struct skiff_rec_watch *w, struct skiff_reply *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    char *data = NULL;
    size_t len = 0;
    bool timed_out = false;
    /* at least a moment (a deadline already past is no deadline to the reader) */
    double now = skiff_now_ms(), until = *deadline_ms;
    const double *dl = until > now ? deadline_ms : &(double){now + 1};
    /* (rep stays open until skiff_helper_finish: a start helper's word
     * after its answer, skiff_helper_joined) */
    int rc = skiff_rec_read_fd_until(hp->rep, SKIFF_REPLY_MAX, dl, SKIFF_REPLY_END, w, &data, &len, &timed_out, err);
    if (rc < 0) {
        if (timed_out)
            return skiff_error(err, ETIMEDOUT,
                               "no answer from the user-side helper within %d s (plugstack.conf timeout=%d; a "
                               "large import may need more)",
                               timeout_s, timeout_s);
        return skiff_err_wrap(err, "user-side helper");
    }
    if (len == 0) {
        free(data);
        /* it closed its end: it has exited, or is about to */
        int st = skiff_helper_finish(hp, 1);
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

/* Milliseconds from now until end, rounded up: poll() with the truncated
 * value would wake up to 1 ms before the deadline. */
static int ms_until(double end)
{
    double left = end - skiff_now_ms();
    if (left <= 0)
        return 0;
    int ms = (int)left;
    return ms + (left > ms);
}

bool skiff_helper_joined(struct skiff_helper_proc *hp, int timeout_ms)
{
    if (hp->rep < 0)
        return false;
    struct pollfd p = {.fd = hp->rep, .events = POLLIN};
    double end = skiff_now_ms() + timeout_ms;
    int r;
    while ((r = poll(&p, 1, ms_until(end))) < 0 && errno == EINTR)
        ;
    char ch = 0;
    return r == 1 && (p.revents & POLLIN) && read(hp->rep, &ch, 1) == 1 && ch == SKIFF_REPLY_WAIT;
}

/* ---- waiting for a child, always bounded ------------------------------------ */

static void (*report_fn)(const char *line);

void skiff_userproc_set_log(void (*log)(const char *line))
{
    report_fn = log;
}

/* Whether our child exited (is a zombie, or was reaped by someone else:
 * slurmstepd waits for any child) within timeout_ms. Through its pidfd;
 * without one (kernels before 5.3), by polling. */
static bool exited_within(pid_t pid, int pidfd, int timeout_ms)
{
    double end = skiff_now_ms() + timeout_ms;
    if (pidfd >= 0) {
        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
        for (;;) {
            int r = poll(&pfd, 1, ms_until(end));
            if (r < 0 && errno == EINTR)
                continue;
            return r > 0;
        }
    }
    for (;;) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
            return errno == ECHILD;
        if (si.si_pid == pid)
            return true;
        if (skiff_now_ms() >= end)
            return false;
        usleep(10000);
    }
}

/* Reaps a child that exited (it does not block: exited_within said so). */
static int reap(pid_t pid, int pidfd)
{
    siginfo_t si = {0};
    int r;
    while ((r = pidfd >= 0 ? waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) : waitid(P_PID, (id_t)pid, &si, WEXITED)) < 0 &&
           errno == EINTR)
        ;
    if (r < 0 || si.si_pid == 0)
        return 0; /* reaped by someone else: its status is gone */
    return si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 : si.si_status & 0x7f;
}

/* Children that outlived SIGKILL, by pidfd: reaped by the next bounded wait
 * after they exit. When more are left than fit, the oldest is left to
 * slurmstepd (its own wait for any child, or init after it exits). */
#define LEFT_MAX 16
static int left_pidfd[LEFT_MAX];
static size_t nleft;

static void reap_left_behind(void)
{
    for (size_t i = 0; i < nleft;) {
        siginfo_t si = {0};
        int r = waitid(P_PIDFD, (id_t)left_pidfd[i], &si, WEXITED | WNOHANG);
        if ((r == 0 && si.si_pid != 0) || (r < 0 && errno != EINTR)) {
            close(left_pidfd[i]);
            left_pidfd[i] = left_pidfd[--nleft];
        } else {
            i++;
        }
    }
}

static void leave_behind(int pidfd)
{
    if (pidfd < 0)
        return;
    if (nleft == LEFT_MAX) {
        close(left_pidfd[0]);
        memmove(left_pidfd, left_pidfd + 1, (LEFT_MAX - 1) * sizeof(int));
        nleft--;
    }
    left_pidfd[nleft++] = pidfd;
}

/* A small /proc file of pid's, or "" (bounded; nothing that could block on
 * the process's memory: no cmdline, environ or mem). */
static void proc_read(pid_t pid, const char *file, char *out, size_t n)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, file);
    out[0] = '\0';
    cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t r = fd < 0 ? -1 : read(fd, out, n - 1);
    out[r > 0 ? r : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Up to three FUSE filesystems uid mounted (fusermount3: user_id=UID), as
 * "'MOUNTPOINT' (fuse.TYPE, connection N)", from /proc/PID/mountinfo
 * (which asks no FUSE server anything). The prime suspects of a process
 * of uid's that SIGKILL does not end. */
static void user_fuse_mounts(pid_t pid, uid_t uid, char *out, size_t n)
{
    char p[64], mine[32];
    snprintf(p, sizeof(p), "/proc/%d/mountinfo", (int)pid);
    snprintf(mine, sizeof(mine), "user_id=%u,", (unsigned)uid);
    out[0] = '\0';
    FILE *f = fopen(p, "re");
    char line[2048];
    size_t o = 0;
    int found = 0;
    for (int lines = 0; f && found < 3 && lines < 100000 && fgets(line, sizeof(line), f); lines++) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [FIELDS...] - TYPE SOURCE SUPEROPTIONS */
        unsigned minor = 0;
        char target[1024], type[64], super[512];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*u:%u %*s %1023s", &minor, target) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", type, super) != 2 || strncmp(type, "fuse", 4) ||
            !strstr(strcat(super, ","), mine))
            continue;
        int w = snprintf(out + o, n - o, "%s'%s' (%s, connection %u)", found ? ", " : "", target, type, minor);
        if (w < 0 || (size_t)w >= n - o)
            break;
        o += (size_t)w;
        found++;
    }
    if (f)
        fclose(f);
}

/* The one log line about a child that did not exit after SIGKILL. */
static void report_unkillable(pid_t pid, uid_t uid, const char *what)
{
    char stat[512], wchan[64], cwd[1024] = "", fuse[1200], sysc[64], p[64];
    proc_read(pid, "stat", stat, sizeof(stat));
    proc_read(pid, "wchan", wchan, sizeof(wchan));
    proc_read(pid, "syscall", sysc, sizeof(sysc));
    sysc[strcspn(sysc, " ")] = '\0';
    const char *paren = strrchr(stat, ')');
    char state = paren && paren[1] == ' ' ? paren[2] : '?';
    snprintf(p, sizeof(p), "/proc/%d/cwd", (int)pid);
    ssize_t r = readlink(p, cwd, sizeof(cwd) - 1);
    cwd[r > 0 ? r : 0] = '\0';
    user_fuse_mounts(pid, uid, fuse, sizeof(fuse));
    char line[SKIFF_SAFE_MAX + 1];
    snprintf(line, sizeof(line),
             "%s (pid %d, uid %u) did not exit within %d ms of SIGKILL: state %c, waiting in %s (syscall %s), cwd "
             "'%s'; FUSE filesystems of uid %u: %s; not waiting for it any longer (it is reaped if it ever "
             "exits; unmounting the FUSE filesystem, or /sys/fs/fuse/connections/N/abort, ends it)",
             what, (int)pid, (unsigned)uid, SKIFF_KILL_GRACE_MS, state, wchan[0] ? wchan : "?", sysc[0] ? sysc : "?",
             cwd, (unsigned)uid, fuse[0] ? fuse : "none");
    if (report_fn)
        report_fn(line);
}

/* Waits up to timeout_ms for our child pid to exit, then SIGKILLs it and
 * waits SKIFF_KILL_GRACE_MS more; reaps it. A child still there after
 * that is reported (report_unkillable) and left behind. Takes over pidfd.
 * Returns the wait status, or -1 when it had to be killed. */
static int finish_child(pid_t pid, int pidfd, int timeout_ms, uid_t uid, const char *what)
{
    reap_left_behind();
    int rv = 0;
    if (!exited_within(pid, pidfd, timeout_ms)) {
        /* our own unreaped child: the pidfd can only be that process */
        if (pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0)
            kill(pid, SIGKILL);
        rv = -1;
        if (!exited_within(pid, pidfd, SKIFF_KILL_GRACE_MS)) {
            report_unkillable(pid, uid, what);
            leave_behind(pidfd);
            return -1;
        }
    }
    int st = reap(pid, pidfd);
    if (pidfd >= 0)
        close(pidfd);
    return rv < 0 ? -1 : st;
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
    char what[64];
    snprintf(what, sizeof(what), "the user-side helper (skiff-helper %s)", hp->verb);
    int st = finish_child(hp->pid, hp->pidfd, timeout_s * 1000, hp->uid, what);
    hp->pidfd = -1;
    hp->pid = 0;
    return st;
}

int skiff_helper_call(const char *program, const char *verb, const struct skiff_user *u, const struct skiff_recbuf *req,
                      int timeout_s, skiff_err *err)
{
    struct skiff_helper_proc hp;
    if (skiff_helper_spawn(program, verb, u, req, NULL, false, &hp, err) < 0)
        return -1;
    struct skiff_reply r;
    double deadline = skiff_now_ms() + timeout_s * 1000.0;
    int rc = skiff_helper_reply(&hp, &deadline, timeout_s, NULL, &r, err);
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
        /* root's memory and, until the close below, its fds: nobody may
         * look; set again after the drop, which sets fs.suid_dumpable */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0)
            _exit(1);
        skiff_close_fds_except(keep, nkeep);
        skiff_err e;
        if (skiff_ns_drop_creds(u->uid, u->gid, u->groups, (size_t)(u->ngroups > 0 ? u->ngroups : 0), &e) < 0 ||
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
            _exit(1);
        _exit(fn(arg) < 0 ? 1 : 0);
    }
    if (pid < 0)
        return -1;
    int st =
        finish_child(pid, pidfd_open(pid, 0), timeout_s * 1000, u->uid, "a child of slurmstepd running as the user");
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
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
