/* Hook "identity": the job user (and their groups) must exist inside the
 * container, or `whoami`, ssh, and many Python libraries fail. The image's
 * root may be read-only squashfs, so this writes merged copies of the
 * image's /etc/passwd and /etc/group (image lines for the same name or id
 * replaced by the host's entry) into SKIFF_STATE_DIR and binds them over
 * the image's files. Skipped when the user is mapped to root
 * (SKIFF_REMAP_ROOT=1): root exists in every image. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "fdio.h"
#include "hookutil.h"

static char *read_image_file(const char *root, const char *path, skiff_err *err)
{
    /* O_NONBLOCK: a FIFO in the image is refused below, not waited on */
    int fd = skiff_hook_open_in_root(root, path, O_RDONLY | O_NONBLOCK, err);
    if (fd < 0) {
        if (err->code == ENOENT) {
            skiff_err_clear(err);
            return strdup("");
        }
        return NULL;
    }
    char *s = skiff_read_fd_small(fd, path, 16u << 20, NULL, err);
    close(fd);
    if (!s)
        skiff_err_wrap(err, "read %s of the image", path);
    return s;
}

static int write_file(const char *dir, const char *name, const char *text, char *out, size_t outlen, skiff_err *err)
{
    if ((size_t)snprintf(out, outlen, "%s/%s", dir, name) >= outlen)
        return skiff_error(err, ENAMETOOLONG, "%s/%s", dir, name);
    return skiff_atomic_write(out, text, strlen(text), 0644, 0, err);
}

static int run(skiff_err *err)
{
    const char *remap = getenv("SKIFF_REMAP_ROOT");
    if (remap && !strcmp(remap, "1"))
        return 0;
    const char *root = getenv("SKIFF_ROOTFS"), *state = getenv("SKIFF_STATE_DIR");
    if (!root || !*root || !state || !*state)
        return skiff_error(err, 0,
                           "SKIFF_ROOTFS and SKIFF_STATE_DIR must be set (run hooks through the skiff runtime)");
    const char *uidv = getenv("SLURM_JOB_UID");
    if (!uidv || !*uidv)
        uidv = getenv("SKIFF_UID");
    uid_t uid = uidv && *uidv ? (uid_t)strtoul(uidv, NULL, 10) : getuid();
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return skiff_error(err, ENOENT, "uid %u is not in the host's user database", (unsigned)uid);
    char user[256];
    snprintf(user, sizeof(user), "%s", pw->pw_name);
    gid_t pgid = pw->pw_gid;
    char pline[1200];
    snprintf(pline, sizeof(pline), "%s:x:%u:%u:%s:%s:%s", pw->pw_name, (unsigned)pw->pw_uid, (unsigned)pw->pw_gid,
             pw->pw_gecos ? pw->pw_gecos : "", pw->pw_dir ? pw->pw_dir : "/",
             pw->pw_shell && *pw->pw_shell ? pw->pw_shell : "/bin/sh");
    if (strpbrk(pline, "\n"))
        return skiff_error(err, 0, "passwd entry of %s holds a newline", user);

    cleanup_free char *passwd = read_image_file(root, "/etc/passwd", err);
    if (!passwd)
        return -1;
    cleanup_free char *np = skiff_identity_merge(passwd, user, uid, pline, err);
    if (!np)
        return -1;

    cleanup_free char *group = read_image_file(root, "/etc/group", err);
    if (!group)
        return -1;
    gid_t gids[256];
    int ng = 256;
    if (getgrouplist(user, pgid, gids, &ng) < 0)
        ng = 256; /* more than 256 groups: keep the first ones */
    char *ngr = strdup(group);
    if (!ngr)
        return skiff_error(err, ENOMEM, "identity");
    for (int i = 0; i < ng; i++) {
        struct group *gr = getgrgid(gids[i]);
        if (!gr || strpbrk(gr->gr_name, ":\n"))
            continue;
        /* Members: only the job user, so other users' names do not leak. */
        char gline[600];
        snprintf(gline, sizeof(gline), "%s:x:%u:%s", gr->gr_name, (unsigned)gr->gr_gid, gids[i] == pgid ? "" : user);
        char *m = skiff_identity_merge(ngr, gr->gr_name, gr->gr_gid, gline, err);
        free(ngr);
        if (!m)
            return -1;
        ngr = m;
    }

    char dir[4200], pfile[4300], gfile[4300];
    snprintf(dir, sizeof(dir), "%s/identity", state);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        free(ngr);
        return skiff_error(err, errno, "create %s", dir);
    }
    int rc = write_file(dir, "passwd", np, pfile, sizeof(pfile), err);
    if (rc == 0)
        rc = write_file(dir, "group", ngr, gfile, sizeof(gfile), err);
    free(ngr);
    if (rc < 0)
        return -1;
    if (skiff_hook_mount(pfile, "/etc/passwd", "none", "ro,bind,x-create=file", err) < 0 ||
        skiff_hook_mount(gfile, "/etc/group", "none", "ro,bind,x-create=file", err) < 0)
        return -1;
    return 0;
}

int main(void)
{
    skiff_err err = {0};
    if (run(&err) < 0) {
        fprintf(stderr, "skiff hook identity: %s\n", err.msg);
        return 1;
    }
    return 0;
}
