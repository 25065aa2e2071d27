/* skiff-helper-full: the importing helper (helper.h): resolve (an image
 * reference, or importer=) for the lean start, and the exit-time verbs. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "container.h"
#include "fdio.h"
#include "helper.h"
#include "image.h"
#include "lazy.h"
#include "named.h"
#include "proto.h"
#include "records.h"
#include "registry.h"
#include "spawn.h"

static int run_importer(const struct skiff_start_request *q, char *out, size_t n, skiff_err *err)
{
    /* its stdout into a memory file: skiff_spawn waits for the program, and
     * a pipe nobody reads could fill */
    cleanup_close int mfd = memfd_create("skiff-importer", MFD_CLOEXEC);
    if (mfd < 0)
        return skiff_error(err, errno, "importer: memfd");
    const char *argv[] = {q->importer, "get", q->image, NULL};
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    struct skiff_spawn_result r;
    if (skiff_spawn(argv, envp, mfd, 0, 0, &r, err) < 0)
        return skiff_err_wrap(err, "importer %s", q->importer);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        char how[64];
        skiff_spawn_describe(&r, 0, how, sizeof(how));
        return skiff_error(err, 0, "importer %s get %s failed (%s): %s", q->importer, q->image, how, r.err_tail);
    }
    ssize_t got = pread(mfd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] != '/')
        return skiff_error(err, 0, "importer %s printed '%s', not the absolute path of a squashfs file", q->importer,
                           out);
    return 0;
}
/* Progress records into the reply pipe, when there is one (the lean
 * helper's; root shows them in srun while the import runs). */
static void progress_put(char tag, const char *text)
{
    struct stat st;
    if (fstat(SKIFF_HELPER_REP_FD, &st) < 0 || !S_ISFIFO(st.st_mode))
        return;
    struct skiff_recbuf b = {0};
    skiff_err ignore;
    if (skiff_rec_put(&b, tag, text, &ignore) == 0)
        (void)skiff_write_all(SKIFF_HELPER_REP_FD, b.p, b.len);
    skiff_recbuf_free(&b);
}

static void on_importing(void *ctx, const char *uri)
{
    (void)ctx;
    progress_put(SKIFF_REPLY_IMPORTING, uri);
}

static void on_imported(void *ctx, const char *uri, unsigned long long bytes, double ms)
{
    (void)ctx;
    char line[SKIFF_PATH_MAX];
    snprintf(line, sizeof(line), "%llu %llu %s", bytes, (unsigned long long)ms, uri);
    progress_put(SKIFF_REPLY_IMPORTED, line);
}

static void on_download(void *ctx, const struct skiff_import_progress *p)
{
    (void)ctx;
    char line[128];
    snprintf(line, sizeof(line), "%llu %llu %.0f %u %u", p->done, p->total, p->rate, p->layers_done, p->layers);
    progress_put(SKIFF_REPLY_DOWNLOAD, line);
}

static void on_waiting(void *ctx, const char *uri, const char *who, double running_s)
{
    (void)ctx;
    char line[SKIFF_PATH_MAX];
    snprintf(line, sizeof(line), "%.0f\t%s\t%s", running_s, who, uri);
    progress_put(SKIFF_REPLY_WAITING, line);
}

static void on_warn(void *ctx, const char *msg)
{
    (void)ctx;
    progress_put(SKIFF_REPLY_RETRY, msg);
}

static int resolve_image(const struct skiff_config *cfg, const struct skiff_start_request *q, char *out, size_t n,
                         skiff_err *err)
{
    /* enroot's credentials file: $VAR passwords from the job's environment */
    skiff_credentials_env(q->enroot_env);
    if (q->importer && q->importer[0])
        return run_importer(q, out, n, err);
    /* a little before root's own deadline, so that this process's message
     * (what it waited for) is the one the user sees, and this process
     * removes what it began (root's deadline kills it) */
    double limit_s = q->import_timeout_s - (q->import_timeout_s >= 8 ? 2 : q->import_timeout_s / 4.0);
    double deadline_ms = limit_s > 0 ? skiff_now_ms() + limit_s * 1000 : 0;
    struct skiff_resolve_opts o = {.importing = on_importing,
                                   .imported = on_imported,
                                   .waiting = on_waiting,
                                   .on_progress = on_download,
                                   .warn = on_warn,
                                   .progress_every_s = 5,
                                   .deadline_ms = deadline_ms,
                                   .keep = skiff_named_keeps_image,
                                   .keep_ctx = (void *)(uintptr_t)cfg};
    if (skiff_image_resolve(cfg, q->image, out, n, &o, err) == 0)
        return 0;
    if (deadline_ms > 0 && skiff_now_ms() >= deadline_ms - 1000)
        skiff_err_wrap(err, "the image's import did not end within import_timeout=%d s (plugstack.conf)",
                       q->import_timeout_s);
    return -1;
}
struct sweep {
    const struct skiff_config *cfg;
    const struct skiff_start_request *q;
    int failures;
    skiff_err first;
};

