/* Container start hooks: the executables of the hook directories, run in
 * lexical order of their names (the directories merged; a name found in two
 * runs from the earlier directory first), each with an argv of just its
 * path, an explicit environment and a timeout. ABI: doc/hooks.md. */
#ifndef SKIFF_HOOKRUN_H
#define SKIFF_HOOKRUN_H

#include "error.h"

/* dirs: NULL-terminated; NULL/empty entries and missing directories are
 * skipped. With suffix, only names ending in it (and longer: enroot's
 * hooks.d, *.sh). A hook that fails (non-zero exit, signal, timeout) stops
 * the run: err names the hook, how it failed and the end of its stderr. */
int skiff_hooks_run(const char *const *dirs, const char *suffix, const char *const *envp, int timeout_ms,
                    skiff_err *err);

#endif
