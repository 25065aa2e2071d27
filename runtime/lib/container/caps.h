/* Dropping every capability before exec, in the documented order:
 * bounding set -> ids (already final when this is called) -> capset
 * (effective/permitted/inheritable empty) -> ambient -> no_new_privs. */
#ifndef SKIFF_CAPS_H
#define SKIFF_CAPS_H

#include "error.h"

int skiff_caps_drop_all(skiff_err *err);

/* For a process that has just joined a container's user namespace (setns
 * gave it every capability there): keeps those capabilities across exec,
 * also for a uid other than 0 (inheritable = permitted, each raised as
 * ambient), then sets no_new_privs. They are the namespace's: the kernel
 * honours them only for what that namespace owns (the container's mounts,
 * its own net/ipc/uts namespaces, files of the one mapped id), never for
 * the host's (doc/SECURITY.md). */
int skiff_caps_keep_userns(skiff_err *err);

#endif
