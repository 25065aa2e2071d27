/* See spawn.h. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

int skiff_spawn(const char *const *argv, const char *const *envp, int stdout_fd, int timeout_ms, int echo,
                struct skiff_spawn_result *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return skiff_error(err, errno, "pipe for %s", argv[0]);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return skiff_error(err, e, "fork for %s", argv[0]);
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: a timeout kills the helper's children too */
        sigset_t none; /* the holder blocks every signal; its helpers must not */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* An ignored SIGPIPE would change how the helper's pipelines end
         * (writers get EPIPE errors instead of dying quietly). The plugin's
         * helper also ignores Slurm's step signals (TERM, USR1, ...); those
         * stay ignored, so an importer's `release` or a hook is not killed
         * by the SIGTERM of the job's end either. */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGPIPE, &dfl, NULL);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0)
            dup2(null, 0);
        dup2(stdout_fd >= 0 ? stdout_fd : 2, 1);
        dup2(p[1], 2);
        /* execve wants char *const[]; the strings are never written. */
        char *const *av = (char *const *)(uintptr_t)argv;
        char *const *ev = (char *const *)(uintptr_t)envp;
        if (strchr(argv[0], '/'))
            execve(argv[0], av, ev);
        else
            execvpe(argv[0], av, ev);
        dprintf(2, "exec %s: %s", argv[0], strerror(errno));
        _exit(127);
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
