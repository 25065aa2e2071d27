/* Parser for pyxis-style mount specs and fstab lines; see mountspec.h. Pure
 * string handling: no mount happens here (plan, then execute in mount.c). */
#include "mountspec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

void skiff_mount_free(struct skiff_mount *m)
{
    if (!m)
        return;
    free(m->src);
    free(m->dst);
    free(m->data);
    memset(m, 0, sizeof(*m));
}

static int append_data(struct skiff_mount *m, const char *opt, skiff_err *err)
{
    size_t old = m->data ? strlen(m->data) : 0;
    char *n = realloc(m->data, old + strlen(opt) + 2);
    if (!n)
        return skiff_error(err, ENOMEM, "mount option %s", opt);
    if (old)
        n[old++] = ',';
    strcpy(n + old, opt);
    m->data = n;
    return 0;
}

static const struct {
    const char *word;
    unsigned long type;
    bool rec;
} propagations[] = {
    {"private", MS_PRIVATE, false},       {"rprivate", MS_PRIVATE, true},       {"slave", MS_SLAVE, false},
    {"rslave", MS_SLAVE, true},           {"shared", MS_SHARED, false},         {"rshared", MS_SHARED, true},
    {"unbindable", MS_UNBINDABLE, false}, {"runbindable", MS_UNBINDABLE, true},
};

/* Applies one flag word. */
static int apply_flag(struct skiff_mount *m, const char *f, skiff_err *err)
{
    if (!*f)
        return 0;
    for (size_t i = 0; i < sizeof(propagations) / sizeof(propagations[0]); i++)
        if (!strcmp(f, propagations[i].word)) {
            m->propagation = propagations[i].type;
            m->propagation_rec = propagations[i].rec;
            return 0;
        }
    if (!strcmp(f, "ro"))
        m->readonly = true;
    else if (!strcmp(f, "rw"))
        m->readonly = false;
    else if (!strcmp(f, "rbind"))
        m->recursive = true;
    else if (!strcmp(f, "bind"))
        m->recursive = false;
    else if (!strcmp(f, "noexec"))
        m->noexec = true;
    else if (!strcmp(f, "exec"))
        m->noexec = false;
    else if (!strcmp(f, "nosuid") || !strcmp(f, "nodev") || !strcmp(f, "defaults") || !strcmp(f, "silent"))
        ; /* always on / default / nothing to say */
    else if (!strcmp(f, "nofail"))
        m->nofail = true;
    else if (!strcmp(f, "x-detach"))
        m->detach = true;
    else if (!strcmp(f, "suid") || !strcmp(f, "dev"))
        return skiff_error(err, 0, "mount flag '%s' is not allowed (every mount is nosuid,nodev)", f);
    else if (!strcmp(f, "x-create=dir"))
        m->create = SKIFF_CREATE_DIR;
    else if (!strcmp(f, "x-create=file"))
        m->create = SKIFF_CREATE_FILE;
    else if (!strcmp(f, "x-create=auto"))
        m->create = SKIFF_CREATE_AUTO;
    else if (!strcmp(f, "x-create=none"))
        m->create = SKIFF_CREATE_NONE;
    else if (!strncmp(f, "x-create=", 9))
        return skiff_error(err, 0, "unknown x-create value '%s' (use dir, file or auto)", f + 9);
    else if (m->tmpfs)
        /* the kernel knows tmpfs's options (size=, mode=, nr_inodes=,
         * huge=, uid=, gid=, ...) and names a bad one at mount time */
        return append_data(m, f, err);
    else
        return skiff_error(err, 0,
                           "unknown mount flag '%s' (accepted: ro, rw, bind, rbind, noexec, exec, private, "
                           "rprivate, slave, rslave, shared, rshared, unbindable, runbindable, "
                           "x-create=dir|file|auto, nofail)",
                           f);
    return 0;
}

static int apply_flags(struct skiff_mount *m, const char *flags, const char *seps, skiff_err *err)
{
    cleanup_free char *copy = strdup(flags);
    if (!copy)
        return skiff_error(err, ENOMEM, "mount flags");
    char *save = NULL;
    for (char *f = strtok_r(copy, seps, &save); f; f = strtok_r(NULL, seps, &save))
        if (apply_flag(m, f, err) < 0)
            return -1;
    return 0;
}

/* A source is a host path, opened as the user: absolute (the plugin makes
 * ./x absolute first). A destination may be relative (to the container's
 * root) and hold '..': where it lands is decided when it is mounted, inside
 * the root (rootfs.h). */
static int check_path(const char *what, const char *p, bool relative_ok, skiff_err *err)
{
    if (!*p)
        return skiff_error(err, 0, "empty %s path", what);
    if (p[0] != '/' && !relative_ok)
        return skiff_error(err, 0, "%s '%s' is not an absolute path", what, p);
    return 0;
}

