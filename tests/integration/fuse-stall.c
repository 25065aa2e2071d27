/* fuse-stall MOUNTPOINT: the attacker's tool of tests/integration/
 * plugin-attacks.sh (issue 23). Mounts a FUSE filesystem on MOUNTPOINT as
 * its caller (an ordinary user: libfuse runs Debian's setuid fusermount3),
 * answers the kernel's INIT and then never answers anything again: every
 * process that touches MOUNTPOINT waits in uninterruptible sleep (D state,
 * request_wait_answer), where SIGKILL does not end it.
 *
 * Prints "ready" on stdout once mounted. It ends on SIGTERM/SIGINT/SIGHUP:
 * closing /dev/fuse aborts the connection, which ends every wait (the
 * requests fail with ENOTCONN); the mount is then left for
 * `fusermount3 -u -z MOUNTPOINT`. */
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>

/* Each handler keeps its request and never replies: the kernel waits. */
static void no_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)req, (void)parent, (void)name;
}
static void no_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)req, (void)ino, (void)fi;
}
static void no_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    (void)req, (void)ino, (void)mask;
}
static void no_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)req, (void)ino, (void)fi;
}
static void no_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)req, (void)ino, (void)size, (void)off, (void)fi;
}
static void no_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)req, (void)ino;
}
static void no_readlink(fuse_req_t req, fuse_ino_t ino)
{
    (void)req, (void)ino;
}
static void no_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    (void)req, (void)ino, (void)name, (void)size;
}
static void no_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)req, (void)parent, (void)name, (void)mode;
}
static void no_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)req, (void)parent, (void)name;
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = no_lookup,
    .getattr = no_getattr,
    .access = no_access,
    .open = no_open,
    .opendir = no_open,
    .readdir = no_readdir,
    .readdirplus = no_readdir,
    .statfs = no_statfs,
    .readlink = no_readlink,
    .getxattr = no_getxattr,
    .mkdir = no_mkdir,
    .unlink = no_unlink,
    .rmdir = no_unlink,
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuse-stall MOUNTPOINT\n");
        return 2;
    }
    char *fargv[] = {argv[0], NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
    if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[1]) != 0) {
        fprintf(stderr, "fuse-stall: cannot mount %s\n", argv[1]);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    fuse_session_loop(se);
    /* no fuse_session_unmount: it would wait on the stalled mount; closing
     * the device aborts the connection */
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return 0;
}
