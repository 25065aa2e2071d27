/* Hook "home": with SKIFF_MOUNT_HOME=1, binds the job user's home directory
 * (from the host's passwd, found by SLURM_JOB_USER, SLURM_JOB_UID or the
 * runtime's SKIFF_UID) at the same path. Anything else: nothing to do. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hookutil.h"

static int run(skiff_err *err)
{
    const char *on = getenv("SKIFF_MOUNT_HOME");
    if (!on || strcmp(on, "1") != 0)
        return 0;
    struct passwd *pw = NULL;
    const char *user = getenv("SLURM_JOB_USER"), *uid = getenv("SLURM_JOB_UID");
    const char *suid = getenv("SKIFF_UID"), *remap = getenv("SKIFF_REMAP_ROOT");
    if (user && *user)
        pw = getpwnam(user);
    if (!pw && uid && *uid)
        pw = getpwuid((uid_t)strtoul(uid, NULL, 10));
    if (!pw && suid && *suid && !(remap && !strcmp(remap, "1")))
        pw = getpwuid((uid_t)strtoul(suid, NULL, 10));
    if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
        return skiff_error(err, ENOENT,
                           "SKIFF_MOUNT_HOME=1 but the job user's home directory is unknown "
                           "(no SLURM_JOB_USER/SLURM_JOB_UID in passwd)");
    struct stat st;
    if (stat(pw->pw_dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return skiff_error(err, errno ? errno : ENOTDIR, "home directory %s", pw->pw_dir);
    const char *root = getenv("SKIFF_ROOTFS");
    if (root && *root) {
        char p[4200];
        struct stat in;
        snprintf(p, sizeof(p), "%s%s", root, pw->pw_dir);
        if (stat(p, &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            return 0; /* the runtime bound it already (--container-mount-home) */
    }
    return skiff_hook_mount(pw->pw_dir, pw->pw_dir, "none", "rw,bind,x-create=dir", err);
}

int main(void)
{
    skiff_err err = {0};
    if (run(&err) < 0) {
        fprintf(stderr, "skiff hook home: %s\n", err.msg);
        return 1;
    }
    return 0;
}
