/* Layer application (layer.h): entries placed beneath the root, the
 * orchestration of a layer with its decoder thread (layerdec.c). */
#include "layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
#include "fsutil.h"
#include "layer_int.h"

/* ---- path handling ---------------------------------------------------- */

/* Normalises an entry name in place: drops leading '/' and "./", empty and
 * "." components; refuses "..". Returns the result (may be ""). */
static int normalise(const char *in, char *out, size_t n, skiff_err *err)
{
    size_t o = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 1 && p[0] == '.') {
            p += len;
            continue;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return skiff_error(
                err, 0, "entry '%s' has a '..' component and would leave the image root; refusing the layer", in);
        if (o + len + 2 >= n)
            return skiff_error(err, ENAMETOOLONG, "entry '%s'", in);
        if (o)
            out[o++] = '/';
        memcpy(out + o, p, len);
        o += len;
        p += len;
    }
    out[o] = '\0';
    return 0;
}

static int openat2_beneath(int rootfd, const char *path, skiff_err *err)
{
    struct open_how how = {
        .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
    if (fd < 0) {
        (void)err;
        return -errno;
    }
    return (int)fd;
}

static int openat2_state = 0; /* 0 unknown, 1 works, -1 missing (ENOSYS) */

/* Opens directory path (relative to rootfd) without following any symlink,
 * creating missing directories (0755) when create is set. */
static int open_dir_beneath(int rootfd, const char *path, bool create, const char *entry, skiff_err *err)
{
    if (!*path) {
        int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
        return fd < 0 ? skiff_error(err, errno, "dup") : fd;
    }
    if (openat2_state >= 0) {
        int fd = openat2_beneath(rootfd, path, err);
        if (fd >= 0) {
            openat2_state = 1;
            return fd;
        }
        if (fd == -ENOSYS)
            openat2_state = -1;
        else if (fd == -ELOOP || fd == -EXDEV)
            return skiff_layer_err_through_symlink(err, entry, path);
        else if (fd != -ENOENT && fd != -ENOTDIR)
            return skiff_error(err, -fd, "entry '%s': open '%s'", entry, path);
        if (fd == -ENOENT && !create)
            return skiff_layer_err_missing(err, entry, path);
    }
    /* Component walk with O_NOFOLLOW; used to create missing directories and
     * where openat2 is missing (Linux < 5.6). */
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return skiff_error(err, errno, "dup");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        int next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                return skiff_error(err, e, "entry '%s': mkdir '%s'", entry, c);
            }
            next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            struct stat st;
            bool link = fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
            close(fd);
            if (link || e == ELOOP)
                return skiff_layer_err_through_symlink(err, entry, path);
            return skiff_error(err, e, "entry '%s': open '%s'", entry, path);
        }
        close(fd);
        fd = next;
    }
    return fd;
}

/* Makes room for a new entry called base: removes what is there, unless it
 * is a directory and the new entry is one too. */
static int make_room(int pfd, const char *base, bool new_is_dir, skiff_err *err)
{
    struct stat st;
    if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : skiff_error(err, errno, "stat %s", base);
    if (S_ISDIR(st.st_mode)) {
        if (new_is_dir)
            return 1;
        return skiff_remove_tree_at(pfd, base, err);
    }
    if (unlinkat(pfd, base, 0) < 0 && errno != ENOENT)
        return skiff_error(err, errno, "replace %s", base);
    return 0;
}

