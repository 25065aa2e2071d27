/* A lazy image's layer index (runtime/lib/image/lazyload.c) and what is
 * built from it: the tree the layers merge into (lazytree.c) and the
 * metadata-only squashfs skeleton (lazyskel.c). An index file sits in the
 * user's cache, where anything of the user's can rewrite it between the
 * index pass and a start, so loading it is parsing input.
 * Input: the bytes of an index file (the seeds are real ones, of the
 * busybox fixture's layer).
 * Properties: a failure says why; a loaded index keeps its own bounds
 * (spans in order inside the blob and the tar, each span's checked range
 * — widened to SHA-256's 64-byte blocks — inside the blob around it, the
 * digest's bytes those of its text, each file's data inside the tar, no
 * set-id file, paths normalised: relative, no '.' or '..' component, no '//');
 * applied onto a tree, as root and as a user, it is refused with a reason
 * or gives a tree the skeleton writer turns into a squashfs, or refuses
 * with a reason. */
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "fuzzlib.h"
#include "layer_int.h"
#include "lazy_int.h"

static bool normalised(const char *p)
{
    if (!p[0] || p[0] == '/')
        return false;
    for (const char *c = p; *c;) {
        const char *e = strchrnul(c, '/');
        size_t n = (size_t)(e - c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c = *e ? e + 1 : e;
    }
    return true;
}

static void check_index(const struct lz_index *ix)
{
    /* (a span that starts inside a byte shares it with the one before) */
    uint64_t cprev = 0, uprev = 0;
    for (uint32_t s = 0; s < ix->nspans; s++) {
        const struct lz_span *sp = &ix->spans[s];
        FUZZ_CHECK(sp->cstart >= cprev && sp->cstart < sp->cend && sp->cend <= ix->csize,
                   "span %u: compressed [%llu, %llu) of %llu", s, (unsigned long long)sp->cstart,
                   (unsigned long long)sp->cend, (unsigned long long)ix->csize);
        FUZZ_CHECK(sp->ustart == uprev && sp->ustart <= sp->uend, "span %u: uncompressed [%llu, %llu) after %llu", s,
                   (unsigned long long)sp->ustart, (unsigned long long)sp->uend, (unsigned long long)uprev);
        uint64_t from = lz_span_wstart(sp), to = lz_span_wend(sp, ix->csize);
        FUZZ_CHECK(from % 64 == 0 && from <= sp->cstart && sp->cend <= to && to <= ix->csize &&
                       (to % 64 == 0 || to == ix->csize),
                   "span %u: checked as [%llu, %llu) of %llu", s, (unsigned long long)from, (unsigned long long)to,
                   (unsigned long long)ix->csize);
        cprev = sp->cstart;
        uprev = sp->uend;
    }
    char text[SKIFF_DIGEST_LEN];
    skiff_digest_text(ix->sha, text);
    FUZZ_CHECK(!strcmp(text, ix->digest), "digest %s read as %s", ix->digest, text);
    FUZZ_CHECK(ix->nspans > 0 && uprev == ix->usize, "the spans end at %llu of %llu", (unsigned long long)uprev,
               (unsigned long long)ix->usize);
    for (uint32_t i = 0; i < ix->nentries; i++) {
        const struct lz_entry *e = &ix->entries[i];
        FUZZ_CHECK(e->path && normalised(e->path), "entry %u: path '%s' not normalised", i, e->path ? e->path : "");
        FUZZ_CHECK(e->target && e->raw, "entry %u: no target or raw name", i);
        FUZZ_CHECK((e->kind != SKIFF_ENTRY_REG && e->kind != SKIFF_ENTRY_FIFO) || !(e->mode & (S_ISUID | S_ISGID)),
                   "entry %u (%s): a set-id file, mode %o", i, e->path, (unsigned)e->mode);
        FUZZ_CHECK(e->kind != SKIFF_ENTRY_REG || (e->off <= ix->usize && e->size <= ix->usize - e->off),
                   "file %u (%s): data [%llu, +%llu) of %llu", i, e->path, (unsigned long long)e->off,
                   (unsigned long long)e->size, (unsigned long long)ix->usize);
    }
}

static void build(const struct lz_index *ix, bool as_root)
{
    struct lz_tree *t = lz_tree_new(as_root, 022);
    FUZZ_CHECK(t != NULL, "no tree");
    skiff_err err;
    skiff_err_clear(&err);
    int rc = lz_tree_apply(t, ix, 0, &err);
    fuzz_check_failure(rc, &err, "lz_tree_apply");
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/root.sqsh", fuzz_dir());
        const uint64_t base[1] = {0};
        skiff_err_clear(&err);
        rc = lz_skel_write(t, base, 1, path, &err);
        fuzz_check_failure(rc, &err, "lz_skel_write");
        unlink(path);
    }
    lz_tree_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lz_index ix;
    skiff_err err;
    skiff_err_clear(&err);
    int rc = lz_index_load_mem(data, size, LZ_LOAD_ENTRIES, &ix, &err);
    fuzz_check_failure(rc, &err, "lz_index_load_mem");
    if (rc == 0) {
        check_index(&ix);
        build(&ix, true);
        build(&ix, false);
    }
    lz_index_free(&ix);
    return 0;
}
