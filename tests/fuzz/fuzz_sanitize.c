/* The log and terminal sanitiser (common/sanitize.c).
 * Input: byte 0 picks the output buffer's size (4..259, or SKIFF_SAFE_MAX),
 * byte 1 bit 0 turns the rest into printable text first (each pair of
 * bytes picks a character from printable ranges of every UTF-8 length);
 * the rest is the string.
 * Properties, for any input: the output fits its buffer; it holds no C0
 * control, DEL or line break, decodes as UTF-8 (glibc's decoder, C.UTF-8)
 * to no C1 control, bidi control or Unicode line separator; sanitising it
 * again changes nothing; a cut output is the uncut one's prefix + "...".
 * Printable text that fits comes out byte for byte unchanged. */
#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "fuzzlib.h"
#include "sanitize.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!setlocale(LC_CTYPE, "C.UTF-8"))
        abort();
    return 0;
}

static int forbidden(wchar_t c)
{
    return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x61c || c == 0x200e || c == 0x200f ||
           (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0x2028 || c == 0x2029;
}

static void check_line(const char *out, size_t len, size_t n)
{
    FUZZ_CHECK(len < n && strlen(out) == len, "length %zu for a buffer of %zu", len, n);
    mbstate_t st;
    memset(&st, 0, sizeof(st));
    for (size_t i = 0; i < len;) {
        wchar_t c;
        size_t k = mbrtowc(&c, out + i, len - i, &st);
        FUZZ_CHECK(k != (size_t)-1 && k != (size_t)-2 && k != 0, "not UTF-8 at byte %zu", i);
        FUZZ_CHECK(!forbidden(c), "U+%04X at byte %zu", (unsigned)c, i);
        i += k;
    }
}

/* UTF-8 of code point c into p; returns the length. */
static size_t put_utf8(char *p, unsigned c)
{
    if (c < 0x80) {
        p[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        p[0] = (char)(0xc0 | c >> 6);
        p[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        p[0] = (char)(0xe0 | c >> 12);
        p[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        p[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    p[0] = (char)(0xf0 | c >> 18);
    p[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    p[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    p[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* A printable character for the two bytes a, b: ASCII 0x20-0x7e most of
 * the time (backslashes and quotes included), else one of Latin-1's
 * printable half, CJK, or an emoji plane. */
static unsigned printable_cp(uint8_t a, uint8_t b)
{
    switch (a % 4) {
    case 0:
    case 1:
        return 0x20 + b % 95;
    case 2:
        return a & 4 ? 0xa0 + b % 96 : 0x4e00 + (unsigned)b * 37;
    default:
        return 0x1f300 + b;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 8192)
        return 0;
    size_t n = data[0] == 255 ? SKIFF_SAFE_MAX + 1 : 4 + (size_t)data[0];
    const uint8_t *p = data + 2;
    size_t len = size - 2;
    char *text = NULL;
    if (data[1] & 1) {
        text = malloc(len * 2 + 1);
        if (!text)
            return 0;
        size_t t = 0;
        for (size_t i = 0; i + 1 < len; i += 2)
            t += put_utf8(text + t, printable_cp(p[i], p[i + 1]));
        p = (const uint8_t *)text;
        len = t;
    }

    char *out = malloc(n), *full = malloc(len * 6 + 1), *again = malloc(n);
    if (!out || !full || !again)
        abort();
    size_t olen = skiff_sanitize_mem(out, n, p, len);
    check_line(out, olen, n);
    size_t flen = skiff_sanitize_mem(full, len * 6 + 1, p, len);
    check_line(full, flen, len * 6 + 1);
    FUZZ_CHECK(flen <= len * 6, "more than 6 bytes out per byte in");
    if (flen < n)
        FUZZ_CHECK(olen == flen && !memcmp(out, full, flen), "fits, yet not the whole line");
    else
        FUZZ_CHECK(olen >= 3 && !memcmp(out + olen - 3, "...", 3) && !memcmp(out, full, olen - 3),
                   "a cut line is not a prefix of the whole + ...");
    /* idempotent: what it wrote is clean */
    FUZZ_CHECK(skiff_is_clean(out, olen), "its own output is not clean");
    size_t alen = skiff_sanitize_mem(again, n, out, olen);
    FUZZ_CHECK(alen == olen && !memcmp(again, out, olen), "sanitising twice changed the line");
    if (text) {
        FUZZ_CHECK(skiff_is_clean(text, len), "printable text called unclean");
        if (len < n)
            FUZZ_CHECK(olen == len && !memcmp(out, text, len), "printable text changed");
    }
    free(out);
    free(full);
    free(again);
    free(text);
    return 0;
}
