/* See fsutil.h. */
#include "fsutil.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int skiff_fmt_path(char *buf, size_t n, skiff_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n)
        return skiff_error(err, ENAMETOOLONG, "path too long");
    return 0;
}
