/* fd-targeted mount primitives; see mount.h. */
#include "mount.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rootfs.h"

static void fd_path(char *buf, size_t n, int fd)
{
    snprintf(buf, n, "/proc/self/fd/%d", fd);
}

/* A bind with a propagation type (MS_SHARED ..., 0: none) set on the clone
 * before it is moved into place (on its submounts too with prop_rec). */
static int bind_prop(const char *src, int target_fd, unsigned flags, unsigned long prop, bool prop_rec, skiff_err *err)
{
    bool recursive = flags & SKIFF_BIND_REC, readonly = flags & SKIFF_BIND_RO, noexec = flags & SKIFF_BIND_NOEXEC,
         keep_dev = flags & SKIFF_BIND_DEV;
    cleanup_close int tree =
        open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0));
    if (tree < 0) {
        if (errno == EINVAL && !recursive)
            /* the kernel keeps what a submount covers hidden from a user
             * namespace: a bind of the source alone would uncover it */
            return skiff_error(err, 0,
                               "bind %s: it has submounts, and a bind without them (the 'bind' flag) is refused "
                               "inside a user namespace: leave 'bind' out (rbind is the default) or mount the "
                               "submount itself",
                               src);
        if (errno != ENOSYS)
            return skiff_error(err, errno, "bind %s", src);
        if (prop)
            return skiff_error(err, ENOSYS, "bind %s with a propagation flag (needs Linux >= 5.12)", src);
        /* old kernel: classic bind on the target through its fd path */
        char t[64];
        fd_path(t, sizeof(t), target_fd);
        unsigned long fl = MS_BIND | (recursive ? MS_REC : 0);
        if (mount(src, t, NULL, fl, NULL) < 0)
            return skiff_error(err, errno, "bind %s", src);
        fl = MS_BIND | MS_REMOUNT | MS_NOSUID | (keep_dev ? 0 : MS_NODEV) | (readonly ? MS_RDONLY : 0) |
             (noexec ? MS_NOEXEC : 0);
        if (mount(NULL, t, NULL, fl, NULL) < 0)
            return skiff_error(err, errno, "remount %s", src);
        return 0;
    }
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | (keep_dev ? 0 : MOUNT_ATTR_NODEV) |
                                          (readonly ? MOUNT_ATTR_RDONLY : 0) | (noexec ? MOUNT_ATTR_NOEXEC : 0)};
    if (mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof(attr)) < 0)
        return skiff_error(err, errno, "set mount attributes of %s", src);
    struct mount_attr pattr = {.propagation = prop};
    if (prop && mount_setattr(tree, "", AT_EMPTY_PATH | (prop_rec ? AT_RECURSIVE : 0), &pattr, sizeof(pattr)) < 0)
        return skiff_error(err, errno, "set the propagation of %s", src);
    if (move_mount(tree, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return skiff_error(err, errno, "bind %s", src);
    return 0;
}

int skiff_mount_bind(const char *src, int target_fd, unsigned flags, skiff_err *err)
{
    return bind_prop(src, target_fd, flags, 0, false, err);
}

/* A user's tmpfs through fsopen/fsconfig/fsmount: each option is given on
 * its own, so the kernel's refusal names it. */
static int user_tmpfs(const struct skiff_mount *m, int target_fd, skiff_err *err)
{
    cleanup_close int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0) {
        if (errno != ENOSYS || m->propagation)
            return skiff_error(err, errno, "tmpfs");
        return skiff_mount_fs("tmpfs", "tmpfs", target_fd, (m->readonly ? MS_RDONLY : 0) | (m->noexec ? MS_NOEXEC : 0),
                              m->data ? m->data : "mode=0755", err);
    }
    cleanup_free char *opts = strdup(m->data ? m->data : "");
    if (!opts)
        return skiff_error(err, ENOMEM, "tmpfs options");
    bool mode = false;
    char *save = NULL;
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(o, '=');
        if (eq)
            *eq = '\0';
        mode |= !strcmp(o, "mode");
        int r = eq ? fsconfig(fs, FSCONFIG_SET_STRING, o, eq + 1, 0) : fsconfig(fs, FSCONFIG_SET_FLAG, o, NULL, 0);
        if (r < 0) {
            int e = errno;
            if (eq)
                *eq = '=';
            return skiff_error(err, e, "tmpfs option '%s'", o);
        }
    }
    if (!mode && fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0)
        return skiff_error(err, errno, "tmpfs option 'mode=0755'");
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return skiff_error(err, errno, "tmpfs with options '%s'", m->data ? m->data : "");
    cleanup_close int mnt = fsmount(fs, FSMOUNT_CLOEXEC,
                                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (m->readonly ? MOUNT_ATTR_RDONLY : 0) |
                                        (m->noexec ? MOUNT_ATTR_NOEXEC : 0));
    if (mnt < 0)
        return skiff_error(err, errno, "tmpfs");
    struct mount_attr pattr = {.propagation = m->propagation};
    if (m->propagation && mount_setattr(mnt, "", AT_EMPTY_PATH, &pattr, sizeof(pattr)) < 0)
        return skiff_error(err, errno, "set the propagation of the tmpfs");
    if (move_mount(mnt, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return skiff_error(err, errno, "tmpfs");
    return 0;
}

int skiff_mount_fs(const char *fstype, const char *source, int target_fd, unsigned long extra, const char *data,
                   skiff_err *err)
{
    char t[64];
    fd_path(t, sizeof(t), target_fd);
    if (mount(source, t, fstype, MS_NOSUID | MS_NODEV | extra, data) < 0)
        return skiff_error(err, errno, "mount %s", fstype);
    return 0;
}

int skiff_mount_setattr(int target_fd, unsigned flags, skiff_err *err)
{
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                          (flags & SKIFF_BIND_RO ? MOUNT_ATTR_RDONLY : 0)};
    if (mount_setattr(target_fd, "", AT_EMPTY_PATH | (flags & SKIFF_BIND_REC ? AT_RECURSIVE : 0), &attr, sizeof(attr)) <
        0)
        return skiff_error(err, errno, "set mount attributes");
    return 0;
}

