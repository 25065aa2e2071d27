/* What the gpu and rdma hooks parse: their NAME.conf knobs, the image's
 * environment file, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_*, the
 * driver's /proc/driver/nvidia files, MELLANOX_VISIBLE_DEVICES, a sysfs
 * tree of RDMA devices and libibverbs' provider files. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "fsutil.h"
#include "hookconf.h"
#include "nvidia.h"
#include "rdma.h"
#include "tenv.h"

/* ---- NAME.conf ---- */

struct knobs {
    char path[64], word[32];
    bool flag;
};

static bool short_word(const char *w)
{
    return strlen(w) <= 5;
}

static int parse(const char *text, struct knobs *k, skiff_err *err)
{
    const struct skiff_knob knobs[] = {
        {"root", SKIFF_KNOB_PATH, k->path, sizeof(k->path), NULL, NULL},
        {"flag", SKIFF_KNOB_BOOL, &k->flag, 0, NULL, NULL},
        {"word", SKIFF_KNOB_WORD, k->word, sizeof(k->word), short_word, "at most 5 letters"},
        {NULL, 0, NULL, 0, NULL, NULL},
    };
    return skiff_hook_conf_parse(text, "/x/40-gpu.conf", knobs, err);
}

Test(conf, knobs)
{
    struct knobs k = {.flag = true};
    skiff_err err = {0};
    cr_assert_eq(parse("# a comment\n\n  root = /run/nvidia/driver  # trailing\nflag=no\r\nword =\tabc\n", &k, &err), 0,
                 "%s", err.msg);
    cr_expect_str_eq(k.path, "/run/nvidia/driver");
    cr_expect(!k.flag);
    cr_expect_str_eq(k.word, "abc");
    cr_expect_eq(parse("", &k, &err), 0, "an empty file keeps the defaults");
    /* skiff.conf's reader and booleans (common/conf.h): quotes go, any case */
    cr_assert_eq(parse("flag = On\nroot = \"/opt/driver\"\n", &k, &err), 0, "%s", err.msg);
    cr_expect(k.flag);
    cr_expect_str_eq(k.path, "/opt/driver");
    cr_assert_eq(parse("flag = FALSE\n", &k, &err), 0, "%s", err.msg);
    cr_expect(!k.flag);
}

