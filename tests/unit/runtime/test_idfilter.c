/* The container's id filter (runtime/lib/container/idfilter.c), loaded in a child:
 * calls that change ids or owners to ids other than the mapped one report
 * success and change nothing; the mapped ones are real. */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "idfilter.h"

/* Runs fn in a child under the filter for the caller's ids; its exit status. */
static int under_filter(int (*fn)(const char *), const char *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct skiff_idfilter_prog p;
        skiff_err err;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || skiff_idfilter_build(getuid(), getgid(), &p, &err) < 0 ||
            skiff_idfilter_load(&p) < 0)
            _exit(100);
        _exit(fn(arg));
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200;
}

static int seccomp_mode(const char *arg)
{
    (void)arg;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int mode = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Seccomp: %d", &mode) == 1)
            break;
    if (f)
        fclose(f);
    return mode;
}

static int fake_ids(const char *file)
{
    uid_t other = getuid() + 4242;
    gid_t ogid = getgid() + 4242;
    struct stat before, after;
    if (stat(file, &before) < 0)
        return 10;
    if (setuid(other) != 0 || setresuid(other, other, other) != 0 || setgid(ogid) != 0 || setgroups(0, NULL) != 0)
        return 11; /* every call "succeeds" */
    if (getuid() == other || geteuid() == other || getgid() == ogid)
        return 12; /* and nothing changed */
    if (chown(file, other, ogid) != 0 || lchown(file, (uid_t)-1, ogid) != 0)
        return 13;
    if (stat(file, &after) < 0 || after.st_uid != before.st_uid || after.st_gid != before.st_gid)
        return 14;
    /* the mapped ids are real calls */
    if (chown(file, getuid(), getgid()) != 0)
        return 15;
    errno = 0;
    if (chown("/nonexistent/px", getuid(), getgid()) == 0 || errno != ENOENT)
        return 16;
    return 0;
}

Test(idfilter, mode_2)
{
    cr_assert_eq(under_filter(seccomp_mode, NULL), 2);
}

Test(idfilter, unmapped_ids_succeed_without_effect)
{
    char path[] = "/tmp/skiff-idfilter-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    int rc = under_filter(fake_ids, path);
    unlink(path);
    cr_assert_eq(rc, 0, "step %d failed", rc);
}
