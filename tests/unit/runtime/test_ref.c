#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "ref.h"

static struct skiff_ref ref;
static skiff_err err;

static void ok(const char *uri)
{
    skiff_err_clear(&err);
    cr_assert_eq(skiff_ref_parse(uri, "registry-1.docker.io", &ref, &err), 0, "%s: %s", uri, err.msg);
}

static void bad(const char *uri, const char *needle)
{
    skiff_err_clear(&err);
    cr_assert_eq(skiff_ref_parse(uri, "registry-1.docker.io", &ref, &err), -1, "%s parsed", uri);
    cr_assert(strstr(err.msg, needle), "%s: message '%s' lacks '%s'", uri, err.msg, needle);
}

Test(ref, docker_hub_short_name)
{
    ok("docker://ubuntu");
    cr_assert_eq(ref.kind, SKIFF_REF_DOCKER);
    cr_assert_str_eq(ref.registry, "registry-1.docker.io");
    cr_assert_str_eq(ref.repository, "library/ubuntu");
    cr_assert_str_eq(ref.tag, "latest");
    cr_assert_str_eq(ref.digest, "");
    cr_assert_str_eq(ref.image, "ubuntu");
}

Test(ref, enroot_registry_hash)
{
    ok("docker://nvcr.io#nvidia/pytorch:24.01-py3");
    cr_assert_str_eq(ref.registry, "nvcr.io");
    cr_assert_str_eq(ref.repository, "nvidia/pytorch");
    cr_assert_str_eq(ref.tag, "24.01-py3");
    cr_assert_str_eq(ref.image, "nvidia/pytorch:24.01-py3");
}

Test(ref, user_and_port)
{
    ok("docker://alice@127.0.0.1:5000#team/app:v1");
    cr_assert_str_eq(ref.user, "alice");
    cr_assert_str_eq(ref.registry, "127.0.0.1:5000");
    cr_assert_str_eq(ref.repository, "team/app");
    cr_assert(skiff_ref_is_loopback(ref.registry));
}

Test(ref, oauthtoken_user)
{
    ok("docker://$oauthtoken@nvcr.io#nvidia/cuda");
    cr_assert_str_eq(ref.user, "$oauthtoken");
}

Test(ref, docker_style_registry)
{
    ok("docker://localhost:5000/foo/bar:1.0");
    cr_assert_str_eq(ref.registry, "localhost:5000");
    cr_assert_str_eq(ref.repository, "foo/bar");
    ok("docker://ghcr.io/org/img");
    cr_assert_str_eq(ref.registry, "ghcr.io");
    ok("docker://library/ubuntu:22.04");
    cr_assert_str_eq(ref.registry, "registry-1.docker.io");
    cr_assert_str_eq(ref.repository, "library/ubuntu");
}

Test(ref, digest)
{
    const char *d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    char uri[256];
    snprintf(uri, sizeof(uri), "docker://busybox@%s", d);
    ok(uri);
    cr_assert_str_eq(ref.digest, d);
    cr_assert_str_eq(ref.tag, "");
    snprintf(uri, sizeof(uri), "docker://busybox:1.36@%s", d);
    ok(uri);
    cr_assert_str_eq(ref.digest, d);
    cr_assert_str_eq(ref.tag, "1.36");
    char canon[512];
    cr_assert_eq(skiff_ref_canonical(&ref, canon, sizeof(canon), &err), 0);
    cr_assert(strstr(canon, "registry-1.docker.io/library/busybox:1.36@sha256:"));
}

Test(ref, docker_io_endpoint)
{
    ok("docker://docker.io#ubuntu");
    cr_assert_str_eq(ref.repository, "library/ubuntu");
    cr_assert_str_eq(skiff_ref_endpoint(&ref), "registry-1.docker.io");
}

Test(ref, default_registry_used)
{
    skiff_err_clear(&err);
    cr_assert_eq(skiff_ref_parse("docker://team/app", "mirror.local:5000", &ref, &err), 0);
    cr_assert_str_eq(ref.registry, "mirror.local:5000");
    cr_assert_str_eq(ref.repository, "team/app");
}

Test(ref, bad_docker_refs)
{
    bad("docker://", "empty");
    bad("docker://Ubuntu", "bad image name");
    bad("docker://ubuntu:", "bad tag");
    bad("docker://ubuntu:-x", "bad tag");
    bad("docker://ubuntu@sha256:abc", "bad digest");
    bad("docker://ubuntu@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", "bad digest");
    bad("docker://bad host#x", "bad registry");
    bad("docker://reg:port#x", "bad registry");
    bad("docker://#ubuntu", "bad registry");
    bad("docker://a//b", "bad image name");
    bad("docker://a/../b", "bad image name");
    bad("docker://ubu__-ntu", "bad image name");
    bad("docker://@ubuntu", "empty user");
    bad("docker:ubuntu", "docker://");
    bad("http://x", "unknown image source");
    bad("ubuntu", "unknown image source");
}