int skiff_mountspec_parse(const char *spec, struct skiff_mount *m, skiff_err *err)
{
    memset(m, 0, sizeof(*m));
    if (!spec || !*spec)
        return skiff_error(err, 0, "empty mount spec (write SRC:DST[:FLAGS])");
    cleanup_free char *copy = strdup(spec);
    if (!copy)
        return skiff_error(err, ENOMEM, "mount spec");
    char *parts[4] = {0};
    int n = 0;
    char *s = copy;
    for (;;) {
        if (n == 3)
            goto too_many;
        parts[n++] = s;
        char *c = strchr(s, ':');
        if (!c)
            break;
        *c = '\0';
        s = c + 1;
    }
    if (!strcmp(parts[0], "tmpfs"))
        m->tmpfs = true;
    m->detach = !strcmp(parts[0], "umount");
    if ((m->tmpfs || m->detach) && n < 2) {
        skiff_error(err, 0, "%s needs a destination (%s:DST)", parts[0], parts[0]);
        goto fail;
    }
    if (n >= 2 && !*parts[1]) {
        skiff_error(err, 0, "empty destination (write SRC:DST, or SRC alone to mount it at the same path)");
        goto fail;
    }
    const char *dst = n >= 2 ? parts[1] : parts[0];
    bool bind = !m->tmpfs && !m->detach;
    if (bind && check_path("mount source", parts[0], false, err) < 0)
        goto fail;
    if (check_path("mount destination", dst, true, err) < 0)
        goto fail;
    if (dst[0] != '/' && dst[0] != '.') {
        /* pyxis's rule: "mnt" is a typo for "/mnt" as often as for "./mnt" */
        skiff_error(err, 0,
                    "mount destination '%s' is neither absolute nor relative: write /%s, or ./%s for a path "
                    "from the container's root",
                    dst, dst, dst);
        goto fail;
    }
    /* pyxis gives every --container-mounts entry "rbind" and enroot every
     * -m: the source's submounts come along unless the flags say "bind" (a
     * non-recursive bind of a source with submounts is refused in a user
     * namespace anyway: mount.c says so). */
    m->recursive = bind;
    if (n == 3 && apply_flags(m, parts[2], "+,", err) < 0)
        goto fail;
    if (m->detach && (m->tmpfs || m->readonly || m->recursive || m->data)) {
        skiff_error(err, 0, "umount:DST takes no mount flags but nofail");
        goto fail;
    }
    m->src = bind ? strdup(parts[0]) : NULL;
    m->dst = strdup(dst);
    if ((bind && !m->src) || !m->dst) {
        skiff_error(err, ENOMEM, "mount spec");
        goto fail;
    }
    return 0;
too_many:
    skiff_error(err, 0, "too many ':' fields (write SRC:DST[:FLAGS])");
fail:
    skiff_mount_free(m);
    return skiff_err_wrap(err, "mount spec '%s'", spec);
}

int skiff_mountspec_parse_fstab(const char *line, struct skiff_mount *m, skiff_err *err)
{
    memset(m, 0, sizeof(*m));
    cleanup_free char *copy = strdup(line);
    if (!copy)
        return skiff_error(err, ENOMEM, "fstab line");
    char *f[6] = {0};
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, " \t\r\n", &save); t && n < 6; t = strtok_r(NULL, " \t\r\n", &save))
        f[n++] = t;
    if (n == 0 || f[0][0] == '#')
        return 0;
    if (n < 2) {
        skiff_error(err, 0, "expected 'SRC DST [TYPE [OPTIONS]]'");
        goto fail;
    }
    /* enroot's short forms: "tmpfs /tmp", "/x /x" (a bind) */
    const char *type = n >= 3 ? f[2] : !strcmp(f[0], "tmpfs") ? "tmpfs" : "none";
    if (!strcmp(type, "tmpfs"))
        m->tmpfs = true;
    else if (strcmp(type, "none") && strcmp(type, "bind")) {
        skiff_error(err, 0, "unsupported type '%s' (use none/bind or tmpfs)", type);
        goto fail;
    }
    if (n >= 4 && apply_flags(m, f[3], ",", err) < 0)
        goto fail;
    bool bind = !m->tmpfs && !m->detach;
    if (bind && check_path("mount source", f[0], false, err) < 0)
        goto fail;
    if (check_path("mount destination", f[1], true, err) < 0)
        goto fail;
    m->src = bind ? strdup(f[0]) : NULL;
    m->dst = strdup(f[1]);
    if ((bind && !m->src) || !m->dst) {
        skiff_error(err, ENOMEM, "fstab line");
        goto fail;
    }
    return 0;
fail:
    skiff_mount_free(m);
    return skiff_err_wrap(err, "mounts line '%s'", line);
}
