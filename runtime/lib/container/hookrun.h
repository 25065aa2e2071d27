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
 * the run: err names the hook, how it failed and the end of its stderr. What
 * a hook that succeeded wrote on stderr is a warning for the user: printed on
 * stderr as "skiff: hook NAME: TEXT" and, when notice is not NULL, added to
 * it (n bytes, one line: "hook NAME: TEXT", lines joined with "; "), so a
 * front end whose stderr nobody reads (the plugin's helper) can pass it on. */
int skiff_hooks_run(const char *const *dirs, const char *suffix, const char *const *envp, int timeout_ms, char *notice,
                    size_t n, skiff_err *err);

#endif
