/* See helper.h: what both helper programs do, start above all. */
#include "helper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "container.h"
#include "fdio.h"
#include "lazy.h"
#include "named.h"
#include "ns.h"
#include "proto.h"
#include "records.h"
#include "ref.h"
#include "rootfs.h"
#include "squash.h"

/* ---- the answer ---- */

static int put_failure(struct skiff_recbuf *b, const char *phase, const skiff_err *e)
{
    skiff_err ignore;
    b->len = 0;
    return skiff_rec_put(b, SKIFF_REPLY_STATUS, "-1", &ignore) < 0 ||
                   skiff_rec_put(b, SKIFF_REPLY_PHASE, phase, &ignore) < 0 ||
                   skiff_rec_putf(b, SKIFF_REPLY_ERRNO, &ignore, "%d", e->code) < 0 ||
                   skiff_rec_put(b, SKIFF_REPLY_ERROR, e->msg, &ignore) < 0 ||
                   skiff_rec_put(b, SKIFF_REPLY_END, "", &ignore) < 0
               ? -1
               : 0;
}

static int answer(const struct skiff_recbuf *b)
{
    int rc = skiff_write_all(SKIFF_HELPER_REP_FD, b->p, b->len);
    close(SKIFF_HELPER_REP_FD);
    return rc;
}

int skiff_helper_answer(int rc, const char *phase, const skiff_err *e)
{
    struct skiff_recbuf b = {0};
    skiff_err ignore;
    if (rc < 0)
        put_failure(&b, phase, e);
    else if (skiff_rec_put(&b, SKIFF_REPLY_STATUS, "0", &ignore) < 0 ||
             skiff_rec_put(&b, SKIFF_REPLY_END, "", &ignore) < 0)
        return 1;
    answer(&b);
    skiff_recbuf_free(&b);
    return rc < 0 ? 1 : 0;
}

/* ---- start ---- */

/* The image this step uses, held until the helper exits with the step
 * (skiff_cache_hold_image): pruning the user's cache never removes it. */
static int image_hold = -1;

/* An image reference resolved through the caches, then held; resolved
 * again if a prune removed it before the hold (skiff_cache_hold_image). */
static int resolve_held(const struct skiff_helper_program *program, const struct skiff_config *cfg,
                        const struct skiff_start_request *q, char *out, size_t n, skiff_err *err)
{
    for (int tries = 0;; tries++) {
        if (program->resolve_image(cfg, q, out, n, err) < 0)
            return -1;
        if (q->importer && q->importer[0])
            return 0; /* pyxis's importer contract: its file, not the cache's */
        if (skiff_lazy_is_image(out))
            return 0; /* a lazy image (a directory): the cache's pruning leaves those alone */
        int fd = skiff_cache_hold_image(cfg, out, err);
        if (fd >= 0) {
            image_hold = fd;
            return 0;
        }
        if (err->code != ENOENT || tries == 2)
            return -1;
    }
}

