/* skiff-helper and skiff-helper-full: the plugin's user-side half.
 * spank_skiff.so (root) execs them as the job's user with a closed fd set
 * and a clean environment; they do everything that touches the user's files
 * and images (see proto.h). One source, two programs: skiff-helper
 * (SKIFF_HELPER_LEAN) links only what starting a container needs, 11 shared
 * objects instead of 49 (~6 ms less to exec, and it runs on every step);
 * skiff-helper-full links the importers too and serves every other verb,
 * including `resolve`, which the lean one runs for an image reference.
 *
 *   start    resolve the image (cache, import, importer=, named container),
 *            start the container through libskiff, answer with the holder's
 *            pid, workdir and environment, then wait: when root closes the
 *            control pipe (last task gone, step over, or slurmstepd dead),
 *            stop the container (nothing stays mounted or running) and exit
 *   save     squash a named container into --container-save's path
 *   remove   remove a named container (the temporary one of --container-save)
 *   sweep    remove the named containers whose name ends in a suffix
 *            (container_scope=job: the job's, at its end)
 *   release  `IMPORTER release` (pyxis's importer contract)
 *   resolve  (full only) print the squashfs path of the request's image:
 *            the cache, an import, or importer= (run by the lean start)
 *
 * It is not a command for people: it refuses to run without its channels. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "container.h"
#include "fdio.h"
#include "image.h"
#include "named.h"
#include "proto.h"
#include "ref.h"
#include "rootfs.h"
#include "spawn.h"
#include "squash.h"
#include "records.h"

/* ---- the answer ---- */

static int put_failure(struct skiff_recbuf *b, const char *phase, const skiff_err *e)
{
    skiff_err ignore;
    b->len = 0;
    return skiff_rec_put(b, 'S', "-1", &ignore) < 0 || skiff_rec_put(b, 'p', phase, &ignore) < 0 ||
                   skiff_rec_putf(b, 'n', &ignore, "%d", e->code) < 0 || skiff_rec_put(b, 'e', e->msg, &ignore) < 0 ||
                   skiff_rec_put(b, 'Z', "", &ignore) < 0
               ? -1
               : 0;
}

static int answer(const struct skiff_recbuf *b)
{
    int rc = skiff_write_all(SKIFF_HELPER_REP_FD, b->p, b->len);
    close(SKIFF_HELPER_REP_FD);
    return rc;
}

/* Answers a verb that has nothing to report but success or failure. */
static int answer_status(int rc, const char *phase, const skiff_err *e)
{
    struct skiff_recbuf b = {0};
    skiff_err ignore;
    if (rc < 0)
        put_failure(&b, phase, e);
    else if (skiff_rec_put(&b, 'S', "0", &ignore) < 0 || skiff_rec_put(&b, 'Z', "", &ignore) < 0)
        return 1;
    answer(&b);
    skiff_recbuf_free(&b);
    return rc < 0 ? 1 : 0;
}

/* ---- start ---- */

#ifndef SKIFF_HELPER_LEAN
static int run_importer(const struct skiff_request *q, char *out, size_t n, skiff_err *err)
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
#endif

#ifdef SKIFF_HELPER_LEAN
/* An image reference (or importer=): skiff-helper-full resolves it, with
 * the same request on fd 3 and the reply pipe on fd 4 for its progress
 * records; its stdout is the path, its stderr the error. */
static int resolve_image(const struct skiff_request *q, char *out, size_t n, skiff_err *err)
{
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
#else
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
    progress_put('I', uri);
}

static void on_imported(void *ctx, const char *uri, unsigned long long bytes, double ms)
{
    (void)ctx;
    char line[SKIFF_PATH_MAX];
    snprintf(line, sizeof(line), "%llu %llu %s", bytes, (unsigned long long)ms, uri);
    progress_put('i', line);
}

static void on_download(void *ctx, const struct skiff_import_progress *p)
{
    (void)ctx;
    char line[128];
    snprintf(line, sizeof(line), "%llu %llu %.0f %u %u", p->done, p->total, p->rate, p->layers_done, p->layers);
    progress_put('d', line);
}

static void on_waiting(void *ctx, const char *uri, const char *who, double running_s)
{
    (void)ctx;
    char line[SKIFF_PATH_MAX];
    snprintf(line, sizeof(line), "%.0f\t%s\t%s", running_s, who, uri);
    progress_put('q', line);
}

