/* The squashfs FUSE server; see fusemount.h. This file mounts the image
 * and runs the serving process; the handlers, readers and the reply
 * splicing are fuseops.c, sqfsreader.c and splice.c (fuse_int.h).
 *
 * Why forked, not an exec'ed squashfuse_ll: exec'ing costs an exec, its own
 * library loading and a daemonize handshake per container start; a fork of
 * the holder, which has already opened the image, costs a fork.
 *
 * Why our own FUSE glue over libsquashfuse's reading functions (instead of
 * libsquashfuse_ll's ready-made sqfs_ll_op_* handlers, which a single thread
 * could use): those handlers share one `sqfs` whose block caches are not
 * thread-safe, so they can only be served one request at a time. Then a
 * lookup waits behind every read queued before it: the holder's own setup
 * behind the command being warmed (warm.h), one task's `ls` behind another
 * task's 100 MB read. Here several readers, each an `sqfs` opened on the
 * image with its own caches and lock, serve metadata (lookup, getattr,
 * readlink, readdir, xattrs, open: one reader) and file data (read: one
 * reader per CPU, up to 4, by block) in parallel from a multithreaded loop.
 * Decoding squashfs (inodes, directories, blocks, decompression) stays
 * libsquashfuse's; the handlers below only lock, call it and reply. Inode
 * numbers are squashfs inode locations (squashfuse's
 * 64-bit scheme), the same in every reader and stateless. */
#include "fusemount.h"
#include "fuse_int.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdio.h"
#include "squash.h"

/* The server keeps stdio, /dev/fuse, its readers' image files and the block
 * cache directory; anything else of the caller's (a pipe its parent reads to
 * EOF, a lock) is closed. */
static void keep_only_server_fds(const struct skiff_fuse *f)
{
    int keep[5 + MAX_DATA_READERS];
    size_t n = 0;
    keep[n++] = f->fd;
    keep[n++] = f->meta.ll.fs.fd;
    keep[n++] = f->cache_dirfd;
    keep[n++] = skiff_lazy_serve_fd(f, 0);
    keep[n++] = skiff_lazy_serve_fd(f, 1);
    for (unsigned i = 0; i < f->ndata; i++)
        keep[n++] = f->data[i].ll.fs.fd;
    skiff_close_fds_except(keep, n);
}

/* One serving thread: take a request off /dev/fuse, handle it, again,
 * until the mount goes away. The handlers never wait on this mount, so a
 * fixed set of threads cannot deadlock. */
static void *serve_thread(void *arg)
{
    struct fuse_session *se = arg;
    struct fuse_buf buf = {.mem = NULL};
    while (!fuse_session_exited(se)) {
        int n = fuse_session_receive_buf(se, &buf);
        if (n == -EINTR || n == -EAGAIN)
            continue;
        if (n <= 0)
            break; /* -ENODEV: unmounted */
        fuse_session_process_buf(se, &buf);
    }
    free(buf.mem);
    return NULL;
}

/* The calling thread and one more per data reader serve. Not libfuse's
 * fuse_session_loop_mt: its main thread only waits while workers, started on
 * demand, serve (five threads per start here, each a clone and a stack to
 * map), and a container start cannot wait for a pool to warm up. Requests
 * beyond the threads queue in the kernel: at most ndata reads are in
 * flight at once anyway (max_background), so one thread is always left
 * for the lookups setup waits on. */
