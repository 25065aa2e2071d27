#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

static char tmpconf[] = "/tmp/skiff-test-conf-XXXXXX";

static void write_conf(const char *text)
{
    int fd = mkstemp(tmpconf);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(config, defaults_without_file)
{
    struct skiff_config cfg;
    skiff_err err;
    skiff_config_for_user(1234, "alice", "/home/alice");
    cr_assert_eq(skiff_config_load(&cfg, NULL, false, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.cache_path, "/home/alice/.cache/skiff");
    cr_assert_str_eq(cfg.runtime_path, "/dev/shm/skiff-1234");
    cr_assert_str_eq(cfg.squash_compression, "zstd");
    cr_assert_eq(cfg.allow_http, false);
    skiff_config_for_user((unsigned)-1, NULL, NULL);
}

Test(config, file_values_and_comments)
{
    write_conf("# site config\ncache_path = /scratch/${USER}/cache  # per user\n"
               "squash_compression=lz4\nallow_http = yes\ndefault_registry = \"reg.local:5000\"\n");
    struct skiff_config cfg;
    skiff_err err;
    skiff_config_for_user(7, "bob", "/home/bob");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.cache_path, "/scratch/bob/cache");
    cr_assert_str_eq(cfg.squash_compression, "lz4");
    cr_assert(cfg.allow_http);
    cr_assert_str_eq(cfg.default_registry, "reg.local:5000");
    unlink(tmpconf);
    skiff_config_for_user((unsigned)-1, NULL, NULL);
}

Test(config, env_overrides_file)
{
    write_conf("squash_compression = gzip\n");
    setenv("SKIFF_SQUASH_COMPRESSION", "xz", 1);
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, true, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.squash_compression, "xz");
    unsetenv("SKIFF_SQUASH_COMPRESSION");
    unlink(tmpconf);
}

/* SKIFF_HOOKS_DIR is the user's extra hooks directory (the CLI passes it in
 * the start options): it must not replace the admin's hooks_dir. */
Test(config, hooks_dir_env_is_not_an_override)
{
    write_conf("hooks_dir = /etc/skiff/hooks.d\n");
    setenv("SKIFF_HOOKS_DIR", "/tmp/user-hooks", 1);
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, true, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.hooks_dir, "/etc/skiff/hooks.d");
    unsetenv("SKIFF_HOOKS_DIR");
    unlink(tmpconf);
}

Test(config, errors_name_line_and_key)
{
    struct skiff_config cfg;
    skiff_err err;
    write_conf("cache_path = /x\nbogus_key = 1\n");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), -1);
    cr_assert(strstr(err.msg, ":2: unknown configuration key 'bogus_key'"), "%s", err.msg);
    unlink(tmpconf);
    strcpy(tmpconf, "/tmp/skiff-test-conf-XXXXXX");
    write_conf("squash_compression = brotli\n");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), -1);
    cr_assert(strstr(err.msg, "unknown compressor 'brotli'"), "%s", err.msg);
    unlink(tmpconf);
    strcpy(tmpconf, "/tmp/skiff-test-conf-XXXXXX");
    write_conf("cache_path = relative/dir\n");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), -1);
    cr_assert(strstr(err.msg, "not an absolute path"), "%s", err.msg);
    unlink(tmpconf);
    strcpy(tmpconf, "/tmp/skiff-test-conf-XXXXXX");
    write_conf("cache_path = ${NOPE}/x\n");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), -1);
    cr_assert(strstr(err.msg, "unknown variable '${NOPE}'"), "%s", err.msg);
    unlink(tmpconf);
}

Test(config, explicit_missing_file_is_error)
{
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, "/nonexistent/skiff.conf", false, &err), -1);
    cr_assert(strstr(err.msg, "open config /nonexistent/skiff.conf"), "%s", err.msg);
}

/* The plugin hands its loaded config to the helper as key=value entries:
 * set_raw over them gives the same config, and no ${...} is expanded twice. */
