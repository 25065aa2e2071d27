/* One sanitiser for every string that reaches a log or a terminal someone
 * else reads: slurmd's log and srun's stderr (the SPANK plugin), the
 * records the user-side helper sends root. Whatever the input, the output
 * is one line of printable UTF-8: no control byte, no line break, nothing
 * that reorders the text on screen, and printable text comes out unchanged.
 *
 * Escaped (as text, so the reader still sees what was there):
 *   C0 controls and DEL                  \n \r \t, else \xHH
 *   invalid UTF-8 (raw C1 bytes 0x80-0x9f, a bad lead or continuation
 *   byte, a cut sequence, an overlong form, a surrogate, > U+10FFFF)
 *                                        \xHH for each byte
 *   C1 controls written as UTF-8 (U+0080-U+009F, e.g. CSI U+009B),
 *   bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E,
 *   U+2066-U+2069), line and paragraph separators (U+2028, U+2029)
 *                                        \uHHHH
 * A backslash is kept as is: printable text round-trips unchanged, so an
 * escape is not always distinguishable from its spelling, which is fine
 * for a log line (it can never become a control byte).
 *
 * The output is cut to fit its buffer, never inside an escape or a
 * character, and a cut ends in "...". */
#ifndef SKIFF_COMMON_SANITIZE_H
#define SKIFF_COMMON_SANITIZE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest line a sink writes (bytes, without the NUL). */
#define SKIFF_SAFE_MAX 2048

/* Writes the sanitised form of p[0..len) into out (n bytes, n >= 4;
 * NUL-terminated). Returns strlen(out). */
size_t skiff_sanitize_mem(char *out, size_t n, const void *p, size_t len);

/* The same for a NUL-terminated string (NULL reads as "(null)"). */
size_t skiff_sanitize(char *out, size_t n, const char *s);

/* Sanitises s in place: a buffer of n bytes holding a string, e.g. an
 * error message; cut to fit as above. */
void skiff_sanitize_inplace(char *s, size_t n);

/* Whether s is already what skiff_sanitize writes for it: printable,
 * valid UTF-8, none of the characters above. */
int skiff_is_clean(const char *s, size_t len);

#ifdef __cplusplus
}
#endif

#endif
