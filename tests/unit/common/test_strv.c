/* String lists and the monotonic clock (common/strv.c, common/clock.c). */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "strv.h"

Test(strv, push_keeps_the_list_terminated)
{
    skiff_err err;
    char **v = NULL;
    cr_assert_eq(skiff_strv_len(v), 0);
    cr_assert_eq(skiff_strv_push(&v, "a", &err), 0);
    cr_assert_eq(skiff_strv_push(&v, "b", &err), 0);
    cr_assert_eq(skiff_strv_len(v), 2);
    cr_assert_str_eq(v[0], "a");
    cr_assert_str_eq(v[1], "b");
    cr_assert_null(v[2]);
    skiff_strv_free(v);
    skiff_strv_free(NULL);
}

Test(strv, push_copies)
{
    skiff_err err;
    char s[] = "x", **v = NULL;
    cr_assert_eq(skiff_strv_push(&v, s, &err), 0);
    s[0] = 'y';
    cr_assert_str_eq(v[0], "x");
    skiff_strv_free(v);
}

Test(strv, contains_and_dup)
{
    skiff_err err;
    char **v = NULL;
    cr_assert_not(skiff_strv_contains(v, "a"));
    skiff_strv_push(&v, "a", &err);
    skiff_strv_push(&v, "bc", &err);
    cr_assert(skiff_strv_contains(v, "bc"));
    cr_assert_not(skiff_strv_contains(v, "b"));
    char **d = skiff_strv_dup(v, &err);
    cr_assert_not_null(d);
    cr_assert_eq(skiff_strv_len(d), 2);
    cr_assert_neq(d[0], v[0]);
    cr_assert_str_eq(d[1], "bc");
    skiff_strv_free(d);
    skiff_strv_free(v);
    /* an empty list copies to an empty list, not to NULL */
    d = skiff_strv_dup(NULL, &err);
    cr_assert_not_null(d);
    cr_assert_null(d[0]);
    skiff_strv_free(d);
}

Test(clock, monotonic_in_both_units)
{
    double s0 = skiff_now_s(), m0 = skiff_now_ms();
    struct timespec ten = {.tv_nsec = 10 * 1000 * 1000};
    nanosleep(&ten, NULL);
    double s1 = skiff_now_s(), m1 = skiff_now_ms();
    cr_assert_geq(m1 - m0, 9.0, "%f", m1 - m0);
    cr_assert_lt(m1 - m0, 10000.0);
    cr_assert_geq((s1 - s0) * 1e3, 9.0);
}

static double monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One clock, CLOCK_MONOTONIC, in both units: each reading lies between
 * the readings taken around it, however long the thread was descheduled
 * in between (no window of milliseconds; EPS only absorbs the rounding of
 * the two conversions). */
Test(clock, one_clock_in_both_units)
{
    const double EPS = 1e-3;
    double a = monotonic_ms();
    double m = skiff_now_ms();
    double s = skiff_now_s();
    double b = monotonic_ms();
    cr_assert_geq(m, a - EPS, "skiff_now_ms %f before CLOCK_MONOTONIC's %f", m, a);
    cr_assert_geq(s * 1e3, m - EPS, "skiff_now_s %f before skiff_now_ms %f", s * 1e3, m);
    cr_assert_leq(s * 1e3, b + EPS, "skiff_now_s %f after CLOCK_MONOTONIC's %f", s * 1e3, b);
}
