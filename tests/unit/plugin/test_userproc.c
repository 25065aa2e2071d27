/* Root's side of the user processes (plugin/userproc.c): the child that
 * runs as the user is not dumpable whatever fs.suid_dumpable says, and
 * every wait for it is bounded. A process that SIGKILL cannot end (D
 * state on a FUSE server that never answers) needs a real FUSE mount:
 * tests/integration/plugin-attacks.sh (10) performs that one. */
#include <criterion/criterion.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "clock.h"
#include "userproc.h"

static struct skiff_user nobody(void)
{
    static gid_t groups[1];
    struct passwd *pw = getpwnam("nobody");
    cr_assert_not_null(pw);
    groups[0] = pw->pw_gid;
    return (struct skiff_user){.uid = pw->pw_uid, .gid = pw->pw_gid, .groups = groups, .ngroups = 1};
}

static int not_dumpable(void *arg)
{
    (void)arg;
    return prctl(PR_GET_DUMPABLE) == 0 && getuid() != 0 ? 0 : -1;
}

Test(userproc, the_child_is_not_dumpable_after_the_drop)
{
    if (geteuid() != 0)
        cr_skip_test("needs root (it drops to nobody)");
    struct skiff_user u = nobody();
    cr_assert_eq(skiff_fork_as_user(&u, NULL, 0, not_dumpable, NULL, 5), 0);
}

static int forever(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return 0;
}

static char reported[2048];
static void capture(const char *line)
{
    snprintf(reported, sizeof(reported), "%s", line);
}

Test(userproc, a_child_that_does_not_end_is_killed_at_the_deadline)
{
    if (geteuid() != 0)
        cr_skip_test("needs root (it drops to nobody)");
    struct skiff_user u = nobody();
    reported[0] = '\0';
    skiff_userproc_set_log(capture);
    double t0 = skiff_now_ms();
    cr_assert_eq(skiff_fork_as_user(&u, NULL, 0, forever, NULL, 1), -1);
    double took = skiff_now_ms() - t0;
    cr_assert(took >= 1000 && took < 1000 + SKIFF_KILL_GRACE_MS, "took %.0f ms", took);
    /* SIGKILL ended it: nothing to report */
    cr_assert_str_empty(reported);
    skiff_userproc_set_log(NULL);
}