static int write_data(struct archive *a, int fd, const char *entry, skiff_err *err)
{
    const void *block;
    size_t size;
    la_int64_t offset, end = 0;
    for (;;) {
        int r = archive_read_data_block(a, &block, &size, &offset);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return skiff_error(err, archive_errno(a) > 0 ? archive_errno(a) : 0, "entry '%s': %s", entry,
                               archive_error_string(a));
        const char *p = block;
        size_t left = size;
        off_t off = (off_t)offset;
        while (left) {
            ssize_t w = pwrite(fd, p, left, off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return skiff_error(err, errno, "entry '%s': write", entry);
            p += w;
            off += w;
            left -= (size_t)w;
        }
        if (off > end)
            end = off;
    }
    return 0;
}

/* ---- the policy: what becomes of an entry (layer_int.h) ---------------- */

int skiff_layer_err_through_symlink(skiff_err *err, const char *entry, const char *path)
{
    return skiff_error(err, 0, "entry '%s' would be written through a symlink in '%s'; refusing the layer", entry,
                       path);
}

int skiff_layer_err_missing(skiff_err *err, const char *entry, const char *path)
{
    return skiff_error(err, 0, "entry '%s': '%s' does not exist", entry, path);
}

int skiff_layer_err_link_target(skiff_err *err, int errnum, const char *entry, const char *target)
{
    return skiff_error(err, errnum, "hardlink '%s' -> '%s' (the target must be in the image)", entry, target);
}

int skiff_layer_err_link_dir(skiff_err *err, const char *entry, const char *target)
{
    return skiff_error(err, 0, "hardlink '%s' -> directory '%s'; refusing the layer", entry, target);
}

static void split_parent(struct skiff_entry_plan *p)
{
    char *slash = strrchr(p->path, '/');
    if (slash) {
        memcpy(p->parent, p->path, (size_t)(slash - p->path));
        p->parent[slash - p->path] = '\0';
        p->base = slash + 1;
    } else {
        p->parent[0] = '\0';
        p->base = p->path;
    }
}

int skiff_layer_plan_entry(struct archive_entry *e, unsigned flags, struct skiff_entry_plan *p, skiff_err *err)
{
    p->raw = archive_entry_pathname(e);
    if (!p->raw)
        return skiff_error(err, 0, "entry without a name");
    if (normalise(p->raw, p->path, sizeof(p->path), err) < 0)
        return -1;
    p->victim = NULL;
    p->link_raw = NULL;
    p->target[0] = '\0';
    p->setid_stripped = false;
    p->xattrs = 0;
    if (!p->path[0]) {
        p->kind = SKIFF_ENTRY_ROOT; /* the root itself: its mode stays 0755 */
        return 0;
    }
    split_parent(p);
    mode_t type = archive_entry_filetype(e);
    if ((flags & SKIFF_LAYER_WHITEOUTS) && !strncmp(p->base, ".wh.", 4)) {
        if (!strcmp(p->base, ".wh..wh..opq")) {
            p->kind = SKIFF_ENTRY_OPAQUE;
            return 0;
        }
        p->victim = p->base + 4;
        if (!*p->victim || !strcmp(p->victim, ".") || !strcmp(p->victim, ".."))
            return skiff_error(err, 0, "bad whiteout entry '%s'", p->raw);
        p->kind = SKIFF_ENTRY_WHITEOUT;
        return 0;
    }
    const char *hardlink = archive_entry_hardlink(e);
    if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFSOCK ||
        (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO)) {
        p->kind = SKIFF_ENTRY_SKIPPED;
        return 0;
    }
    p->mode = archive_entry_perm(e) & 07777;
    if (type != AE_IFDIR && (p->mode & (S_ISUID | S_ISGID))) {
        p->mode &= ~(mode_t)(S_ISUID | S_ISGID);
        p->setid_stripped = true;
    }
    if (archive_entry_xattr_count(e) > 0)
        p->xattrs = (unsigned long)archive_entry_xattr_count(e);
    p->uid = (uid_t)archive_entry_uid(e);
    p->gid = (gid_t)archive_entry_gid(e);
    p->mtime = archive_entry_mtime(e);
    p->size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
    if (hardlink) {
        p->link_raw = hardlink;
        if (normalise(hardlink, p->target, sizeof(p->target), err) < 0)
            return skiff_err_wrap(err, "hardlink '%s'", p->raw);
        if (!p->target[0])
            return skiff_error(err, 0, "hardlink '%s' points at the image root; refusing the layer", p->raw);
        p->kind = SKIFF_ENTRY_HARDLINK;
        return 0;
    }
    switch (type) {
    case AE_IFDIR:
        p->kind = SKIFF_ENTRY_DIR;
        break;
    case AE_IFREG:
        p->kind = SKIFF_ENTRY_REG;
        break;
    case AE_IFLNK: {
        const char *target = archive_entry_symlink(e);
        if (!target)
            return skiff_error(err, 0, "symlink '%s' without a target", p->raw);
        if (strlen(target) >= sizeof(p->target))
            return skiff_error(err, ENAMETOOLONG, "symlink '%s'", p->raw);
        strcpy(p->target, target);
        p->kind = SKIFF_ENTRY_SYMLINK;
        break;
    }
    default:
        p->kind = SKIFF_ENTRY_FIFO;
        break;
    }
    return 0;
}

