/* The filesystem toolkit every part shares: paths that are never cut
 * short, directories made with their parents, trees removed without
 * following symlinks, bounded whole-file reads. libc only. (Whole-or-nothing
 * writes: atomicfile.h; fd I/O: fdio.h.) */
#ifndef SKIFF_FSUTIL_H
#define SKIFF_FSUTIL_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* snprintf into buf (n bytes) that fails with ENAMETOOLONG instead of
 * cutting the result: a path must never be truncated. */
int skiff_fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif

#endif