static void on_warn(void *ctx, const char *msg)
{
    (void)ctx;
    progress_put('r', msg);
}

static int resolve_image(const struct skiff_request *q, char *out, size_t n, skiff_err *err)
{
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
                                   .keep_ctx = (void *)(uintptr_t)&q->cfg};
    if (skiff_image_resolve(&q->cfg, q->image, out, n, &o, err) == 0)
        return 0;
    if (deadline_ms > 0 && skiff_now_ms() >= deadline_ms - 1000)
        skiff_err_wrap(err, "the image's import did not end within import_timeout=%d s (plugstack.conf)",
                       q->import_timeout_s);
    return -1;
}
#endif

/* The shared lock on a cached image that this step uses, held until the
 * helper exits with the step: pruning the cache never removes it. */
static int image_hold = -1;

/* An image reference resolved through the caches, then held; resolved
 * again if a prune removed it before the hold (skiff_cache_hold). */
static int resolve_held(const struct skiff_request *q, char *out, size_t n, skiff_err *err)
{
    for (int tries = 0;; tries++) {
        if (resolve_image(q, out, n, err) < 0)
            return -1;
        if (q->importer && q->importer[0])
            return 0; /* pyxis's importer contract: its file, not the cache's */
        int fd = skiff_cache_hold(out, err);
        if (fd >= 0) {
            image_hold = fd;
            return 0;
        }
        if (err->code != ENOENT || tries == 2)
            return -1;
    }
}

/* The image to start, or "" for an existing named container. */
static int prepare(const struct skiff_request *q, char *image, size_t n, skiff_err *err)
{
    image[0] = '\0';
    bool exists = false;
    if (q->named) {
        bool create = q->name_mode && !strcmp(q->name_mode, "create");
        exists = skiff_named_exists(&q->cfg, q->named);
        if (exists && (q->temp || create)) {
            if (skiff_named_remove(&q->cfg, q->named, err) < 0)
                return -1;
            exists = false;
        }
        if (!exists && !q->image)
            return skiff_error(err, 0, "no container named '%s' on %s yet: give --container-image to create it",
                               q->name, q->node);
    }
    if (exists)
        return 0;
    if (!q->image)
        return skiff_error(err, 0, "no image given");
    /* a squashfs path needs no importer: checked here, without an exec */
    int rc = !(q->importer && q->importer[0]) && skiff_ref_classify(q->image) == SKIFF_ARG_PATH
                 ? skiff_squash_resolve_path(q->image, image, n, err)
                 : resolve_held(q, image, n, err);
    if (rc < 0)
        return -1;
    if (q->named && skiff_named_create(&q->cfg, q->named, image, true, err) < 0)
        return skiff_err_wrap(err, "container %s", q->named);
    return 0;
}

/* "JOBID.STEPID": the container of that step (pyxis's name for an
 * unnamed step's container). */
static bool step_name(const char *name)
{
    size_t a = strspn(name, "0123456789");
    return a > 0 && name[a] == '.' && name[a + 1] && strspn(name + a + 1, "0123456789") == strlen(name + a + 1);
}

/* A running container the step's tasks join instead of starting one:
 * --container-name=NAME (auto or exec) while a step on this node runs
 * NAME, or JOBID.STEPID of a running step. Looked up as the user, in the
 * user's own runtime directory; root checks the process it names. */
static int find_running(const struct skiff_request *q, struct skiff_container *c, skiff_err *err)
{
    char key[512], prefix[300];
    if (step_name(q->name) && (size_t)snprintf(key, sizeof(key), "%s.%s", q->node, q->name) < sizeof(key)) {
        int f = skiff_container_find(&q->cfg, key, NULL, NULL, c, err);
        if (f != 0)
            return f;
    }
    snprintf(prefix, sizeof(prefix), "%s.", q->node);
    return skiff_container_find(&q->cfg, NULL, q->named, prefix, c, err);
}

/* Steps joined to a running container hold STATE_DIR/joined shared, for
 * as long as they run; the step that started the container takes it
 * exclusively before stopping it, so a container is never stopped under
 * a step that joined it (up to a deadline), and a container that is
 * stopping is not joined. All of it in the user's own runtime directory,
 * as the user. */