Test(ref, archives_and_dirs)
{
    ok("docker-archive:/tmp/img.tar");
    cr_assert_eq(ref.kind, SKIFF_REF_DOCKER_ARCHIVE);
    cr_assert_str_eq(ref.path, "/tmp/img.tar");
    ok("oci:/tmp/layout:v2");
    cr_assert_eq(ref.kind, SKIFF_REF_OCI);
    cr_assert_str_eq(ref.path, "/tmp/layout");
    cr_assert_str_eq(ref.tag, "v2");
    ok("oci:/tmp/layout");
    cr_assert_str_eq(ref.tag, "");
    ok("oci:/tmp/a:b/layout");
    cr_assert_str_eq(ref.path, "/tmp/a:b/layout");
    ok("oci-archive:img.tar:latest");
    cr_assert_eq(ref.kind, SKIFF_REF_OCI_ARCHIVE);
    cr_assert_str_eq(ref.path, "img.tar");
    ok("dir:/srv/img");
    cr_assert_eq(ref.kind, SKIFF_REF_DIR);
    bad("dir:", "missing path");
    bad("oci:", "missing path");
    bad("oci:/x:b@d", "bad tag");
    bad("docker-archive:", "missing path");
}

Test(ref, loopback)
{
    cr_assert(skiff_ref_is_loopback("127.0.0.1"));
    cr_assert(skiff_ref_is_loopback("127.1.2.3:5000"));
    cr_assert(skiff_ref_is_loopback("localhost:5000"));
    cr_assert(skiff_ref_is_loopback("[::1]:5000"));
    cr_assert_not(skiff_ref_is_loopback("10.200.0.1:5000"));
    cr_assert_not(skiff_ref_is_loopback("127.0.0.1.evil.com"));
    cr_assert_not(skiff_ref_is_loopback("localhost.evil.com"));
    cr_assert_not(skiff_ref_is_loopback("[::2]"));
}

Test(ref, classify)
{
    cr_assert_eq(skiff_ref_classify("/abs/img.sqsh"), SKIFF_ARG_PATH);
    cr_assert_eq(skiff_ref_classify("./img.sqsh"), SKIFF_ARG_PATH);
    cr_assert_eq(skiff_ref_classify("../img.sqsh"), SKIFF_ARG_PATH);
    cr_assert_eq(skiff_ref_classify("docker://ubuntu"), SKIFF_ARG_URI);
    cr_assert_eq(skiff_ref_classify("oci-archive:/x.tar"), SKIFF_ARG_URI);
    cr_assert_eq(skiff_ref_classify("ubuntu:22.04"), SKIFF_ARG_BARE);
    cr_assert_eq(skiff_ref_classify("nvcr.io#nvidia/pytorch:24.01"), SKIFF_ARG_BARE);
    cr_assert_eq(skiff_ref_classify("foo.sqsh"), SKIFF_ARG_SQSH_NAME);
    cr_assert_eq(skiff_ref_classify("sub/foo.squashfs"), SKIFF_ARG_SQSH_NAME);
    cr_assert_eq(skiff_ref_classify(""), SKIFF_ARG_INVALID);
    cr_assert_eq(skiff_ref_classify("Not An Image"), SKIFF_ARG_INVALID);
    cr_assert_eq(skiff_ref_classify(NULL), SKIFF_ARG_INVALID);
}

Test(ref, valid_digest)
{
    cr_assert(skiff_ref_valid_digest("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    cr_assert_not(skiff_ref_valid_digest("sha512:e3b0"));
    cr_assert_not(skiff_ref_valid_digest("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85"));
}

/* Found by tests/fuzz/fuzz_ref.c: a Docker Hub name of 248..255 characters
 * passed the 255-character check and became "library/NAME", a repository
 * longer than the parser itself accepts (docker://registry-1.docker.io#
 * library/NAME was refused). The limit now applies to the repository. */
Test(ref, repository_limit_counts_library_prefix)
{
    char name[256], uri[300];
    memset(name, 'a', 250);
    name[250] = '\0';
    snprintf(uri, sizeof(uri), "docker://%s", name);
    cr_assert_eq(skiff_ref_parse(uri, NULL, &ref, &err), -1, "library/%s accepted", name);
    cr_assert(strstr(err.msg, "longer than 255 characters"), "%s", err.msg);
    /* on another registry no prefix is added: 250 characters are fine */
    snprintf(uri, sizeof(uri), "docker://reg.example#%s", name);
    cr_assert_eq(skiff_ref_parse(uri, NULL, &ref, &err), 0, "%s", err.msg);
    name[247] = '\0';
    snprintf(uri, sizeof(uri), "docker://%s", name);
    cr_assert_eq(skiff_ref_parse(uri, NULL, &ref, &err), 0, "%s", err.msg);
    cr_assert_eq(strlen(ref.repository), 255);
}