static void serve(struct skiff_fuse *f)
{
    /* the first request is INIT, which the caller's mount waits for: it is
     * answered before the other threads are made */
    struct fuse_buf buf = {.mem = NULL};
    int got = fuse_session_receive_buf(f->se, &buf);
    if (got > 0)
        fuse_session_process_buf(f->se, &buf);
    free(buf.mem);
    if (got <= 0 && got != -EINTR && got != -EAGAIN)
        return;
    pthread_t t[MAX_DATA_READERS];
    unsigned n = 0;
    for (; n < f->ndata; n++)
        if (pthread_create(&t[n], NULL, serve_thread, f->se) != 0)
            break;
    serve_thread(f->se);
    /* the mount is gone: the others see it too */
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

struct skiff_fuse *skiff_fuse_mount_squashfs(const char *image, int target_fd, const struct skiff_fuse_opts *o,
                                             skiff_err *err)
{
    if (skiff_squash_check(image, err) < 0)
        return NULL;
    struct skiff_fuse *f = calloc(1, sizeof(*f));
    if (!f) {
        skiff_error(err, ENOMEM, "fuse");
        return NULL;
    }
    f->cache_dirfd = -1;
    f->fd = o->devfuse_fd >= 0 ? fcntl(o->devfuse_fd, F_DUPFD_CLOEXEC, 3) : open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (f->fd < 0) {
        skiff_error(err, errno, "open /dev/fuse (run 'skiff doctor')");
        free(f);
        return NULL;
    }
    f->own_root = o->own_root;
    f->cache_bytes = o->cache_bytes;
    f->uid = geteuid();
    f->gid = getegid();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    f->ndata = cpus < 1 ? 1 : cpus > MAX_DATA_READERS ? MAX_DATA_READERS : (unsigned)cpus;
    if (skiff_reader_open(&f->meta, image, false, err) < 0)
        goto fail;
    for (unsigned i = 0; i < f->ndata; i++)
        if (skiff_reader_open(&f->data[i], image, true, err) < 0)
            goto fail;
    f->no_xattrs = (uint64_t)f->meta.ll.fs.sb.xattr_id_table_start == UINT64_MAX; /* SQUASHFS_INVALID_BLK */
    if (o->lazy) {
        int chan = fcntl(o->lazy_chan, F_DUPFD_CLOEXEC, 3);
        if (chan < 0) {
            skiff_error(err, errno, "lazy image: the fetcher's channel");
            goto fail;
        }
        if (skiff_lazy_serve_init(f, o->lazy, chan, o->lazy_timeout_s, err) < 0) {
            close(chan);
            goto fail;
        }
    }
    char target[64], opts[160];
    snprintf(target, sizeof(target), "/proc/self/fd/%d", target_fd);
    snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=%u,group_id=%u,default_permissions", f->fd,
             (unsigned)geteuid(), (unsigned)getegid());
    if (mount("squashfuse", target, "fuse.squashfuse", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0) {
        skiff_error(err, errno, "mount squashfs with FUSE");
        goto fail;
    }
    char arg0[] = "skiff";
    char *argv[] = {arg0, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, argv);
    f->se = fuse_session_new(&args, &skiff_fuse_ops, sizeof(skiff_fuse_ops), f);
    if (!f->se) {
        skiff_error(err, EIO, "create FUSE session");
        goto fail_mounted;
    }
    /* "/dev/fd/N": libfuse takes the already-mounted fd instead of mounting */
    char fdpath[32];
    snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", f->fd);
    if (fuse_session_mount(f->se, fdpath) != 0) {
        skiff_error(err, EIO, "attach FUSE session");
        goto fail_mounted;
    }
    /* The server is a process of its own, not threads of the caller: a FUSE
     * request waits for its answer even through SIGKILL once the server has
     * read it, so a caller thread caught in a request to its own server when
     * the process is killed would wait forever, holding the /dev/fuse fd that
     * would abort the connection. Served from another process, the caller's
     * requests are answered or fail when that process dies. */
    pid_t parent = getpid();
    f->server = fork();
    if (f->server < 0) {
        skiff_error(err, errno, "start the FUSE server");
        goto fail_mounted;
    }
    if (f->server == 0) {
        /* dies with the caller's thread, even by SIGKILL */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        prctl(PR_SET_NAME, "skiff-fuse", 0, 0, 0); /* in top, perf */
        if (getppid() == parent) {
            if (o->cache_dirfd >= 0 && o->cache_bytes)
                f->cache_dirfd = fcntl(o->cache_dirfd, F_DUPFD_CLOEXEC, 3);
            skiff_fuse_cache_serve(f);
            keep_only_server_fds(f);
            skiff_lazy_serve_start(f);
            /* squashfuse allocates a block-sized buffer (128 KiB) per block
             * it reads, and we one per request: at glibc's default threshold
             * each is a fresh mmap, page-faulted in 4 KiB at a time and
             * unmapped again. Served from the heap instead, the pages are
             * faulted once and reused. This process only serves. */
            mallopt(M_MMAP_THRESHOLD, 8 << 20);
            mallopt(M_TRIM_THRESHOLD, 32 << 20);
            serve(f);
        }
        _exit(0);
    }
    /* the server's copy is the connection's last: when it exits, every
     * request to the mount fails instead of waiting; the data readers are
     * the server's too (the caller keeps the metadata reader's copy, for
     * skiff_fuse_lookup) */
    close(f->fd);
    f->fd = -1;
    for (unsigned i = 0; i < f->ndata; i++)
        skiff_reader_close(&f->data[i]);
    /* (the channel too: when the server dies, the fetcher sees it) */
    if (f->lazy_srv)
        close(skiff_lazy_serve_fd(f, 0));
    return f;
fail_mounted:
    umount2(target, MNT_DETACH);
fail:
    if (f->se)
        fuse_session_destroy(f->se); /* closes f->fd */
    else if (f->fd >= 0)
        close(f->fd);
    skiff_reader_close(&f->meta);
    for (unsigned i = 0; i < f->ndata; i++)
        skiff_reader_close(&f->data[i]);
    skiff_lazy_serve_free(f);
    free(f);
    return NULL;
}

int skiff_fuse_lookup(struct skiff_fuse *f, const char *path, mode_t *mode)
{
    if (!f || !f->meta.open)
        return -1;
    sqfs_inode inode;
    bool found = false;
    sqfs *fs = &f->meta.ll.fs;
    if (sqfs_inode_get(fs, &inode, sqfs_inode_root(fs)) != SQFS_OK ||
        sqfs_lookup_path(fs, &inode, path, &found) != SQFS_OK || !found)
        return -1;
    *mode = inode.base.mode;
    return 0;
}

pid_t skiff_fuse_server_pid(const struct skiff_fuse *f)
{
    return f ? f->server : 0;
}

void skiff_fuse_stop(struct skiff_fuse *f)
{
    if (!f || f->server <= 0)
        return;
    kill(f->server, SIGKILL);
    while (waitpid(f->server, NULL, 0) < 0 && errno == EINTR)
        ;
    f->server = 0;
}
