/* Tagged records and their bounded reader (runtime/lib/records.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "container.h"
#include "container_int.h"
#include "records.h"

static skiff_err err;

Test(state, records_round_trip)
{
    struct skiff_recbuf b = {0};
    cr_assert_eq(skiff_rec_put(&b, 'W', "/work", &err), 0);
    cr_assert_eq(skiff_rec_putf(&b, 'H', &err, "%d", 42), 0);
    cr_assert_eq(skiff_rec_put(&b, 'E', "", &err), 0);
    size_t off = 0;
    char tag;
    const char *s;
    cr_assert_eq(skiff_rec_next(b.p, b.len, &off, &tag, &s), 1);
    cr_assert(tag == 'W' && !strcmp(s, "/work"));
    cr_assert_eq(skiff_rec_next(b.p, b.len, &off, &tag, &s), 1);
    cr_assert(tag == 'H' && skiff_rec_pid(s) == 42);
    cr_assert_eq(skiff_rec_next(b.p, b.len, &off, &tag, &s), 1);
    cr_assert(tag == 'E' && !*s);
    cr_assert_eq(skiff_rec_next(b.p, b.len, &off, &tag, &s), 0);
    cr_assert_eq(skiff_rec_next(b.p, b.len - 1, &(size_t){0}, &tag, &s), 1);
    off = 0;
    cr_assert_eq(skiff_rec_next("Wab", 3, &off, &tag, &s), -1); /* unterminated */
    skiff_recbuf_free(&b);
}

Test(state, pids)
{
    cr_assert_eq(skiff_rec_pid("1"), 1);
    cr_assert_eq(skiff_rec_pid("2147483647"), 2147483647);
    cr_assert_eq(skiff_rec_pid("0"), -1);
    cr_assert_eq(skiff_rec_pid("-3"), -1);
    cr_assert_eq(skiff_rec_pid("3x"), -1);
    cr_assert_eq(skiff_rec_pid(NULL), -1);
    cr_assert_eq(skiff_rec_pid("2147483648"), -1);
}

Test(state, the_reader_stops_at_the_end_record_with_the_writer_still_there)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    static const char data[] = "S0\0H7\0Z\0";
    cr_assert_eq(write(p[1], data, sizeof(data) - 1), (ssize_t)sizeof(data) - 1);
    char *out;
    size_t len;
    cr_assert_eq(skiff_rec_read_fd(p[0], 1024, 2000, 'Z', &out, &len, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(len, sizeof(data) - 1);
    free(out);
    close(p[0]);
    close(p[1]);
}

Test(state, the_reader_is_bounded_in_size)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    char buf[8192];
    memset(buf, 'E', sizeof(buf));
    cr_assert_eq(write(p[1], buf, sizeof(buf)), (ssize_t)sizeof(buf));
    char *out = NULL;
    size_t len;
    cr_assert_eq(skiff_rec_read_fd(p[0], 4096, 2000, 'Z', &out, &len, NULL, &err), -1);
    cr_assert_eq(err.code, EMSGSIZE);
    cr_assert_null(out);
    close(p[0]);
    close(p[1]);
}

Test(state, the_reader_is_bounded_in_time)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    (void)!write(p[1], "S0", 3); /* a record, but never the end one */
    char *out = NULL;
    size_t len;
    bool timed_out = false;
    double t0 = skiff_now_ms();
    cr_assert_eq(skiff_rec_read_fd(p[0], 4096, 300, 'Z', &out, &len, &timed_out, &err), -1);
    double took = skiff_now_ms() - t0;
    cr_assert(timed_out);
    cr_assert(took >= 290 && took < 3000, "took %.0f ms", took);
    close(p[0]);
    close(p[1]);
}

Test(state, eof_ends_the_read)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[1]);
    char *out = NULL;
    size_t len = 1;
    cr_assert_eq(skiff_rec_read_fd(p[0], 4096, 300, 'Z', &out, &len, NULL, &err), 0);
    cr_assert_eq(len, 0);
    free(out);
    close(p[0]);
}

/* Found by tests/fuzz/fuzz_records.c: a pid record that did not parse gave
 * pid -1 (skiff_rec_pid's error), which kill() takes as "every process". */
Test(state, a_bad_pid_in_a_state_is_an_error)
{
    static const char *const bad[] = {"H", "X", "F"};
    for (size_t i = 0; i < 3; i++) {
        char data[32];
        int n = snprintf(data, sizeof(data), "W/%c%snot-a-pid", 0, bad[i]);
        struct skiff_container c;
        memset(&c, 0, sizeof(c));
        skiff_err_clear(&err);
        cr_assert_eq(skiff_state_parse(data, (size_t)n + 1, &c, &err), -1, "%s record accepted", bad[i]);
        cr_assert(strstr(err.msg, "pid 'not-a-pid'"), "%s", err.msg);
        cr_assert(c.holder >= 0 && c.command >= 0 && c.server >= 0);
    }
    struct skiff_container c;
    memset(&c, 0, sizeof(c));
    static const char good[] = "H7\0X8\0F9\0";
    cr_assert_eq(skiff_state_parse(good, sizeof(good) - 1, &c, &err), 0, "%s", err.msg);
    cr_assert(c.holder == 7 && c.command == 8 && c.server == 9);
}

/* The plugin's user_init asks whether the job still runs while it waits
 * (records.h's stop): nothing written, no deadline, the stop ends it. */
static bool stop_third(void *ctx, skiff_err *e)
{
    int *n = ctx;
    if (++*n < 3)
        return false;
    skiff_error(e, ECANCELED, "stopped");
    return true;
}

Test(state, a_stop_ends_a_wait_with_no_deadline)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    int asked = 0;
    const struct skiff_rec_watch w = {.stop = stop_third, .tick_ms = 10, .ctx = &asked};
    double none = 0;
    char *out = NULL;
    size_t len;
    cr_assert_eq(skiff_rec_read_fd_until(p[0], 4096, &none, 'Z', &w, &out, &len, NULL, &err), -1);
    cr_assert_eq(err.code, ECANCELED);
    cr_assert_eq(asked, 3);
    cr_assert_null(out);
    close(p[0]);
    close(p[1]);
}

/* A writer's flood of records does not keep the stop from being asked. */
struct flood {
    int seen, asked;
};

static void count_seen(char tag, const char *s, void *ctx)
{
    (void)tag;
    (void)s;
    ((struct flood *)ctx)->seen++;
}

static bool stop_after_records(void *ctx, skiff_err *e)
{
    struct flood *f = ctx;
    f->asked++;
    if (f->seen == 0)
        return false;
    skiff_error(e, ECANCELED, "stopped");
    return true;
}

Test(state, records_arriving_do_not_keep_the_stop_from_being_asked)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(write(p[1], "i0 0 x", 7), 7);
    struct flood f = {0};
    const struct skiff_rec_watch w = {.seen = count_seen, .stop = stop_after_records, .tick_ms = 60000, .ctx = &f};
    double none = 0;
    char *out = NULL;
    size_t len;
    cr_assert_eq(skiff_rec_read_fd_until(p[0], 1 << 20, &none, 'Z', &w, &out, &len, NULL, &err), -1);
    cr_assert_eq(err.code, ECANCELED);
    cr_assert(f.seen > 0 && f.asked >= 2, "seen %d asked %d", f.seen, f.asked);
    close(p[0]);
    close(p[1]);
}
