/* Shared by skiff's libFuzzer targets (tests/fuzz/fuzz_*.c; doc/fuzzing.md):
 * input handling, property checks that abort with a reason, and a private
 * scratch directory on a tmpfs for parsers that read files. */
#ifndef SKIFF_FUZZLIB_H
#define SKIFF_FUZZLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property that does not hold: prints the target's reason and aborts, so
 * libFuzzer keeps the input as a crash artifact. */
#define FUZZ_CHECK(cond, ...)                                                                                          \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                                         \
    } while (0)
__attribute__((noreturn, format(printf, 4, 5))) void fuzz_fail(const char *file, int line, const char *cond,
                                                               const char *fmt, ...);

/* A failed call (rc < 0) must say why: err->msg is not empty. With
 * FUZZ_VERBOSE set in the environment, every call's outcome is printed
 * (for looking at one input: FUZZ_VERBOSE=1 build/fuzz/fuzz_NAME FILE). */
void fuzz_check_failure(int rc, const skiff_err *err, const char *what);

/* data[0..size) as a NUL-terminated string (malloc'ed; NULs in the input
 * stay, so the string may end early). */
char *fuzz_str(const uint8_t *data, size_t size);

/* Splits data[0..size) at each occurrence of sep into at most max parts
 * (the last part keeps the rest). Returns the count; parts point into data. */
struct fuzz_part {
    const uint8_t *p;
    size_t len;
};
size_t fuzz_split(const uint8_t *data, size_t size, const char *sep, struct fuzz_part *parts, size_t max);

/* The target's scratch directory (created on first use under $FUZZ_SCRATCH,
 * else /dev/shm or /tmp; removed at exit): parsers that read files get theirs here. */
const char *fuzz_dir(void);

/* Writes data to fuzz_dir()/name (replacing it); returns the full path in a
 * static buffer of the slot (0..3). */
const char *fuzz_write(int slot, const char *name, const void *data, size_t len);

/* Removes everything under path (not path itself). */
void fuzz_empty_dir(const char *path);

/* Whether s is one of the NULL-terminated list. */
bool fuzz_in(const char *s, const char *const *list);

#endif
