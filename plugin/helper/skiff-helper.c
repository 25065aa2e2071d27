/* skiff-helper: the lean helper (helper.h), run on every step: it starts
 * containers and leaves imports and every other verb to skiff-helper-full. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helper.h"
#include "proto.h"
#include "spawn.h"

/* An image reference (or importer=): skiff-helper-full resolves it, with
 * the same request on fd 3 and the reply pipe on fd 4 for its progress
 * records; its stdout is the path, its stderr the error. */
static int resolve_image(const struct skiff_config *cfg, const struct skiff_start_request *q, char *out, size_t n,
                         skiff_err *err)
{
    (void)cfg; /* (it is in the request skiff-helper-full reads) */
    char self[PATH_MAX], full[PATH_MAX + 8];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return skiff_error(err, errno, "find skiff-helper-full");
    self[len] = '\0';
    snprintf(full, sizeof(full), "%s-full", self);
    cleanup_close int mfd = memfd_create("skiff-resolved", MFD_CLOEXEC);
    if (mfd < 0 || lseek(SKIFF_HELPER_REQ_FD, 0, SEEK_SET) < 0)
        return skiff_error(err, errno, "resolve %s", q->image);
    const char *argv[] = {full, "resolve", NULL};
    extern char **environ;
    struct skiff_spawn_result r;
    fcntl(SKIFF_HELPER_REP_FD, F_SETFD, 0); /* (single-threaded here) */
    int rc = skiff_spawn(argv, (const char *const *)environ, mfd, 0, 0, &r, err);
    fcntl(SKIFF_HELPER_REP_FD, F_SETFD, FD_CLOEXEC);
    if (rc < 0)
        return -1;
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
        return skiff_error(err, 0, "%s", r.err_tail[0] ? r.err_tail : "skiff-helper-full resolve failed");
    ssize_t got = pread(mfd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    if (out[0] != '/')
        return skiff_error(err, 0, "skiff-helper-full resolve printed no path");
    return 0;
}
static int verb(const char *name, const struct skiff_config *cfg, const struct skiff_start_request *q)
{
    (void)cfg;
    (void)q;
    skiff_err err;
    skiff_error(&err, 0, "verb '%s' is skiff-helper-full's", name);
    return skiff_helper_answer(-1, "config", &err);
}

int main(int argc, char **argv)
{
    static const struct skiff_helper_program lean = {
        .keep_request = true, .resolve_image = resolve_image, .verb = verb};
    return skiff_helper_main(argc, argv, &lean);
}
