/* See spawn.h. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

static void tail_append(struct skiff_spawn_result *r, size_t *len, const char *buf, size_t n)
{
    size_t cap = sizeof(r->err_tail) - 1;
    if (n >= cap) {
        memcpy(r->err_tail, buf + n - cap, cap);
        *len = cap;
    } else {
        if (*len + n > cap) {
            size_t drop = *len + n - cap;
            memmove(r->err_tail, r->err_tail + drop, *len - drop);
            *len -= drop;
        }
        memcpy(r->err_tail + *len, buf, n);
        *len += n;
    }
    r->err_tail[*len] = '\0';
}

struct child_args {
    const char *const *argv, *const *envp;
    int stdout_fd, err_fd;
};

/* The child's side until its exec: it shares our memory (CLONE_VM; we wait
 * for its exec: CLONE_VFORK) and runs on its own stack, so it makes system
 * calls only, on what was prepared before. Its own process group: a timeout
 * kills what it started too. An empty signal mask: the holder blocks every
 * signal, its helpers must not. SIGPIPE's default action: an ignored SIGPIPE
 * would change how the helper's pipelines end (writers get EPIPE errors
 * instead of dying quietly); the plugin's helper also ignores Slurm's step
 * signals (TERM, USR1, ...), which stay ignored, so an importer's `release`
 * or a hook is not killed by the SIGTERM of the job's end either. The
 * handler table is the child's own (no CLONE_SIGHAND). */
static int child(void *arg)
{
    const struct child_args *a = arg;
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &dfl, NULL);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0)
        dup2(null, 0);
    dup2(a->stdout_fd >= 0 ? a->stdout_fd : 2, 1);
    dup2(a->err_fd, 2);
    /* execve wants char *const[]; the strings are never written. */
    char *const *av = (char *const *)(uintptr_t)a->argv;
    char *const *ev = (char *const *)(uintptr_t)a->envp;
    if (strchr(a->argv[0], '/'))
        execve(a->argv[0], av, ev);
    else
        execvpe(a->argv[0], av, ev);
    int e = errno;
    (void)!write(2, "exec ", 5);
    (void)!write(2, a->argv[0], strlen(a->argv[0]));
    (void)!write(2, ": ", 2);
    const char *m = strerror(e);
    (void)!write(2, m, strlen(m));
    _exit(127);
}

int skiff_spawn(const char *const *argv, const char *const *envp, int stdout_fd, int timeout_ms, int echo,
                struct skiff_spawn_result *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "pipe for %s", argv[0]);
    /* like vfork: nothing of this process is copied for an exec (hooks run
     * at every container start, one by one) */
    const size_t stack_size = 64 << 10;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return skiff_error(err, e, "stack for %s", argv[0]);
    }
    struct child_args a = {.argv = argv, .envp = envp, .stdout_fd = stdout_fd, .err_fd = p[1]};
    pid_t pid = clone(child, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    int ce = errno;
    munmap(stack, stack_size); /* the child has exec'ed or exited */
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return skiff_error(err, ce, "start %s", argv[0]);
    }
    close(p[1]);
    size_t len = 0;
    double deadline = timeout_ms > 0 ? skiff_now_ms() + timeout_ms : 0;
    for (;;) {
        int wait_ms = -1;
        if (deadline) {
            double left = deadline - skiff_now_ms();
            if (left <= 0) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                r->timed_out = 1;
                break;
            }
            wait_ms = (int)left + 1;
        }
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int rc = poll(&pfd, 1, wait_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0)
            continue;
        char buf[sizeof(r->err_tail)];
        ssize_t n = read(p[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (echo)
            (void)!write(2, buf, (size_t)n);
        tail_append(r, &len, buf, (size_t)n);
    }
    close(p[0]);
    while (waitpid(pid, &r->status, 0) < 0) {
        if (errno != EINTR)
            return skiff_error(err, errno, "wait for %s", argv[0]);
        if (deadline && skiff_now_ms() > deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            r->timed_out = 1;
        }
    }
    while (len && (r->err_tail[len - 1] == '\n' || r->err_tail[len - 1] == ' '))
        r->err_tail[--len] = '\0';
    return 0;
}

void skiff_spawn_describe(const struct skiff_spawn_result *r, int timeout_ms, char *buf, size_t n)
{
    if (r->timed_out)
        snprintf(buf, n, "timed out after %d ms", timeout_ms);
    else if (WIFEXITED(r->status))
        snprintf(buf, n, "exit status %d", WEXITSTATUS(r->status));
    else if (WIFSIGNALED(r->status))
        snprintf(buf, n, "killed by signal %d", WTERMSIG(r->status));
    else
        snprintf(buf, n, "wait status %d", r->status);
}
