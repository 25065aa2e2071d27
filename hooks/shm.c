/* Hook "shm": makes sure the container has a /dev/shm. The runtime binds the
 * host's /dev/shm (NCCL and PyTorch data loaders exchange memory through
 * it); where that did not happen, this binds it. SKIFF_SHM_SIZE=N[kmg]
 * gives the container a private tmpfs of that size instead. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hookutil.h"

static int run(skiff_err *err)
{
    const char *size = getenv("SKIFF_SHM_SIZE");
    if (size && *size) {
        char opts[96];
        size_t n = strspn(size, "0123456789");
        if (n == 0 || n > 12 || (size[n] && (strchr("kmgKMG", size[n]) == NULL || size[n + 1])))
            return skiff_error(err, 0, "SKIFF_SHM_SIZE='%.40s': expected a size such as 8g or 512m", size);
        snprintf(opts, sizeof(opts), "rw,size=%s,mode=1777,x-create=dir", size);
        return skiff_hook_mount("tmpfs", "/dev/shm", "tmpfs", opts, err);
    }
    const char *root = getenv("SKIFF_ROOTFS");
    if (!root || !*root)
        return skiff_error(err, 0, "SKIFF_ROOTFS is not set (run hooks through the skiff runtime)");
    struct stat host, in, dev;
    if (stat("/dev/shm", &host) < 0)
        return 0; /* the host has none: nothing to share */
    char p[4200], d[4200];
    snprintf(p, sizeof(p), "%s/dev/shm", root);
    snprintf(d, sizeof(d), "%s/dev", root);
    if (stat(p, &in) == 0 && stat(d, &dev) == 0 && in.st_dev != dev.st_dev)
        return 0; /* already a mount point: the runtime bound it */
    return skiff_hook_mount("/dev/shm", "/dev/shm", "none", "rw,bind,x-create=dir", err);
}

int main(void)
{
    skiff_err err = {0};
    if (run(&err) < 0) {
        fprintf(stderr, "skiff hook shm: %s\n", err.msg);
        return 1;
    }
    return 0;
}