/* The image to start, or "" for an existing named container. */
static int prepare(const struct skiff_helper_program *program, const struct skiff_config *cfg,
                   const struct skiff_start_request *q, char *image, size_t n, skiff_err *err)
{
    image[0] = '\0';
    bool exists = false;
    if (q->name) {
        bool create = q->name_mode == SKIFF_NAME_CREATE;
        exists = skiff_named_exists(cfg, q->name);
        if (exists && (q->temp_name || create)) {
            if (skiff_named_remove(cfg, q->name, err) < 0)
                return -1;
            exists = false;
        }
        if (!exists && !q->image)
            return skiff_error(err, 0, "no container named '%s' on %s yet: give --container-image to create it",
                               q->name_given, q->node);
    }
    if (exists)
        return 0;
    if (!q->image)
        return skiff_error(err, 0, "no image given");
    /* a squashfs path needs no importer: checked here, without an exec */
    int rc = !(q->importer && q->importer[0]) && skiff_ref_classify(q->image) == SKIFF_ARG_PATH
                 ? skiff_squash_resolve_path(q->image, image, n, err)
                 : resolve_held(program, cfg, q, image, n, err);
    if (rc < 0)
        return -1;
    if (q->name && skiff_named_create(cfg, q->name, image, q->node, true, err) < 0)
        return skiff_err_wrap(err, "container %s", q->name);
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
static int find_running(const struct skiff_config *cfg, const struct skiff_start_request *q, struct skiff_container *c,
                        skiff_err *err)
{
    char key[512], prefix[300];
    if (step_name(q->name_given) && (size_t)snprintf(key, sizeof(key), "%s.%s", q->node, q->name_given) < sizeof(key)) {
        int f = skiff_container_find(cfg, key, NULL, NULL, c, err);
        if (f != 0)
            return f;
    }
    snprintf(prefix, sizeof(prefix), "%s.", q->node);
    return skiff_container_find(cfg, NULL, q->name, prefix, c, err);
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
 * pipe (SKIFF_REPLY_WAIT) when steps joined it and waits until none holds it, at most
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
        (void)skiff_write_all(SKIFF_HELPER_REP_FD, &(char){SKIFF_REPLY_WAIT}, 1);
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
static int answer_attach(const struct skiff_start_request *q, struct skiff_container *c, int hold, double t0)
{
    struct skiff_recbuf b = {0};
    skiff_err e;
    char wd[SKIFF_PATH_MAX] = "/";
    if (q->workdir && skiff_root_path("/", q->workdir, true, wd, sizeof(wd), &e) < 0) {
        put_failure(&b, "config", &e);
        answer(&b);
        return 1;
    }
    /* the container as any start answers it, with JOINED: root must not
     * look for its own child, nor ever stop it */
    snprintf(c->workdir, sizeof(c->workdir), "%s", wd);
    skiff_strv_free(c->entrypoint);
    skiff_strv_free(c->cmd);
    c->entrypoint = c->cmd = NULL;
    int bad = skiff_rec_put(&b, SKIFF_REPLY_STATUS, "0", &e) < 0 ||
              skiff_rec_putf(&b, SKIFF_REPLY_TIMES, &e, "%.3f 0", skiff_now_ms() - t0) < 0 ||
              skiff_container_encode(c, &b, &e) < 0 || skiff_rec_put(&b, SKIFF_REPLY_JOINED, "1", &e) < 0 ||
              skiff_rec_put(&b, SKIFF_REPLY_END, "", &e) < 0;
    int rc = bad ? 1 : answer(&b) < 0;
    skiff_recbuf_free(&b);
    skiff_container_free(c);
    if (rc == 0)
        wait_for_root();
    close(hold);
    return rc; /* nothing of ours runs: the step that started it stops it */
}

/* The lazy image's fetcher: skiff-helper-full fetch DIR, with the request
 * again on fd 3 (its configuration) and the channel on fd 6. */
static int start_fetcher(const struct skiff_config *cfg, struct skiff_start_request *so, struct skiff_lazy_run *run,
                         skiff_err *err)
{
    char self[PATH_MAX], full[PATH_MAX + 8];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return skiff_error(err, errno, "find skiff-helper-full");
    self[len] = '\0';
    snprintf(full, sizeof(full), "%s%s", self, strstr(self, "-full") ? "" : "-full");
    if (lseek(SKIFF_HELPER_REQ_FD, 0, SEEK_SET) < 0)
        return skiff_error(err, errno, "lazy image: the request");
    const int keep[] = {SKIFF_HELPER_REQ_FD};
    return skiff_lazy_run_begin(cfg, so, full, "fetch", SKIFF_HELPER_LAZY_FD, keep, 1, run, err);
}

/* LAZY "FETCHED TOTAL IMAGE": what the start read of a lazy image so far
 * (root shows it in srun as "fetched X of Y MB"). */
static void lazy_progress(const struct skiff_start_request *q, const struct lz_image *im)
{
    uint64_t fetched, total;
    uint32_t present;
    skiff_lazy_counters(im, &fetched, &total, &present);
    struct skiff_recbuf b = {0};
    skiff_err ignore;
    if (skiff_rec_putf(&b, SKIFF_REPLY_LAZY, &ignore, "%llu %llu %s", (unsigned long long)fetched,
                       (unsigned long long)total, q->image ? q->image : "") == 0)
        (void)skiff_write_all(SKIFF_HELPER_REP_FD, b.p, b.len);
    skiff_recbuf_free(&b);
}

static int verb_start(const struct skiff_helper_program *program, const struct skiff_config *cfg,
                      const struct skiff_start_request *q)
{
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_recbuf b = {0};
    double t0 = skiff_now_ms();
    bool exec = q->name_mode == SKIFF_NAME_EXEC;
    if (q->name && !q->temp_name && (q->name_mode == SKIFF_NAME_AUTO || exec)) {
        struct skiff_container running;
        int f = find_running(cfg, q, &running, &err);
        if (f > 0) {
            /* pyxis: a namespace asked for that the running container
             * does not have is an error, not a silent join of the node's */
            if (q->unshare_flags && skiff_ns_check_unshared(running.holder, q->unshare_flags, &err) < 0) {
                skiff_container_free(&running);
                put_failure(&b, "join", &err);
                answer(&b);
                return 1;
            }
            int hold = join_hold(&running);
            if (hold >= 0)
                return answer_attach(q, &running, hold, t0);
            skiff_container_free(&running); /* stopping: as if it were not running */
            f = 0;
        }
        if (f == 0 && exec)
            skiff_error(&err, 0,
                        "container '%s' is not running on %s (--container-name=%s:exec only joins a running "
                        "container; without :exec the step starts it)",
                        q->name_given, q->node, q->name_given);
        if (f < 0 || exec) {
            put_failure(&b, "join", &err);
            answer(&b);
            return 1;
        }
    }
    char image[SKIFF_PATH_MAX];
    if (prepare(program, cfg, q, image, sizeof(image), &err) < 0) {
        put_failure(&b, "import", &err);
        answer(&b);
        return 1;
    }
    double t1 = skiff_now_ms();
    /* the request as root wrote it, with the image resolved */
    struct skiff_start_request so = *q;
    so.image = image[0] ? image : NULL;
    /* when this process dies, even by SIGKILL, the holder and every mount go */
    so.die_with_parent = true;
    /* a lazy image: its span fetcher (skiff-helper-full fetch), outside the
     * container's namespaces */
    struct skiff_lazy_run lazy;
    if (start_fetcher(cfg, &so, &lazy, &err) < 0) {
        put_failure(&b, "mount", &err);
        answer(&b);
        return 1;
    }
    struct skiff_container c;
    if (skiff_container_start(cfg, &so, &c, &err) < 0) {
        skiff_lazy_run_end(&lazy);
        put_failure(&b, c.failed_phase == SKIFF_START_FAILED_HOOKS ? "hook" : "mount", &err);
        answer(&b);
        return 1;
    }
    if (lazy.im)
        lazy_progress(q, lazy.im);
    double t2 = skiff_now_ms();
    skiff_err ignore;
    int bad = skiff_rec_put(&b, SKIFF_REPLY_STATUS, "0", &ignore) < 0 ||
              skiff_rec_putf(&b, SKIFF_REPLY_TIMES, &ignore, "%.3f %.3f", t1 - t0, t2 - t1) < 0 ||
              skiff_container_encode(&c, &b, &ignore) < 0;
    if (!bad && c.shared)
        /* the rule of named.h, said once per step and node */
        bad = skiff_rec_putf(&b, SKIFF_REPLY_NOTICE, &ignore,
                             "container '%s' is in use by another step on this node: this step starts from its "
                             "files, but its own changes will not be kept%s%s",
                             q->name_given ? q->name_given : q->name, c.notice[0] ? "; " : "", c.notice) < 0;
    else if (!bad && c.notice[0]) /* what the hooks told the user (the rdma hook's fabric notes) */
        bad = skiff_rec_put(&b, SKIFF_REPLY_NOTICE, c.notice, &ignore) < 0;
    bad = bad || skiff_rec_put(&b, SKIFF_REPLY_END, "", &ignore) < 0;
    /* the reply pipe stays open for wait_joined's word */
    if (!bad && skiff_write_all(SKIFF_HELPER_REP_FD, b.p, b.len) == 0) {
        /* EOF: root is done with the container (or slurmstepd is gone) */
        wait_for_root();
        /* steps that joined it finish first, within root's deadline for us */
        wait_joined(c.state_dir, q->timeout_s > 2 ? (q->timeout_s - 2) * 1000.0 : 0);
    }
    skiff_recbuf_free(&b);
    skiff_container_stop(&c, &err);
    skiff_lazy_run_end(&lazy);
    return 0;
}

int skiff_helper_main(int argc, char **argv, const struct skiff_helper_program *p)
{
    /* its channels are there, or it was not started by the plugin */
    struct stat st;
    bool resolve = argc == 2 && !strcmp(argv[1], "resolve");
    /* fetch DIR: a lazy image's span fetcher (start_fetcher), channel on fd 6 */
    bool fetch = argc == 3 && !strcmp(argv[1], "fetch") && p->fetch;
    if ((argc != 2 && !fetch) || fstat(SKIFF_HELPER_REQ_FD, &st) < 0 ||
        (!resolve && !fetch && fstat(SKIFF_HELPER_REP_FD, &st) < 0) ||
        (fetch && fstat(SKIFF_HELPER_LAZY_FD, &st) < 0)) {
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
    struct skiff_config config;
    struct skiff_start_request req;
    const struct skiff_config *cfg = &config;
    const struct skiff_start_request *q = &req;
    size_t len = 0;
    char *data = skiff_read_fd_small(SKIFF_HELPER_REQ_FD, "request", SKIFF_REQUEST_MAX, &len, &err);
    if (!p->keep_request && !start)
        close(SKIFF_HELPER_REQ_FD); /* (a start hands it to a lazy image's fetcher) */
    /* (data lives as long as the process: the request points into it) */
    if (!data || skiff_start_request_decode(data, len, &config, &req, &err) < 0) {
        if (resolve || fetch) {
            fprintf(stderr, "%s", err.msg);
            return 1;
        }
        return skiff_helper_answer(-1, "config", &err);
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
        return skiff_helper_answer(-1, start ? "import" : "save", &err);
    }
    if (fetch) /* (its stderr is the helper's: /dev/null; the FUSE server tells the reader) */
        return p->fetch(cfg, argv[2]);
    if (start)
        return verb_start(p, cfg, q);
    return p->verb(verb, cfg, q);
}