static int joined_open(const char *state_dir)
{
    char p[SKIFF_PATH_MAX + 16];
    if ((size_t)snprintf(p, sizeof(p), "%s/joined", state_dir) >= sizeof(p))
        return -1;
    return open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* A shared hold on c for a joining step, or -1 when c is stopping or gone. */
static int join_hold(const struct skiff_container *c)
{
    int fd = c->state_dir[0] ? joined_open(c->state_dir) : -1;
    if (fd < 0)
        return -1;
    int r;
    while ((r = flock(fd, LOCK_SH | LOCK_NB)) < 0 && errno == EINTR)
        ;
    /* held: the container stops only after us; it must still be up now */
    if (r < 0 || kill(c->holder, 0) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Before the starting step stops its container: tells root on the reply
 * pipe ('w') when steps joined it and waits until none holds it, at most
 * timeout_ms; root waits for this process meanwhile, so that Slurm does not
 * kill it with the step's processes. Nothing written: nobody joined. Keeps
 * the lock: a step that looks now finds the container stopping. */
static void wait_joined(const char *state_dir, double timeout_ms)
{
    int fd = joined_open(state_dir);
    int r = -1;
    while (fd >= 0 && (r = flock(fd, LOCK_EX | LOCK_NB)) < 0 && errno == EINTR)
        ;
    bool busy = r < 0 && fd >= 0 && errno == EWOULDBLOCK;
    if (busy)
        (void)skiff_write_all(SKIFF_HELPER_REP_FD, "w", 1);
    close(SKIFF_HELPER_REP_FD);
    double end = skiff_now_ms() + timeout_ms;
    while (busy && flock(fd, LOCK_EX | LOCK_NB) < 0 && (errno == EINTR || errno == EWOULDBLOCK) && skiff_now_ms() < end)
        usleep(20000);
    /* fd stays open (and locked) until this process exits */
}

/* Reads the control pipe until root closes it (or slurmstepd is gone). */
static void wait_for_root(void)
{
    for (;;) {
        char ch;
        ssize_t r = read(SKIFF_HELPER_CTL_FD, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
    }
}

/* The answer for a step that joins a running container: its holder, its
 * environment, and / (or --container-workdir from /) as the working
 * directory, not that of the process that runs there (pyxis). Then holds
 * the container (hold: join_hold's fd) until root is done with the step. */
static int answer_attach(const struct skiff_request *q, struct skiff_container *c, int hold, double t0)
{
    struct skiff_recbuf b = {0};
    skiff_err e;
    char wd[SKIFF_PATH_MAX] = "/";
    if (q->workdir && skiff_root_path("/", q->workdir, true, wd, sizeof(wd), &e) < 0) {
        put_failure(&b, "config", &e);
        answer(&b);
        return 1;
    }
    /* the container as any start answers it, with 'J': root must not
     * look for its own child, nor ever stop it */
    snprintf(c->workdir, sizeof(c->workdir), "%s", wd);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->entrypoint = c->cmd = NULL;
    int bad = skiff_rec_put(&b, 'S', "0", &e) < 0 || skiff_rec_putf(&b, 'T', &e, "%.3f 0", skiff_now_ms() - t0) < 0 ||
              skiff_container_encode(c, &b, &e) < 0 || skiff_rec_put(&b, 'J', "1", &e) < 0 ||
              skiff_rec_put(&b, 'Z', "", &e) < 0;
    int rc = bad ? 1 : answer(&b) < 0;
    skiff_recbuf_free(&b);
    skiff_container_free(c);
    if (rc == 0)
        wait_for_root();
    close(hold);
    return rc; /* nothing of ours runs: the step that started it stops it */
}

static int verb_start(const struct skiff_request *q)
{
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_recbuf b = {0};
    double t0 = skiff_now_ms();
    const char *mode = q->name_mode ? q->name_mode : "auto";
    if (q->named && !q->temp && (!strcmp(mode, "auto") || !strcmp(mode, "exec"))) {
        struct skiff_container running;
        int f = find_running(q, &running, &err);
        if (f > 0) {
            int hold = join_hold(&running);
            if (hold >= 0)
                return answer_attach(q, &running, hold, t0);
            skiff_container_free(&running); /* stopping: as if it were not running */
            f = 0;
        }
        if (f == 0 && !strcmp(mode, "exec"))
            skiff_error(&err, 0,
                        "container '%s' is not running on %s (--container-name=%s:exec only joins a running "
                        "container; without :exec the step starts it)",
                        q->name, q->node, q->name);
        if (f < 0 || !strcmp(mode, "exec")) {
            put_failure(&b, "join", &err);
            answer(&b);
            return 1;
        }
    }
    char image[SKIFF_PATH_MAX];
    if (prepare(q, image, sizeof(image), &err) < 0) {
        put_failure(&b, "import", &err);
        answer(&b);
        return 1;
    }
    double t1 = skiff_now_ms();
    struct skiff_start_opts so;
    skiff_start_opts_init(&so);
    so.image = image[0] ? image : NULL;
    so.name = q->named;
    so.mounts = q->mounts;
    so.workdir = q->workdir;
    so.writable = q->writable || q->named;
    so.remap_root = q->remap_root;
    so.mount_home = q->mount_home;
    so.use_entrypoint = q->entrypoint;
    so.unshare_flags = q->unshare;
    char *command[2] = {q->command ? strdup(q->command) : NULL, NULL};
    so.command = command[0] ? command : NULL;
    so.hook_env = q->hook_env;
    so.locale_env = q->locale_env;
    so.state_key = q->state_key;
    /* when this process dies, even by SIGKILL, the holder and every mount go */
    so.die_with_parent = true;
    struct skiff_container c;
    if (skiff_container_start(&q->cfg, &so, &c, &err) < 0) {
        put_failure(&b, c.failed_phase == SKIFF_START_FAILED_HOOKS ? "hook" : "mount", &err);
        answer(&b);
        return 1;
    }
    double t2 = skiff_now_ms();
    skiff_err ignore;
    int bad = skiff_rec_put(&b, 'S', "0", &ignore) < 0 ||
              skiff_rec_putf(&b, 'T', &ignore, "%.3f %.3f", t1 - t0, t2 - t1) < 0 ||
              skiff_container_encode(&c, &b, &ignore) < 0;
    if (!bad && c.shared)
        /* the rule of named.h, said once per step and node */
        bad = skiff_rec_putf(&b, 'U', &ignore,
                             "container '%s' is in use by another step on this node: this step starts from its "
                             "files, but its own changes will not be kept",
                             q->name ? q->name : q->named) < 0;
    bad = bad || skiff_rec_put(&b, 'Z', "", &ignore) < 0;
    /* the reply pipe stays open for wait_joined's word */
    if (!bad && skiff_write_all(SKIFF_HELPER_REP_FD, b.p, b.len) == 0) {
        /* EOF: root is done with the container (or slurmstepd is gone) */
        wait_for_root();
        /* steps that joined it finish first, within root's deadline for us */
        wait_joined(c.state_dir, q->timeout_s > 2 ? (q->timeout_s - 2) * 1000.0 : 0);
    }
    skiff_recbuf_free(&b);
    skiff_container_stop(&c, &err);
    return 0;
}

#ifndef SKIFF_HELPER_LEAN
/* ---- the exit-time verbs (skiff-helper-full) ---- */

struct sweep {
    const struct skiff_request *q;
    int failures;
    skiff_err first;
};

static void sweep_one(const char *name, const char *image, void *arg)
{
    (void)image;
    struct sweep *s = arg;
    size_t n = strlen(name), m = strlen(s->q->suffix);
    if (n <= m || strcmp(name + n - m, s->q->suffix))
        return;
    skiff_err e;
    skiff_err_clear(&e);
    if (skiff_named_remove(&s->q->cfg, name, &e) < 0 && s->failures++ == 0)
        s->first = e;
}

static int verb_sweep(const struct skiff_request *q, skiff_err *err)
{
    if (!q->suffix || !q->suffix[0])
        return skiff_error(err, 0, "sweep: no suffix");
    struct sweep s = {.q = q};
    if (skiff_named_list(&q->cfg, sweep_one, &s, err) < 0)
        return err->code == ENOENT ? 0 : -1; /* no named container here at all */
    if (s.failures) {
        *err = s.first;
        return -1;
    }
    return 0;
}

static int verb_release(const struct skiff_request *q, skiff_err *err)
{
    if (!q->importer || !q->importer[0])
        return 0;
    const char *argv[] = {q->importer, "release", NULL};
    const char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    struct skiff_spawn_result r;
    return skiff_spawn(argv, envp, -1, 60000, 0, &r, err);
}

static int verb_resolve(const struct skiff_request *q, skiff_err *err)
{
    char path[SKIFF_PATH_MAX];
    if (!q->image)
        return skiff_error(err, 0, "no image given");
    if (resolve_image(q, path, sizeof(path), err) < 0)
        return -1;
    printf("%s\n", path);
    return fflush(stdout) == 0 ? 0 : skiff_error(err, errno, "write the path");
}
#endif

int main(int argc, char **argv)
{
    /* its channels are there, or it was not started by the plugin */
    struct stat st;
    bool resolve = argc == 2 && !strcmp(argv[1], "resolve");
    if (argc != 2 || fstat(SKIFF_HELPER_REQ_FD, &st) < 0 || (!resolve && fstat(SKIFF_HELPER_REP_FD, &st) < 0)) {
        fprintf(stderr, "skiff-helper: run by spank_skiff.so only (see doc/SECURITY.md)\n");
        return 2;
    }
    const char *verb = argv[1];
    bool start = !strcmp(verb, "start");
    if (start && fstat(SKIFF_HELPER_CTL_FD, &st) < 0) {
        fprintf(stderr, "skiff-helper: start without its control channel\n");
        return 2;
    }
    /* dies with the plugin's process (set before the exec as well) */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* Slurm signals every process of a step (scancel, --signal, the job's
     * end): those signals are for the tasks. The container must outlive
     * them, so that a task that checkpoints on SIGTERM or SIGUSR1 still has
     * its files, and --container-save must finish. Root ends this process
     * by closing the control pipe, and SIGKILL (after KillWait) still ends
     * it. */
    static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
        signal(ignored[i], SIG_IGN); /* (already, from before the exec: userproc.c) */
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_request *q = calloc(1, sizeof(*q));
    size_t len = 0;
    char *data = skiff_read_fd_small(SKIFF_HELPER_REQ_FD, "request", SKIFF_REQUEST_MAX, &len, &err);
#ifndef SKIFF_HELPER_LEAN
    close(SKIFF_HELPER_REQ_FD); /* (the lean one hands it to skiff-helper-full resolve) */
#endif
    if (!q || !data || skiff_request_parse(data, len, q, &err) < 0) {
        if (resolve) {
            fprintf(stderr, "%s", err.msg);
            return 1;
        }
        return answer_status(-1, "config", &err);
    }
    /* the reply and control pipes are not for the programs run from here */
    fcntl(SKIFF_HELPER_REP_FD, F_SETFD, FD_CLOEXEC);
    fcntl(SKIFF_HELPER_CTL_FD, F_SETFD, FD_CLOEXEC);
    if (q->cwd && q->cwd[0] && chdir(q->cwd) < 0) {
        skiff_error(&err, errno, "working directory %s", q->cwd);
        if (resolve) {
            fprintf(stderr, "%s", err.msg);
            return 1;
        }
        return answer_status(-1, start ? "import" : "save", &err);
    }
    if (start)
        return verb_start(q);
#ifdef SKIFF_HELPER_LEAN
    skiff_error(&err, 0, "verb '%s' is skiff-helper-full's", verb);
    return answer_status(-1, "config", &err);
#else
    if (resolve) {
        if (verb_resolve(q, &err) == 0)
            return 0;
        fprintf(stderr, "%s", err.msg);
        return 1;
    }
    int rc;
    const char *phase = "save";
    if (!strcmp(verb, "save")) {
        rc = q->named && q->save ? skiff_container_export(&q->cfg, q->named, q->save, &err)
                                 : skiff_error(&err, 0, "save: no container or path");
    } else if (!strcmp(verb, "remove")) {
        rc = q->named && skiff_named_exists(&q->cfg, q->named) ? skiff_named_remove(&q->cfg, q->named, &err) : 0;
    } else if (!strcmp(verb, "sweep")) {
        rc = verb_sweep(q, &err);
    } else if (!strcmp(verb, "release")) {
        rc = verb_release(q, &err);
    } else {
        phase = "config";
        rc = skiff_error(&err, 0, "unknown verb '%s'", verb);
    }
    return answer_status(rc, phase, &err);
#endif
}
