/* The image cache's holds and the store's records (runtime/lib/image/cache.c):
 * which locks a reader takes where (doc/SECURITY.md, "Locks"). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/skiff-test-cache.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void put(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_assert_eq(chmod(path, mode), 0);
}

/* Another open file description's lock, as another process's would be. */
static bool lockable(const char *path, int op)
{
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0);
    bool ok = flock(fd, op | LOCK_NB) == 0;
    close(fd);
    return ok;
}

Test(cache, a_hold_in_the_users_cache_is_a_shared_lock, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/img.sqsh", dir);
    put(p, "image", 0600);
    skiff_err err;
    int fd = skiff_cache_hold(p, SKIFF_HOLD_LOCKED, &err);
    cr_assert(fd >= 0, "%s", err.msg);
    cr_assert(!lockable(p, LOCK_EX), "prune's exclusive lock must fail while it is held");
    cr_assert(lockable(p, LOCK_SH), "other readers share it");
    close(fd);
    cr_assert(lockable(p, LOCK_EX));
}

Test(cache, a_hold_in_the_store_takes_no_lock_and_waits_for_none, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/img.sqsh", dir);
    put(p, "image", 0644);
    int other = open(p, O_RDONLY);
    cr_assert_eq(flock(other, LOCK_EX), 0); /* the attack: an exclusive lock on a read-only fd */
    skiff_err err;
    int fd = skiff_cache_hold(p, SKIFF_HOLD_OPEN, &err);
    cr_assert(fd >= 0, "%s", err.msg);
    close(fd);
    close(other);
    cr_assert(lockable(p, LOCK_EX), "the hold took no lock");
}

Test(cache, a_hold_on_a_removed_image_says_so, .init = make_dir, .fini = remove_dir)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/gone.sqsh", dir);
    skiff_err err;
    cr_assert_eq(skiff_cache_hold(p, SKIFF_HOLD_OPEN, &err), -1);
    cr_assert_eq(err.code, ENOENT);
}

static const char tag[] = "ref = \"docker://r/x:1\"\n"
                          "digest = sha256:0000000000000000000000000000000000000000000000000000000000000000\n"
                          "image = 1111111111111111111111111111111111111111111111111111111111111111\nresolved = 5\n";

Test(cache, the_stores_tag_records_are_checked_as_its_images, .init = make_dir, .fini = remove_dir)
{
    char tags[96], p[160];
    snprintf(tags, sizeof(tags), "%s/tags", dir);
    cr_assert_eq(mkdir(tags, 0755), 0);
    cr_assert_eq(chmod(tags, 0755), 0);
    snprintf(p, sizeof(p), "%s/k", tags);
    put(p, tag, 0644);
    struct skiff_cache_tag t;
    skiff_err err;
    uid_t me = geteuid(), other = me + 1;
    cr_assert_eq(skiff_cache_tag_read(dir, "k", &me, &t, &err), 1, "%s", err.msg);
    cr_assert_str_eq(t.key, "1111111111111111111111111111111111111111111111111111111111111111");
    cr_assert_eq(skiff_cache_tag_read(dir, "missing", &me, &t, &err), 0);
    cr_assert_eq(skiff_cache_tag_read(dir, "k", &other, &t, &err), -1);
    cr_assert(strstr(err.msg, "not to the store's owner"), "%s", err.msg);
    cr_assert_eq(chmod(p, 0664), 0);
    cr_assert_eq(skiff_cache_tag_read(dir, "k", &me, &t, &err), -1);
    cr_assert(strstr(err.msg, "writable by others than its owner"), "%s", err.msg);
    /* the user's own cache: no owner to check */
    cr_assert_eq(skiff_cache_tag_read(dir, "k", NULL, &t, &err), 1, "%s", err.msg);
    cr_assert_eq(chmod(p, 0644), 0);
    cr_assert_eq(chmod(tags, 0775), 0);
    cr_assert_eq(skiff_cache_tag_read(dir, "k", &me, &t, &err), -1);
    cr_assert(strstr(err.msg, "tags is writable by others"), "%s", err.msg);
}

Test(cache, a_tag_record_that_is_a_link_is_none, .init = make_dir, .fini = remove_dir)
{
    char tags[96], p[160], real[160];
    snprintf(tags, sizeof(tags), "%s/tags", dir);
    cr_assert_eq(mkdir(tags, 0755), 0);
    snprintf(real, sizeof(real), "%s/real", dir);
    put(real, tag, 0644);
    snprintf(p, sizeof(p), "%s/k", tags);
    cr_assert_eq(symlink(real, p), 0);
    struct skiff_cache_tag t;
    skiff_err err;
    cr_assert_eq(skiff_cache_tag_read(dir, "k", NULL, &t, &err), -1); /* O_NOFOLLOW: ELOOP */
    cr_assert_eq(err.code, ELOOP);
}
