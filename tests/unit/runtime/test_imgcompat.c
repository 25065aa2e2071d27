/* The container environment's adjustments (runtime/lib/container/imgcompat.c): apt
 * under remap-root, HOME=/root, the host's locale, an environment file. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "container.h"
#include "container_int.h"

static char root[] = "/tmp/skiff-compat-XXXXXX";
static int rootfd = -1;

static void mk(const char *rel)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", p);
    cr_assert_eq(system(cmd), 0);
}

static void setup(void)
{
    cr_assert_not_null(mkdtemp(root));
    mk("etc/apt");
    mk("dev");
    mk("usr/lib/locale/de_DE.utf8");
    rootfd = open(root, O_PATH | O_DIRECTORY);
}

static void teardown(void)
{
    close(rootfd);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

static const char *get(char **env, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], key, n) && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

Test(imgcompat, apt_and_home_under_remap_root, .init = setup, .fini = teardown)
{
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    o.remap_root = true;
    o.mount_home = true;
    char **env = NULL;
    skiff_err err = {0};
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(get(env, "APT_CONFIG"), "/dev/.skiff-apt.conf");
    cr_assert_str_eq(get(env, "HOME"), "/root");
    char p[256], buf[256] = "";
    snprintf(p, sizeof(p), "%s/dev/.skiff-apt.conf", root);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_assert(strstr(buf, "APT::Sandbox::User \"root\";"), "%s", buf);
    cr_assert_null(strstr(buf, "#include"), "no apt.conf in the image: nothing to include");
    skiff_strv_free(env);
    /* without remap-root: nothing of it */
    env = NULL;
    o.remap_root = false;
    unlink(p);
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), 0, "%s", err.msg);
    cr_assert_null(get(env, "APT_CONFIG"));
    cr_assert_null(get(env, "HOME"));
    skiff_strv_free(env);
}

Test(imgcompat, host_locale_falls_back_when_missing, .init = setup, .fini = teardown)
{
    const char *host[] = {"LANG=en_US.UTF-8",
                          "LC_CTYPE=de_DE.UTF-8",
                          "LC_ALL=C.UTF-8",
                          "LC_TIME=",
                          "LC_NUMERIC=/x/y",
                          "LC_MESSAGES=fr_FR.UTF-8",
                          NULL};
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    o.locale_env = host;
    char **env = NULL;
    skiff_err err = {0};
    cr_assert_eq(skiff_env_set(&env, "LC_MESSAGES=C", &err), 0); /* the image's own choice */
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(get(env, "LANG"), "C.UTF-8");  /* missing: falls back */
    cr_assert_null(get(env, "LC_CTYPE"));           /* de_DE.utf8 is a directory of the image */
    cr_assert_null(get(env, "LC_ALL"));             /* built in */
    cr_assert_null(get(env, "LC_TIME"));            /* empty: left alone */
    cr_assert_null(get(env, "LC_NUMERIC"));         /* a path: not an installed name */
    cr_assert_str_eq(get(env, "LC_MESSAGES"), "C"); /* the image set it */
    skiff_strv_free(env);
}

Test(imgcompat, locale_archive_names, .init = setup, .fini = teardown)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "localedef -i en_US -f UTF-8 --prefix='%s' en_US.UTF-8 >/dev/null 2>&1", root);
    if (system(cmd) != 0)
        cr_skip_test("localedef cannot build en_US.UTF-8 here");
    const char *host[] = {"LANG=en_US.UTF-8", "LC_ALL=en_GB.UTF-8", NULL};
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    o.locale_env = host;
    char **env = NULL;
    skiff_err err = {0};
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), 0, "%s", err.msg);
    cr_assert_null(get(env, "LANG"), "en_US.utf8 is in the image's locale-archive");
    cr_assert_str_eq(get(env, "LC_ALL"), "C.UTF-8");
    skiff_strv_free(env);
}

Test(imgcompat, an_environment_file_over_the_adjustments, .init = setup, .fini = teardown)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/run.env", root);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("# settings\n\nFROM_FILE=1\r\n  INDENTED=a b=c \nLANG=en_US.UTF-8\n", f);
    fclose(f);
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    const char *host[] = {"LANG=fr_FR.UTF-8", NULL};
    o.locale_env = host;
    o.env_file = path;
    char **env = NULL;
    skiff_err err = {0};
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), 0, "%s", err.msg);
    cr_assert_str_eq(get(env, "FROM_FILE"), "1");
    cr_assert_str_eq(get(env, "INDENTED"), "a b=c ");
    cr_assert_str_eq(get(env, "LANG"), "en_US.UTF-8"); /* the file's, over the locale fallback */
    skiff_strv_free(env);
    env = NULL;
    f = fopen(path, "w");
    fputs("OK=1\n\nnot an assignment\n", f);
    fclose(f);
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), -1);
    cr_assert(strstr(err.msg, "line 3: 'not an assignment' is not NAME=VALUE"), "%s", err.msg);
    skiff_strv_free(env);
    env = NULL;
    snprintf(path, sizeof(path), "%s/missing.env", root);
    cr_assert_eq(skiff_compat_env(rootfd, &o, &env, &err), -1);
    cr_assert(strstr(err.msg, "environment file"), "%s", err.msg);
    skiff_strv_free(env);
}
