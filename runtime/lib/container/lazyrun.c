/* A start of a lazy image, the front end's part (container.h): the image
 * opened for serving, its span fetcher exec'd as the caller (the user),
 * before skiff_container_start makes the container's namespaces, so the
 * fetcher has the host's network and the container none of its sockets.
 * The FUSE server (in the holder's namespaces) gets the image and the
 * channel through the start options; the fetcher dies with the caller
 * and is killed by skiff_lazy_run_end.
 *
 * On a hot node (skiff_lazy_fetcher_idle: nothing to prefetch or
 * complete) the fetcher is not exec'd before it is needed: its process
 * is forked as before, but waits for the channel's first NEED and execs
 * only then (its libraries and threads cost ~10 ms of CPU, which a start
 * on a busy node shares; doc/benchmarks.md), or exits when the channel
 * closes first. The fork is of the user's own front end, as before. */
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "lazy.h"
#include "named.h"

/* Execs argv with its end of a new channel as fd chan_fd and keep's fds
 * at their numbers, every other fd closed; it dies with the caller. With
 * standby, only once a message is there to read (none: it exits). */
static int spawn_fetcher(const char *const argv[], int chan_fd, const int *keep, size_t nkeep, bool standby, int *chan,
                         pid_t *pid, skiff_err *err)
{
    if (nkeep > 15)
        return skiff_error(err, EINVAL, "lazy fetcher: too many fds");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return skiff_error(err, errno, "socketpair");
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return skiff_error(err, e, "start the lazy fetcher");
    }
    if (p == 0) {
        /* dies with the front end, even by SIGKILL */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(127);
        if (sv[1] == chan_fd ? fcntl(chan_fd, F_SETFD, 0) < 0 : dup2(sv[1], chan_fd) < 0)
            _exit(127);
        int all[16];
        size_t n = 0;
        all[n++] = chan_fd;
        for (size_t i = 0; i < nkeep; i++) {
            all[n++] = keep[i];
            fcntl(keep[i], F_SETFD, 0);
        }
        skiff_close_fds_except(all, n);
        while (standby) {
            /* the NEED stays queued for the fetcher: a peek */
            char b;
            ssize_t r = recv(chan_fd, &b, 1, MSG_PEEK);
            if (r > 0)
                break;
            if (r == 0)
                _exit(0); /* every server gone, nothing asked */
            if (errno != EINTR)
                _exit(127);
        }
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(sv[1]);
    *chan = sv[0];
    *pid = p;
    return 0;
}

int skiff_lazy_run_begin(const struct skiff_config *cfg, struct skiff_start_request *o, const char *program,
                         const char *verb, int chan_fd, const int *keep, size_t nkeep, struct skiff_lazy_run *run,
                         skiff_err *err)
{
    memset(run, 0, sizeof(*run));
    run->chan = -1;
    char named[SKIFF_PATH_MAX];
    const char *dir = o->image;
    if (!dir && o->name) {
        if (skiff_named_image(cfg, o->name, named, sizeof(named), err) < 0) {
            skiff_err_clear(err); /* the start says what is wrong with it */
            return 0;
        }
        dir = named;
    }
    if (!dir || !skiff_lazy_is_image(dir))
        return 0;
    run->im = skiff_lazy_open(cfg, dir, err);
    if (!run->im)
        return -1;
    const char *argv[] = {program, verb, dir, NULL};
    bool standby = skiff_lazy_fetcher_idle(cfg, run->im);
    if (spawn_fetcher(argv, chan_fd, keep, nkeep, standby, &run->chan, &run->fetcher, err) < 0) {
        skiff_lazy_close(run->im);
        run->im = NULL;
        return -1;
    }
    o->lazy = run->im;
    o->lazy_chan = run->chan;
    return 0;
}

void skiff_lazy_run_end(struct skiff_lazy_run *run)
{
    if (run->chan >= 0)
        close(run->chan);
    if (run->fetcher > 0) {
        /* the container is gone, its server with it: the fetcher sees its
         * channel close, records what this start read and exits; it is
         * given a second for that */
        double end = skiff_now_ms() + 1000;
        /* woken by its exit (a pidfd), not by polling every few ms: a
         * standby fetcher exits at once */
        int pfd = (int)syscall(SYS_pidfd_open, run->fetcher, 0);
        pid_t r;
        while ((r = waitpid(run->fetcher, NULL, WNOHANG)) == 0 && skiff_now_ms() < end) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            if (pfd < 0 || poll(&p, 1, (int)(end - skiff_now_ms()) + 1) < 0)
                usleep(5000);
        }
        if (pfd >= 0)
            close(pfd);
        if (r == 0) {
            kill(run->fetcher, SIGKILL);
            while (waitpid(run->fetcher, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
    skiff_lazy_close(run->im);
    memset(run, 0, sizeof(*run));
    run->chan = -1;
}
