/* Unit tests for pyxis-style mount specs and hook fstab lines. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>

#include "mountspec.h"

Test(mountspec, src_dst_defaults)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/data:/mnt/data", &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.src, "/data");
    cr_assert_str_eq(m.dst, "/mnt/data");
    cr_assert(!m.readonly && !m.tmpfs && !m.noexec);
    cr_assert(m.recursive, "rbind is the default, as pyxis and enroot give it");
    cr_assert_eq(m.create, SKIFF_CREATE_AUTO);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("/data:/mnt/data:ro+bind", &m, &err), 0, "%s", err.msg);
    cr_assert(!m.recursive, "bind asks for the source alone");
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("umount:/root", &m, &err), 0, "%s", err.msg);
    cr_assert(m.detach && !m.recursive);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("umount:/root:rbind", &m, &err), -1, "umount takes no rbind");
}

Test(mountspec, src_only_means_same_dst)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/scratch", &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.dst, "/scratch");
    skiff_mount_free(&m);
    /* but a ':' promises a destination: "/tmp:" is a mistake (pyxis) */
    cr_assert_eq(skiff_mountspec_parse("/scratch:", &m, &err), -1);
    cr_assert(strstr(err.msg, "empty destination"), "%s", err.msg);
    cr_assert_eq(skiff_mountspec_parse("/scratch::ro", &m, &err), -1);
    cr_assert(strstr(err.msg, "empty destination"), "%s", err.msg);
}

Test(mountspec, propagation_and_all_pyxis_flags)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/tmp:/mnt:unbindable+ro", &m, &err), 0, "%s", err.msg);
    cr_assert(m.readonly);
    cr_assert_eq(m.propagation, MS_UNBINDABLE);
    cr_assert(!m.propagation_rec);
    skiff_mount_free(&m);
    const struct {
        const char *flag;
        unsigned long type;
        bool rec;
    } p[] = {{"private", MS_PRIVATE, false},      {"rprivate", MS_PRIVATE, true}, {"slave", MS_SLAVE, false},
             {"rslave", MS_SLAVE, true},          {"shared", MS_SHARED, false},   {"rshared", MS_SHARED, true},
             {"runbindable", MS_UNBINDABLE, true}};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        char spec[64];
        snprintf(spec, sizeof(spec), "/a:/b:%s+nosuid+nodev+noexec+bind", p[i].flag);
        cr_assert_eq(skiff_mountspec_parse(spec, &m, &err), 0, "%s: %s", spec, err.msg);
        cr_assert_eq(m.propagation, p[i].type, "%s", spec);
        cr_assert_eq(m.propagation_rec, p[i].rec, "%s", spec);
        cr_assert(m.noexec && !m.recursive);
        skiff_mount_free(&m);
    }
    cr_assert_eq(skiff_mountspec_parse("/a:/b:suid", &m, &err), -1);
    cr_assert(strstr(err.msg, "nosuid,nodev"), "%s", err.msg);
}

Test(mountspec, relative_and_dotdot_destinations_wait_for_the_mount)
{
    /* where they land (or that they would leave the root: EXDEV) is the
     * mount's business, resolved inside the root (test_rootfs.c) */
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/home:../home", &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.dst, "../home");
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("/x:./rel/dir", &m, &err), 0, "%s", err.msg);
    skiff_mount_free(&m);
}

/* pyxis refuses a target that is neither absolute nor ./relative: "mnt" in
 * --container-mounts=/tmp:mnt:ro was mounted at /mnt before */
Test(mountspec, bare_relative_destination_is_refused)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/tmp:mnt:ro", &m, &err), -1);
    cr_assert(strstr(err.msg, "neither absolute nor relative") && strstr(err.msg, "/mnt") && strstr(err.msg, "./mnt"),
              "%s", err.msg);
    cr_assert_eq(err.code, 0);
    cr_assert_eq(skiff_mountspec_parse("tmpfs:scratch", &m, &err), -1);
}

Test(mountspec, pyxis_flags_plus_separated)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("/a:/b:ro+rbind+x-create=file+rprivate", &m, &err), 0, "%s", err.msg);
    cr_assert(m.readonly && m.recursive);
    cr_assert_eq(m.create, SKIFF_CREATE_FILE);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("/a:/b:ro,rw,x-create=dir", &m, &err), 0, "%s", err.msg);
    cr_assert(!m.readonly, "later rw wins over ro");
    cr_assert_eq(m.create, SKIFF_CREATE_DIR);
    skiff_mount_free(&m);
}