/* umount:DST: detaches the mount on dst (inside the root), found through
 * an O_PATH fd of it, so no path is looked up twice. */
static int detach(int rootfd, const struct skiff_mount *m, const char *dst, skiff_err *err)
{
    cleanup_close int t = skiff_root_open(rootfd, dst, O_PATH, err);
    if (t < 0) {
        if (err->code == ENOENT && m->nofail)
            return 0;
        return skiff_err_wrap(err, "umount %s", m->dst);
    }
    char p[64];
    fd_path(p, sizeof(p), t);
    if (umount2(p, MNT_DETACH) == 0)
        return 0;
    if (errno == EINVAL && m->nofail)
        return 0;
    if (errno == EINVAL)
        return skiff_error(err, 0, "umount %s: nothing is mounted there (add nofail to allow that)", m->dst);
    return skiff_error(err, errno, "umount %s", m->dst);
}

int skiff_mount_apply(int rootfd, const struct skiff_mount *m, skiff_err *err)
{
    bool dir = true, chardev = false;
    struct stat st;
    char dst[PATH_MAX];
    if (skiff_root_path("/", m->dst, false, dst, sizeof(dst), err) < 0)
        return skiff_err_wrap(err, "mount %s", m->dst);
    if (m->detach)
        return detach(rootfd, m, dst, err);
    if (!m->tmpfs) {
        if (stat(m->src, &st) < 0 && errno == ENOENT && m->nofail)
            return 0;
        if (stat(m->src, &st) < 0 && errno == ENOENT)
            return skiff_error(err, 0, "mount %s: source path does not exist: %s", m->dst, m->src);
        if (stat(m->src, &st) < 0)
            return skiff_error(err, errno, "mount %s: source %s", m->dst, m->src);
        dir = S_ISDIR(st.st_mode);
        /* A single character device (the gpu hook's /dev/nvidia*) is useless
         * on a nodev mount. Binding it without nodev grants nothing new: the
         * node keeps its host owner and mode, checked on every open. */
        chardev = S_ISCHR(st.st_mode);
    }
    if (m->create == SKIFF_CREATE_DIR)
        dir = true;
    else if (m->create == SKIFF_CREATE_FILE)
        dir = false;
    cleanup_close int target = -1;
    if (m->create == SKIFF_CREATE_NONE) {
        target = skiff_root_open(rootfd, dst, O_PATH, err);
    } else {
        target = dir ? skiff_root_mkdirs(rootfd, dst, 0755, err) : skiff_root_mkfile(rootfd, dst, err);
    }
    if (target < 0) {
        if (err->code == EROFS)
            skiff_err_wrap(err,
                           "destination %s does not exist in the read-only image (use --rw, or "
                           "mount on an existing path)",
                           m->dst);
        return skiff_err_wrap(err, "mount %s", m->dst);
    }
    if (fstat(target, &st) == 0 && !m->tmpfs && S_ISDIR(st.st_mode) != dir)
        return skiff_error(err, ENOTDIR, "mount %s on %s: one is a directory, the other is not", m->src, m->dst);
    int rc = m->tmpfs ? user_tmpfs(m, target, err)
                      : bind_prop(m->src, target,
                                  (m->recursive ? SKIFF_BIND_REC : 0) | (m->readonly ? SKIFF_BIND_RO : 0) |
                                      (m->noexec ? SKIFF_BIND_NOEXEC : 0) | (chardev ? SKIFF_BIND_DEV : 0),
                                  m->propagation, m->propagation_rec, err);
    if (rc < 0)
        return skiff_err_wrap(err, "mount %s", m->dst);
    return 0;
}
