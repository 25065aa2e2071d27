/* What the plugin (root, in slurmstepd or slurmd) and its user-side helper
 * (plugin/helper/, exec'd as the job's user) say to each other.
 *
 * Root execs `skiff-helper VERB` with exactly these fds open:
 *   3  the request: a sealed memory file holding a start request as
 *      libskiff encodes it (runtime/lib/container/request.h: the user's
 *      configuration, then one record per field), for every verb
 *   4  the reply: a pipe the helper writes records into
 *   5  (verb start only) control: a pipe; EOF means "stop the container
 *      and exit" (slurmstepd closed it, or died)
 * and 0-2 on /dev/null. Root trusts nothing in the reply: it reads at most
 * SKIFF_REPLY_MAX bytes before a deadline, parses with skiff_reply_parse,
 * and checks every pid it is given (plugin/start.c, verify_holder).
 *
 * Reply records (enum skiff_reply_tag), in this order:
 *   progress, while an import runs (start and resolve), before the status:
 *            IMPORTING URI, IMPORTED "BYTES MS URI", DOWNLOAD "DONE TOTAL RATE
 *            LAYERS_DONE LAYERS" (its downloads: bytes, bytes/s), RETRY a
 *            download retried (one line), WAITING "SECONDS\tWHO\tURI" (waiting
 *            for WHO's import of the same image, running that long); after a
 *            lazy image's start: LAZY "FETCHED TOTAL URI", FETCHED of its TOTAL
 *            compressed bytes there on this node
 *   STATUS "0" or "-1"
 *   failure: PHASE (one of skiff_reply_phases: config, import, mount, hook,
 *            join, env, save), ERRNO, ERROR message
 *   start:   TIMES "RESOLVE_MS START_MS", then the container as libskiff
 *            encodes it (skiff_container_encode, container.h: holder pid,
 *            workdir, env, Entrypoint, Cmd); JOINED "1": the holder is a
 *            running container of another step the tasks join
 *            (--container-name), not the helper's child; NOTICE: one line
 *            for the user
 *   END ""
 * After a start's answer the reply pipe stays open; when the control pipe
 * closes, the helper writes the single byte SKIFF_REPLY_WAIT when steps
 * joined its container (it stops the container when they are done; root
 * waits for it, skiff_helper_joined), and closes the pipe. */
#ifndef SKIFF_PLUGIN_PROTO_H
#define SKIFF_PLUGIN_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"
#include "request.h"

#define SKIFF_HELPER_REQ_FD 3
#define SKIFF_HELPER_REP_FD 4
#define SKIFF_HELPER_CTL_FD 5
/* skiff-helper-full fetch: the channel to a lazy image's FUSE server */
#define SKIFF_HELPER_LAZY_FD 6

/* Bounds on what root accepts from the helper. */
#define SKIFF_REPLY_MAX (4u << 20)
#define SKIFF_REPLY_RECORDS_MAX 65536

/* The records of a reply (records.h). */
enum skiff_reply_tag {
    SKIFF_REPLY_IMPORTING = 'I', /* URI: an import started */
    SKIFF_REPLY_IMPORTED = 'i',  /* "BYTES MS URI": it ended */
    SKIFF_REPLY_DOWNLOAD = 'd',  /* "DONE TOTAL RATE LAYERS_DONE LAYERS": its downloads so far */
    SKIFF_REPLY_RETRY = 'r',     /* a download retried, or another warning (one line) */
    SKIFF_REPLY_WAITING = 'q',   /* "SECONDS\tWHO\tURI": waiting for another's import */
    SKIFF_REPLY_LAZY = 'L',      /* "FETCHED TOTAL URI": a lazy image's bytes on this node */
    SKIFF_REPLY_STATUS = 'S',    /* "0" or "-1" */
    SKIFF_REPLY_PHASE = 'p',     /* where it failed: one of skiff_reply_phases */
    SKIFF_REPLY_ERRNO = 'n',     /* the failure's errno, decimal */
    SKIFF_REPLY_ERROR = 'e',     /* the failure's message */
    SKIFF_REPLY_TIMES = 'T',     /* "RESOLVE_MS START_MS" */
    SKIFF_REPLY_JOINED = 'J',    /* "1": the tasks join another step's running container */
    SKIFF_REPLY_NOTICE = 'U',    /* one line for the user, shown by task 0 */
    SKIFF_REPLY_END = 'Z',       /* "": nothing follows */
    SKIFF_REPLY_WAIT = 'w',      /* a single byte after the reply: steps joined, wait for the stop */
};

/* The phases a failure may name, NULL-terminated ("skiff: PHASE: CAUSE").
 * The reply parser takes one of these; anything else reads as "mount". */
extern const char *const skiff_reply_phases[];

#define SKIFF_PHASE_MAX 16
#define SKIFF_NOTICE_MAX 512

struct skiff_reply {
    int status; /* 0, or -1 with phase and err */
    char phase[SKIFF_PHASE_MAX];
    skiff_err err;
    pid_t holder;
    bool attached; /* JOINED: a running container, not the helper's child */
    char notice[SKIFF_NOTICE_MAX];
    double t_resolve_ms, t_start_ms;
    char workdir[SKIFF_PATH_MAX];
    char **env, **entrypoint, **cmd; /* NULL-terminated, owned */
};

/* Parses a reply. Anything unexpected (an unknown tag, no STATUS or END,
 * a bad pid, too many records, data after END) is an error. Messages and
 * the notice are sanitised (common/sanitize.h) here already, and again at
 * the sink: they end up in srun's output and slurmd's log. */
int skiff_reply_parse(const char *p, size_t len, struct skiff_reply *r, skiff_err *err);
void skiff_reply_free(struct skiff_reply *r);

/* Whether tag is a progress record (see above). */
bool skiff_progress_tag(char tag);

/* The line root shows for a progress record (see above), made sanitised
 * and bounded: "importing URI …", "imported URI (N MB, T s)",
 * "downloading 1.2 of 5.0 GB (2 of 9 layers), 180.0 MB/s, 18 s left",
 * "waiting for the import of URI by WHO (running for N s)", a retry's line,
 * "lazy start of URI: fetched X of Y MB (the rest as it is read)".
 * 0 with the line in out, -1 for any other record or a malformed one. */
int skiff_progress_line(char tag, const char *s, char *out, size_t n);

#endif
