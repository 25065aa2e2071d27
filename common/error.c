#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void skiff_err_clear(skiff_err *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

int skiff_error(skiff_err *err, int errnum, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    size_t len = strlen(err->msg);
    if (errnum != 0 && len < sizeof(err->msg) - 1) {
        int w = snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", strerror(errnum));
        if (w < 0)
            err->msg[len] = '\0';
    }
    err->code = errnum;
    return -1;
}

int skiff_err_wrap(skiff_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[SKIFF_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    char old[SKIFF_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof(old));
    /* A message longer than the buffer is cut at its end: the outer context
     * and the start of the cause are what a reader needs first. */
    int w = old[0] ? snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old)
                   : snprintf(err->msg, sizeof(err->msg), "%s", prefix);
    if (w < 0)
        err->msg[0] = '\0';
    return -1;
}

void skiff_freep(void *p)
{
    free(*(void **)p);
}

void skiff_closep(const int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
