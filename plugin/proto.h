/* What the plugin (root, in slurmstepd or slurmd) and its user-side helper
 * (plugin/helper.c, exec'd as the job's user) say to each other.
 *
 * Root execs `skiff-helper VERB` with exactly these fds open:
 *   3  the request: a sealed memory file of records (runtime/lib/records.h)
 *   4  the reply: a pipe the helper writes records into
 *   5  (verb start only) control: a pipe; EOF means "stop the container
 *      and exit" (slurmstepd closed it, or died)
 * and 0-2 on /dev/null. Root trusts nothing in the reply: it reads at most
 * SKIFF_REPLY_MAX bytes before a deadline, parses with skiff_reply_parse,
 * and checks every pid it is given (plugin/remote.c, verify_holder).
 *
 * Request records:
 *   'c' key=value   the loaded configuration (skiff_config_entry)
 *   'o' key=value   one scalar of the step (keys below, SKIFF_REQ_*)
 *   'm' spec        a --container-mounts entry, sources made absolute
 *   'h' K=V         environment for the container's hooks (SLURM_* ...)
 *   'l' K=V         the job's LANG and LC_* (a locale the image lacks falls back)
 * Reply records, in this order:
 *   progress, while an import runs (start and resolve), before 'S':
 *            'I' URI (importing), 'i' "BYTES MS URI" (imported),
 *            'd' "DONE TOTAL RATE LAYERS_DONE LAYERS" (its downloads, bytes and
 *            bytes/s), 'r' a download retried (one line), 'q' "SECONDS\tWHO\tURI"
 *            (waiting for WHO's import of the same image, running that long);
 *            'L' "FETCHED TOTAL URI": a lazy image started, FETCHED of its
 *            TOTAL compressed bytes there on this node (after the start)
 *   'S' "0" or "-1"
 *   failure: 'p' phase (config, import, mount, hook, save), 'n' errno, 'e' message
 *   start:   'T' "RESOLVE_MS START_MS", then the container as libskiff
 *            encodes it (skiff_container_encode, container.h): 'H' holder
 *            pid, 'W' workdir, 'E' K=V..., 'P' entrypoint word..., 'C' cmd word...;
 *            'J' "1": the holder is a running container of another step the
 *            tasks join (--container-name), not the helper's child;
 *            'U' a notice for the user (one line)
 *   'Z' ""          the end
 * After a start's answer the reply pipe stays open; when the control pipe
 * closes, the helper writes the single byte 'w' when steps joined its
 * container (it stops the container when they are done; root waits for
 * it, skiff_helper_joined), and closes the pipe. */
#ifndef SKIFF_PLUGIN_PROTO_H
#define SKIFF_PLUGIN_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"

#define SKIFF_HELPER_REQ_FD 3
#define SKIFF_HELPER_REP_FD 4
#define SKIFF_HELPER_CTL_FD 5
/* skiff-helper-full fetch: the channel to a lazy image's FUSE server */
#define SKIFF_HELPER_LAZY_FD 6

/* Bounds on what root accepts from the helper. */
#define SKIFF_REPLY_MAX (4u << 20)
#define SKIFF_REPLY_RECORDS_MAX 65536
/* and on what the helper accepts as a request (root wrote it) */
#define SKIFF_REQUEST_MAX (16u << 20)

/* 'o' keys */
#define SKIFF_REQ_CWD "cwd"             /* the step's working directory */
#define SKIFF_REQ_NODE "node"           /* this node's name, for messages */
#define SKIFF_REQ_IMAGE "image"         /* --container-image as given */
#define SKIFF_REQ_NAME "name"           /* --container-name as given (no mode) */
#define SKIFF_REQ_NAMED "named"         /* the stored name: NAME.NODE[.jobID] */
#define SKIFF_REQ_NAME_MODE "name_mode" /* auto, create, exec, no_exec */
#define SKIFF_REQ_TEMP "temp"           /* 1: named only to keep the upper for --container-save */
#define SKIFF_REQ_IMPORTER "importer"   /* the plugstack's importer program */
#define SKIFF_REQ_WORKDIR "workdir"
#define SKIFF_REQ_WRITABLE "writable"
#define SKIFF_REQ_REMAP_ROOT "remap_root"
#define SKIFF_REQ_MOUNT_HOME "mount_home"
#define SKIFF_REQ_ENTRYPOINT "entrypoint"
#define SKIFF_REQ_UNSHARE "unshare"               /* CLONE_NEW* flags, decimal */
#define SKIFF_REQ_COMMAND "command"               /* the step's argv[0], warmed */
#define SKIFF_REQ_STATE_KEY "state_key"           /* NODE.JOB.STEP */
#define SKIFF_REQ_SAVE "save"                     /* --container-save's absolute path */
#define SKIFF_REQ_SUFFIX "suffix"                 /* sweep: remove named containers ending in it */
#define SKIFF_REQ_TIMEOUT "timeout"               /* root's deadline for the helper, seconds */
#define SKIFF_REQ_IMPORT_TIMEOUT "import_timeout" /* ... and for an import, seconds */

#define SKIFF_PHASE_MAX 16
#define SKIFF_NOTICE_MAX 512
#define SKIFF_REQUEST_LIST_MAX 4096

/* A request as the helper reads it: strings point into the request's data,
 * which must outlive it. */
struct skiff_request {
    struct skiff_config cfg;
    const char *cwd, *node, *image, *name, *named, *name_mode, *importer, *workdir, *command, *state_key, *save,
        *suffix;
    bool temp, writable, remap_root, mount_home, entrypoint;
    int unshare;
    int timeout_s;        /* root's deadline for the helper (0: not given) */
    int import_timeout_s; /* the import's (0: not given) */
    const char *mounts[SKIFF_REQUEST_LIST_MAX + 1];
    size_t nmounts;
    const char *hook_env[SKIFF_REQUEST_LIST_MAX + 1];
    size_t nhook_env;
    const char *locale_env[64 + 1];
    size_t nlocale_env;
};

/* Parses a request over the defaults of skiff_config_load. Root wrote it,
 * but it is parsed as strictly as a reply: unknown keys and tags are
 * errors, lists are bounded. */
int skiff_request_parse(const char *data, size_t len, struct skiff_request *q, skiff_err *err);

struct skiff_reply {
    int status; /* 0, or -1 with phase and err */
    char phase[SKIFF_PHASE_MAX];
    skiff_err err;
    pid_t holder;
    bool attached; /* holder came as 'A': a running container, not the helper's child */
    char notice[SKIFF_NOTICE_MAX];
    double t_resolve_ms, t_start_ms;
    char workdir[SKIFF_PATH_MAX];
    char **env, **entrypoint, **cmd; /* NULL-terminated, owned */
};

/* Parses a reply. Anything unexpected (unknown tag, missing 'S' or 'Z',
 * a bad pid, too many records, data after 'Z') is an error. Messages and
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