Test(conf, errors_name_the_file_and_line)
{
    struct {
        const char *text, *msg;
    } c[] = {
        {"root = relative\n", "/x/40-gpu.conf:1: root must be an absolute path, got 'relative'"},
        {"\nflag = maybe\n", "/x/40-gpu.conf:2: flag is yes or no, got 'maybe'"},
        {"word = toolong\n", "/x/40-gpu.conf:1: word is at most 5 letters, got 'toolong'"},
        {"word = a b\n", "word is at most 5 letters, got 'a b'"},
        {"word = a\rb\n", "word is at most 5 letters, got 'a\rb'"},
        {"rot = /x\n", "/x/40-gpu.conf:1: unknown key 'rot' (root, flag, word)"},
        {"just words\n", "/x/40-gpu.conf:1: expected 'key = value'"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct knobs k = {0};
        skiff_err err = {0};
        cr_expect_eq(parse(c[i].text, &k, &err), -1, "'%s' should fail", c[i].text);
        cr_expect(strstr(err.msg, c[i].msg) != NULL, "'%s': %s", c[i].text, err.msg);
    }
}

/* ---- the image's environment ---- */

static int collect(void *ctx, const char *name, const char *value)
{
    char *out = ctx;
    snprintf(out + strlen(out), 256 - strlen(out), "%s=%s;", name, value);
    return 0;
}

Test(imgenv, last_line_wins)
{
    const char *text = "PATH=/usr/bin\nNVIDIA_VISIBLE_DEVICES=0\r\nNVIDIA_VISIBLE_DEVICES=all\r\nX==y\nNVIDIA=z";
    char buf[64];
    cr_expect_str_eq(skiff_envtext_get(text, "NVIDIA_VISIBLE_DEVICES", buf, sizeof(buf)), "all");
    cr_expect_str_eq(skiff_envtext_get(text, "X", buf, sizeof(buf)), "=y");
    cr_expect_str_eq(skiff_envtext_get(text, "NVIDIA", buf, sizeof(buf)), "z");
    cr_expect_null(skiff_envtext_get(text, "NVIDIA_DRIVER_CAPABILITIES", buf, sizeof(buf)));
    cr_expect_null(skiff_envtext_get(text, "PAT", buf, sizeof(buf)));
    char small[4];
    cr_expect_str_eq(skiff_envtext_get(text, "PATH", small, sizeof(small)), "/us", "cut to the buffer");
    char all[256] = "";
    cr_assert_eq(
        skiff_envtext_each("NVIDIA_REQUIRE_CUDA=cuda>=12.2\nA=1\nNVIDIA_REQUIRE_X=\n", "NVIDIA_REQUIRE_", collect, all),
        0);
    cr_expect_str_eq(all, "NVIDIA_REQUIRE_CUDA=cuda>=12.2;NVIDIA_REQUIRE_X=;");
}

/* ---- NVIDIA ---- */

Test(nvidia, capabilities)
{
    unsigned caps;
    skiff_err err = {0};
    char buf[128];
    cr_assert_eq(skiff_nv_caps_parse("utility,compute", &caps, &err), 0);
    skiff_nv_caps_format(caps, buf, sizeof(buf));
    cr_expect_str_eq(buf, "compute,utility");
    cr_assert_eq(skiff_nv_caps_parse("all", &caps, &err), 0);
    cr_expect_eq(caps, (unsigned)SKIFF_NV_ALL);
    cr_assert_eq(skiff_nv_caps_parse("", &caps, &err), 0);
    cr_expect_eq(caps, 0u, "empty: the caller's default");
    cr_assert_eq(skiff_nv_caps_parse("video,,display", &caps, &err), 0);
    cr_expect_eq(caps, (unsigned)(SKIFF_NV_VIDEO | SKIFF_NV_DISPLAY));
    cr_expect_eq(skiff_nv_caps_parse("compute,ngx", &caps, &err), -1);
    cr_expect(strstr(err.msg, "unknown NVIDIA driver capability 'ngx'") != NULL, "%s", err.msg);
}

Test(nvidia, versions)
{
    struct {
        const char *a, *b;
        int want;
    } c[] = {
        {"12.2", "12.10", -1},    {"12.2", "12.2.0", 0}, {"535.104.05", "535.104.5", 0},
        {"580", "535.104.05", 1}, {"13.0", "13", 0},     {"9.0", "10.0", -1},
        {"00012", "12", 0},       {"1.0.1", "1", 1},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        int cmp = 99;
        cr_assert_eq(skiff_nv_version_cmp(c[i].a, c[i].b, &cmp), 0);
        cr_expect_eq(cmp, c[i].want, "%s vs %s: %d", c[i].a, c[i].b, cmp);
    }
    int cmp;
    cr_expect_eq(skiff_nv_version_cmp("12.x", "12", &cmp), -1);
    cr_expect_eq(skiff_nv_version_cmp("", "12", &cmp), -1);
}

struct facts {
    const char *cuda, *driver, *arch, *brand;
    int asked_cuda;
};

static const char *fact(void *ctx, const char *name)
{
    struct facts *f = ctx;
    if (!strcmp(name, "cuda")) {
        f->asked_cuda++;
        return f->cuda;
    }
    return !strcmp(name, "driver") ? f->driver : !strcmp(name, "arch") ? f->arch : f->brand;
}

/* NVIDIA's NGC images set strings of this shape. */
#define NGC "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536"

Test(nvidia, require)
{
    struct facts new_driver = {"12.8", "570.86.15", "9.0", "tesla", 0};
    struct facts old_tesla = {"12.2", "535.104.05", "8.0", "tesla", 0};
    struct facts old_geforce = {"12.2", "535.104.05", "8.6", "geforce", 0};
    struct facts unknown = {"", "", "", "", 0};
    char why[256];
    skiff_err err = {0};
    cr_expect_eq(skiff_nv_require_eval(NGC, fact, &new_driver, why, sizeof(why), &err), 1);
    cr_expect_eq(skiff_nv_require_eval(NGC, fact, &old_tesla, why, sizeof(why), &err), 1,
                 "a datacenter GPU on driver 535 runs it (CUDA forward compatibility)");
    cr_expect_eq(skiff_nv_require_eval(NGC, fact, &old_geforce, why, sizeof(why), &err), 0);
    cr_expect_str_eq(why, "cuda>=12.4 (this node: cuda 12.2)", "the first alternative is named");
    cr_expect_eq(skiff_nv_require_eval(NGC, fact, &unknown, why, sizeof(why), &err), 1,
                 "unknown facts hold, as in NVIDIA's toolkit");
    cr_expect_eq(skiff_nv_require_eval("arch>=8.0,BRAND=Tesla", fact, &old_tesla, why, sizeof(why), &err), 1);
    cr_expect_eq(skiff_nv_require_eval("arch>=9.0", fact, &old_tesla, why, sizeof(why), &err), 0);
    cr_expect_eq(skiff_nv_require_eval("driver!=535.104.05", fact, &old_tesla, why, sizeof(why), &err), 0);
    cr_expect_eq(skiff_nv_require_eval("  ", fact, &old_tesla, why, sizeof(why), &err), 1, "nothing required");
    struct facts lazy = {"12.2", "535.104.05", "8.0", "tesla", 0};
    cr_expect_eq(skiff_nv_require_eval("driver>=500", fact, &lazy, why, sizeof(why), &err), 1);
    cr_expect_eq(lazy.asked_cuda, 0, "no cuda rule: libcuda need not be asked");
    const char *bad[] = {"cuda",   "cuda>=",       "cuda==12",     "cuda=>12",
                         "gpu>=1", "cuda>=twelve", "brand>=tesla", "cuda>=12.4 brand=tesla,driver"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(skiff_nv_require_eval(bad[i], fact, &old_tesla, why, sizeof(why), &err), -1, "'%s'", bad[i]);
        cr_expect(err.msg[0]);
    }
}

Test(nvidia, proc_files)
{
    const char *info = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t "
                       "GPU-5a1e0001-0000-4000-8000-000000000001\nBus Location: \t 0000:02:00.0\nDevice Minor: \t 1\n";
    char uuid[96], ver[32];
    unsigned minor;
    skiff_err err = {0};
    cr_assert_eq(skiff_nv_parse_information(info, uuid, sizeof(uuid), &minor, &err), 0, "%s", err.msg);
    cr_expect_str_eq(uuid, "GPU-5a1e0001-0000-4000-8000-000000000001");
    cr_expect_eq(minor, 1u);
    cr_expect_eq(skiff_nv_parse_information("GPU UUID: GPU-ab\n", uuid, sizeof(uuid), &minor, &err), -1);
    cr_expect_eq(skiff_nv_parse_information("Device Minor: 1\n", uuid, sizeof(uuid), &minor, &err), -1);
    cr_assert_eq(skiff_nv_parse_access("DeviceFileMinor: 12\nDeviceFileMode: 292\n", &minor, &err), 0);
    cr_expect_eq(minor, 12u);
    cr_expect_eq(skiff_nv_parse_access("DeviceFileMinor: x\n", &minor, &err), -1);
    cr_assert_eq(skiff_nv_parse_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release "
                                        "Build  (dvs-builder@U16-I3-C03-2-1)  Sun Jul 27 07:09:36 UTC 2025\n",
                                        ver, sizeof(ver), &err),
                 0, "%s", err.msg);
    cr_expect_str_eq(ver, "580.65.06");
    cr_assert_eq(skiff_nv_parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n"
                                        "GCC version:  gcc version 12.2.0\n",
                                        ver, sizeof(ver), &err),
                 0);
    cr_expect_str_eq(ver, "535.104.05");
    cr_expect_eq(skiff_nv_parse_version("GCC version: 12\n", ver, sizeof(ver), &err), -1);
}

