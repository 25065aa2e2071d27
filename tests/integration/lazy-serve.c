/* Serves an image with skiff's FUSE server on a directory and runs a
 * command while it is mounted, for runtime-lazy.sh and tests/bench/lazy.sh:
 * the differential test walks a lazily served tree and a fully imported
 * one the same way, through the same server.
 *   usage: lazy-serve IMAGE.sqsh|IMAGE.lazy DIR CMD [ARG...]
 * IMAGE.lazy: its fetcher is bin/skiff-import fetch, beside this build's
 * tests/ (BUILD/bin/skiff-import). In a private mount namespace (as root),
 * or a user namespace that maps the caller to itself (as a user: files
 * owned by root show as the caller's, as in a container). The mount goes
 * with the namespace when CMD exits. CMD finds the span fetcher's pid in
 * LAZY_SERVE_FETCHER (a lazy image's). */
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "container.h"
#include "fusemount.h"
#include "lazy.h"

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A mount namespace of our own; a user namespace first when not root. */
static int own_namespace(void)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (uid != 0) {
        char map[64];
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0 || write_file("/proc/self/setgroups", "deny") < 0)
            return -1;
        snprintf(map, sizeof(map), "%u %u 1", (unsigned)uid, (unsigned)uid);
        if (write_file("/proc/self/uid_map", map) < 0)
            return -1;
        snprintf(map, sizeof(map), "%u %u 1", (unsigned)gid, (unsigned)gid);
        if (write_file("/proc/self/gid_map", map) < 0)
            return -1;
    } else if (unshare(CLONE_NEWNS) < 0) {
        return -1;
    }
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s IMAGE.sqsh|IMAGE.lazy DIR CMD [ARG...]\n", argv[0]);
        return 2;
    }
    skiff_err err = {0};
    struct skiff_config cfg;
    if (skiff_config_load(&cfg, NULL, true, &err) < 0) {
        fprintf(stderr, "lazy-serve: config: %s\n", err.msg);
        return 1;
    }
    char self[PATH_MAX], fetcher[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(fetcher, sizeof(fetcher), "%s/../bin/skiff-import", self);
    /* the fetcher starts before the namespace, as a front end starts it */
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    o.image = argv[1];
    struct skiff_lazy_run run;
    if (skiff_lazy_run_begin(&cfg, &o, fetcher, "fetch", 3, NULL, 0, &run, &err) < 0) {
        fprintf(stderr, "lazy-serve: %s\n", err.msg);
        return 1;
    }
    if (own_namespace() < 0) {
        perror("lazy-serve: namespace");
        skiff_lazy_run_end(&run);
        return 1;
    }
    char skel[PATH_MAX];
    const char *image = o.lazy ? skiff_lazy_skeleton(o.lazy, skel, sizeof(skel)) : argv[1];
    int dirfd = open(argv[2], O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct skiff_fuse_opts fo = {.devfuse_fd = -1,
                                 .own_root = getuid() != 0,
                                 .cache_dirfd = -1,
                                 .lazy = o.lazy,
                                 .lazy_chan = o.lazy_chan,
                                 .lazy_timeout_s = cfg.lazy_timeout_s};
    struct skiff_fuse *f = dirfd < 0 ? NULL : skiff_fuse_mount_squashfs(image, dirfd, &fo, &err);
    if (!f) {
        fprintf(stderr, "lazy-serve: mount %s: %s\n", image, dirfd < 0 ? "cannot open the directory" : err.msg);
        skiff_lazy_run_end(&run);
        return 1;
    }
    if (run.chan >= 0) {
        close(run.chan); /* the server's copy is the channel's last */
        run.chan = -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the span fetcher's pid, for the cases that kill or stop it */
        char fp[16];
        snprintf(fp, sizeof(fp), "%d", (int)run.fetcher);
        if (run.fetcher > 0)
            setenv("LAZY_SERVE_FETCHER", fp, 1);
        execvp(argv[3], argv + 3);
        perror("lazy-serve: exec");
        _exit(127);
    }
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0)
        ;
    umount2(argv[2], MNT_DETACH);
    skiff_fuse_stop(f);
    skiff_lazy_run_end(&run);
    return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