Test(config, entries_round_trip_without_a_second_expansion)
{
    struct skiff_config a, b;
    skiff_err err;
    skiff_config_for_user(1234, "alice", "/home/al${UID}ice");
    cr_assert_eq(skiff_config_load(&a, NULL, false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_config_set(&a, "allow_http", "yes", &err), 0);
    cr_assert_eq(skiff_config_set(&a, "block_cache_size", "64", &err), 0);
    skiff_config_for_user((unsigned)-1, NULL, NULL);
    cr_assert_str_eq(a.data_path, "/home/al${UID}ice/.local/share/skiff");
    cr_assert_eq(skiff_config_load(&b, "/dev/null", false, &err), 0, "%s", err.msg);
    char kv[8192];
    int r;
    for (size_t i = 0; (r = skiff_config_entry(&a, i, kv, sizeof(kv))) == 1; i++) {
        char *eq = strchr(kv, '=');
        cr_assert_not_null(eq);
        *eq = '\0';
        cr_assert_eq(skiff_config_set_raw(&b, kv, eq + 1, &err), 0, "%s: %s", kv, err.msg);
    }
    cr_assert_eq(r, 0);
    cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
    cr_assert_eq(skiff_config_set_raw(&b, "data_path", "relative", &err), -1);
    cr_assert_eq(skiff_config_set_raw(&b, "data_path", "${HOME}/x", &err), -1);
}

Test(config, block_cache_follows_the_runtime_path)
{
    struct skiff_config cfg;
    skiff_err err;
    char dir[4096];
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_config_set(&cfg, "runtime_path", "/run/skiff/7", &err), 0);
    cr_assert_eq(skiff_config_block_cache(&cfg, dir, sizeof(dir)), 0);
    cr_assert_str_eq(dir, "/run/skiff/7/blocks");
    cr_assert_eq(skiff_config_set(&cfg, "block_cache_path", "/var/cache/b", &err), 0);
    cr_assert_eq(skiff_config_block_cache(&cfg, dir, sizeof(dir)), 0);
    cr_assert_str_eq(dir, "/var/cache/b");
}

/* Found by tests/fuzz/fuzz_config.c (its seed regress-long-comment-line):
 * lines were read into an 8 KiB buffer, so the end of a longer comment
 * was read as a line of its own and set a key. */
Test(config, long_comment_line_stays_a_comment)
{
    size_t n = 9000;
    char *text = malloc(n + 64);
    cr_assert_not_null(text);
    memset(text, 'x', n);
    memcpy(text, "# ", 2);
    strcpy(text + n - 20, " allow_http = yes\ncache_path = /c\n");
    write_conf(text);
    free(text);
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), 0, "%s", err.msg);
    unlink(tmpconf);
    cr_assert_eq(cfg.allow_http, false, "the end of a comment set allow_http");
    cr_assert_str_eq(cfg.cache_path, "/c");
}

/* Found by tests/fuzz/fuzz_config.c: paths were checked before expansion,
 * where a leading '$' passed, so "$HOME/x" (no braces) and "${USER}/x"
 * loaded as relative paths, which the helper's set_raw then refused. */
Test(config, paths_are_absolute_once_expanded)
{
    struct skiff_config cfg;
    skiff_err err;
    skiff_config_for_user(7, "bob", "/home/bob");
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    cr_assert_eq(skiff_config_set(&cfg, "cache_path", "$HOME/cache", &err), -1);
    cr_assert(strstr(err.msg, "cache_path: '$HOME/cache' is not an absolute path"), "%s", err.msg);
    cr_assert_eq(skiff_config_set(&cfg, "runtime_path", "${USER}/run", &err), -1);
    cr_assert(strstr(err.msg, "'${USER}/run' is not an absolute path once expanded"), "%s", err.msg);
    cr_assert_str_eq(cfg.runtime_path, "/dev/shm/skiff-7", "a refused value changed the key");
    cr_assert_eq(skiff_config_set(&cfg, "data_path", "${HOME}/d", &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.data_path, "/home/bob/d");
    write_conf("temp_path = ${UID}\n");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), -1);
    unlink(tmpconf);
    cr_assert(strstr(err.msg, ":1: temp_path: '${UID}' is not an absolute path once expanded"), "%s", err.msg);
    skiff_config_for_user((unsigned)-1, NULL, NULL);
}

