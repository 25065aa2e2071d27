#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "blockcache.h"

#define BS 4096u

static char dir[64];
static int dirfd_, imgfd;
static const unsigned char sb[96] = {'h', 's', 'q', 's', 1, 2, 3};

static void setup(void)
{
    strcpy(dir, "/tmp/skiff-bc-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    dirfd_ = open(dir, O_PATH | O_DIRECTORY);
    char img[96];
    snprintf(img, sizeof(img), "%s.img", dir);
    imgfd = open(img, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert(dirfd_ >= 0 && imgfd >= 0);
    cr_assert_eq(write(imgfd, "image", 5), 5);
}

static void teardown(void)
{
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s.img", dir, dir);
    close(dirfd_);
    close(imgfd);
    cr_assert_eq(system(cmd), 0);
}

static struct skiff_blockcache *open_cache(uint64_t max)
{
    skiff_err err;
    struct skiff_blockcache *c = skiff_blockcache_open(dirfd_, imgfd, sb, sizeof(sb), BS, max, &err);
    cr_assert_not_null(c, "open: %s", err.msg);
    return c;
}

static void block(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed * 31 + i * 7);
}

/* 0 when the cache has [off, off+len) of the block at pos equal to want */
static int cached(struct skiff_blockcache *c, uint64_t pos, size_t off, size_t len, const unsigned char *want)
{
    off_t at;
    unsigned char got[BS];
    if (skiff_blockcache_find(c, pos, off, len, &at) < 0)
        return -1;
    cr_assert_eq(pread(skiff_blockcache_fd(c), got, len, at), (ssize_t)len);
    return memcmp(got, want + off, len) ? 1 : 0;
}

static int files_in(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* One block (seed's pattern, in a) stored at image offset 96 by a server
 * that then goes away. */
static void store_one(unsigned char *a, unsigned seed, uint64_t max)
{
    block(a, BS, seed);
    struct skiff_blockcache *c = open_cache(max);
    skiff_blockcache_put(c, 96, a, BS);
    skiff_blockcache_close(c);
}

TestSuite(blockcache, .init = setup, .fini = teardown);

Test(blockcache, stores_and_finds_blocks_across_opens)
{
    unsigned char a[BS], b[1000];
    block(a, sizeof(a), 1);
    block(b, sizeof(b), 2);
    struct skiff_blockcache *c = open_cache(64 * BS);
    cr_assert_eq(cached(c, 96, 0, 10, a), -1);
    skiff_blockcache_put(c, 96, a, sizeof(a));
    skiff_blockcache_put(c, 5000, b, sizeof(b));
    skiff_blockcache_put(c, 96, b, sizeof(b)); /* already there: kept */
    cr_assert_eq(cached(c, 96, 0, BS, a), 0);
    cr_assert_eq(cached(c, 5000, 100, 900, b), 0);
    cr_assert_eq(cached(c, 5000, 100, 901, b), -1, "past the block's end");
    skiff_blockcache_close(c);
    c = open_cache(64 * BS); /* another process, another start */
    cr_assert_eq(cached(c, 96, 17, 300, a), 0);
    cr_assert_eq(cached(c, 5000, 0, 1000, b), 0);
    cr_assert_eq(files_in(), 1);
    skiff_blockcache_close(c);
}

Test(blockcache, a_changed_image_gets_a_new_cache)
{
    unsigned char a[BS];
    store_one(a, 3, 64 * BS);
    cr_assert_eq(pwrite(imgfd, "IMAGE", 5, 0), 5); /* mtime, ctime */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1, 0}};
    cr_assert_eq(futimens(imgfd, ts), 0);
    struct skiff_blockcache *c = open_cache(64 * BS);
    cr_assert_eq(cached(c, 96, 0, BS, a), -1);
    skiff_blockcache_close(c);
    c = open_cache(32 * BS); /* other limits: a new one too */
    skiff_blockcache_put(c, 96, a, sizeof(a));
    cr_assert_eq(cached(c, 96, 0, BS, a), 0);
    skiff_blockcache_close(c);
    cr_assert_eq(files_in(), 1);
}

Test(blockcache, a_garbage_file_is_replaced)
{
    unsigned char a[BS];
    store_one(a, 4, 8 * BS);
    DIR *d = opendir(dir);
    struct dirent *e;
    char name[400] = "";
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            snprintf(name, sizeof(name), "%s/%s", dir, e->d_name);
    closedir(d);
    int fd = open(name, O_WRONLY);
    cr_assert_eq(pwrite(fd, "garbage!", 8, 0), 8);
    close(fd);
    struct skiff_blockcache *c = open_cache(8 * BS);
    cr_assert_eq(cached(c, 96, 0, BS, a), -1);
    skiff_blockcache_put(c, 96, a, sizeof(a));
    cr_assert_eq(cached(c, 96, 0, BS, a), 0);
    skiff_blockcache_close(c);
}

Test(blockcache, a_full_cache_stores_no_more)
{
    unsigned char a[BS];
    struct skiff_blockcache *c = open_cache(4 * BS);
    for (unsigned i = 0; i < 10; i++) {
        block(a, sizeof(a), i);
        skiff_blockcache_put(c, 96 + i * 10000, a, sizeof(a));
    }
    for (unsigned i = 0; i < 10; i++) {
        block(a, sizeof(a), i);
        cr_assert_eq(cached(c, 96 + i * 10000, 0, BS, a), i < 4 ? 0 : -1, "block %u", i);
    }
    skiff_blockcache_close(c);
}

Test(blockcache, servers_filling_at_once_agree)
{
    /* 4 processes put the same 200 blocks in different orders */
    for (int p = 0; p < 4; p++) {
        if (fork() == 0) {
            unsigned char a[BS];
            struct skiff_blockcache *c = open_cache(256 * BS);
            for (unsigned k = 0; k < 200; k++) {
                unsigned i = (k * (2 * (unsigned)p + 1)) % 200;
                block(a, sizeof(a), i);
                skiff_blockcache_put(c, 96 + (uint64_t)i * 4096, a, sizeof(a));
            }
            skiff_blockcache_close(c);
            _exit(0);
        }
    }
    int st;
    for (int p = 0; p < 4; p++) {
        cr_assert_gt(wait(&st), 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    struct skiff_blockcache *c = open_cache(256 * BS);
    unsigned char a[BS];
    for (unsigned i = 0; i < 200; i++) {
        block(a, sizeof(a), i);
        cr_assert_eq(cached(c, 96 + (uint64_t)i * 4096, 0, BS, a), 0, "block %u", i);
    }
    skiff_blockcache_close(c);
    cr_assert_eq(files_in(), 1, "one cache, no temporary files left");
}

Test(blockcache, creating_one_evicts_the_least_recently_used)
{
    unsigned char a[BS];
    block(a, sizeof(a), 5);
    struct skiff_blockcache *c = open_cache(4 * BS);
    for (unsigned i = 0; i < 4; i++)
        skiff_blockcache_put(c, 96 + i * 10000, a, sizeof(a));
    skiff_blockcache_close(c);
    /* another image: the first's cache (more than max_bytes) goes */
    char img2[96];
    snprintf(img2, sizeof(img2), "%s.img2", dir);
    int fd2 = open(img2, O_RDWR | O_CREAT | O_TRUNC, 0600);
    skiff_err err;
    c = skiff_blockcache_open(dirfd_, fd2, sb, sizeof(sb), BS, 4 * BS, &err);
    cr_assert_not_null(c);
    cr_assert_eq(files_in(), 1);
    skiff_blockcache_close(c);
    close(fd2);
    unlink(img2);
}

Test(blockcache, rejects_a_cache_smaller_than_a_block)
{
    skiff_err err;
    cr_assert_null(skiff_blockcache_open(dirfd_, imgfd, sb, sizeof(sb), BS, BS - 1, &err));
    cr_assert_null(skiff_blockcache_open(dirfd_, imgfd, sb, sizeof(sb), 0, 1 << 20, &err));
}