Test(mountspec, tmpfs)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("tmpfs:/scratch:size=64m+mode=1777", &m, &err), 0, "%s", err.msg);
    cr_assert(m.tmpfs);
    cr_assert_null(m.src);
    cr_assert_str_eq(m.dst, "/scratch");
    cr_assert_str_eq(m.data, "size=64m,mode=1777");
    skiff_mount_free(&m);
    /* every other word is the kernel's to judge */
    cr_assert_eq(skiff_mountspec_parse("tmpfs:/t:nr_inodes=10k+huge=within_size+uid=0+gid=0+ro+unbindable", &m, &err),
                 0, "%s", err.msg);
    cr_assert_str_eq(m.data, "nr_inodes=10k,huge=within_size,uid=0,gid=0");
    cr_assert(m.readonly);
    cr_assert_eq(m.propagation, MS_UNBINDABLE);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("tmpfs", &m, &err), -1);
    cr_assert(strstr(err.msg, "tmpfs needs a destination"), "%s", err.msg);
}

Test(mountspec, errors_say_why)
{
    struct skiff_mount m;
    skiff_err err = {0};
    struct {
        const char *spec, *want;
    } cases[] = {
        {"", "empty mount spec"},
        {"data:/x", "not an absolute path"},
        {"/x:/y:ro:extra", "too many ':'"},
        {"/x:/y:bogus", "unknown mount flag 'bogus'"},
        {"/x:/y:x-create=socket", "unknown x-create value"},
        {"/x:/y:size=1m", "unknown mount flag 'size=1m'"},
        {"/tmp:", "empty destination"},
        {":/x", "empty mount source path"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        skiff_err_clear(&err);
        cr_assert_eq(skiff_mountspec_parse(cases[i].spec, &m, &err), -1, "'%s' accepted", cases[i].spec);
        cr_assert(strstr(err.msg, cases[i].want), "'%s': got '%s'", cases[i].spec, err.msg);
        /* a validation error: no errno, so no strerror text after the reason */
        cr_assert_eq(err.code, 0, "'%s': code %d", cases[i].spec, err.code);
        cr_assert_null(strstr(err.msg, "Invalid argument"), "'%s': %s", cases[i].spec, err.msg);
        cr_assert_null(m.dst);
    }
    /* dotdot inside a name is fine */
    cr_assert_eq(skiff_mountspec_parse("/x:/y/a..b", &m, &err), 0, "%s", err.msg);
    skiff_mount_free(&m);
}

Test(mountspec, fstab_lines)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse_fstab("/dev/shm /dev/shm none rbind,x-create=dir 0 0", &m, &err), 0, "%s",
                 err.msg);
    cr_assert_str_eq(m.src, "/dev/shm");
    cr_assert(m.recursive);
    cr_assert_eq(m.create, SKIFF_CREATE_DIR);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse_fstab("  # comment", &m, &err), 0);
    cr_assert_null(m.dst);
    cr_assert_eq(skiff_mountspec_parse_fstab("", &m, &err), 0);
    cr_assert_null(m.dst);
    cr_assert_eq(skiff_mountspec_parse_fstab("tmpfs /run tmpfs size=1m", &m, &err), 0, "%s", err.msg);
    cr_assert(m.tmpfs);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse_fstab("/a /b ext4 ro", &m, &err), -1);
    cr_assert(strstr(err.msg, "unsupported type 'ext4'"), "%s", err.msg);
    cr_assert_eq(skiff_mountspec_parse_fstab("/a", &m, &err), -1);
    /* enroot's short forms, its relative targets and its options */
    cr_assert_eq(skiff_mountspec_parse_fstab("/a b", &m, &err), 0, "%s", err.msg);
    cr_assert_str_eq(m.src, "/a");
    cr_assert_str_eq(m.dst, "b");
    cr_assert_not(m.tmpfs);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse_fstab("tmpfs /scratch", &m, &err), 0, "%s", err.msg);
    cr_assert(m.tmpfs);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse_fstab("/lustre /lustre none x-create=dir,bind,nofail,silent", &m, &err), 0, "%s",
                 err.msg);
    cr_assert(m.nofail);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse_fstab("none /tmp none x-detach,nofail,silent", &m, &err), 0, "%s", err.msg);
    cr_assert(m.detach);
    cr_assert_null(m.src);
    cr_assert_str_eq(m.dst, "/tmp");
    skiff_mount_free(&m);
}

/* pyxis: umount:DST takes away what the image or a default mount put there */
Test(mountspec, umount)
{
    struct skiff_mount m;
    skiff_err err = {0};
    cr_assert_eq(skiff_mountspec_parse("umount:/root", &m, &err), 0, "%s", err.msg);
    cr_assert(m.detach);
    cr_assert_null(m.src);
    cr_assert_str_eq(m.dst, "/root");
    cr_assert_not(m.nofail);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("umount:/x:nofail", &m, &err), 0, "%s", err.msg);
    cr_assert(m.nofail);
    skiff_mount_free(&m);
    cr_assert_eq(skiff_mountspec_parse("umount", &m, &err), -1);
    cr_assert(strstr(err.msg, "umount:DST"), "%s", err.msg);
    cr_assert_eq(skiff_mountspec_parse("umount:/x:ro", &m, &err), -1);
    cr_assert(strstr(err.msg, "no mount flags"), "%s", err.msg);
}
