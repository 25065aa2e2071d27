/* ref: parse and classify image references. Pure string work, no I/O, so
 * every rule is unit-tested (tests/unit/runtime/test_ref.c).
 *
 * docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST] is enroot's syntax;
 * like docker, a first component with a '.' or ':' (or "localhost") also names
 * the registry when no '#' is given (docker://nvcr.io/nvidia/cuda:12). */
#ifndef SKIFF_REF_H
#define SKIFF_REF_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

enum skiff_ref_kind {
    SKIFF_REF_DOCKER,
    SKIFF_REF_DOCKER_ARCHIVE,
    SKIFF_REF_OCI,
    SKIFF_REF_OCI_ARCHIVE,
    SKIFF_REF_DIR,
};

struct skiff_ref {
    enum skiff_ref_kind kind;
    /* docker:// */
    char user[128];       /* "" when none */
    char registry[256];   /* host[:port] as the user wrote it (or the default) */
    char repository[512]; /* path on the registry, "library/" added for Docker Hub */
    char image[640];      /* IMAGE[:TAG|@DIGEST] as written, for the default file name */
    char tag[136];        /* "latest" when neither tag nor digest is given */
    char digest[80];      /* "sha256:<64 hex>" or "" */
    /* archives, oci:, dir: */
    char path[4096];
};

/* Parses a URI (with its scheme). default_registry is used for docker:// refs
 * that name none. */
int skiff_ref_parse(const char *uri, const char *default_registry, struct skiff_ref *ref, skiff_err *err);

/* The host to connect to: Docker Hub's names map to registry-1.docker.io. */
const char *skiff_ref_endpoint(const struct skiff_ref *ref);

/* True for 127.0.0.0/8, ::1 and localhost (with or without a port). */
bool skiff_ref_is_loopback(const char *registry);

/* REGISTRY/REPOSITORY[:TAG][@DIGEST] (docker) or SCHEME:PATH[:TAG]. */
int skiff_ref_canonical(const struct skiff_ref *ref, char *out, size_t n, skiff_err *err);

/* True for a well-formed "sha256:<64 lowercase hex>". */
bool skiff_ref_valid_digest(const char *digest);

/* What a --container-image argument is. */
enum skiff_ref_class {
    SKIFF_ARG_PATH,      /* starts with '/', './' or '../': a squashfs file */
    SKIFF_ARG_URI,       /* has a known scheme */
    SKIFF_ARG_BARE,      /* a docker reference without scheme (pyxis: ubuntu:22.04) */
    SKIFF_ARG_SQSH_NAME, /* foo.sqsh without a '/': a file name written wrong */
    SKIFF_ARG_INVALID,
};
enum skiff_ref_class skiff_ref_classify(const char *arg);

#endif
