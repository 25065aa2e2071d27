/* Named containers shared by concurrent starts (runtime/lib/container/named.c): the
 * first instance writes, later ones read, removal waits for none. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "named.h"

static char dir[] = "/tmp/skiff-named-XXXXXX";
static char image[300];
static struct skiff_config cfg;

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    snprintf(cfg.data_path, sizeof(cfg.data_path), "%s/data", dir);
    snprintf(image, sizeof(image), "%s/img.sqsh", dir);
    FILE *f = fopen(image, "w");
    fputs("hsqs", f);
    fclose(f);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(named, first_writes_later_read_removal_waits, .init = setup, .fini = teardown)
{
    skiff_err err = {0};
    cr_assert_eq(skiff_named_create(&cfg, "c", image, false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "c", image, false, &err), -1);
    cr_assert(strstr(err.msg, "exists"), "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "c", image, true, &err), 0, "exist_ok: %s", err.msg);
    struct skiff_named_use a, b, e;
    cr_assert_eq(skiff_named_acquire(&cfg, "c", true, &a, &err), 0, "%s", err.msg);
    cr_assert(a.writer);
    cr_assert_eq(skiff_named_acquire(&cfg, "c", true, &b, &err), 0, "%s", err.msg);
    cr_assert(!b.writer, "a second instance reads");
    cr_assert_eq(skiff_named_acquire(&cfg, "c", false, &e, &err), 0, "%s", err.msg);
    cr_assert(!e.writer);
    cr_assert_eq(skiff_named_remove(&cfg, "c", &err), -1);
    cr_assert_eq(err.code, EBUSY);
    skiff_named_release(&a);
    cr_assert_eq(skiff_named_remove(&cfg, "c", &err), -1, "readers still use it");
    skiff_named_release(&b);
    skiff_named_release(&e);
    /* alone again: the next one writes */
    cr_assert_eq(skiff_named_acquire(&cfg, "c", true, &a, &err), 0, "%s", err.msg);
    cr_assert(a.writer);
    skiff_named_release(&a);
    cr_assert_eq(skiff_named_remove(&cfg, "c", &err), 0, "%s", err.msg);
    cr_assert(!skiff_named_exists(&cfg, "c"));
}

Test(named, creation_race_leaves_one_complete_container, .init = setup, .fini = teardown)
{
    pid_t kids[8];
    for (int i = 0; i < 8; i++)
        if ((kids[i] = fork()) == 0) {
            skiff_err e;
            _exit(skiff_named_create(&cfg, "race", image, true, &e) == 0 ? 0 : 1);
        }
    for (int i = 0; i < 8; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "creator %d failed", i);
    }
    char got[300];
    skiff_err err;
    cr_assert_eq(skiff_named_image(&cfg, "race", got, sizeof(got), &err), 0, "%s", err.msg);
    cr_assert_str_eq(got, image);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s/data/containers' | grep -v '^race$')\"", dir);
    cr_assert_eq(system(cmd), 0, "temporary directories left");
}
