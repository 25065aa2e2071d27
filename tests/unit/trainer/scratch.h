/* A scratch directory for each test of a trainer suite: made under /tmp
 * before the test (Criterion's .init), removed with all it holds after it
 * (.fini). SCRATCH_SUITE(data, "skiff-train-test") declares `dir` and the
 * suite. */
#ifndef SKIFF_TEST_SCRATCH_H
#define SKIFF_TEST_SCRATCH_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "fdio.h"
#include "fsutil.h"

#define SCRATCH_SUITE(suite, prefix)                                                                                   \
    static char dir[64];                                                                                               \
    static void suite##_scratch_make(void)                                                                             \
    {                                                                                                                  \
        snprintf(dir, sizeof dir, "/tmp/" prefix "-XXXXXX");                                                           \
        cr_assert_not_null(mkdtemp(dir));                                                                              \
    }                                                                                                                  \
    static void suite##_scratch_remove(void)                                                                           \
    {                                                                                                                  \
        skiff_err e_;                                                                                                  \
        cr_assert_eq(skiff_remove_tree(dir, &e_), 0, "%s", e_.msg);                                                    \
    }                                                                                                                  \
    TestSuite(suite, .init = suite##_scratch_make, .fini = suite##_scratch_remove)

#endif
