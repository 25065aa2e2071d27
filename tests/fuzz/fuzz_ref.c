/* Image references (runtime/lib/image/ref.c): what users pass to --container-image
 * and `skiff import`. Properties: a failure says why; a parsed docker ref has
 * a valid registry, repository, tag and digest, and written back as
 * docker://[USER@]REGISTRY#REPOSITORY[:TAG][@DIGEST] parses to the same
 * fields; its canonical form parses back to the same fields whenever the
 * registry is recognisable as one (docker's rule); path refs round-trip
 * through their canonical form; classify agrees with parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzlib.h"
#include "ref.h"

static void same_ref(const struct skiff_ref *a, const struct skiff_ref *b, const char *via)
{
    FUZZ_CHECK(a->kind == b->kind, "kind differs after %s", via);
    FUZZ_CHECK(!strcmp(a->registry, b->registry), "registry '%s' became '%s' via %s", a->registry, b->registry, via);
    FUZZ_CHECK(!strcmp(a->repository, b->repository), "repository '%s' became '%s' via %s", a->repository,
               b->repository, via);
    FUZZ_CHECK(!strcmp(a->tag, b->tag), "tag '%s' became '%s' via %s", a->tag, b->tag, via);
    FUZZ_CHECK(!strcmp(a->digest, b->digest), "digest '%s' became '%s' via %s", a->digest, b->digest, via);
    FUZZ_CHECK(!strcmp(a->path, b->path), "path '%s' became '%s' via %s", a->path, b->path, via);
}

static void check_docker(const char *s, const struct skiff_ref *ref)
{
    FUZZ_CHECK(ref->registry[0] && ref->repository[0], "'%s': empty registry or repository", s);
    FUZZ_CHECK(ref->tag[0] || ref->digest[0], "'%s': neither tag nor digest", s);
    FUZZ_CHECK(!ref->digest[0] || skiff_ref_valid_digest(ref->digest), "'%s': bad digest kept", s);
    FUZZ_CHECK(!strchr(ref->repository, ':') && !strchr(ref->repository, '@'), "'%s': repository '%s'", s,
               ref->repository);
    (void)skiff_ref_endpoint(ref);
    (void)skiff_ref_is_loopback(ref->registry);

    /* the explicit form: every field where the user could have put it */
    char again[2048];
    snprintf(again, sizeof(again), "docker://%s%s%s#%s%s%s%s%s", ref->user, ref->user[0] ? "@" : "", ref->registry,
             ref->repository, ref->tag[0] ? ":" : "", ref->tag, ref->digest[0] ? "@" : "", ref->digest);
    struct skiff_ref b;
    skiff_err err = {0};
    int rc = skiff_ref_parse(again, NULL, &b, &err);
    FUZZ_CHECK(rc == 0, "'%s' parsed, its explicit form '%s' did not: %s", s, again, err.msg);
    same_ref(ref, &b, again);
    FUZZ_CHECK(!strcmp(ref->user, b.user), "user '%s' became '%s'", ref->user, b.user);

    char canon[2048];
    rc = skiff_ref_canonical(ref, canon, sizeof(canon), &err);
    FUZZ_CHECK(rc == 0, "canonical of '%s' failed: %s", s, err.msg);
    /* docker's rule makes REGISTRY/... a registry only with a '.', a ':' or
     * "localhost" in it; other registries came from '#' and need it back */
    if (strpbrk(ref->registry, ".:") || !strcmp(ref->registry, "localhost")) {
        snprintf(again, sizeof(again), "docker://%s", canon);
        rc = skiff_ref_parse(again, NULL, &b, &err);
        FUZZ_CHECK(rc == 0, "canonical '%s' of '%s' does not parse: %s", canon, s, err.msg);
        same_ref(ref, &b, again);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = fuzz_str(data, size);
    struct skiff_ref ref;
    skiff_err err = {0};
    int rc = skiff_ref_parse(s, size & 1 ? "reg.example:5000" : NULL, &ref, &err);
    fuzz_check_failure(rc, &err, "skiff_ref_parse");
    if (rc == 0) {
        if (ref.kind == SKIFF_REF_DOCKER) {
            FUZZ_CHECK(!strncmp(s, "docker://", 9), "'%s' is no docker:// ref", s);
            check_docker(s, &ref);
        } else {
            FUZZ_CHECK(ref.path[0], "'%s': empty path", s);
            char canon[8192];
            rc = skiff_ref_canonical(&ref, canon, sizeof(canon), &err);
            FUZZ_CHECK(rc == 0, "canonical of '%s' failed: %s", s, err.msg);
            struct skiff_ref b;
            rc = skiff_ref_parse(canon, NULL, &b, &err);
            FUZZ_CHECK(rc == 0, "canonical '%s' of '%s' does not parse: %s", canon, s, err.msg);
            same_ref(&ref, &b, canon);
        }
    }

    /* as a --container-image argument */
    enum skiff_ref_class c = skiff_ref_classify(s);
    if (c == SKIFF_ARG_BARE) {
        size_t n = strlen(s) + 16;
        char *uri = malloc(n);
        if (!uri)
            abort();
        snprintf(uri, n, "docker://%s", s);
        rc = skiff_ref_parse(uri, NULL, &ref, &err);
        FUZZ_CHECK(rc == 0, "'%s' classified as an image name, but '%s' does not parse: %s", s, uri, err.msg);
        free(uri);
    } else if (c == SKIFF_ARG_URI) {
        FUZZ_CHECK(strchr(s, ':'), "'%s' classified as a URI", s);
    }
    (void)skiff_ref_is_loopback(s);
    free(s);
    return 0;
}
