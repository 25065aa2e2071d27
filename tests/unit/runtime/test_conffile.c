/* The commented skiff.conf the packages install (runtime/skiff.conf.in,
 * @HOOKS_DIR@ filled in as the Makefile does): as shipped it changes
 * nothing, and each of its "#key = value" lines names a real key at its
 * real default, for every key there is. Run from the repository root
 * (make unit-test does). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

#define TEMPLATE "runtime/skiff.conf.in"

/* The template with @HOOKS_DIR@ replaced; with uncomment, "#key" setting
 * lines become "key" lines. Returns a temp file's path (static buffer). */
static const char *render(bool uncomment)
{
    static char path[64];
    FILE *in = fopen(TEMPLATE, "re");
    cr_assert_not_null(in, "open %s (run from the repository root)", TEMPLATE);
    snprintf(path, sizeof(path), "/tmp/skiff-test-conffile-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *out = fdopen(fd, "w");
    cr_assert_not_null(out);
    char line[1024];
    while (fgets(line, sizeof(line), in)) {
        char *p = line;
        if (uncomment && p[0] == '#' && islower((unsigned char)p[1]))
            p++;
        char *at = strstr(p, "@HOOKS_DIR@");
        if (at)
            fprintf(out, "%.*s%s%s", (int)(at - p), p, SKIFF_HOOKS_DIR_DEFAULT, at + strlen("@HOOKS_DIR@"));
        else
            fputs(p, out);
    }
    fclose(in);
    cr_assert_eq(fclose(out), 0);
    return path;
}

static void load(struct skiff_config *cfg, const char *path)
{
    skiff_err err;
    skiff_config_for_user(1234, "alice", "/home/alice");
    cr_assert_eq(skiff_config_load(cfg, path, false, &err), 0, "%s: %s", path, err.msg);
    skiff_config_for_user((unsigned)-1, NULL, NULL);
}

Test(conffile, as_shipped_it_changes_nothing)
{
    struct skiff_config def, shipped;
    load(&def, "/dev/null");
    const char *p = render(false);
    load(&shipped, p);
    unlink(p);
    cr_assert_eq(memcmp(&def, &shipped, sizeof(def)), 0);
}

Test(conffile, every_key_is_there_at_its_default)
{
    struct skiff_config def, all;
    load(&def, "/dev/null");
    const char *p = render(true);
    load(&all, p); /* an unknown key or a bad value fails here */
    cr_assert_eq(memcmp(&def, &all, sizeof(def)), 0, "a commented value differs from the built-in default");

    FILE *f = fopen(p, "re");
    cr_assert_not_null(f);
    char text[16384];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(p);
    char kv[8192];
    for (size_t i = 0; skiff_config_entry(&def, i, kv, sizeof(kv)) == 1; i++) {
        *strchr(kv, '=') = '\0';
        char want[sizeof(kv) + 8];
        snprintf(want, sizeof(want), "\n%s =", kv);
        cr_assert_not_null(strstr(text, want), "key %s is missing from %s", kv, TEMPLATE);
    }
}
