#include <criterion/criterion.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "warm.h"

/* byte copy: gcc's -Warray-bounds misjudges memcpy into the caller's buffer
 * at -O1 with the sanitizers */
static void put(unsigned char *dst, size_t at, const void *src, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        dst[at + i] = s[i];
}

/* A minimal ELF64 header with one PT_INTERP program header pointing at
 * interp (placed right after the headers), in buf; returns its length. */
static size_t make_elf(unsigned char *buf, size_t cap, const char *interp, size_t interp_len)
{
    memset(buf, 0, cap);
    Elf64_Ehdr eh = {0};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_phoff = sizeof(eh);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = 2;
    Elf64_Phdr load = {.p_type = PT_LOAD};
    Elf64_Phdr ip = {.p_type = PT_INTERP, .p_offset = sizeof(eh) + 2 * sizeof(Elf64_Phdr), .p_filesz = interp_len};
    size_t at = sizeof(eh) + 2 * sizeof(Elf64_Phdr);
    cr_assert_leq(at + interp_len, cap);
    put(buf, 0, &eh, sizeof(eh));
    put(buf, sizeof(eh), &load, sizeof(load));
    put(buf, sizeof(eh) + sizeof(load), &ip, sizeof(ip));
    put(buf, at, interp, interp_len);
    return at + interp_len;
}

Test(warm, finds_the_interpreter)
{
    unsigned char buf[512];
    char out[64];
    const char interp[] = "/lib64/ld-linux-x86-64.so.2";
    size_t n = make_elf(buf, sizeof(buf), interp, sizeof(interp));
    cr_assert_eq(skiff_warm_elf_interp(buf, n, -1, out, sizeof(out)), 0);
    cr_assert_str_eq(out, interp);
}

Test(warm, interpreter_beyond_the_head_is_read_from_the_file)
{
    unsigned char buf[512];
    char out[64];
    const char interp[] = "/lib/ld-musl-x86_64.so.1";
    size_t n = make_elf(buf, sizeof(buf), interp, sizeof(interp));
    char path[] = "/tmp/skiff-test-warm-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, buf, n), (ssize_t)n);
    /* only the headers in the head: the string comes from the fd */
    cr_assert_eq(skiff_warm_elf_interp(buf, n - sizeof(interp), fd, out, sizeof(out)), 0);
    cr_assert_str_eq(out, interp);
    close(fd);
    unlink(path);
}

Test(warm, static_and_malformed_images_have_none)
{
    unsigned char buf[512];
    char out[64];
    const char interp[] = "/lib64/ld-linux-x86-64.so.2";
    size_t n = make_elf(buf, sizeof(buf), interp, sizeof(interp));
    /* no PT_INTERP (a static binary) */
    Elf64_Phdr none = {.p_type = PT_NOTE};
    unsigned char st[512];
    memcpy(st, buf, sizeof(st));
    memcpy(st + sizeof(Elf64_Ehdr) + sizeof(Elf64_Phdr), &none, sizeof(none));
    cr_assert_eq(skiff_warm_elf_interp(st, n, -1, out, sizeof(out)), -1);
    /* too short, not ELF, 32-bit */
    cr_assert_eq(skiff_warm_elf_interp(buf, 10, -1, out, sizeof(out)), -1);
    unsigned char bad[512];
    memcpy(bad, buf, sizeof(bad));
    bad[1] = 'X';
    cr_assert_eq(skiff_warm_elf_interp(bad, n, -1, out, sizeof(out)), -1);
    memcpy(bad, buf, sizeof(bad));
    bad[EI_CLASS] = ELFCLASS32;
    cr_assert_eq(skiff_warm_elf_interp(bad, n, -1, out, sizeof(out)), -1);
    /* program headers past what was read */
    Elf64_Ehdr eh;
    memcpy(bad, buf, sizeof(bad));
    memcpy(&eh, bad, sizeof(eh));
    eh.e_phnum = 60000;
    memcpy(bad, &eh, sizeof(eh));
    cr_assert_eq(skiff_warm_elf_interp(bad, n, -1, out, sizeof(out)), -1);
    /* an interpreter string without its NUL, a relative one, one too long */
    n = make_elf(buf, sizeof(buf), "/lib/ld.so", 10);
    cr_assert_eq(skiff_warm_elf_interp(buf, n, -1, out, sizeof(out)), -1);
    n = make_elf(buf, sizeof(buf), "lib/ld.so", 10);
    cr_assert_eq(skiff_warm_elf_interp(buf, n, -1, out, sizeof(out)), -1);
    n = make_elf(buf, sizeof(buf), interp, sizeof(interp));
    cr_assert_eq(skiff_warm_elf_interp(buf, n, -1, out, 8), -1);
    /* an embedded NUL */
    n = make_elf(buf, sizeof(buf), "/lib\0/ld.so", 12);
    cr_assert_eq(skiff_warm_elf_interp(buf, n, -1, out, sizeof(out)), -1);
}

Test(warm, the_hosts_own_dynamic_binaries_parse)
{
    /* whatever this host's loader is, /bin/sh names an absolute one */
    int fd = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    unsigned char head[4096];
    ssize_t n = pread(fd, head, sizeof(head), 0);
    cr_assert_gt(n, 0);
    char out[256];
    cr_assert_eq(skiff_warm_elf_interp(head, (size_t)n, fd, out, sizeof(out)), 0);
    cr_assert_eq(out[0], '/');
    cr_assert_eq(access(out, R_OK), 0, "%s", out);
    close(fd);
}

Test(warm, nothing_to_warm_without_a_command)
{
    cr_assert_eq(skiff_warm_start(AT_FDCWD, "", "/bin", "/"), -1);
    cr_assert_eq(skiff_warm_start(AT_FDCWD, NULL, "/bin", "/"), -1);
}
