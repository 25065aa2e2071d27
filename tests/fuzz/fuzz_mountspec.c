/* Mount specifications (runtime/lib/container/mountspec.c): --container-mounts and
 * `skiff start -m` entries (SRC:DST[:FLAGS]) and the lines of a hook's
 * mounts file (SRC DST TYPE OPTIONS). The first byte picks the form.
 * Properties: a failure says why and leaves nothing allocated; an accepted
 * mount has an absolute source exactly when it is a bind and a non-empty
 * destination (relative and '..' are allowed: they are resolved inside the
 * root when mounted, rootfs.h and mount.h), tmpfs data only of words that are not
 * flags (those are the kernel's to judge), a propagation type only with
 * its known values; written back in the same form it parses to the same
 * mount; a blank or comment line yields no mount. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "fuzzlib.h"
#include "mountspec.h"

static const char *const flag_words[] = {
    "ro",       "rw",      "bind",     "rbind", "noexec", "exec",   "nosuid",  "nodev",      "suid",        "dev",
    "defaults", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable", NULL};

/* The word of a propagation type, "" for none. */
static const char *propagation_word(const struct skiff_mount *m)
{
    switch (m->propagation) {
    case MS_PRIVATE:
        return m->propagation_rec ? "rprivate" : "private";
    case MS_SLAVE:
        return m->propagation_rec ? "rslave" : "slave";
    case MS_SHARED:
        return m->propagation_rec ? "rshared" : "shared";
    case MS_UNBINDABLE:
        return m->propagation_rec ? "runbindable" : "unbindable";
    default:
        return "";
    }
}

static const char *create_word(enum skiff_mount_create c)
{
    switch (c) {
    case SKIFF_CREATE_DIR:
        return "x-create=dir";
    case SKIFF_CREATE_FILE:
        return "x-create=file";
    case SKIFF_CREATE_NONE:
        return "x-create=none";
    case SKIFF_CREATE_AUTO:
        break;
    }
    return "x-create=auto";
}

/* The mount's flags as words joined by sep; tmpfs data (comma-separated
 * already) follows after a ',', a separator in both forms. */
static void flags_of(const struct skiff_mount *m, char sep, char *out, size_t n)
{
    const char *prop = propagation_word(m);
    snprintf(out, n, "%s%c%s%c%s%s%s%s%s%s%s", m->readonly ? "ro" : "rw", sep, m->recursive ? "rbind" : "bind", sep,
             create_word(m->create), m->noexec ? (sep == '+' ? "+" : ",") : "", m->noexec ? "noexec" : "",
             *prop ? (sep == '+' ? "+" : ",") : "", prop, m->data ? "," : "", m->data ? m->data : "");
}

static void same(const struct skiff_mount *a, const struct skiff_mount *b, const char *in, const char *again)
{
    FUZZ_CHECK(a->tmpfs == b->tmpfs && a->readonly == b->readonly && a->recursive == b->recursive &&
                   a->noexec == b->noexec && a->create == b->create && a->propagation == b->propagation &&
                   a->propagation_rec == b->propagation_rec,
               "'%s' and its rewrite '%s' differ in flags", in, again);
    FUZZ_CHECK(!a->src == !b->src && (!a->src || !strcmp(a->src, b->src)), "'%s' -> '%s': source differs", in, again);
    FUZZ_CHECK(!strcmp(a->dst, b->dst), "'%s' -> '%s': destination differs", in, again);
    FUZZ_CHECK(!a->data == !b->data && (!a->data || !strcmp(a->data, b->data)), "'%s' -> '%s': data differs", in,
               again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    bool fstab = data[0] & 1;
    char *s = fuzz_str(data + 1, size - 1);
    struct skiff_mount m;
    skiff_err err = {0};
    int rc = fstab ? skiff_mountspec_parse_fstab(s, &m, &err) : skiff_mountspec_parse(s, &m, &err);
    fuzz_check_failure(rc, &err, fstab ? "skiff_mountspec_parse_fstab" : "skiff_mountspec_parse");
    if (rc < 0) {
        static const struct skiff_mount zero;
        FUZZ_CHECK(!memcmp(&m, &zero, sizeof(m)), "'%s' failed but left the mount filled", s);
        free(s);
        return 0;
    }
    if (fstab && !m.dst) { /* blank or comment */
        char *t = s + strspn(s, " \t\r\n");
        FUZZ_CHECK(*t == '\0' || *t == '#', "'%s' gave no mount and no error", s);
        FUZZ_CHECK(!m.src && !m.data, "'%s': no mount but fields set", s);
        free(s);
        return 0;
    }
    FUZZ_CHECK(m.dst && m.dst[0], "'%s': empty destination", s);
    FUZZ_CHECK(m.propagation == 0 || m.propagation == MS_PRIVATE || m.propagation == MS_SLAVE ||
                   m.propagation == MS_SHARED || m.propagation == MS_UNBINDABLE,
               "'%s': propagation %#lx", s, m.propagation);
    FUZZ_CHECK(m.propagation || !m.propagation_rec, "'%s': recursive without a propagation type", s);
    if (m.detach) { /* umount:DST, enroot's x-detach: nothing is mounted */
        FUZZ_CHECK(!m.src && !m.data && !m.tmpfs, "'%s': an unmount with a source or data", s);
    } else if (m.tmpfs) {
        FUZZ_CHECK(!m.src, "'%s': tmpfs with a source", s);
    } else {
        FUZZ_CHECK(m.src && m.src[0] == '/', "'%s': source '%s' is not absolute", s, m.src ? m.src : "(null)");
        FUZZ_CHECK(!m.data, "'%s': bind mount with tmpfs data '%s'", s, m.data);
    }
    if (m.data) {
        char *copy = strdup(m.data), *save = NULL;
        for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save))
            FUZZ_CHECK(!fuzz_in(o, flag_words) && strncmp(o, "x-create=", 9), "'%s': flag '%s' in the tmpfs data", s,
                       o);
        free(copy);
    }

    /* written back in its own form */
    size_t n = 2 * strlen(s) + 1024;
    char *again = malloc(n), *flags = malloc(n);
    if (!again || !flags)
        abort();
    if (m.detach) {
        snprintf(again, n, fstab ? "none %s none x-detach 0 0" : "umount:%s", m.dst);
    } else if (fstab) {
        flags_of(&m, ',', flags, n);
        snprintf(again, n, "%s %s %s %s 0 0", m.tmpfs ? "tmpfs" : m.src, m.dst, m.tmpfs ? "tmpfs" : "none", flags);
    } else {
        flags_of(&m, '+', flags, n);
        snprintf(again, n, "%s:%s:%s", m.tmpfs ? "tmpfs" : m.src, m.dst, flags);
    }
    struct skiff_mount b;
    rc = fstab ? skiff_mountspec_parse_fstab(again, &b, &err) : skiff_mountspec_parse(again, &b, &err);
    FUZZ_CHECK(rc == 0, "'%s' parsed, its rewrite '%s' did not: %s", s, again, err.msg);
    same(&m, &b, s, again);
    FUZZ_CHECK(m.detach == b.detach, "'%s' -> '%s': unmount or not differs", s, again);
    skiff_mount_free(&b);
    skiff_mount_free(&m);
    free(again);
    free(flags);
    free(s);
    return 0;
}
