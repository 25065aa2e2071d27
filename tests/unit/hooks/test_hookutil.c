/* Hook helpers: GPU visibility lists, the host's real ld.so.cache, identity
 * merging, and the env/mount line writers. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hookutil.h"
#include "tenv.h"

Test(gpu, parse_table)
{
    struct {
        const char *in;
        enum skiff_gpu_vis kind;
        const char *idx;
    } c[] = {
        {"0", SKIFF_GPU_LIST, "0"},
        {"0,2", SKIFF_GPU_LIST, "0 2"},
        {"0-3", SKIFF_GPU_LIST, "0 1 2 3"},
        {"1,3-4", SKIFF_GPU_LIST, "1 3 4"},
        {"2,2", SKIFF_GPU_LIST, "2"},
        {"all", SKIFF_GPU_ALL, ""},
        {"none", SKIFF_GPU_DRIVER, ""},
        {"void", SKIFF_GPU_NONE, ""},
        {"", SKIFF_GPU_NONE, ""},
        {"NoDevFiles", SKIFF_GPU_NONE, ""},
        {"GPU-8a3f-11", SKIFF_GPU_LIST, ""},
        {"MIG-abc", SKIFF_GPU_LIST, ""},
        {"0,GPU-8a3f-11,2", SKIFF_GPU_LIST, "0 2"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct skiff_gpu_set s;
        skiff_err err = {0};
        cr_assert_eq(skiff_gpu_parse(c[i].in, &s, &err), 0, "'%s': %s", c[i].in, err.msg);
        cr_expect_eq(s.kind, c[i].kind, "'%s'", c[i].in);
        char got[64] = "";
        for (size_t k = 0; k < s.n; k++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%u", k ? " " : "", s.idx[k]);
        cr_expect_str_eq(got, c[i].idx, "'%s'", c[i].in);
    }
    const char *bad[] = {"x",     "1,",      "3-1",  "1-",           "0-100",          "1;2",
                         "99999", "GPU-xyz", "GPU-", "MIG-GPU-ab/1", "MIG-GPU-ab/1/x", "GPU-ab/1",
                         "gpu-1", "MIG-a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct skiff_gpu_set s;
        skiff_err err = {0};
        cr_expect_eq(skiff_gpu_parse(bad[i], &s, &err), -1, "'%s' should fail", bad[i]);
        cr_expect(err.msg[0]);
    }
}

Test(gpu, uuids_kept_as_given)
{
    struct skiff_gpu_set s;
    skiff_err err = {0};
    cr_assert_eq(skiff_gpu_parse("GPU-5a1e-01,MIG-GPU-5a1e-01/1/0,MIG-77ab,3", &s, &err), 0, "%s", err.msg);
    cr_expect_eq(s.kind, SKIFF_GPU_LIST);
    cr_assert_eq(s.nuuid, 3);
    cr_expect_str_eq(s.uuid[0], "GPU-5a1e-01");
    cr_expect_str_eq(s.uuid[1], "MIG-GPU-5a1e-01/1/0");
    cr_expect_str_eq(s.uuid[2], "MIG-77ab");
    cr_expect(s.n == 1 && s.idx[0] == 3);
}

Test(gpu, precedence)
{
    const char *e1[] = {"CUDA_VISIBLE_DEVICES=0", "SLURM_STEP_GPUS=2,3", "SLURM_JOB_GPUS=1-3", NULL};
    const char *e2[] = {"CUDA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=none", "SLURM_STEP_GPUS=2", NULL};
    const char *e3[] = {"CUDA_VISIBLE_DEVICES=1", NULL};
    const char *e4[] = {NULL};
    struct skiff_gpu_set s;
    skiff_err err = {0};
    cr_assert_eq(skiff_gpu_select(tget, CTX(e1), NULL, NULL, &s, &err), 0);
    cr_expect_str_eq(s.from, "SLURM_STEP_GPUS");
    cr_expect_eq(s.n, 2);
    cr_expect(!s.renumber, "CUDA_VISIBLE_DEVICES=0 is not the step's 2,3: Slurm numbered them (cgroups)");
    cr_assert_eq(skiff_gpu_select(tget, CTX(e2), NULL, NULL, &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_DRIVER);
    cr_assert_eq(skiff_gpu_select(tget, CTX(e3), NULL, NULL, &s, &err), 0);
    cr_expect_eq(s.idx[0], 1);
    cr_expect(s.renumber, "a host number from CUDA_VISIBLE_DEVICES alone is renumbered");
    cr_assert_eq(skiff_gpu_select(tget, CTX(e4), NULL, NULL, &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_NONE, "no GPU variable: no GPU");
    const char *e5[] = {"SLURM_STEP_GPUS=zz", NULL};
    cr_expect_eq(skiff_gpu_select(tget, CTX(e5), NULL, NULL, &s, &err), -1);
    cr_expect(strstr(err.msg, "SLURM_STEP_GPUS") != NULL, "%s", err.msg);
    const char *e6[] = {"SLURM_STEP_GPUS=1,3", "CUDA_VISIBLE_DEVICES=1,3", NULL};
    cr_assert_eq(skiff_gpu_select(tget, CTX(e6), NULL, NULL, &s, &err), 0);
    cr_expect(s.renumber, "Slurm without cgroups gives host numbers: renumbered");
}

/* enroot's 98-nvidia: the job's NVIDIA_VISIBLE_DEVICES, else the image's;
 * skiff then Slurm's allocation, which also narrows an image's "all". */