Test(nvidia, mig_path_and_brands)
{
    char uuid[96];
    unsigned gi, ci;
    cr_assert_eq(skiff_nv_parse_mig_path("MIG-GPU-5a1e0001-0000/1/0", uuid, sizeof(uuid), &gi, &ci), 0);
    cr_expect_str_eq(uuid, "GPU-5a1e0001-0000");
    cr_expect(gi == 1 && ci == 0);
    cr_expect_eq(skiff_nv_parse_mig_path("MIG-5a1e0002", uuid, sizeof(uuid), &gi, &ci), -1);
    cr_expect_eq(skiff_nv_parse_mig_path("MIG-GPU-ab/1", uuid, sizeof(uuid), &gi, &ci), -1);
    cr_expect_eq(skiff_nv_parse_mig_path("MIG-GPU-ab/1/2/3", uuid, sizeof(uuid), &gi, &ci), -1);
    cr_expect_str_eq(skiff_nv_brand_name(2), "tesla");
    cr_expect_str_eq(skiff_nv_brand_name(14), "nvidia");
    cr_expect_str_eq(skiff_nv_brand_name(99), "");
}

/* ---- RDMA ---- */

Test(rdma, visible_devices)
{
    struct skiff_rdma_set s;
    skiff_err err = {0};
    cr_assert_eq(skiff_rdma_parse("all", &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_RDMA_ALL);
    const char *nothing[] = {"none", "void", ""};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(skiff_rdma_parse(nothing[i], &s, &err), 0);
        cr_expect_eq(s.kind, SKIFF_RDMA_VOID, "'%s'", nothing[i]);
    }
    cr_assert_eq(skiff_rdma_parse("2,0,2", &s, &err), 0);
    cr_expect(s.kind == SKIFF_RDMA_LIST && s.n == 2 && s.idx[0] == 2 && s.idx[1] == 0);
    const char *bad[] = {"mlx5_0", "1,", "0-3", "64", "-1", "1 2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(skiff_rdma_parse(bad[i], &s, &err), -1, "'%s'", bad[i]);
    const char *job[] = {"MELLANOX_VISIBLE_DEVICES=1", NULL}, *image[] = {"MELLANOX_VISIBLE_DEVICES=none", NULL},
               *empty[] = {NULL};
    cr_assert_eq(skiff_rdma_select(tget, CTX(job), tget, CTX(image), "all", &s, &err), 0);
    cr_expect(s.kind == SKIFF_RDMA_LIST && !strcmp(s.from, "MELLANOX_VISIBLE_DEVICES"));
    cr_assert_eq(skiff_rdma_select(tget, CTX(empty), tget, CTX(image), "all", &s, &err), 0);
    cr_expect_eq(s.kind, SKIFF_RDMA_VOID, "the image's value when the job has none");
    cr_assert_eq(skiff_rdma_select(tget, CTX(empty), tget, CTX(empty), "all", &s, &err), 0);
    cr_expect(s.kind == SKIFF_RDMA_ALL && !strcmp(s.from, "default"));
    const char *badjob[] = {"MELLANOX_VISIBLE_DEVICES=mlx5_0", NULL};
    cr_expect_eq(skiff_rdma_select(tget, CTX(badjob), NULL, NULL, "all", &s, &err), -1);
    cr_expect(strstr(err.msg, "MELLANOX_VISIBLE_DEVICES") != NULL, "%s", err.msg);
}

static void put(const char *dir, const char *file, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *root, const char *rel)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    for (char *s = strchr(p + strlen(root) + 1, '/');; s = strchr(s + 1, '/')) {
        if (s)
            *s = '\0';
        cr_assert(mkdir(p, 0755) == 0 || errno == EEXIST, "%s", p);
        if (!s)
            break;
        *s = '/';
    }
}

