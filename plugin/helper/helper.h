/* The parts of skiff-helper and skiff-helper-full, the plugin's user-side
 * half (plugin/README.md): spank_skiff.so (root) execs them as the job's
 * user with a closed fd set and a clean environment, and they do
 * everything that touches the user's files and images (the channels:
 * ../proto.h). Two programs over the same sources, each with a small main
 * file: skiff-helper (skiff-helper.c) links only what starting a container
 * needs, 11 shared objects instead of 49 (~6 ms less to exec, and it runs
 * on every step); skiff-helper-full (skiff-helper-full.c) links the
 * importers too and serves every other verb, including `resolve`, which
 * the lean one runs for an image reference.
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
 *            the cache, an import, or importer= (run by the lean start);
 *            or a lazy image's directory (image_mode, lazy.h)
 *   fetch DIR (full only) a lazy image's span fetcher (run by the start,
 *            before the container's namespaces; its channel to the FUSE
 *            server on fd 6)
 *
 * They are not commands for people: they refuse to run without their
 * channels. */
#ifndef SKIFF_PLUGIN_HELPER_H
#define SKIFF_PLUGIN_HELPER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "error.h"
#include "request.h"

/* What makes one program of the two. */
struct skiff_helper_program {
    /* the lean one keeps the request's fd open: skiff-helper-full resolve
     * reads it again */
    bool keep_request;
    /* The squashfs path of q->image in out (n bytes): an image reference,
     * or anything through importer=. */
    int (*resolve_image)(const struct skiff_config *cfg, const struct skiff_start_request *q, char *out, size_t n,
                         skiff_err *err);
    /* Every verb but start: the program's exit status. resolve answers on
     * stdout and stderr, the others on the reply pipe (skiff_helper_answer). */
    int (*verb)(const char *verb, const struct skiff_config *cfg, const struct skiff_start_request *q);
    /* `fetch DIR`: the span fetcher of the lazy image at dir (lazy.h), or
     * NULL; the program's exit status. */
    int (*fetch)(const struct skiff_config *cfg, const char *dir);
};

/* The main of both programs: the channels, signals, the request, the
 * working directory, then start or p->verb. */
int skiff_helper_main(int argc, char **argv, const struct skiff_helper_program *p);

/* Answers a verb that has nothing to report but success or failure (phase:
 * proto.h's skiff_reply_phases); the program's exit status. */
int skiff_helper_answer(int rc, const char *phase, const skiff_err *e);

#endif
