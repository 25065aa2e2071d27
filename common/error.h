/* skiff error contract: see doc/error_handling.md.
 *
 * A function that can fail returns int: >= 0 on success, -1 on failure, and on
 * failure fills the caller's skiff_err with an errno value and a message.
 * Callers add context with skiff_err_wrap() and pass the -1 up. */
#ifndef SKIFF_ERROR_H
#define SKIFF_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKIFF_ERR_MSG_MAX 1024

typedef struct skiff_err {
    int code;                    /* errno value, or 0 when the cause has none */
    char msg[SKIFF_ERR_MSG_MAX]; /* "context: context: cause: strerror" */
} skiff_err;

/* Clears err. Safe on NULL. */
void skiff_err_clear(skiff_err *err);

/* Sets err to "FMT: strerror(errnum)" (or "FMT" when errnum is 0) and
 * returns -1, so a failure path is `return skiff_error(err, errno, "...")`. */
int skiff_error(skiff_err *err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message with "FMT: " and returns -1; the code stays. */
int skiff_err_wrap(skiff_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Free-on-scope-exit helpers, crun style: a variable declared with one of these
 * is released when it goes out of scope; "steal" it (set to NULL / -1) to keep it. */
void skiff_freep(void *p);
void skiff_closep(const int *fd);
#define cleanup_free __attribute__((cleanup(skiff_freep)))
#define cleanup_close __attribute__((cleanup(skiff_closep)))

#ifdef __cplusplus
}
#endif

#endif
