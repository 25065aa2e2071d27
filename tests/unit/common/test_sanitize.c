/* The one sanitiser of log and terminal lines (common/sanitize.c): the
 * review's vectors, each class of what is escaped, what is kept, cuts. */
#include <criterion/criterion.h>
#include <string.h>

#include "sanitize.h"

static const char *clean(const char *s)
{
    static char out[256];
    skiff_sanitize(out, sizeof(out), s);
    return out;
}

static const char *clean_mem(const char *s, size_t len)
{
    static char out[256];
    skiff_sanitize_mem(out, sizeof(out), s, len);
    return out;
}

Test(sanitize, printable_text_is_unchanged)
{
    const char *keep[] = {"",
                          "docker://nvcr.io#nvidia/pytorch:24.01",
                          "a path/with spaces and 'quotes' \"too\" \\backslash\\ $HOME ${X} %s %n",
                          "caf\xc3\xa9 \xe2\x80\xa6 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x90\xb3 \xc2\xa0nbsp",
                          "U+00A0 is the first kept above C1: \xc2\xa0; U+2030 after the separators: \xe2\x80\xb0",
                          "~!@#^&*()_+`-={}|[]:;<>?,./"};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        cr_assert_str_eq(clean(keep[i]), keep[i]);
        cr_assert(skiff_is_clean(keep[i], strlen(keep[i])));
    }
}

Test(sanitize, the_reviews_forged_log_line_stays_on_one_line)
{
    cr_assert_str_eq(clean("bad ref\n[2026-11-26T09:50:53.701] [4.0] error: FORGED: x"),
                     "bad ref\\n[2026-11-26T09:50:53.701] [4.0] error: FORGED: x");
    cr_assert_str_eq(clean("a\r\nb\tc"), "a\\r\\nb\\tc");
}

Test(sanitize, terminal_escapes_are_escaped)
{
    /* ESC, BEL, an OSC title: the review's second vector */
    cr_assert_str_eq(clean("\x1b[2J\x1b]0;pwned\x07"), "\\x1b[2J\\x1b]0;pwned\\x07");
    cr_assert_str_eq(clean("del\x7f"), "del\\x7f");
    cr_assert_str_eq(clean_mem("nul\0x", 5), "nul\\x00x");
    cr_assert_str_eq(clean("\x01\x1f"), "\\x01\\x1f");
}

Test(sanitize, c1_controls_raw_and_as_utf8)
{
    /* CSI as a raw byte (not UTF-8) and as U+009B; NEL U+0085 */
    cr_assert_str_eq(clean("a\x9b"
                           "31mb"),
                     "a\\x9b31mb");
    cr_assert_str_eq(clean("a\xc2\x9b"
                           "31mb"),
                     "a\\u009b31mb");
    cr_assert_str_eq(clean("\xc2\x80\xc2\x85\xc2\x9f"), "\\u0080\\u0085\\u009f");
}

Test(sanitize, bidi_controls_and_unicode_line_breaks)
{
    /* RLO U+202E, LRE..PDF, isolates U+2066..U+2069, marks, ALM */
    cr_assert_str_eq(clean("x\xe2\x80\xaegnp.exe"), "x\\u202egnp.exe");
    cr_assert_str_eq(clean("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad"), "\\u202a\\u202b\\u202c\\u202d");
    cr_assert_str_eq(clean("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"), "\\u2066\\u2067\\u2068\\u2069");
    cr_assert_str_eq(clean("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c"), "\\u200e\\u200f\\u061c");
    cr_assert_str_eq(clean("a\xe2\x80\xa8"
                           "b\xe2\x80\xa9"),
                     "a\\u2028b\\u2029");
}

Test(sanitize, invalid_utf8_byte_by_byte)
{
    cr_assert_str_eq(clean("\xff\xfe"), "\\xff\\xfe");
    cr_assert_str_eq(clean("\xc0\xaf"), "\\xc0\\xaf");                   /* overlong '/' */
    cr_assert_str_eq(clean("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");          /* overlong */
    cr_assert_str_eq(clean("\xed\xa0\x80"), "\\xed\\xa0\\x80");          /* a surrogate */
    cr_assert_str_eq(clean("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80"); /* > U+10FFFF */
    cr_assert_str_eq(clean("cut \xe2\x80"), "cut \\xe2\\x80");           /* cut sequence */
    cr_assert_str_eq(clean("\xe2\x80"
                           "a\xc3\xa9"),
                     "\\xe2\\x80a\xc3\xa9"); /* resynchronises */
}

Test(sanitize, cut_to_the_buffer_never_inside_an_escape_or_a_character)
{
    char out[12];
    cr_assert_eq(skiff_sanitize(out, sizeof(out), "0123456789"), 10);
    cr_assert_str_eq(out, "0123456789");
    cr_assert_eq(skiff_sanitize(out, sizeof(out), "0123456789ab"), 11);
    cr_assert_str_eq(out, "01234567...");
    skiff_sanitize(out, sizeof(out), "0123456\x1b\x1b");
    cr_assert_str_eq(out, "0123456...");
    skiff_sanitize(out, sizeof(out), "0123456\xe4\xb8\xad\xe6\x96\x87");
    cr_assert_str_eq(out, "0123456...");
    char tiny[4];
    skiff_sanitize(tiny, sizeof(tiny), "\n\n\n");
    cr_assert_str_eq(tiny, "...");
    cr_assert_str_eq(clean(NULL), "(null)");
}

Test(sanitize, in_place_and_idempotent)
{
    char msg[64] = "open ./a\nFORGED \x1b[31m: No such file";
    skiff_sanitize_inplace(msg, sizeof(msg));
    cr_assert_str_eq(msg, "open ./a\\nFORGED \\x1b[31m: No such file");
    char again[64];
    skiff_sanitize(again, sizeof(again), msg);
    cr_assert_str_eq(again, msg);
    cr_assert(skiff_is_clean(msg, strlen(msg)));
    char small[16] = "0123456789\n\n\n";
    skiff_sanitize_inplace(small, sizeof(small));
    cr_assert_str_eq(small, "0123456789\\n...");
}
