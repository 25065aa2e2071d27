/* See hookrun.h. */
#include "hookrun.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"

struct hook {
    char name[NAME_MAX + 1];
    char path[PATH_MAX];
};

static int cmp_hook(const void *a, const void *b)
{
    return strcmp(((const struct hook *)a)->name, ((const struct hook *)b)->name);
}

static int collect(const char *dir, struct hook **list, size_t *n, skiff_err *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return skiff_error(err, errno, "open hooks directory %s", dir);
    }
    struct dirent *e;
    int rv = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode) ||
            faccessat(dirfd(d), e->d_name, X_OK, 0) < 0)
            continue; /* not an executable file: documentation, disabled hooks */
        struct hook *nl = realloc(*list, (*n + 1) * sizeof(**list));
        if (!nl) {
            rv = skiff_error(err, ENOMEM, "hooks");
            break;
        }
        *list = nl;
        snprintf(nl[*n].name, sizeof(nl[*n].name), "%s", e->d_name);
        if ((size_t)snprintf(nl[*n].path, sizeof(nl[*n].path), "%s/%s", dir, e->d_name) >=
            sizeof(nl[*n].path))
            continue;
        (*n)++;
    }
    closedir(d);
    return rv;
}

int skiff_hooks_run(const char *const *dirs, const char *const *envp, int timeout_ms, skiff_err *err)
{
    struct hook *list = NULL;
    size_t n = 0;
    for (size_t i = 0; dirs && dirs[i]; i++)
        if (dirs[i][0] && collect(dirs[i], &list, &n, err) < 0) {
            free(list);
            return -1;
        }
    if (n > 1)
        qsort(list, n, sizeof(*list), cmp_hook); /* stable enough: names differ or dirs order */
    int rv = 0;
    for (size_t i = 0; i < n; i++) {
        const char *argv[] = {list[i].path, NULL};
        struct skiff_spawn_result r;
        if (skiff_spawn(argv, envp, -1, timeout_ms, 0, &r, err) < 0) {
            rv = skiff_err_wrap(err, "hook %s", list[i].path);
            break;
        }
        if (r.timed_out || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
            char how[64];
            skiff_spawn_describe(&r, timeout_ms, how, sizeof(how));
            rv = skiff_error(err, 0, "hook %s failed (%s)%s%s", list[i].path, how, r.err_tail[0] ? ": " : "",
                             r.err_tail);
            break;
        }
        if (r.err_tail[0]) /* a successful hook's warnings still reach the user */
            fprintf(stderr, "skiff: hook %s: %s\n", list[i].name, r.err_tail);
    }
    free(list);
    return rv;
}
