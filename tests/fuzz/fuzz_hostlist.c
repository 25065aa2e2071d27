/* libFuzzer target for the host list parser: any input must either fail
 * with a message or expand; expansion, count and nth must agree; and
 * compress(expand(x)) must expand back to the same hosts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    skiff_err err = {0};
    size_t n = 0;
    int crc = skiff_hostlist_count(s, &n, &err);
    struct skiff_hostlist hl;
    /* A small cap keeps each run fast; the cap itself is part of what is tested. */
    int erc = skiff_hostlist_expand(s, 1u << 14, &hl, &err);
    if (erc < 0) {
        if (err.msg[0] == '\0')
            abort(); /* every failure says why */
        if (hl.hosts || hl.buf)
            abort(); /* nothing left allocated */
        free(s);
        return 0;
    }
    if (crc < 0 || n != hl.n)
        abort();
    char buf[SKIFF_HOSTLIST_MAX_NAME + 1];
    for (size_t i = 0; i < hl.n && i < 8; i++) {
        if (skiff_hostlist_nth(s, i, buf, sizeof(buf), &err) < 0 || strcmp(buf, hl.hosts[i]) != 0)
            abort();
    }
    char *c = skiff_hostlist_compress((const char *const *)hl.hosts, hl.n, &err);
    if (!c) {
        /* the one allowed failure: a result too long to read back */
        if (!strstr(err.msg, "longer than the"))
            abort();
        skiff_hostlist_free(&hl);
        free(s);
        return 0;
    }
    struct skiff_hostlist back;
    if (skiff_hostlist_expand(c, 1u << 14, &back, &err) < 0 || back.n != hl.n)
        abort();
    for (size_t i = 0; i < hl.n; i++)
        if (strcmp(back.hosts[i], hl.hosts[i]) != 0)
            abort();
    skiff_hostlist_free(&back);
    free(c);
    skiff_hostlist_free(&hl);
    free(s);
    return 0;
}
