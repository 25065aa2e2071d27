/* Tagged records (runtime/lib/records.c) and what is built on them: the
 * holder's report and state file (skiff_state_parse, runtime/lib/container/runstate.c),
 * the user-side helper's reply that root reads in slurmstepd and the request
 * root writes for it (runtime/lib/container/request.c). Every input goes through all of them,
 * and through skiff_rec_read_fd from a pipe.
 * Properties: walking the records never leaves the buffer, and writing them
 * again with skiff_rec_put gives back the same bytes; a failure says why;
 * a parsed state has no negative pid; an accepted reply holds only what
 * proto.h allows (status 0/-1, a known phase on failure, a positive holder
 * pid, an absolute workdir, K=V environment, messages the sanitiser would leave as they are); an
 * accepted request has absolute config paths, bounded lists, strings in
 * the data, scalars in range, and reads back the same once written again; the reader
 * returns a prefix of what was written, never more than its bound, and
 * stops early only after a complete end record. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "container.h"
#include "container_int.h"
#include "fuzzlib.h"
#include "proto.h"
#include "records.h"
#include "request.h"
#include "sanitize.h"

static void walk(const char *p, size_t len)
{
    struct skiff_recbuf b = {0};
    size_t off = 0, prev = 0;
    char tag;
    const char *s;
    int r;
    skiff_err err = {0};
    while ((r = skiff_rec_next(p, len, &off, &tag, &s)) == 1) {
        FUZZ_CHECK(tag == p[prev] && s == p + prev + 1, "record at %zu misplaced", prev);
        FUZZ_CHECK(off <= len && strlen(s) == off - prev - 2, "record at %zu: bad length", prev);
        FUZZ_CHECK(skiff_rec_put(&b, tag, s, &err) == 0, "rec_put: %s", err.msg);
        prev = off;
    }
    FUZZ_CHECK(b.len == prev && (!prev || !memcmp(b.p, p, prev)), "records written again differ");
    if (r < 0)
        FUZZ_CHECK(prev < len && !memchr(p + prev + 1, '\0', len - prev - 1), "-1 at %zu with a terminated record",
                   prev);
    else
        FUZZ_CHECK(prev == len, "walk stopped at %zu of %zu", prev, len);
    skiff_recbuf_free(&b);
}

static void state(const char *p, size_t len)
{
    struct skiff_container c;
    memset(&c, 0, sizeof(c));
    skiff_err err = {0};
    int rc = skiff_state_parse(p, len, &c, &err);
    fuzz_check_failure(rc, &err, "skiff_state_parse");
    if (rc == 0)
        FUZZ_CHECK(c.holder >= 0 && c.command >= 0 && c.server >= 0,
                   "state with pids holder %d command %d server %d (kill(-1) signals everything)", (int)c.holder,
                   (int)c.command, (int)c.server);
    skiff_strv_free(c.env);
    skiff_strv_free(c.entrypoint);
    skiff_strv_free(c.cmd);
}

static const char *const phases[] = {"config", "import", "mount", "hook", "join", "env", "save", NULL};

/* what the sinks get: the sanitiser's output (common/sanitize.h) */
static void printable(const char *s, const char *what)
{
    FUZZ_CHECK(skiff_is_clean(s, strlen(s)), "%s is not one clean line: '%s'", what, s);
}

static void reply(const char *p, size_t len)
{
    /* progress lines, as root shows them while the answer comes */
    size_t off = 0;
    char tag, line[400];
    const char *rec;
    while (skiff_rec_next(p, len, &off, &tag, &rec) == 1)
        if (skiff_progress_line(tag, rec, line, sizeof(line)) == 0)
            printable(line, "a progress line");
    struct skiff_reply r;
    skiff_err err = {0};
    int rc = skiff_reply_parse(p, len, &r, &err);
    fuzz_check_failure(rc, &err, "skiff_reply_parse");
    if (rc == 0) {
        FUZZ_CHECK(r.status == 0 || r.status == -1, "status %d", r.status);
        if (r.status < 0) {
            FUZZ_CHECK(fuzz_in(r.phase, phases), "failure in phase '%s'", r.phase);
            FUZZ_CHECK(r.err.msg[0], "failure without a message");
        }
        printable(r.err.msg, "the message");
        printable(r.phase, "the phase");
        printable(r.notice, "the notice");
        FUZZ_CHECK(r.err.code >= 0 && r.err.code <= 4095, "errno %d", r.err.code);
        FUZZ_CHECK(r.holder >= 0, "holder %d", (int)r.holder);
        FUZZ_CHECK(!r.workdir[0] || r.workdir[0] == '/', "workdir '%s'", r.workdir);
        FUZZ_CHECK(r.t_resolve_ms >= 0 && r.t_resolve_ms <= 1e9 && r.t_start_ms >= 0 && r.t_start_ms <= 1e9,
                   "times %g %g", r.t_resolve_ms, r.t_start_ms);
        for (size_t i = 0; r.env && r.env[i]; i++)
            FUZZ_CHECK(r.env[i][0] != '=' && strchr(r.env[i], '='), "env entry '%s'", r.env[i]);
    }
    skiff_reply_free(&r);
}

