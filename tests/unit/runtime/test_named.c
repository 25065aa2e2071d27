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
    cr_assert_eq(skiff_named_create(&cfg, "c", image, NULL, false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "c", image, NULL, false, &err), -1);
    cr_assert(strstr(err.msg, "exists"), "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "c", image, NULL, true, &err), 0, "exist_ok: %s", err.msg);
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
            _exit(skiff_named_create(&cfg, "race", image, NULL, true, &e) == 0 ? 0 : 1);
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

/* The plugin's stored names and enroot's names for them, both ways: pyxis
 * named its containers pyxis_NAME and pyxis_JOBID_NAME, and cleanup
 * scripts run `enroot remove -f pyxis_...`. */
Test(named, enroot_names, .init = setup, .fini = teardown)
{
    skiff_err err = {0};
    char out[256];
    bool nm;
    cr_assert_eq(skiff_named_step_name("train", "n1", 0, out, sizeof(out), &err), 0);
    cr_assert_str_eq(out, "train.n1");
    cr_assert_eq(skiff_named_step_name("train", "n1", 42, out, sizeof(out), &err), 0);
    cr_assert_str_eq(out, "train.n1.job42");
    cr_assert_eq(skiff_named_step_name("bad name", "n1", 0, out, sizeof(out), &err), -1);

    cr_assert_eq(skiff_named_from_enroot(&cfg, "pyxis_train", "n1", out, sizeof(out), &nm, &err), 0);
    cr_assert_str_eq(out, "train.n1");
    cr_assert(nm);
    cr_assert_eq(skiff_named_from_enroot(&cfg, "pyxis_42_train", "n1", out, sizeof(out), &nm, &err), 0);
    cr_assert_str_eq(out, "train.n1.job42");
    cr_assert_eq(skiff_named_from_enroot(&cfg, "pyxis_42.train", "n1", out, sizeof(out), &nm, &err), 0);
    cr_assert_str_eq(out, "train.n1.job42");
    cr_assert_eq(skiff_named_from_enroot(&cfg, "ubuntu+22.04", "n1", out, sizeof(out), &nm, &err), 0);
    cr_assert_str_eq(out, "ubuntu+22.04");
    cr_assert_not(nm);
    cr_assert_eq(skiff_named_from_enroot(&cfg, "a/b", "n1", out, sizeof(out), &nm, &err), -1);
    cr_assert_eq(err.code, 0, "a usage error");

    /* a global container whose name starts with digits and '_' is found
     * as itself when no job-scoped one exists */
    cr_assert_eq(skiff_named_create(&cfg, "7_x.n1", image, "n1", false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_from_enroot(&cfg, "pyxis_7_x", "n1", out, sizeof(out), &nm, &err), 0);
    cr_assert_str_eq(out, "7_x.n1");

    /* listed on its node as pyxis named it; another node's is not listed */
    cr_assert_eq(skiff_named_create(&cfg, "train.n1.job42", image, "n1", false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "train.n2", image, "n2", false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_create(&cfg, "mine", image, NULL, false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_named_to_enroot(&cfg, "train.n1.job42", "n1", out, sizeof(out)), 1);
    cr_assert_str_eq(out, "pyxis_42_train");
    cr_assert_eq(skiff_named_to_enroot(&cfg, "7_x.n1", "n1", out, sizeof(out)), 1);
    cr_assert_str_eq(out, "pyxis_7_x");
    cr_assert_eq(skiff_named_to_enroot(&cfg, "train.n2", "n1", out, sizeof(out)), 0);
    cr_assert_eq(skiff_named_to_enroot(&cfg, "train.n2", "n2", out, sizeof(out)), 1);
    cr_assert_str_eq(out, "pyxis_train");
    cr_assert_eq(skiff_named_to_enroot(&cfg, "mine", "n1", out, sizeof(out)), 1);
    cr_assert_str_eq(out, "mine");
}

static void count_foreign(const char *name, const char *img, void *arg)
{
    (void)img;
    char out[256];
    if (skiff_named_to_enroot(&cfg, name, "n1", out, sizeof(out)))
        ++*(int *)arg;
}

/* MLPerf's cleanup runs `enroot remove -f $(enroot list)` on every node at
 * once over a shared data path: node n1's list must never show n2's
 * container while n2 removes it (found on the cluster: n1 listed it as
 * "train.n2", half removed, without its node mark, and failed to remove it). */
Test(named, a_container_being_removed_is_never_listed_half, .init = setup, .fini = teardown)
{
    pid_t kid = fork();
    if (kid == 0) {
        skiff_err err;
        char p[SKIFF_PATH_MAX + 64];
        for (int round = 0; round < 30; round++) {
            if (skiff_named_create(&cfg, "train.n2", image, "n2", false, &err) < 0)
                _exit(1);
            for (int i = 0; i < 50; i++) { /* a removal that takes a while */
                snprintf(p, sizeof(p), "%s/containers/train.n2/upper/f%d", cfg.data_path, i);
                FILE *f = fopen(p, "w");
                if (f)
                    fclose(f);
            }
            if (skiff_named_remove(&cfg, "train.n2", &err) < 0)
                _exit(2);
        }
        _exit(0);
    }
    int foreign = 0, st = 0;
    while (waitpid(kid, &st, WNOHANG) == 0) {
        skiff_err err;
        cr_assert_eq(skiff_named_list(&cfg, count_foreign, &foreign, &err), 0, "%s", err.msg);
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "create/remove failed: %d", st);
    cr_assert_eq(foreign, 0, "n1 listed n2's container %d times while it was removed", foreign);
}