/* ENROOT_* variables with a skiff meaning set skiff's keys, below
 * skiff.conf and SKIFF_* (skiff's own settings win); with use_env false
 * (the plugin, whose environment is slurmd's) none is read. */
Test(config, enroot_variables_under_skiffs_own)
{
    write_conf("cache_path = /from/skiff.conf\n");
    setenv("ENROOT_CACHE_PATH", "/from/enroot/cache", 1);
    setenv("ENROOT_DATA_PATH", "/from/enroot/data", 1);
    setenv("ENROOT_CONFIG_PATH", "/from/enroot/config", 1);
    setenv("ENROOT_CONNECT_TIMEOUT", "7", 1);
    setenv("ENROOT_TRANSFER_TIMEOUT", "600", 1);
    setenv("ENROOT_TRANSFER_RETRIES", "4", 1);
    setenv("ENROOT_MAX_PROCESSORS", "3", 1);
    setenv("ENROOT_ALLOW_HTTP", "y", 1);
    setenv("ENROOT_SQUASH_OPTIONS", "-comp gzip -noD -Xcompression-level 4", 1);
    setenv("ENROOT_GZIP_PROGRAM", "pigz", 1); /* no skiff meaning: ignored */
    setenv("SKIFF_DATA_PATH", "/from/skiff/env", 1);
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, true, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.cache_path, "/from/skiff.conf");
    cr_assert_str_eq(cfg.data_path, "/from/skiff/env");
    cr_assert_str_eq(cfg.enroot_config_path, "/from/enroot/config");
    cr_assert_eq(cfg.connect_timeout_s, 7);
    cr_assert_eq(cfg.transfer_timeout_s, 600);
    cr_assert_eq(cfg.transfer_retries, 4);
    cr_assert_eq(cfg.max_processors, 3);
    cr_assert(cfg.allow_http);
    cr_assert_str_eq(cfg.squash_compression, "gzip");
    cr_assert_eq(cfg.squash_level, 4);
    unsetenv("SKIFF_DATA_PATH");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, true, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.data_path, "/from/enroot/data");
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, false, &err), 0, "%s", err.msg);
    cr_assert_str_neq(cfg.data_path, "/from/enroot/data");
    cr_assert_eq(cfg.connect_timeout_s, 30);
    cr_assert_eq(cfg.transfer_retries, 5); /* skiff's default, not the variable's 4 */
    /* a bad value names the variable */
    setenv("ENROOT_MAX_PROCESSORS", "many", 1);
    cr_assert_eq(skiff_config_load(&cfg, tmpconf, true, &err), -1);
    cr_assert(strstr(err.msg, "ENROOT_MAX_PROCESSORS"), "%s", err.msg);
    cr_assert_str_eq(skiff_config_enroot_var("ENROOT_RUNTIME_PATH"), "runtime_path");
    cr_assert_null(skiff_config_enroot_var("ENROOT_GZIP_PROGRAM"));
    static const char *const vars[] = {"ENROOT_CACHE_PATH",      "ENROOT_DATA_PATH",        "ENROOT_CONFIG_PATH",
                                       "ENROOT_CONNECT_TIMEOUT", "ENROOT_TRANSFER_TIMEOUT", "ENROOT_MAX_PROCESSORS",
                                       "ENROOT_ALLOW_HTTP",      "ENROOT_SQUASH_OPTIONS",   "ENROOT_GZIP_PROGRAM",
                                       "ENROOT_TRANSFER_RETRIES"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    unlink(tmpconf);
}