/* ---- the plan carried out on a real tree ------------------------------- */

static int carry_out(struct archive *a, const struct skiff_entry_plan *p, int rootfd, unsigned flags,
                     struct skiff_layer_stats *st, skiff_err *err)
{
    const char *raw = p->raw, *base = p->base;
    switch (p->kind) {
    case SKIFF_ENTRY_ROOT:
        return 0;
    case SKIFF_ENTRY_SKIPPED:
        st->devices_skipped++;
        return 0;
    case SKIFF_ENTRY_OPAQUE:
    case SKIFF_ENTRY_WHITEOUT: {
        cleanup_close int pfd = open_dir_beneath(rootfd, p->parent, true, raw, err);
        if (pfd < 0)
            return -1;
        if (p->kind == SKIFF_ENTRY_OPAQUE) {
            int dfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd < 0)
                return skiff_error(err, errno, "entry '%s'", raw);
            int rv = skiff_clear_dir_fd(dfd, err);
            close(dfd);
            return rv < 0 ? skiff_err_wrap(err, "opaque whiteout '%s'", raw) : 0;
        }
        if (skiff_remove_tree_at(pfd, p->victim, err) < 0)
            return skiff_err_wrap(err, "whiteout '%s'", raw);
        return 0;
    }
    default:
        break;
    }

    cleanup_close int pfd = open_dir_beneath(rootfd, p->parent, true, raw, err);
    if (pfd < 0)
        return -1;
    mode_t mode = p->mode;
    if (p->setid_stripped)
        st->setid_stripped++;
    st->xattrs_dropped += p->xattrs;
    bool owners = (flags & SKIFF_LAYER_OWNERS) && geteuid() == 0;
    uid_t uid = p->uid;
    gid_t gid = p->gid;
    struct timespec times[2] = {{.tv_sec = p->mtime, .tv_nsec = 0}, {.tv_sec = p->mtime, .tv_nsec = 0}};

    if (p->kind == SKIFF_ENTRY_HARDLINK) {
        char tparent[SKIFF_ENTRY_PATH_MAX];
        const char *tbase;
        const char *slash = strrchr(p->target, '/');
        if (slash) {
            memcpy(tparent, p->target, (size_t)(slash - p->target));
            tparent[slash - p->target] = '\0';
            tbase = slash + 1;
        } else {
            tparent[0] = '\0';
            tbase = p->target;
        }
        cleanup_close int tfd = open_dir_beneath(rootfd, tparent, false, raw, err);
        if (tfd < 0)
            return skiff_err_wrap(err, "hardlink '%s' -> '%s'", raw, p->link_raw);
        struct stat tst;
        if (fstatat(tfd, tbase, &tst, AT_SYMLINK_NOFOLLOW) < 0)
            return skiff_layer_err_link_target(err, errno, raw, p->link_raw);
        if (S_ISDIR(tst.st_mode))
            return skiff_layer_err_link_dir(err, raw, p->link_raw);
        if (!strcmp(p->target, p->path))
            return 0;
        if (make_room(pfd, base, false, err) < 0)
            return -1;
        if (linkat(tfd, tbase, pfd, base, 0) < 0)
            return skiff_error(err, errno, "hardlink '%s' -> '%s'", raw, p->link_raw);
        st->entries++;
        return 0;
    }

    int room = make_room(pfd, base, p->kind == SKIFF_ENTRY_DIR, err);
    if (room < 0)
        return -1;
    switch (p->kind) {
    case SKIFF_ENTRY_DIR: {
        if (!room && mkdirat(pfd, base, 0700) < 0)
            return skiff_error(err, errno, "entry '%s': mkdir", raw);
        /* As a user, keep u+rwx so later entries can go in; root needs no such help. */
        mode_t m = geteuid() == 0 ? mode : (mode | 0700);
        int dfd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            return skiff_error(err, errno, "entry '%s'", raw);
        if (owners && fchown(dfd, uid, gid) < 0) {
            int e2 = errno;
            close(dfd);
            return skiff_error(err, e2, "entry '%s': chown", raw);
        }
        if (fchmod(dfd, m) < 0) {
            int e2 = errno;
            close(dfd);
            return skiff_error(err, e2, "entry '%s': chmod", raw);
        }
        close(dfd);
        break;
    }
    case SKIFF_ENTRY_REG: {
        cleanup_close int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return skiff_error(err, errno, "entry '%s': create", raw);
        if (write_data(a, fd, raw, err) < 0)
            return -1;
        if (p->size >= 0 && ftruncate(fd, p->size) < 0)
            return skiff_error(err, errno, "entry '%s': truncate", raw);
        if (owners && fchown(fd, uid, gid) < 0)
            return skiff_error(err, errno, "entry '%s': chown", raw);
        /* fchmod after fchown: chown clears set-id bits, and ours are gone anyway. */
        if (fchmod(fd, mode) < 0)
            return skiff_error(err, errno, "entry '%s': chmod", raw);
        futimens(fd, times);
        break;
    }
    case SKIFF_ENTRY_SYMLINK:
        /* The target is stored as is: nothing here ever follows it, and inside the
         * container it resolves within the container's root. */
        if (symlinkat(p->target, pfd, base) < 0)
            return skiff_error(err, errno, "entry '%s': symlink", raw);
        if (owners && fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return skiff_error(err, errno, "entry '%s': chown", raw);
        utimensat(pfd, base, times, AT_SYMLINK_NOFOLLOW);
        break;
    case SKIFF_ENTRY_FIFO:
        if (mknodat(pfd, base, S_IFIFO | (mode & 0777), 0) < 0)
            return skiff_error(err, errno, "entry '%s': mkfifo", raw);
        if (owners && fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return skiff_error(err, errno, "entry '%s': chown", raw);
        break;
    default:
        break;
    }
    st->entries++;
    return 0;
}

static int apply_entry(struct archive *a, struct archive_entry *e, int rootfd, const struct skiff_layer_sink *sink,
                       unsigned flags, struct skiff_layer_stats *st, skiff_err *err)
{
    struct skiff_entry_plan *p = malloc(sizeof(*p));
    if (!p)
        return skiff_error(err, ENOMEM, "layer entry");
    int rv = skiff_layer_plan_entry(e, flags, p, err);
    if (rv == 0)
        rv = sink ? sink->entry(sink->ctx, a, p, st, err) : carry_out(a, p, rootfd, flags, st, err);
    free(p);
    return rv;
}

static int apply_stream(int rootfd, const struct skiff_layer_sink *sink, int blobfd, const char *path,
                        const char *digest, unsigned flags, int (*wait_more)(void *ctx, unsigned long long have),
                        void *wait_ctx, struct skiff_layer_stats *st, skiff_err *err);

int skiff_layer_apply(int rootfd, const char *path, const char *digest, unsigned flags, struct skiff_layer_stats *st,
                      skiff_err *err)
{
    int fd = skiff_open_regular(path, 0, err); /* a FIFO as an archive: refused, not waited on */
    if (fd < 0)
        return -1;
    return skiff_layer_apply_fd(rootfd, fd, path, digest, flags, st, err);
}

int skiff_layer_apply_fd(int rootfd, int blobfd, const char *path, const char *digest, unsigned flags,
                         struct skiff_layer_stats *st, skiff_err *err)
{
    return skiff_layer_apply_stream(rootfd, blobfd, path, digest, flags, NULL, NULL, st, err);
}

int skiff_layer_apply_stream(int rootfd, int blobfd, const char *path, const char *digest, unsigned flags,
                             int (*wait_more)(void *ctx, unsigned long long have), void *wait_ctx,
                             struct skiff_layer_stats *st, skiff_err *err)
{
    return apply_stream(rootfd, NULL, blobfd, path, digest, flags, wait_more, wait_ctx, st, err);
}

int skiff_layer_sink_stream(const struct skiff_layer_sink *sink, int blobfd, const char *path, const char *digest,
                            unsigned flags, int (*wait_more)(void *ctx, unsigned long long have), void *wait_ctx,
                            struct skiff_layer_stats *st, skiff_err *err)
{
    return apply_stream(-1, sink, blobfd, path, digest, flags, wait_more, wait_ctx, st, err);
}

/* A layer's entries, planned, carried out on the tree at rootfd or handed to
 * sink (when not NULL). */
static int apply_stream(int rootfd, const struct skiff_layer_sink *sink, int blobfd, const char *path,
                        const char *digest, unsigned flags, int (*wait_more)(void *ctx, unsigned long long have),
                        void *wait_ctx, struct skiff_layer_stats *st, skiff_err *err)
{
    struct skiff_layer_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof(*st));
    struct skiff_layer_decoder d;
    memset(&d, 0, sizeof(d));
    d.path = path;
    d.r.fd = blobfd;
    d.r.wait_more = wait_more;
    d.r.wait_ctx = wait_ctx;
    struct skiff_layer_pipe pipe;
    bool piped = false;
    struct archive *a = NULL;
    bool started = false;
    int rv = -1;
    d.r.buf = malloc(READ_CHUNK);
    if (!d.r.buf) {
        skiff_error(err, ENOMEM, "layer %s", path);
        goto out;
    }
    if (digest) {
        if (skiff_sha256_init(&d.r.hash, err) < 0)
            goto out;
        d.r.hashing = true;
    }
    if (skiff_layer_pipe_init(&pipe) < 0) {
        skiff_error(err, ENOMEM, "layer %s", path);
        goto out;
    }
    piped = true;
    d.pipe = &pipe;
    pthread_t tid;
    int pe = pthread_create(&tid, NULL, skiff_layer_decoder_main, &d);
    if (pe != 0) {
        skiff_error(err, pe, "pthread_create");
        goto out;
    }
    started = true;

    a = archive_read_new();
    if (!a) {
        skiff_error(err, ENOMEM, "archive_read_new");
        goto out;
    }
    archive_read_support_format_tar(a);
    if (archive_read_open(a, &pipe, NULL, skiff_layer_pipe_read, NULL) != ARCHIVE_OK) {
        skiff_error(err, 0, "%s: not a tar archive (plain, gzip or zstd): %s", path, archive_error_string(a));
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int h = archive_read_next_header(a, &e);
        if (h == ARCHIVE_EOF)
            break;
        if (h < ARCHIVE_WARN) {
            skiff_error(err, 0, "%s: %s (truncated or corrupt layer)", path, archive_error_string(a));
            goto out;
        }
        if (apply_entry(a, e, rootfd, sink, flags, st, err) < 0)
            goto out;
    }
    rv = 0;
out:
    if (a)
        archive_read_free(a);
    if (piped)
        skiff_layer_pipe_reader_done(&pipe); /* stops the decoder if it is still decoding */
    if (started) {
        pthread_join(tid, NULL);
        /* The decoder's error is the root cause (a truncated stream makes the
         * tar reader fail too). */
        if (digest && d.digest_checked && strcmp(d.got, digest) != 0) {
            rv = skiff_error(err, 0, "digest mismatch: expected %s, got %s (corrupt or tampered blob)", digest, d.got);
            err->code = EBADMSG; /* lets a cache drop the blob */
        } else if (d.error[0]) {
            rv = skiff_error(err, 0, "%s", d.error);
        } else if (rv == 0 && digest) {
            if (!d.digest_checked) {
                rv = skiff_error(err, 0, "digest mismatch: expected %s, got %s (corrupt or tampered blob)", digest,
                                 d.got[0] ? d.got : "nothing");
                err->code = EBADMSG; /* lets a cache drop the blob */
            }
        }
    }
    if (piped)
        skiff_layer_pipe_destroy(&pipe);
    st->bytes_in = d.r.bytes;
    if (d.r.hashing)
        skiff_sha256_abort(&d.r.hash);
    free(d.r.buf);
    close(d.r.fd);
    return rv;
}
