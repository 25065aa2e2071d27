/* See sanitize.h. Hand-written, not a library's: the decision is skiff's
 * own list (which code points a log line must not carry), and the UTF-8
 * decoding it needs is the strict one of RFC 3629 in twenty lines. */
#include "sanitize.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The length (1-4) of the valid UTF-8 sequence at p, its code point in
 * *cp; 0 when the bytes at p are not one (RFC 3629: no overlong form, no
 * surrogate, nothing above U+10FFFF). */
static size_t utf8_next(const unsigned char *p, size_t len, unsigned *cp)
{
    unsigned c = p[0], min;
    size_t n;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        c &= 0x1f;
        min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3;
        c &= 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        c &= 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3fu);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

/* Printable, but not on a line of someone else's log: C1 controls, the
 * characters that reorder text (bidi controls, "Trojan Source") and the
 * two Unicode line breaks. */
static bool escaped_cp(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

/* The piece of output for the input at p: either the input's own bytes
 * (*keep set, length returned) or an escape written into esc. */
static size_t piece(const unsigned char *p, size_t len, size_t *used, char esc[8], bool *keep)
{
    unsigned cp = 0;
    size_t k = utf8_next(p, len, &cp);
    *keep = false;
    if (k == 0) {
        *used = 1;
        return (size_t)snprintf(esc, 8, "\\x%02x", p[0]);
    }
    *used = k;
    if (cp < 0x20 || cp == 0x7f) {
        if (cp == '\n' || cp == '\r' || cp == '\t') {
            esc[0] = '\\';
            esc[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
            esc[2] = '\0';
            return 2;
        }
        return (size_t)snprintf(esc, 8, "\\x%02x", cp);
    }
    if (escaped_cp(cp))
        return (size_t)snprintf(esc, 8, "\\u%04x", cp);
    *keep = true;
    return k;
}

static size_t sanitized_len(const unsigned char *p, size_t len)
{
    size_t total = 0, used;
    char esc[8];
    bool keep;
    for (size_t i = 0; i < len; i += used)
        total += piece(p + i, len - i, &used, esc, &keep);
    return total;
}

size_t skiff_sanitize_mem(char *out, size_t n, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (n == 0)
        return 0;
    /* everything, or as much as leaves room for the "..." of a cut */
    bool cut = sanitized_len(p, len) > n - 1;
    size_t limit = n - 1 - (cut ? (n > 4 ? 3 : n - 1) : 0), o = 0, used;
    char esc[8];
    bool keep;
    for (size_t i = 0; i < len; i += used) {
        size_t k = piece(p + i, len - i, &used, esc, &keep);
        if (o + k > limit)
            break;
        memcpy(out + o, keep ? (const char *)p + i : esc, k);
        o += k;
    }
    if (cut)
        for (size_t d = 0; d < 3 && o < n - 1; d++)
            out[o++] = '.';
    out[o] = '\0';
    return o;
}

size_t skiff_sanitize(char *out, size_t n, const char *s)
{
    if (!s)
        s = "(null)";
    return skiff_sanitize_mem(out, n, s, strlen(s));
}

void skiff_sanitize_inplace(char *s, size_t n)
{
    if (n == 0)
        return;
    size_t len = strnlen(s, n - 1);
    if (skiff_is_clean(s, len))
        return;
    char tmp[SKIFF_SAFE_MAX + 1];
    size_t m = n < sizeof(tmp) ? n : sizeof(tmp);
    skiff_sanitize_mem(tmp, m, s, len);
    memcpy(s, tmp, strlen(tmp) + 1);
}

int skiff_is_clean(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t used;
    char esc[8];
    bool keep;
    for (size_t i = 0; i < len; i += used) {
        piece(p + i, len - i, &used, esc, &keep);
        if (!keep)
            return 0;
    }
    return 1;
}