/* Whether s points into p[0..len). */
static bool inside(const char *s, const char *p, size_t len)
{
    return s >= p && s < p + len;
}

static void request(const char *p, size_t len)
{
    static struct skiff_config cfg, cfg2; /* large: kept off the stack */
    struct skiff_start_request q, q2;
    skiff_err err = {0};
    int rc = skiff_start_request_decode(p, len, &cfg, &q, &err);
    fuzz_check_failure(rc, &err, "skiff_start_request_decode");
    if (rc == 0) {
        const char *const *lists[] = {q.mounts, q.env, q.command, q.hook_env, q.locale_env};
        for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
            size_t n = 0;
            for (; lists[l] && lists[l][n]; n++)
                FUZZ_CHECK(inside(lists[l][n], p, len), "list %zu entry %zu outside the data", l, n);
            FUZZ_CHECK(n <= SKIFF_REQUEST_LIST_MAX, "list %zu has %zu entries", l, n);
        }
        const char *paths[] = {cfg.data_path,        cfg.cache_path, cfg.runtime_path,    cfg.temp_path,
                               cfg.block_cache_path, cfg.hooks_dir,  cfg.credentials_file};
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
            FUZZ_CHECK(!paths[i][0] || paths[i][0] == '/', "config path '%s'", paths[i]);
        const char *strs[] = {q.image, q.name,       q.workdir,  q.state_key, q.cwd,
                              q.node,  q.name_given, q.importer, q.save,      q.sweep_suffix};
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
            FUZZ_CHECK(!strs[i] || inside(strs[i], p, len), "request string %zu outside the data", i);
        FUZZ_CHECK(q.name_mode >= 0 && q.name_mode <= SKIFF_NAME_NO_EXEC && q.timeout_s >= 0 &&
                       q.timeout_s <= SKIFF_REQUEST_TIMEOUT_MAX && q.unshare_flags >= 0,
                   "scalars out of range");
        /* what it reads, written again, reads back the same */
        struct skiff_recbuf b1 = {0}, b2 = {0};
        FUZZ_CHECK(skiff_start_request_encode(&cfg, &q, &b1, &err) == 0, "encode: %s", err.msg);
        FUZZ_CHECK(skiff_start_request_decode(b1.p, b1.len, &cfg2, &q2, &err) == 0, "decode again: %s", err.msg);
        FUZZ_CHECK(skiff_start_request_encode(&cfg2, &q2, &b2, &err) == 0, "encode again: %s", err.msg);
        FUZZ_CHECK(b1.len == b2.len && !memcmp(b1.p, b2.p, b1.len), "encode(decode(encode(q))) differs");
        skiff_start_request_free(&q2);
        skiff_recbuf_free(&b1);
        skiff_recbuf_free(&b2);
    }
    skiff_start_request_free(&q);
}

static void reader(const uint8_t *data, size_t size)
{
    if (size > 60000) /* stays within a pipe's buffer: one write, no writer thread */
        return;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        abort();
    if (size && write(fds[1], data, size) != (ssize_t)size)
        abort();
    close(fds[1]);
    size_t max = size ? (size_t)data[0] * 97 : 0;
    char *out;
    size_t len;
    bool timed_out;
    skiff_err err = {0};
    int rc = skiff_rec_read_fd(fds[0], max, 5000, 'Z', &out, &len, &timed_out, &err);
    close(fds[0]);
    fuzz_check_failure(rc, &err, "skiff_rec_read_fd");
    if (rc < 0) {
        FUZZ_CHECK(!timed_out && size > max, "read of %zu bytes (max %zu) failed: %s", size, max, err.msg);
        return;
    }
    FUZZ_CHECK(len <= max && len <= size && out[len] == '\0', "read %zu of %zu bytes (max %zu)", len, size, max);
    FUZZ_CHECK(!len || !memcmp(out, data, len), "read bytes differ from what was written");
    if (len < size) { /* stopped early: only at a complete 'Z' record */
        size_t off = 0;
        char tag;
        const char *s;
        bool end = false;
        while (skiff_rec_next(out, len, &off, &tag, &s) == 1)
            end |= tag == 'Z';
        FUZZ_CHECK(end, "stopped after %zu of %zu bytes without an end record", len, size);
    }
    free(out);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    skiff_config_for_user(1000, "fuzz", "/home/fuzz");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    /* the parsers get exactly the bytes, in a buffer of exactly that size */
    char *p = malloc(size ? size : 1);
    if (!p)
        abort();
    memcpy(p, data, size);
    walk(p, size);
    state(p, size);
    reply(p, size);
    request(p, size);
    free(p);
    reader(data, size);
    return 0;
}
