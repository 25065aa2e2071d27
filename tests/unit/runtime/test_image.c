#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image.h"

static void name_is(const char *uri, const char *want)
{
    char out[512];
    skiff_err err;
    skiff_err_clear(&err);
    cr_assert_eq(skiff_image_default_name(uri, out, sizeof(out), &err), 0, "%s: %s", uri, err.msg);
    cr_assert_str_eq(out, want, "%s", uri);
}

Test(image, default_names_like_enroot)
{
    name_is("docker://ubuntu", "ubuntu.sqsh");
    name_is("docker://ubuntu:22.04", "ubuntu+22.04.sqsh");
    name_is("docker://nvcr.io#nvidia/pytorch:24.01-py3", "nvidia+pytorch+24.01-py3.sqsh");
    name_is("docker://alice@127.0.0.1:5000#team/app:v1", "team+app+v1.sqsh");
    name_is("docker://ghcr.io/org/img", "org+img.sqsh");
    name_is("docker-archive:/tmp/saved.tar", "saved.sqsh");
    name_is("oci-archive:img.tar:v2", "img+v2.sqsh");
    name_is("oci:/srv/layouts/app/:prod", "app+prod.sqsh");
    name_is("dir:/srv/img", "img.sqsh");
}

Test(image, default_name_bad_uri)
{
    char out[64];
    skiff_err err;
    cr_assert_eq(skiff_image_default_name("ubuntu", out, sizeof(out), &err), -1);
    cr_assert(strstr(err.msg, "unknown image source"), "%s", err.msg);
}

static void resolve_fails(const char *arg, const char *needle)
{
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    snprintf(cfg.cache_path, sizeof(cfg.cache_path), "/tmp/skiff-test-image-cache");
    char path[512];
    skiff_err_clear(&err);
    cr_assert_eq(skiff_image_resolve(&cfg, arg, path, sizeof(path), NULL, &err), -1, "%s resolved", arg);
    cr_assert(strstr(err.msg, needle), "%s: '%s' lacks '%s'", arg, err.msg, needle);
}

Test(image, resolve_argument_errors)
{
    resolve_fails("surely-missing.sqsh", "no such file ./surely-missing.sqsh; a local file needs a path with '/'");
    resolve_fails("./surely-missing.sqsh", "No such file");
    resolve_fails("/etc/hostname", "not a squashfs image");
    resolve_fails("/etc", "not a regular file");
    resolve_fails("Not An Image", "neither a file path");
    resolve_fails("", "neither a file path");
}

/* A docker-archive (tar) of regular files name=content. */
static void write_archive(const char *path, const char *const *files)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    cr_assert_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; files[i]; i += 2) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, files[i]);
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        archive_entry_set_size(ae, (la_int64_t)strlen(files[i + 1]));
        cr_assert_eq(archive_write_header(a, ae), ARCHIVE_OK);
        archive_write_data(a, files[i + 1], strlen(files[i + 1]));
        archive_entry_free(ae);
    }
    archive_write_close(a);
    archive_write_free(a);
}

/* Found by the fuzz build (clang refuses the jump; gcc compiled it): a
 * Config path with ".." jumped over the initialisation of a cleanup
 * variable, and free() got whatever its stack slot held (`skiff import`
 * died with SIGSEGV). tests/fuzz/corpus/manifest keeps the input. */
Test(image, docker_archive_config_path_with_dotdot)
{
    char dir[] = "/tmp/skiff-test-image-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char tar[128], uri[160], out[160], cmd[200];
    snprintf(tar, sizeof(tar), "%s/evil.tar", dir);
    snprintf(uri, sizeof(uri), "docker-archive:%s", tar);
    snprintf(out, sizeof(out), "%s/out.sqsh", dir);
    const char *files[] = {"manifest.json", "[{\"Config\": \"../config.json\", \"Layers\": []}]", NULL};
    write_archive(tar, files);
    struct skiff_config cfg;
    skiff_err err;
    cr_assert_eq(skiff_config_load(&cfg, "/dev/null", false, &err), 0, "%s", err.msg);
    snprintf(cfg.cache_path, sizeof(cfg.cache_path), "%s/cache", dir);
    snprintf(cfg.temp_path, sizeof(cfg.temp_path), "%s", dir);
    skiff_err_clear(&err);
    cr_assert_eq(skiff_image_import(&cfg, uri, out, NULL, NULL, 0, &err), -1);
    cr_assert(strstr(err.msg, "bad config path '../config.json'"), "%s", err.msg);
    cr_assert_eq(access(out, F_OK), -1, "a refused import left %s", out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
