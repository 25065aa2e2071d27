/* The system-call filter every container command runs under (libseccomp).
 *
 * A container's user namespace maps one uid and one gid: the user's own, or
 * 0 with remap-root. Package managers and installers change ids (apt drops
 * to _apt: setgroups, setresgid, setresuid) and file owners (dpkg, chown
 * in maintainer scripts) to ids the namespace does not map, and the kernel
 * refuses those calls. Like enroot, skiff installs a filter in every
 * container (with and without remap-root) under which such calls return
 * success and do nothing:
 *   setuid setgid setreuid setregid setresuid setresgid   an id argument is
 *       not the mapped id (-1, "unchanged", counts as not mapped: in a
 *       namespace of one id the call changes nothing either way)
 *   setgroups                                             always (the
 *       namespace denies it: setgroups is "deny")
 *   chown lchown fchown fchownat                          the uid or gid
 *       argument is not the mapped one (so `chown root:root f` under
 *       remap-root is a real call; `chown _apt f` or `chgrp 42 f` are not)
 *   setfsuid setfsgid                                     remap-root only:
 *       any id but 0 (the call then reports 0, the fs id it keeps); without
 *       remap-root the kernel's own answer already changes nothing
 * The filter only turns calls into no-ops: it never performs anything the
 * caller could not, so it grants nothing on the host (doc/SECURITY.md).
 * libseccomp cannot say "neither M nor -1" in one rule (one comparison
 * per argument, and no ALLOW rule may overlap an ERRNO rule), hence -1
 * counting as unmapped. Other ABIs (i386, x32) of the same process are not
 * filtered. */
#ifndef SKIFF_IDFILTER_H
#define SKIFF_IDFILTER_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* A compiled filter (classic BPF), ready to load without allocating. */
struct skiff_idfilter_prog {
    void *insns; /* struct sock_filter[len] */
    unsigned short len;
};

/* Compiles the filter for a namespace that maps uid and gid (as seen from
 * inside it: 0 with remap-root). Free with skiff_idfilter_free. */
int skiff_idfilter_build(uid_t uid, gid_t gid, struct skiff_idfilter_prog *p, skiff_err *err);
void skiff_idfilter_free(struct skiff_idfilter_prog *p);

/* Loads p into the calling thread (inherited by its children and across
 * exec). Needs no_new_privs or CAP_SYS_ADMIN in the caller's user
 * namespace. System calls only: safe in a vfork-like child. 0 or -errno. */
int skiff_idfilter_load(const struct skiff_idfilter_prog *p);

/* build (for the caller's current uid and gid) + load, with errors. */
int skiff_idfilter_install(skiff_err *err);

#endif