Test(rdma, sysfs_tree)
{
    char root[] = "/tmp/skiff-rdma-sys-XXXXXX", d[512];
    cr_assert_not_null(mkdtemp(root));
    const char *devs[][3] = {{"mlx5_10", "mlx5_core", "uverbs2"},
                             {"mlx5_2", "mlx5_core", "uverbs1"},
                             {"efa_0", "efa", "uverbs0"},
                             {"rxe0", "", ""}};
    for (size_t i = 0; i < 4; i++) {
        snprintf(d, sizeof(d), "class/infiniband/%s/device", devs[i][0]);
        mkdirs(root, d);
        if (devs[i][1][0]) {
            char link[1100], target[128];
            snprintf(link, sizeof(link), "%s/%s/driver", root, d);
            snprintf(target, sizeof(target), "../../../../bus/pci/drivers/%s", devs[i][1]);
            cr_assert_eq(symlink(target, link), 0);
        }
        if (devs[i][2][0]) {
            snprintf(d, sizeof(d), "class/infiniband_verbs/%s", devs[i][2]);
            mkdirs(root, d);
            snprintf(d, sizeof(d), "%s/class/infiniband_verbs/%s", root, devs[i][2]);
            put(d, "ibdev", devs[i][0]);
        }
    }
    mkdirs(root, "class/infiniband_mad/umad0");
    mkdirs(root, "class/infiniband_mad/issm0");
    mkdirs(root, "class/infiniband_mad/umad7");
    snprintf(d, sizeof(d), "%s/class/infiniband_mad", root);
    put(d, "abi_version", "5\n");
    snprintf(d, sizeof(d), "%s/class/infiniband_mad/umad0", root);
    put(d, "ibdev", "mlx5_2\n");
    snprintf(d, sizeof(d), "%s/class/infiniband_mad/issm0", root);
    put(d, "ibdev", "mlx5_2\n");
    snprintf(d, sizeof(d), "%s/class/infiniband_mad/umad7", root);
    put(d, "ibdev", "gone_9\n");
    struct skiff_rdma_dev v[SKIFF_RDMA_MAX];
    size_t n;
    skiff_err err = {0};
    cr_assert_eq(skiff_rdma_list(root, v, SKIFF_RDMA_MAX, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 4u);
    const char *order[] = {"efa_0", "mlx5_2", "mlx5_10", "rxe0"};
    for (size_t i = 0; i < 4; i++)
        cr_expect_str_eq(v[i].name, order[i], "natural order: %zu", i);
    cr_expect_str_eq(v[1].driver, "mlx5_core");
    cr_expect_str_eq(v[1].uverbs, "uverbs1");
    cr_assert_eq(v[1].nmad, 2u);
    cr_expect_str_eq(v[1].mad[0], "issm0");
    cr_expect_str_eq(v[1].mad[1], "umad0");
    cr_expect_str_eq(v[3].uverbs, "", "a device without a verbs node");
    char p[32];
    skiff_rdma_provider(&v[0], p, sizeof(p));
    cr_expect_str_eq(p, "efa");
    skiff_rdma_provider(&v[2], p, sizeof(p));
    cr_expect_str_eq(p, "mlx5");
    skiff_rdma_provider(&v[3], p, sizeof(p));
    cr_expect_str_eq(p, "rxe", "no driver: by name");
    cr_expect_eq(skiff_rdma_list(root, v, 2, &n, &err), -1, "more devices than room");
    cr_assert_eq(skiff_rdma_list("/nonexistent-sys", v, SKIFF_RDMA_MAX, &n, &err), 0);
    cr_expect_eq(n, 0u, "no class/infiniband: no device");
    skiff_remove_tree(root, &err);
}

Test(rdma, driver_files)
{
    char out[64];
    skiff_err err = {0};
    cr_assert_eq(skiff_rdma_parse_driver_file("driver mlx5\n", out, sizeof(out), &err), 0);
    cr_expect_str_eq(out, "mlx5");
    cr_assert_eq(
        skiff_rdma_parse_driver_file("# MOFED\n  driver\t/usr/lib64/libibverbs/libmlx5 \n", out, sizeof(out), &err), 0);
    cr_expect_str_eq(out, "/usr/lib64/libibverbs/libmlx5");
    cr_expect_eq(skiff_rdma_parse_driver_file("drivers x\n", out, sizeof(out), &err), -1);
    cr_expect_eq(skiff_rdma_parse_driver_file("driver \n", out, sizeof(out), &err), -1);
    cr_expect_eq(skiff_rdma_parse_driver_file("", out, sizeof(out), &err), -1);
}