Test(gpu, image_environment)
{
    const char *ngc[] = {"NVIDIA_VISIBLE_DEVICES=all", NULL};
    const char *novar[] = {NULL};
    const char *exclusive[] = {"SLURM_JOB_ID=7", NULL};
    const char *alloc[] = {"SLURM_STEP_GPUS=1", "CUDA_VISIBLE_DEVICES=1", NULL};
    const char *job_none[] = {"NVIDIA_VISIBLE_DEVICES=void", "SLURM_STEP_GPUS=1", NULL};
    const char *image_void[] = {"NVIDIA_VISIBLE_DEVICES=void", NULL};
    struct skiff_gpu_set s;
    skiff_err err = {0};
    /* --exclusive without --gpus, an NGC image: every GPU (the MLPerf case) */
    cr_assert_eq(skiff_gpu_select(tget, CTX(exclusive), tget, CTX(ngc), &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_ALL);
    cr_expect_str_eq(s.from, "the image's NVIDIA_VISIBLE_DEVICES");
    /* the image's all within Slurm's allocation */
    cr_assert_eq(skiff_gpu_select(tget, CTX(alloc), tget, CTX(ngc), &s, &err), 0);
    cr_expect(s.kind == SKIFF_GPU_LIST && s.n == 1 && s.idx[0] == 1);
    cr_expect_str_eq(s.from, "SLURM_STEP_GPUS");
    cr_expect(s.renumber);
    /* the job's own value wins over the image's and Slurm's */
    cr_assert_eq(skiff_gpu_select(tget, CTX(job_none), tget, CTX(ngc), &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_NONE);
    /* an image that says void gets nothing, as under enroot */
    cr_assert_eq(skiff_gpu_select(tget, CTX(alloc), tget, CTX(image_void), &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_NONE);
    /* no variable anywhere: nothing */
    cr_assert_eq(skiff_gpu_select(tget, CTX(exclusive), tget, CTX(novar), &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_GPU_NONE);
}

Test(gpu, renumber)
{
    struct {
        const char *cvd, *minors, *want;
        int changed;
    } c[] = {
        {"1", "1", "0", 1},       {"3", "1,3", "1", 1}, {"1,3", "1,3", "0,1", 1},
        {"0,1", "0,1", "0,1", 0}, {"5", "1,3", "5", 0}, {"GPU-ab,3", "1,3", "GPU-ab,1", 1},
        {"3,1", "1,3", "1,0", 1}, {"", "1", "", 0},     {"12", "2,12", "1", 1},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char out[64];
        skiff_err err = {0};
        int r = skiff_gpu_renumber(c[i].cvd, c[i].minors, out, sizeof(out), &err);
        cr_expect_eq(r, c[i].changed, "'%s' in %s: %d (%s)", c[i].cvd, c[i].minors, r, err.msg);
        cr_expect_str_eq(out, c[i].want, "'%s' in %s", c[i].cvd, c[i].minors);
    }
    char out[4];
    skiff_err err = {0};
    cr_expect_eq(skiff_gpu_renumber("1", "x", out, sizeof(out), &err), -1);
    cr_expect_eq(skiff_gpu_renumber("1,1,1,1", "1", out, sizeof(out), &err), -1, "no room is an error");
    const char *task[] = {"SKIFF_GPU_MINORS=2,3", "CUDA_VISIBLE_DEVICES=3", NULL};
    char cvd[16];
    cr_expect_eq(skiff_gpu_task_cvd(tget, CTX(task), cvd, sizeof(cvd), &err), 1);
    cr_expect_str_eq(cvd, "1");
    const char *plain[] = {"CUDA_VISIBLE_DEVICES=3", NULL};
    cr_expect_eq(skiff_gpu_task_cvd(tget, CTX(plain), cvd, sizeof(cvd), &err), 0, "no map: nothing to do");
}

struct found {
    int libc;
    char path[512];
};

static int on_lib(void *ctx, const char *name, const char *path, unsigned flags)
{
    struct found *f = ctx;
    if (!strcmp(name, "libc.so.6") && (flags & 0xffffu) == skiff_ldcache_native_abi()) {
        f->libc = 1;
        snprintf(f->path, sizeof(f->path), "%s", path);
    }
    return 0;
}

Test(ldcache, finds_libc_in_the_hosts_cache)
{
    /* The real cache of this machine, as the gpu hook reads it on a GPU host. */
    const char *prefixes[] = {"libc.so", NULL};
    struct found f = {0};
    skiff_err err = {0};
    cr_assert_eq(skiff_ldcache_find("/etc/ld.so.cache", prefixes, on_lib, &f, &err), 0, "%s", err.msg);
    cr_expect(f.libc, "libc.so.6 not found in /etc/ld.so.cache");
    cr_expect_eq(access(f.path, R_OK), 0, "%s", f.path);
}

Test(ldcache, rejects_other_files)
{
    const char *prefixes[] = {"libc.so", NULL};
    struct found f = {0};
    skiff_err err = {0};
    cr_expect_eq(skiff_ldcache_find("/etc/hostname", prefixes, on_lib, &f, &err), -1);
    cr_expect(strstr(err.msg, "not a glibc ld.so.cache") != NULL, "%s", err.msg);
    cr_expect_eq(skiff_ldcache_find("/nonexistent", prefixes, on_lib, &f, &err), -1);
    /* a truncated copy of the real cache is refused, not read past its end */
    char tmp[] = "/tmp/skiff-ldcache-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert(fd >= 0);
    int in = open("/etc/ld.so.cache", O_RDONLY);
    char buf[100];
    cr_assert_eq(read(in, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    cr_assert_eq(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    close(in);
    close(fd);
    cr_expect_eq(skiff_ldcache_find(tmp, prefixes, on_lib, &f, &err), -1);
    cr_expect(strstr(err.msg, "beyond") != NULL, "%s", err.msg);
    unlink(tmp);
}

Test(identity, merge)
{
    skiff_err err = {0};
    const char *img =
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1001:1001::/home/alice:/bin/sh\nbob:x:1002:1002::/b:/bin/sh\n";
    char *m = skiff_identity_merge(img, "carol", 1001, "carol:x:1001:1001::/home/carol:/bin/bash", &err);
    cr_assert_not_null(m);
    cr_expect_str_eq(m, "root:x:0:0:root:/root:/bin/sh\nbob:x:1002:1002::/b:/bin/sh\n"
                        "carol:x:1001:1001::/home/carol:/bin/bash\n");
    free(m);
    m = skiff_identity_merge(img, "bob", 5000, "bob:x:5000:5000::/b:/bin/sh", &err);
    cr_expect(strstr(m, "bob:x:1002") == NULL);
    cr_expect(strstr(m, "bob:x:5000") != NULL);
    free(m);
    m = skiff_identity_merge("", "u", 7, "u:x:7:7::/:/bin/sh", &err);
    cr_expect_str_eq(m, "u:x:7:7::/:/bin/sh\n");
    free(m);
    m = skiff_identity_merge("noend:x:1:1::/:/bin/sh", "u", 7, "u:x:7:7::/:/bin/sh", &err);
    cr_expect_str_eq(m, "noend:x:1:1::/:/bin/sh\nu:x:7:7::/:/bin/sh\n");
    free(m);
    /* found by tests/fuzz/fuzz_hookutil.c: a line whose id field is empty
     * took the next line's leading number as its id and was dropped */
    m = skiff_identity_merge("odd:x:\n7:x\nkeep:x:8:8::/:/bin/sh\n", "u", 7, "u:x:7:7::/:/bin/sh", &err);
    cr_expect_str_eq(m, "odd:x:\n7:x\nkeep:x:8:8::/:/bin/sh\nu:x:7:7::/:/bin/sh\n");
    free(m);
    /* an id the C library would read (blanks, a sign) still counts */
    m = skiff_identity_merge("a:x: 7:7::/:/bin/sh\n", "u", 7, "u:x:7:7::/:/bin/sh", &err);
    cr_expect_str_eq(m, "u:x:7:7::/:/bin/sh\n");
    free(m);
}

Test(writers, refuse_bad_lines)
{
    char dir[] = "/tmp/skiff-hookw-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char envf[64], mnt[64];
    snprintf(envf, sizeof(envf), "%s/env", dir);
    snprintf(mnt, sizeof(mnt), "%s/fstab", dir);
    close(open(envf, O_CREAT | O_WRONLY, 0600));
    close(open(mnt, O_CREAT | O_WRONLY, 0600));
    setenv("SKIFF_ENV_FILE", envf, 1);
    setenv("SKIFF_MOUNTS_FILE", mnt, 1);
    skiff_err err = {0};
    cr_expect_eq(skiff_hook_setenv("A", "1", &err), 0);
    cr_expect_eq(skiff_hook_setenv("B", "x\ny", &err), -1);
    cr_expect_eq(skiff_hook_mount("/a", "/a", "none", "ro,bind", &err), 0);
    cr_expect_eq(skiff_hook_mount("/a b", "/a", "none", "ro", &err), -1);
    /* found by tests/fuzz/fuzz_hookfiles.c: these were written, and the
     * runtime skipped them as comments */
    cr_expect_eq(skiff_hook_setenv("#A", "1", &err), -1);
    cr_expect(strstr(err.msg, "name starting with '#'") != NULL, "%s", err.msg);
    cr_expect_eq(skiff_hook_mount("#/a", "/", "none", "ro", &err), -1);
    cr_expect(strstr(err.msg, "a source starting with '#'") != NULL, "%s", err.msg);
    char buf[256] = "";
    int fd = open(envf, O_RDONLY);
    cr_assert(read(fd, buf, sizeof(buf) - 1) >= 0);
    close(fd);
    cr_expect_str_eq(buf, "A=1\n");
    memset(buf, 0, sizeof(buf));
    fd = open(mnt, O_RDONLY);
    cr_assert(read(fd, buf, sizeof(buf) - 1) >= 0);
    close(fd);
    cr_expect_str_eq(buf, "/a /a none ro,bind\n");
    unsetenv("SKIFF_ENV_FILE");
    cr_expect_eq(skiff_hook_setenv("A", "1", &err), -1);
    cr_expect(strstr(err.msg, "SKIFF_ENV_FILE is not set") != NULL);
    unlink(envf);
    unlink(mnt);
    rmdir(dir);
}