static void sweep_one(const char *name, const char *image, void *arg)
{
    (void)image;
    struct sweep *s = arg;
    size_t n = strlen(name), m = strlen(s->q->sweep_suffix);
    if (n <= m || strcmp(name + n - m, s->q->sweep_suffix))
        return;
    skiff_err e;
    skiff_err_clear(&e);
    if (skiff_named_remove(s->cfg, name, &e) < 0 && s->failures++ == 0)
        s->first = e;
}

static int verb_sweep(const struct skiff_config *cfg, const struct skiff_start_request *q, skiff_err *err)
{
    if (!q->sweep_suffix || !q->sweep_suffix[0])
        return skiff_error(err, 0, "sweep: no suffix");
    struct sweep s = {.cfg = cfg, .q = q};
    if (skiff_named_list(cfg, sweep_one, &s, err) < 0)
        return err->code == ENOENT ? 0 : -1; /* no named container here at all */
    if (s.failures) {
        *err = s.first;
        return -1;
    }
    return 0;
}

static int verb_release(const struct skiff_start_request *q, skiff_err *err)
{
    if (!q->importer || !q->importer[0])
        return 0;
    const char *argv[] = {q->importer, "release", NULL};
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    struct skiff_spawn_result r;
    return skiff_spawn(argv, envp, -1, 60000, 0, &r, err);
}

static int verb_resolve(const struct skiff_config *cfg, const struct skiff_start_request *q, skiff_err *err)
{
    char path[SKIFF_PATH_MAX];
    if (!q->image)
        return skiff_error(err, 0, "no image given");
    if (resolve_image(cfg, q, path, sizeof(path), err) < 0)
        return -1;
    printf("%s\n", path);
    return fflush(stdout) == 0 ? 0 : skiff_error(err, errno, "write the path");
}
static int verb(const char *name, const struct skiff_config *cfg, const struct skiff_start_request *q)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (!strcmp(name, "resolve")) {
        if (verb_resolve(cfg, q, &err) == 0)
            return 0;
        fprintf(stderr, "%s", err.msg);
        return 1;
    }
    int rc;
    const char *phase = "save";
    /* what an earlier step's killed export left (a cancelled --container-save:
     * its state, its partial image), now that its process is gone */
    skiff_container_prune(cfg);
    if (!strcmp(name, "save")) {
        rc = q->name && q->save ? skiff_container_export(cfg, q->name, q->save, &err)
                                : skiff_error(&err, 0, "save: no container or path");
    } else if (!strcmp(name, "remove")) {
        rc = q->name && skiff_named_exists(cfg, q->name) ? skiff_named_remove(cfg, q->name, &err) : 0;
    } else if (!strcmp(name, "sweep")) {
        rc = verb_sweep(cfg, q, &err);
    } else if (!strcmp(name, "release")) {
        rc = verb_release(q, &err);
    } else {
        phase = "config";
        rc = skiff_error(&err, 0, "unknown verb '%s'", name);
    }
    return skiff_helper_answer(rc, phase, &err);
}

/* fetch DIR: a lazy image's span fetcher (helper.c's start_fetcher). */
static int fetch(const struct skiff_config *cfg, const char *dir)
{
    skiff_err err;
    skiff_err_clear(&err);
    return skiff_lazy_fetch_main(cfg, dir, SKIFF_HELPER_LAZY_FD, &err) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct skiff_helper_program full = {.resolve_image = resolve_image, .verb = verb, .fetch = fetch};
    return skiff_helper_main(argc, argv, &full);
}
