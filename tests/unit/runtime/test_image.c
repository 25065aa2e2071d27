#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

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
    cr_assert_eq(skiff_image_resolve(&cfg, arg, path, sizeof(path), &err), -1, "%s resolved", arg);
    cr_assert(strstr(err.msg, needle), "%s: '%s' lacks '%s'", arg, err.msg, needle);
}

Test(image, resolve_argument_errors)
{
    resolve_fails("surely-missing.sqsh", "no such file ./surely-missing.sqsh; a local file needs a path with '/'");
    resolve_fails("./surely-missing.sqsh", "No such file");
    resolve_fails("/etc/hostname", "not a squashfs image");
    resolve_fails("/etc", "not a file");
    resolve_fails("Not An Image", "neither a file path");
    resolve_fails("", "neither a file path");
}
