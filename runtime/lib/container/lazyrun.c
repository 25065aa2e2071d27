/* A start of a lazy image, the front end's part (container.h): the image
 * opened for serving, its span fetcher exec'd as the caller (the user),
 * before skiff_container_start makes the container's namespaces, so the
 * fetcher has the host's network and the container none of its sockets.
 * The FUSE server (in the holder's namespaces) gets the image and the
 * channel through the start options; the fetcher dies with the caller
 * and is killed by skiff_lazy_run_end. */
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "lazy.h"
#include "named.h"

/* Execs argv with its end of a new channel as fd chan_fd and keep's fds
 * at their numbers, every other fd closed; it dies with the caller. */
static int spawn_fetcher(const char *const argv[], int chan_fd, const int *keep, size_t nkeep, int *chan, pid_t *pid,
                         skiff_err *err)
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
    if (spawn_fetcher(argv, chan_fd, keep, nkeep, &run->chan, &run->fetcher, err) < 0) {
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
        pid_t r;
        while ((r = waitpid(run->fetcher, NULL, WNOHANG)) == 0 && skiff_now_ms() < end)
            usleep(5000);
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
